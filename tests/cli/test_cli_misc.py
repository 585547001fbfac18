"""Entry points, the demo, and start-up staying light."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_python_m_zwarm_help(zw) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "zwarm", "--help"],
        capture_output=True,
        text=True,
        env=zw.env,
        cwd=zw.cwd,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    for cmd in (
        "spawn",
        "ls",
        "show",
        "trajectory",
        "inject",
        "logs",
        "wait",
        "kill",
        "rm",
        "demo",
        "init",
    ):
        assert f"  {cmd} " in res.stdout, cmd
    assert not zw.state_dir.exists()


def test_version_and_subcommand_help(zw) -> None:
    res = zw.run("--version", check=True)
    assert res.stdout.startswith("zwarm ")
    res = zw.run("spawn", "--help", check=True)
    assert "--adapter" in res.stdout and "--timeout" in res.stdout


def test_every_description_names_every_agent_that_ships(zw) -> None:
    """Issue 30.15: ``zwarm --help``, ``spawn --help``, the MCP server's instructions, the
    orchestrator's prompt and the ``delegate`` tool name Gemini CLI beside Codex and Claude
    Code, as every agent zwarm ships with."""
    from zwarm.orchestrator import loop, mcp_server, tools

    assert "Gemini CLI" in zw.run("--help", check=True).stdout
    assert "gemini" in " ".join(zw.run("spawn", "--help", check=True).stdout.split())
    delegate = next(t for t in tools.TOOLS if t.name == "delegate")
    for text in (mcp_server.INSTRUCTIONS, loop.SYSTEM_PROMPT, delegate.description):
        assert all(a in text for a in ("Codex", "Claude Code", "Gemini CLI")), text


def test_demo_runs_on_a_fresh_machine(zw) -> None:
    state = zw.tmp / "demo" / ".zwarm"
    # no agent on PATH, no API key: the demo needs neither
    env = {"PATH": "/usr/bin:/bin"}
    res = zw.run("--state-dir", str(state), "demo", env_extra=env, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    for part in ("zwarm spawn", "zwarm ls", "zwarm trajectory", "zwarm inject", "zwarm show"):
        assert part in res.stdout
    rows = zw.json("--state-dir", str(state), "ls")
    assert len(rows) == 1 and rows[0]["status"] == "completed" and rows[0]["turns"] == 2


def test_demo_leaves_nothing_behind_unless_kept(zw) -> None:
    """Regression: the demo wrote ./zwarm-demo/ into the current directory, and its --keep
    flag did nothing. Now it runs in a temporary directory unless --keep DIR."""
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(zw.tmp / "t")}
    (zw.tmp / "t").mkdir()
    before = sorted(os.listdir(zw.cwd))
    res = zw.run("demo", env_extra=env, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(os.listdir(zw.cwd)) == before and os.listdir(zw.tmp / "t") == []
    kept = zw.tmp / "kept"
    res = zw.run("demo", "--keep", str(kept), env_extra=env, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(zw.json("--state-dir", str(kept / ".zwarm"), "ls")) == 1


@pytest.mark.perf
@pytest.mark.parametrize(
    ("args", "with_click"), [(["--help"], True), (["ls"], False), (["ls", "--json"], False)]
)
def test_light_commands_do_not_import_heavy_modules(zw, args: list[str], with_click: bool) -> None:
    """Nothing heavy on the commands users run most; ``ls`` not even click (the fast path)."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "zwarm", *args],
        capture_output=True,
        text=True,
        env=zw.env,
        cwd=zw.cwd,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in res.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "zwarm.cli" in imported  # the measurement works
    assert ("click" in imported) == with_click
    for heavy in ("rich", "psutil", "tomli_w", "openai", "mcp"):
        assert heavy not in imported, heavy
