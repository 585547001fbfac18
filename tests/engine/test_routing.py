"""Which adapter and model a spawn uses: explicit > implied by the model > configured."""

from __future__ import annotations

from pathlib import Path

import pytest

from zwarm.agents import agent_for_model
from zwarm.api import Zwarm
from zwarm.env import Env
from zwarm.errors import InvalidInput

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "model",
    [
        "sonnet",
        "opus",
        "haiku",
        "opusplan",
        "Sonnet",
        "claude-sonnet-4-5",
        "claude-opus-4-1",
        "claude-3-5-haiku-20241022",
        "sonnet[1m]",
    ],
)
def test_claude_models(model: str) -> None:
    assert agent_for_model(model) == "claude"


@pytest.mark.parametrize(
    "model",
    [
        "gpt-5",
        "gpt-5-codex",
        "gpt-4.1",
        "o3",
        "o4-mini",
        "o1",
        "codex-mini-latest",
        "gpt-5.1-codex-max",
        "my-codex-model",
        "codex",
        "GPT-5",
    ],
)
def test_codex_models(model: str) -> None:
    assert agent_for_model(model) == "codex"


@pytest.mark.parametrize(
    "model", [None, "", "llama3", "mistral-large", "grok-4", "gemini", "sonnetish", "opus2", "demo"]
)
def test_unknown_models_imply_nothing(model: str | None) -> None:
    assert agent_for_model(model) is None


def api(tmp_path: Path, config: str = "") -> Zwarm:
    state = tmp_path / ".zwarm"
    if config:
        state.mkdir(parents=True)
        (state / "config.toml").write_text(config)
    return Zwarm(env=Env(state_dir=state, environ={}, cwd=tmp_path))


@pytest.mark.parametrize(
    ("adapter", "model", "expect"),
    [
        (None, None, ("codex", None)),  # nothing given: default adapter, agent's own model
        (None, "sonnet", ("claude", "sonnet")),
        (None, "claude-opus-4-1", ("claude", "claude-opus-4-1")),
        (None, "gpt-5", ("codex", "gpt-5")),
        (None, "o4-mini", ("codex", "o4-mini")),
        (None, "gpt-5.1-codex", ("codex", "gpt-5.1-codex")),
        (None, "llama3", ("codex", "llama3")),  # unknown -> configured default adapter
        ("claude", None, ("claude", None)),
        ("claude", "gpt-5", ("claude", "gpt-5")),  # explicit adapter wins
        ("codex", "", ("codex", None)),
    ],
)
def test_route_with_defaults(tmp_path: Path, adapter, model, expect) -> None:
    assert api(tmp_path).route(adapter, model) == expect


def test_unknown_model_uses_configured_default_adapter(tmp_path: Path) -> None:
    z = api(tmp_path, '[defaults]\nadapter = "claude"\n')
    assert z.route(None, "llama3") == ("claude", "llama3")
    assert z.route(None, None) == ("claude", None)
    assert z.route(None, "gpt-5") == ("codex", "gpt-5")


def test_configured_models(tmp_path: Path) -> None:
    z = api(tmp_path, '[codex]\nmodel = "gpt-5-mini"\n[claude]\nmodel = "haiku"\n')
    assert z.route(None, None) == ("codex", "gpt-5-mini")
    assert z.route("claude", None) == ("claude", "haiku")
    assert z.route(None, "opus") == ("claude", "opus")  # given model beats configured


def test_default_model_picks_adapter(tmp_path: Path) -> None:
    z = api(tmp_path, '[defaults]\nmodel = "sonnet"\n')
    assert z.route(None, None) == ("claude", "sonnet")
    # an explicit codex session never inherits a claude-only default model
    assert z.route("codex", None) == ("codex", None)
    z2 = api(tmp_path / "b", '[defaults]\nmodel = "my-local"\n')
    assert z2.route(None, None) == ("codex", "my-local")
    assert z2.route("claude", None) == ("claude", "my-local")


def test_unknown_adapter(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="unknown adapter 'grok'"):
        api(tmp_path).route("grok", None)
