"""``zwarm mcp install`` as a user runs it: what it says, its exit codes, one line on bad input,
nothing written by --print, the state dir made for the server (the writer's cases:
tests/unit/test_mcp_install.py)."""

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
