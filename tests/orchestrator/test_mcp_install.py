"""``zwarm.mcp_install``: what ``zwarm mcp install`` writes for each client and scope, merged
into what is there, idempotent, never through a link, the serve token never in a project file.
(The real clients reading these files: tests/orchestrator/test_mcp_install_real.py.)"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from zwarm import mcp_install
from zwarm.errors import InvalidInput

pytestmark = pytest.mark.unit

CMD = ["/opt/zwarm/bin/zwarm"]


class Box:
    def __init__(self, tmp: Path) -> None:
        self.proj = tmp / "proj"
        self.home = tmp / "home"
        self.proj.mkdir()
        self.home.mkdir()
        self.state = self.proj / ".zwarm"
        self.environ = {
            "HOME": str(self.home),
            "XDG_STATE_HOME": str(tmp / "xdg-state"),
            "XDG_RUNTIME_DIR": "",
        }

    def plan(self, client: str, **kw: Any) -> mcp_install.Plan:
        return mcp_install.plan(
            client,
            user=kw.pop("user", False),
            state_dir=self.state,
            cwd=self.proj,
            environ=self.environ,
            command=CMD,
            **kw,
        )

    def install(self, client: str, **kw: Any) -> mcp_install.Plan:
        p = self.plan(client, **kw)
        mcp_install.apply(p)
        return p


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def _json(p: Path) -> Any:
    return json.loads(p.read_text())


def test_claude_project_writes_the_server_the_allow_rule_and_its_approval(box: Box) -> None:
    p = box.install("claude")
    server = _json(box.proj / ".mcp.json")["mcpServers"]["zwarm"]
    assert server == {
        "type": "stdio",
        "command": CMD[0],
        "args": ["mcp"],
        "env": {"ZWARM_DIR": str(box.state)},
        "alwaysLoad": True,
    }
    settings = _json(box.proj / ".claude" / "settings.json")
    assert settings == {
        "permissions": {"allow": ["mcp__zwarm__*"]},
        "enabledMcpjsonServers": ["zwarm"],
    }
    text = "\n".join(mcp_install.describe(p, printing=False))
    assert f"created {box.proj / '.mcp.json'}" in text
    assert '+ permissions.allow: "mcp__zwarm__*"' in text
    assert "trust this folder" in text  # claude ignores an untrusted project's permissions


def test_codex_project_approves_only_the_zwarm_server_and_says_when_codex_will_not_read_it(
    box: Box,
) -> None:
    p = box.install("codex")
    doc = tomllib.loads((box.proj / ".codex" / "config.toml").read_text())
    assert doc == {
        "mcp_servers": {
            "zwarm": {
                "command": CMD[0],
                "args": ["mcp"],
                "env": {"ZWARM_DIR": str(box.state)},
                "default_tools_approval_mode": "approve",
                "required": True,
            }
        }
    }
    assert any("codex exec --trust" in n for n in p.notes)
    user = box.home / ".codex"
    user.mkdir()
    (user / "config.toml").write_text(f'[projects."{box.proj}"]\ntrust_level = "trusted"\n')
    assert not box.plan("codex").notes  # trusted: nothing to say


def test_install_is_idempotent_and_keeps_everything_else(box: Box) -> None:
    (box.proj / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}}))
    (box.proj / ".claude").mkdir()
    settings = {"permissions": {"allow": ["Bash(ls)"], "deny": ["Read(.env)"]}, "model": "m"}
    (box.proj / ".claude" / "settings.json").write_text(json.dumps(settings))
    (box.proj / ".codex").mkdir()
    toml = '# my settings\nmodel = "o3"  # keep me\n\n[mcp_servers.other]\ncommand = "y"\n'
    (box.proj / ".codex" / "config.toml").write_text(toml)
    for client in ("claude", "codex"):
        box.install(client)
    assert _json(box.proj / ".mcp.json")["mcpServers"]["other"] == {"command": "x"}
    got = _json(box.proj / ".claude" / "settings.json")
    assert got["permissions"] == {"allow": ["Bash(ls)", "mcp__zwarm__*"], "deny": ["Read(.env)"]}
    assert got["model"] == "m"
    text = (box.proj / ".codex" / "config.toml").read_text()
    assert text.startswith(toml)  # appended: the comments are kept
    assert tomllib.loads(text)["mcp_servers"]["other"] == {"command": "y"}
    files = [box.proj / ".mcp.json", box.proj / ".claude/settings.json", box.proj / ".codex"]
    before = {f: (f / "config.toml" if f.is_dir() else f).stat().st_mtime_ns for f in files}
    again = [box.plan(c) for c in ("claude", "codex")]
    assert all(c.data is None for p in again for c in p.changes)
    for p in again:
        mcp_install.apply(p)
        assert "unchanged" in mcp_install.describe(p, printing=False)[0]
    after = {f: (f / "config.toml" if f.is_dir() else f).stat().st_mtime_ns for f in files}
    assert after == before


def test_a_changed_zwarm_entry_is_replaced_not_duplicated(box: Box) -> None:
    (box.proj / ".codex").mkdir()
    old = '[mcp_servers.zwarm]\ncommand = "zwarm"\nargs = ["mcp"]\n'
    (box.proj / ".codex" / "config.toml").write_text(old)
    p = box.install("codex")
    doc = tomllib.loads((box.proj / ".codex" / "config.toml").read_text())
    assert doc["mcp_servers"]["zwarm"]["command"] == CMD[0]
    assert any(line.startswith("~ mcp_servers.zwarm") for line in p.changes[0].lines)


def test_print_writes_nothing(box: Box) -> None:
    for client in ("claude", "codex"):
        p = box.plan(client)
        shown = "\n".join(mcp_install.describe(p, printing=True))
        assert "mcp__zwarm__*" in shown or "[mcp_servers.zwarm]" in shown
    assert sorted(os.listdir(box.proj)) == []


def test_user_scope_writes_the_users_files(box: Box) -> None:
    box.install("claude", user=True)
    box.install("codex", user=True)
    assert _json(box.home / ".claude.json")["mcpServers"]["zwarm"]["command"] == CMD[0]
    settings = _json(box.home / ".claude" / "settings.json")
    assert settings == {"permissions": {"allow": ["mcp__zwarm__*"]}}  # approves nothing else
    codex = box.home / ".codex" / "config.toml"
    assert tomllib.loads(codex.read_text())["mcp_servers"]["zwarm"]["required"] is True
    assert os.stat(codex).st_mode & 0o777 == 0o600
    assert os.listdir(box.proj) == []
    box.environ["CODEX_HOME"] = str(box.home / "ch")
    box.environ["CLAUDE_CONFIG_DIR"] = str(box.home / "cc")
    box.install("codex", user=True)
    box.install("claude", user=True)
    assert (box.home / "ch" / "config.toml").is_file()
    assert (box.home / "cc" / ".claude.json").is_file()
    assert (box.home / "cc" / "settings.json").is_file()


@pytest.mark.parametrize("client", ["claude", "codex"])
def test_a_symlinked_config_file_is_refused_and_its_target_untouched(
    box: Box, tmp_path: Path, client: str
) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("{}" if client == "claude" else "")
    link = box.proj / (".mcp.json" if client == "claude" else ".codex/config.toml")
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(target)
    with pytest.raises(InvalidInput, match="symbolic link"):
        box.install(client)
    assert target.read_text() == ("{}" if client == "claude" else "")


def test_a_symlinked_client_folder_in_the_project_is_refused(box: Box, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (box.proj / ".codex").symlink_to(elsewhere)
    with pytest.raises(InvalidInput, match="symbolic link"):
        box.install("codex")
    assert os.listdir(elsewhere) == []


def test_a_file_that_does_not_parse_is_named_and_nothing_is_written(box: Box) -> None:
    (box.proj / ".mcp.json").write_text("{not json")
    with pytest.raises(InvalidInput, match=r"\.mcp\.json is not valid JSON"):
        box.install("claude")
    assert not (box.proj / ".claude").exists()
    (box.proj / ".mcp.json").write_text('{"mcpServers": []}')
    with pytest.raises(InvalidInput, match="mcpServers is not an object"):
        box.install("claude")
    (box.proj / ".codex").mkdir()
    (box.proj / ".codex" / "config.toml").write_text("[[[")
    with pytest.raises(InvalidInput, match="is not valid TOML"):
        box.install("codex")


def test_http_token_is_never_written_into_a_project_file(box: Box) -> None:
    from zwarm.serve.auth import load_token

    token, _, _ = load_token(box.environ, box.state, box.proj)
    url = "http://127.0.0.1:9999/mcp"
    p1, p2 = box.install("claude", http_url=url), box.install("codex", http_url=url)
    for path in (box.proj / ".mcp.json", box.proj / ".codex" / "config.toml"):
        assert token not in path.read_text()
    server = _json(box.proj / ".mcp.json")["mcpServers"]["zwarm"]
    assert server["headers"] == {"Authorization": "Bearer ${ZWARM_SERVE_TOKEN}"}
    assert server["url"] == url
    codex = tomllib.loads((box.proj / ".codex" / "config.toml").read_text())["mcp_servers"]
    assert codex["zwarm"]["bearer_token_env_var"] == "ZWARM_SERVE_TOKEN"
    assert any("export ZWARM_SERVE_TOKEN" in n for n in p1.notes + p2.notes)
    shown = box.plan("claude", user=True, http_url=url, printing=True)
    assert any("Bearer TOKEN" in line for line in mcp_install.describe(shown, printing=True))
    with pytest.raises(InvalidInput, match="http"):
        box.plan("codex", http_url="claude")  # `--http claude`: the client taken for the URL
    # user scope may keep it: a file of the user's, 0600
    box.install("codex", user=True, http_url=url)
    user = box.home / ".codex" / "config.toml"
    assert token in user.read_text() and os.stat(user).st_mode & 0o777 == 0o600


def test_the_command_is_the_running_zwarm_made_absolute(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "zwarm"
    script.parent.mkdir()
    script.write_text("")
    assert mcp_install.zwarm_command(str(script)) == [str(script)]
    cmd = mcp_install.zwarm_command("/nonexistent/python-ish")
    assert os.path.isabs(cmd[0]) and cmd[-2:] == ["-m", "zwarm"]
