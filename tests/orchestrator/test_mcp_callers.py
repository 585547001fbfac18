"""Who calls ``zwarm mcp``, and what each caller has been told (issue 33, bugs 5 and 6).

Every connection is a caller of its own (two conversations of one client never take each
other's news), a source given to the server names its caller across connections, and a
finish reaches the model at least once: a ``wait`` the client cancelled, or left by going
away, records nothing as told. The real ``zwarm mcp`` driven by the MCP SDK's own client (and,
to go away in the middle of a call, by hand over its pipes), fake agents behind it."""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Any

import anyio

from tests.support import SAMPLES, ZWARM_BIN, wait_until
from tests.support.mcp_client import connect

REPLAY = {"FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl")}


def _finished(zw: Any, sid: str) -> bool:
    return bool(zw.json("show", sid)["status"] == "completed")


def test_a_cancelled_wait_records_no_finish(zw) -> None:
    """Bug 5: the client cancels its ``wait`` (the SDK sends notifications/cancelled); the
    worker finishes afterwards. The server's abandoned wait recorded that finish as told, so
    the next check_session said finished_since_last_look false, and wait had nothing."""
    go = zw.tmp / "go"
    env = {**REPLAY, "FAKE_WAIT_FILE": str(go)}
    window = 4.0  # the cancelled call's own timeout: the old server waited (and marked) so long
    got: dict[str, Any] = {}

    async def main() -> None:
        async with connect(zw, env) as (_, call):
            _, d = await call("delegate", {"task": "finish when told"})
            sid = got["sid"] = d["session_id"]
            scope = anyio.CancelScope()

            async def waiter() -> None:
                with scope:
                    got["cancelled_wait"] = await call("wait", {"timeout_s": window})

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                began = time.monotonic()
                await call("list_sessions")  # answered after the wait has begun (in order)
                scope.cancel()
            await call("list_sessions")  # answered after the server has read the cancel
            go.touch()
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: _finished(zw, sid)))
            # what the old server did meanwhile: its wait saw the finish and marked it told
            await anyio.sleep(max(0.0, began + window + 1.0 - time.monotonic()))
            _, got["check"] = await call("check_session", {"session_id": sid})
            _, got["wait"] = await call("wait", {"session_ids": [sid], "timeout_s": 0})

    anyio.run(main)
    assert "cancelled_wait" not in got
    assert got["check"]["status"] == "completed"
    assert got["check"]["finished_since_last_look"] is True
    # check_session told it: the next call does not tell it again as news
    assert [f["new"] for f in got["wait"]["finished"]] == [False]


def test_a_client_that_goes_away_mid_wait_loses_no_finish(zw) -> None:
    """Bug 5: the client goes away in the middle of a ``wait`` (its stdin closed), the worker
    finishes, the server ends. The next connection of that caller (named by ZWARM_SOURCE)
    gets the finish from ``wait`` as news. Before, the server's wait went on, recorded the
    finish as told, and only then let the server exit."""
    go = zw.tmp / "go"
    env = {**zw.env, **REPLAY, "FAKE_WAIT_FILE": str(go), "ZWARM_SOURCE": "planner"}
    server = subprocess.Popen(
        [str(ZWARM_BIN), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=zw.cwd,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    sent = 0

    def send(method: str, params: dict[str, Any], request: bool = True) -> int:
        nonlocal sent
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            sent += 1
            msg["id"] = sent
        assert server.stdin is not None
        server.stdin.write(json.dumps(msg) + "\n")
        server.stdin.flush()
        return sent

    def reply(n: int) -> dict[str, Any]:
        assert server.stdout is not None
        while True:
            msg = json.loads(server.stdout.readline())
            if msg.get("id") == n:
                return dict(msg["result"])

    def tool(name: str, args: dict[str, Any]) -> int:
        return send("tools/call", {"name": name, "arguments": args})

    try:
        from mcp_types.version import LATEST_HANDSHAKE_VERSION

        hello = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw-client", "version": "1"},
        }
        reply(send("initialize", hello))
        send("notifications/initialized", {}, request=False)
        sid = reply(tool("delegate", {"task": "finish when told"}))["structuredContent"][
            "session_id"
        ]
        tool("wait", {"timeout_s": 30})
        reply(tool("list_sessions", {}))  # answered after the wait has begun (in order)
        server.stdin.close()  # the client goes away in the middle of the wait
        go.touch()
        wait_until(lambda: _finished(zw, sid))
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()

    got: dict[str, Any] = {}

    async def main() -> None:
        async with connect(zw, {"ZWARM_SOURCE": "planner"}) as (_, call):
            _, got["wait"] = await call("wait", {"timeout_s": 5})

    anyio.run(main)
    finished = got["wait"]["finished"]
    assert [(f["session_id"], f["new"]) for f in finished] == [(sid, True)], got["wait"]
    assert zw.json("show", sid)["source"] == "planner"


def test_two_conversations_of_one_client_keep_their_own_news(zw) -> None:
    """Bug 6: two connections with the same client name (two Claude Code conversations) are
    two callers. Before, both were mcp:pytest-client: the second one, which started nothing,
    got the first one's finished session from wait, and the first one's wait came back
    empty."""
    got: dict[str, Any] = {}

    async def main() -> None:
        async with connect(zw, REPLAY) as (_, first), connect(zw, REPLAY) as (_, second):
            _, got["second_before"] = await second("list_sessions")
            _, d = await first("delegate", {"task": "quick"})
            sid = got["sid"] = d["session_id"]
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: _finished(zw, sid)))
            _, got["second_wait"] = await second("wait", {"timeout_s": 5})
            _, got["second_list"] = await second("list_sessions", {"mine": True})
            _, got["first_wait"] = await first("wait", {"timeout_s": 5})
            _, got["first_list"] = await first("list_sessions")

    anyio.run(main)
    sid = got["sid"]
    assert got["second_wait"]["finished"] == [] and "note" in got["second_wait"]
    assert got["second_list"]["total"] == 0
    assert [(f["session_id"], f["new"]) for f in got["first_wait"]["finished"]] == [(sid, True)]
    first, second = got["first_list"]["you"], got["second_before"]["you"]
    assert re.fullmatch(r"mcp:pytest-client/[0-9a-f]{6}", first) and first != second
    assert re.fullmatch(r"mcp:pytest-client/[0-9a-f]{6}", second)
    assert [r["source"] for r in zw.json("ls")] == [first]


def test_a_named_source_is_not_passed_to_the_agents(zw) -> None:
    """ZWARM_SOURCE names the caller of one server: an agent's own zwarm (an MCP server it
    starts) must not take its orchestrator's identity, and its news."""
    got: dict[str, Any] = {}

    async def main() -> None:
        async with connect(zw, {**REPLAY, "ZWARM_SOURCE": "planner"}) as (_, call):
            _, d = await call("delegate", {"task": "quick"})
            _, got["wait"] = await call("wait", {"session_ids": [d["session_id"]]})
            _, got["list"] = await call("list_sessions")

    anyio.run(main)
    assert got["list"]["you"] == "planner"
    (record,) = zw.record.glob("env*.json")
    agent_env = json.loads(record.read_text())
    assert "ZWARM_SOURCE" not in agent_env and "ZWARM_DIR" in agent_env


def test_the_state_of_callers_long_gone_is_removed(zw) -> None:
    """Every connection is a caller with a state file of its own: a new caller's first call
    removes the files of callers silent for 30 days, so they do not pile up."""
    import os

    from zwarm.orchestrator.tools import Toolbox

    api = zw.api()
    api.ensure_state_dir()
    assert Toolbox(api, "mcp:gone/abc123").dispatch("list_sessions")["ok"] is True
    seen = zw.state_dir / "orchestrator" / "seen"
    (gone,) = seen.glob("mcp_gone_abc123-*.json")
    month = time.time() - 31 * 86_400
    os.utime(gone, (month, month))
    assert Toolbox(api, "mcp:new/def456").dispatch("list_sessions")["ok"] is True
    assert not gone.exists()
    assert [p.name.split("-")[0] for p in seen.glob("*.json")] == ["mcp_new_def456"]


def test_mcp_refuses_a_blank_source_in_one_line(zw) -> None:
    res = zw.run("mcp", "--source", " ", input="")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip() == (
        "Error: --source (or ZWARM_SOURCE) must be 1 to 100 printable characters, not ' '"
    )
