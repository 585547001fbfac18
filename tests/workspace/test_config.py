"""``[workspace]`` and ``[defaults] workspace`` in config.toml: validated, and trust-gated."""

from __future__ import annotations

import pytest

from zwarm import config
from zwarm.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[defaults]\nworkspace = "both"\n', "defaults.workspace must be one of shared, worktree"),
        ('[workspace]\nroot = "rel/dir"\n', "workspace.root must be an absolute path"),
        ('[workspace]\nsetup = ["ok", 3]\n', "each command is a string or a list of strings"),
        ("[workspace]\nsetup = [[]]\n", "each command is a string or a list of strings"),
        ('[workspace]\ncopy = ["../secrets"]\n', "'../secrets' must be a path inside"),
        ('[workspace]\nlink = ["/etc"]\n', "'/etc' must be a path inside"),
        ('[workspace]\ncopy = "x"\n', "workspace.copy must be an array"),
        ("[workspace]\nother = 1\n", "unknown key 'other' in [workspace]"),
    ],
)
def test_bad_workspace_settings_are_one_line_errors(text: str, problem: str) -> None:
    import tomllib

    with pytest.raises(ConfigError) as e:
        config.validate(tomllib.loads(text), "config.toml")
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_workspace_commands_and_paths_need_trust_the_mode_does_not() -> None:
    for key in ("root", "setup", "copy", "link"):
        assert config.is_security_key("workspace", key)
    assert not config.is_security_key("defaults", "workspace")
    assert not config.is_security_key("tools", "diff_chars")
    ok = config.validate(
        {"workspace": {"root": "~/wt", "setup": ["npm ci", ["make", "deps"]], "copy": [".env"]}},
        "c",
    )
    assert ok["workspace"]["setup"] == ["npm ci", ["make", "deps"]]
