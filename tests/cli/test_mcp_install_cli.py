"""``zwarm mcp install`` as a user runs it: what it says, its exit codes, one line on bad input,
nothing written by --print, the state dir made for the server (the writer's cases:
tests/orchestrator/test_mcp_install.py)."""

from __future__ import annotations

import json
import os

from tests.support import ZW


def test_install_says_what_it_wrote_then_that_nothing_changed(zw: ZW) -> None:
    home = {"HOME": str(zw.tmp / "home")}
    shown = zw.run("mcp", "install", "claude", "--print", env_extra=home, check=True)
    assert '"mcp__zwarm__*"' in shown.stdout and f"# {zw.cwd / '.mcp.json'}" in shown.stdout
    assert os.listdir(zw.cwd) == [] and not zw.state_dir.exists()  # --print writes nothing
    first = zw.run("mcp", "install", "claude", env_extra=home, check=True)
    assert f"created {zw.cwd / '.mcp.json'}" in first.stdout
    assert zw.state_dir.is_dir()  # made: zwarm mcp serves a state dir that is there
    server = json.loads((zw.cwd / ".mcp.json").read_text())["mcpServers"]["zwarm"]
    assert server["env"] == {"ZWARM_DIR": str(zw.state_dir)}
    assert os.path.isabs(server["command"])
    again = zw.run("mcp", "install", "claude", env_extra=home, check=True)
    assert f"unchanged {zw.cwd / '.mcp.json'}" in again.stdout
    assert f"unchanged {zw.cwd / '.claude' / 'settings.json'}" in again.stdout


def test_bad_input_is_one_line_and_writes_nothing(zw: ZW) -> None:
    (zw.cwd / ".mcp.json").write_text("{broken")
    res = zw.run("mcp", "install", "claude")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.startswith("Error: ") and res.stderr.count("\n") == 1, res.stderr
    assert ".mcp.json is not valid JSON" in res.stderr
    assert not (zw.cwd / ".claude").exists() and not zw.state_dir.exists()
    (zw.cwd / ".codex").symlink_to(zw.tmp)
    res = zw.run("mcp", "install", "codex")
    assert res.returncode == 1 and "symbolic link" in res.stderr and "Traceback" not in res.stderr
    assert not (zw.tmp / "config.toml").exists()
    res = zw.run("mcp", "install", "cursor")
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_a_users_file_that_others_can_read_gets_no_token_they_can_read(zw: ZW) -> None:
    """Regression: ``--user --http`` wrote serve's token into the user's client config keeping
    that file's mode, so a ``~/.codex/config.toml`` or ``~/.claude.json`` other users could
    read (0644, as an editor or the client made it) handed them the token; and a planted
    group/world-writable project file stayed writable by every local user."""
    home = zw.tmp / "home"
    (home / ".codex").mkdir(parents=True)
    for path in (home / ".codex" / "config.toml", home / ".claude.json"):
        path.write_text("")
        path.chmod(0o644)
    env = {"HOME": str(home)}
    url = "http://127.0.0.1:9/mcp"
    for client in ("codex", "claude"):
        zw.run("mcp", "install", client, "--user", "--http", url, env_extra=env, check=True)
    for path in (home / ".codex" / "config.toml", home / ".claude.json"):
        assert "Bearer " in path.read_text() and "${ZWARM_SERVE_TOKEN}" not in path.read_text()
        assert os.stat(path).st_mode & 0o077 == 0, oct(os.stat(path).st_mode)
    (zw.cwd / ".claude").mkdir()
    planted = zw.cwd / ".claude" / "settings.json"
    planted.write_text('{"permissions": {"allow": []}}')
    planted.chmod(0o666)
    zw.run("mcp", "install", "claude", env_extra=env, check=True)
    assert os.stat(planted).st_mode & 0o022 == 0, oct(os.stat(planted).st_mode)
