"""Which names look secret: one rule (``zwarm.secret_names.looks_secret``) for the orchestrator's
redaction, gemini's copied settings and what ``zwarm trust`` masks."""

import pytest

from zwarm.secret_names import looks_secret
from zwarm.trust import masked

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "name",
    ["OPENAI_API_KEY", "x-api-key", "key", "OPENAI_KEY", "api.key", "ANTHROPIC_AUTH_TOKEN",
     "AUTH", "Authorization", "GH_TOKEN", "CLIENT_SECRET", "DB_PASSWORD", "credentials"],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert looks_secret(name)


@pytest.mark.parametrize(
    "name", ["HOME", "PATH", "keyBindings", "MONKEY", "GIT_AUTHOR_NAME", "author", "model"]
)
def test_names_that_are_not_secret(name: str) -> None:
    assert not looks_secret(name)


def test_trust_masks_by_the_same_rule() -> None:
    value = {"OPENAI_KEY": "sk-abcdefghijkl", "keyBindings": "vim-mode"}
    assert masked("orchestrator.extra", value) == {"OPENAI_KEY": "sk-a…", "keyBindings": "vim-mode"}
