"""``zwarm mcp`` driven by the MCP Python SDK's own client over stdio, as Claude Code or
Codex would drive it: the real ``zwarm`` executable, fake agents behind it."""

from __future__ import annotations

import re
import time
from typing import Any

import anyio
import pytest
from mcp import ClientSession

from tests.orchestrator.helpers import write_config
from tests.support import SAMPLES
from tests.support.mcp_client import Call, connect, run_client
from zwarm.orchestrator.tools import TOOL_NAMES, schemas


def test_mcp_full_session_life_cycle(zw) -> None:
    claude_replay = SAMPLES / "claude_simple.jsonl"
    write_config(zw, f'[claude]\nenv = {{ FAKE_HANG = "1", FAKE_REPLAY = "{claude_replay}" }}\n')
    env = {"FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl")}
    seen: dict[str, Any] = {}

    async def body(session: ClientSession, call: Call) -> None:
        listed = await session.list_tools()
        assert [t.name for t in listed.tools] == list(TOOL_NAMES)
        wire = [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]
        assert wire == schemas("mcp")

        # bad calls are tool errors, and the server lives on
        assert await call("delegate", {}) == (
            True,
            {"ok": False, "error": "missing required argument 'task'"},
        )
        is_error, data = await call("check_session", {"session_id": "nope"})
        assert is_error and data["error"] == "no session matches 'nope'"
        is_error, data = await call("frobnicate", {"x": 1})
        assert is_error and data["error"].startswith("unknown tool 'frobnicate'")
        is_error, data = await call("delegate", {"task": "x", "cwd": "/"})
        assert is_error and "outside the allowed roots" in data["error"]

        # delegate, wait, check, trajectory, converse, wait, end
        _, d = await call("delegate", {"task": "write hello.py", "name": "hello"})
        sid = d["session_id"]
        _, w = await call("wait", {"session_ids": [sid], "timeout_s": 30})
        assert w["timed_out"] is False and w["finished"][0]["status"] == "completed"
        _, c = await call("check_session", {"session_id": "hello"})
        assert re.fullmatch(r"mcp:pytest-client/[0-9a-f]{6}", c["source"]) and c["turns"] == 1
        seen["source"] = c["source"]
        assert c["last_message"] == "Hi there! This is the fake server."
        _, t = await call("get_trajectory", {"session_id": sid})
        assert t["steps"][0]["kind"] == "message"
        _, v = await call("converse", {"session_id": sid, "message": "add a test"})
        assert (v["state"], v["turn"]) == ("started", 2)
        _, w = await call("wait", {"session_ids": [sid]})
        assert w["finished"][0]["turns"] == 2
        is_error, e = await call("end_session", {"session_id": sid})
        assert is_error and "already finished (completed)" in e["error"]

        # a blocking wait does not block the server: other calls are answered meanwhile
        _, slow = await call("delegate", {"task": "slow work", "adapter": "claude"})
        seen["slow"] = slow["session_id"]
        waited: dict[str, Any] = {}

        async def waiter() -> None:
            waited["result"] = await call("wait", {"timeout_s": 30})
            waited["at"] = time.monotonic()

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.sleep(0.3)
            _, rows = await call("list_sessions")
            listed_at = time.monotonic()
            assert rows["total"] == 2 and "result" not in waited
            _, ended = await call("end_session", {"session_id": seen["slow"]})
            assert ended["killed"] is True
        assert waited["at"] > listed_at
        _, w = waited["result"]
        assert w["finished"][0]["status"] == "killed" and w["timed_out"] is False

        _, gone = await call("end_session", {"session_id": sid, "delete": True})
        assert gone["deleted"] is True
        assert len((await session.list_tools()).tools) == len(TOOL_NAMES)

    run_client(zw, body, env)
    rows = zw.json("ls")
    assert [(r["source"], r["status"]) for r in rows] == [(seen["source"], "killed")]
    assert seen["source"] in zw.run("ls", check=True).stdout


def test_sessions_outlive_the_server(zw) -> None:
    started: dict[str, str] = {}

    async def body(session: ClientSession, call: Call) -> None:
        _, d = await call("delegate", {"task": "runs on"})
        started["id"] = d["session_id"]

    run_client(zw, body, {"FAKE_HANG": "1", "FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl")})
    assert zw.json("show", started["id"])["status"] == "running"


def test_mcp_refuses_an_invalid_config_in_one_line(zw) -> None:
    write_config(zw, "[tools]\nmax_wait_s = 'soon'\n")
    res = zw.run("mcp", input="")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert (
        res.stderr.strip()
        .splitlines()[-1]
        .endswith("tools.max_wait_s must be an integer or a number, not a string")
    )


def test_mcp_refuses_a_state_dir_it_cannot_find_or_use_in_one_line(zw) -> None:
    """Issue 33: a client that starts the server elsewhere, or does not pass ZWARM_DIR (Codex
    drops exported variables), got an empty state dir served silently: 0 sessions, no error."""
    elsewhere = zw.tmp / "elsewhere"
    elsewhere.mkdir()
    res = zw.run("mcp", input="", cwd=elsewhere, env_extra={"ZWARM_DIR": ""})
    assert res.returncode == 1 and "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"Error: no zwarm state dir found from {elsewhere}")
    assert "zwarm init" in line and "ZWARM_DIR" in line
    assert not (elsewhere / ".zwarm").exists()
    a_file = zw.tmp / "a-file"
    a_file.write_text("")
    for given, says in (
        (a_file, f"Error: state dir {a_file} is not a directory"),
        (zw.tmp / "no" / ".zwarm", f"Error: state dir {zw.tmp / 'no' / '.zwarm'}: "),
    ):
        res = zw.run("mcp", input="", env_extra={"ZWARM_DIR": str(given)})
        assert res.returncode == 1 and res.stderr.strip().startswith(says), res.stderr


def test_mcp_says_which_state_dir_it_serves(zw) -> None:
    """A project made by ``zwarm init`` is found from a subdirectory, with no ZWARM_DIR; the
    instructions and list_sessions name its state dir and project."""
    project = zw.tmp / "project"
    (project / "src").mkdir(parents=True)
    zw.run("init", "-y", cwd=project, env_extra={"ZWARM_DIR": ""}, check=True)
    state = project / ".zwarm"
    got: dict[str, Any] = {}

    async def main() -> None:
        async with connect(zw, drop=("ZWARM_DIR",), cwd=project / "src") as (session, call):
            got["instructions"] = session.instructions
            _, got["list"] = await call("list_sessions")

    anyio.run(main)
    assert f"serves the zwarm state dir {state} (project {project})" in got["instructions"]
    assert got["list"]["state_dir"] == str(state) and got["list"]["total"] == 0


def test_missing_extras_are_one_line(monkeypatch) -> None:
    import importlib.util

    from click.testing import CliRunner

    from zwarm.cli.commands import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("mcp", "openai") else real(name, *a),
    )
    runner = CliRunner()
    res = runner.invoke(cli, ["mcp"])
    assert res.exit_code == 1
    assert res.stderr.strip() == "Error: zwarm mcp needs the mcp package: pip install 'zwarm[mcp]'"
    res = runner.invoke(cli, ["orchestrate", "x"])
    assert res.exit_code == 1
    assert "pip install 'zwarm[orchestrate]'" in res.stderr


@pytest.mark.perf
@pytest.mark.parametrize("cmd", ["mcp", "orchestrate", "tools"])
def test_help_does_not_import_the_extras(zw, cmd) -> None:
    code = (
        "import sys; from zwarm.cli import main; sys.argv = ['zwarm', "
        + repr(cmd)
        + ", '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('mcp', 'openai', 'rich', 'anyio') if m in sys.modules))"
    )
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=zw.env, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_a_linked_seen_folder_is_never_written_or_swept(zw, tmp_path) -> None:
    """Regression: ``.zwarm/orchestrator/seen`` (or ``orchestrator``) made a link by an agent
    had a new caller's start write its state into the link's target and delete every
    ``*.json`` there untouched for 30 days: a user's files outside the state dir."""
    import os

    sid = zw.spawn("task", env_extra={"FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl")})
    assert zw.wait(sid).returncode == 0
    orch = zw.state_dir / "orchestrator"
    for link in (orch / "seen", orch):
        victim = tmp_path / f"victim-{link.name}"
        victim.mkdir()
        if link.name == "orchestrator":
            (victim / "seen").mkdir()
        old = victim / ("seen" if link.name == "orchestrator" else "") / "old.json"
        old.write_text("{}")
        os.utime(old, (time.time() - 40 * 86_400,) * 2)
        before = sorted(p.relative_to(victim) for p in victim.rglob("*"))
        if orch.is_dir() and not orch.is_symlink():
            import shutil

            shutil.rmtree(orch)
        if link.name == "seen":
            orch.mkdir(mode=0o700)
        link.symlink_to(victim)

        async def body(session: ClientSession, call: Call) -> None:
            is_error, data = await call("list_sessions", {})
            assert not is_error and data["ok"], data

        run_client(zw, body)
        assert old.exists(), f"{old} deleted through {link}"
        assert sorted(p.relative_to(victim) for p in victim.rglob("*")) == before
        link.unlink()
