"""Conformance, one turn: the real ``codex``/``claude`` run by zwarm against the fake LLMs.

Matrix items 1-6 of issue 3: a plain answer, shell commands, a file write, HTTP errors, a
stream broken mid-turn, claude's ``--max-turns`` and a permission refusal. Each test starts
the session through zwarm and asserts what zwarm recorded (``show``, ``trajectory``) against
what the fake sent and what the agent wrote in its own log.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.llm import (
    Reply,
    Usage,
    broken_stream,
    http_error,
    reasoning,
    shell,
    text,
    write_file,
)
from tests.support.real import ALLOW_BASH, RealWorld, result_line, shell_args


def agent_failure(real: RealWorld, sid: str, adapter: str) -> str:
    """The agent's own words for its failure, from its log."""
    if adapter == "codex":
        (failed,) = [e for e in real.events(sid) if e.get("type") == "turn.failed"]
        message: str = failed["error"]["message"]
        return message
    result = result_line(real, sid)
    assert result["is_error"] is True
    message = result["result"]
    return message


def kinds(steps: list[dict[str, Any]]) -> list[str]:
    return [s["kind"] for s in steps]


# --------------------------------------------------------------------------- 1 plain answer


def test_plain_answer(real: RealWorld, adapter: str) -> None:
    usage = Usage(input=460, cached=200, output=30, reasoning=7, cache_write=5)
    srv = real.use(adapter, [Reply([reasoning("Thinking it over."), text("Hello!")], usage)])
    sid = real.spawn("Say hello.", adapter)
    d = real.wait(sid)

    (t,) = d["turns_detail"]
    assert (d["status"], t["status"], t["exit_code"], t["signal"]) == ("completed",) * 2 + (0, None)
    assert (d["error"], t["error"]) == (None, None)
    assert d["last_message"] == t["final_message"] == "Hello!"
    assert real.steps(sid) == [
        {"kind": "reasoning", "text": "Thinking it over.", "turn": 1, "index": 0},
        {"kind": "message", "text": "Hello!", "turn": 1, "index": 1},
    ]
    assert srv.requests[0].contains("Say hello.")
    assert (len(srv.requests), srv.other_requests) == (1, [])  # nothing else was asked
    if adapter == "codex":
        # OpenAI's input_tokens already include the cached ones; reasoning is reported
        expected = {"input_tokens": 460, "cached_input_tokens": 200, "output_tokens": 30,
                    "reasoning_tokens": 7, "total_tokens": 490}  # fmt: skip
        assert d["agent_session_id"] == real.events(sid)[0]["thread_id"]
        # codex reports no money and no model: the model is the one zwarm passed it
        # ([codex.config] model), and the cost is estimated at its list price: 260 fresh
        # input at $5/M, 200 cached at $0.50/M, 30 output at $30/M
        assert d["model"] == srv.requests[0].body["model"] == "gpt-5.5"
        assert (d["cost_usd"], d["cost_source"]) == (pytest.approx(0.0023), "estimated")
    else:
        # zwarm's input_tokens include cached ones: 460 fresh + 5 cache write + 200 cache read;
        # the Messages API carries no reasoning-token count
        expected = {"input_tokens": 665, "cached_input_tokens": 200, "output_tokens": 30,
                    "reasoning_tokens": 0, "total_tokens": 695}  # fmt: skip
        result = result_line(real, sid)
        assert result["total_cost_usd"] > 0
        assert t["cost_usd"] == d["cost_usd"] == pytest.approx(result["total_cost_usd"])
        assert d["cost_source"] == "reported"
        assert d["agent_session_id"] == result["session_id"]
        assert d["model"] == srv.requests[0].body["model"]  # the model claude asked for
    assert t["usage"] == d["usage"] == expected


# --------------------------------------------------------------------------- 2 shell commands


def test_shell_commands_succeed_and_fail(real: RealWorld, adapter: str) -> None:
    script = [
        Reply([shell("echo fine")], Usage(100, 0, 10)),
        Reply([shell("echo bad; exit 3")], Usage(150, 100, 10)),
        Reply([text("Both ran.")], Usage(210, 150, 10)),
    ]
    srv = real.use(adapter, script, **shell_args(adapter))
    sid = real.spawn("Run two commands.", adapter)
    d = real.wait(sid)

    assert (d["status"], d["turns_detail"][0]["exit_code"]) == ("completed", 0)
    assert d["last_message"] == "Both ran."
    steps = real.steps(sid)
    assert kinds(steps) == ["command", "command", "message"]
    ok, bad = steps[0], steps[1]
    assert "echo fine" in ok["command"] and "echo bad; exit 3" in bad["command"]
    assert (ok["exit_code"], ok["status"]) == (0, "completed")
    assert (bad["exit_code"], bad["status"]) == (3, "failed")
    if adapter == "codex":
        assert (ok["output"], bad["output"]) == ("fine\n", "bad\n")
    else:  # claude's tool result: stdout, and "Exit code N" before a failure's output
        assert (ok["output"], bad["output"]) == ("fine", "Exit code 3\nbad")
    assert srv.requests[1].contains("fine")  # the command's output went back to the model
    assert len(srv.requests) == 3


# --------------------------------------------------------------------------- 3 file write


def test_file_written_by_the_agent(real: RealWorld, adapter: str) -> None:
    target = real.work / "notes" / "hello.txt" if adapter == "codex" else real.work / "hello.txt"
    # codex's apply_patch takes a path relative to its -C dir; claude's Write an absolute one
    path = "notes/hello.txt" if adapter == "codex" else str(target)
    script = [Reply([write_file(path, "line one\nline two\n")]), Reply([text("Wrote it.")])]
    real.use(adapter, script)
    sid = real.spawn("Write the file.", adapter)
    d = real.wait(sid)

    assert (d["status"], d["last_message"]) == ("completed", "Wrote it.")
    assert target.read_text() == "line one\nline two\n"
    change = {"kind": "file_change", "changes": [{"path": str(target), "kind": "add"}],
              "status": "completed"}  # fmt: skip
    steps = [{k: v for k, v in s.items() if k not in ("turn", "index")} for s in real.steps(sid)]
    if adapter == "codex":
        assert steps == [change, {"kind": "message", "text": "Wrote it."}]
    else:
        call, result, file_change, message = steps
        assert (call["kind"], call["name"]) == ("tool_call", "Write")
        assert call["arguments"] == {"file_path": str(target), "content": "line one\nline two\n"}
        assert (result["kind"], result["id"]) == ("tool_result", call["id"])
        assert result["is_error"] is False
        assert file_change == change
        assert message == {"kind": "message", "text": "Wrote it."}


# --------------------------------------------------------------------------- 4 HTTP errors


@pytest.mark.parametrize("status", [500, 401])
def test_http_error_fails_with_the_agents_reason(
    real: RealWorld, adapter: str, status: int
) -> None:
    srv = real.use(adapter, [http_error(status, "fake says no")])
    sid = real.spawn("Say hi.", adapter)
    d = real.wait(sid)

    reason = agent_failure(real, sid, adapter)
    (t,) = d["turns_detail"]
    assert (d["status"], t["status"], t["exit_code"]) == ("failed", "failed", 1)
    assert d["error"] == t["error"] == reason
    expected = {
        ("codex", 500): "We’re currently experiencing high demand",  # codex hides a 5xx body
        ("codex", 401): "unexpected status 401 Unauthorized: fake says no",
        ("claude", 500): "API Error: 500 fake says no",
        ("claude", 401): "Failed to authenticate. API Error: 401 fake says no",
    }[adapter, status]
    assert reason.startswith(expected)
    shown = real.cli("show", sid).stdout  # what a user reads
    assert f"error: {reason}" in shown
    assert real.cli_json("show", sid)["error"] == reason
    assert real.cli("wait", sid, check=False).returncode == 1
    assert len(srv.requests) == 1  # the agents' retries are off
    assert real.steps(sid)[-1] == {"kind": "error", "message": reason, "fatal": True,
                                   "turn": 1, "index": len(real.steps(sid)) - 1}  # fmt: skip


# --------------------------------------------------------------------------- 5 broken stream


def test_codex_broken_stream_fails_the_turn(real: RealWorld) -> None:
    srv = real.use("codex", [broken_stream(text("Partial answer"))])
    sid = real.spawn("Say hi.", "codex")
    d = real.wait(sid)

    reason = agent_failure(real, sid, "codex")
    assert reason.startswith("stream disconnected before completion")
    (t,) = d["turns_detail"]
    assert (d["status"], t["exit_code"], d["error"]) == ("failed", 1, reason)
    # what arrived before the cut is kept, and is the turn's last message
    assert real.steps(sid)[0] == {"kind": "message", "text": "Partial answer", "turn": 1,
                                  "index": 0}  # fmt: skip
    assert t["final_message"] == "Partial answer"
    assert len(srv.requests) == 1  # stream_max_retries=0


def test_claude_broken_stream_then_failed_fallback_fails(real: RealWorld) -> None:
    # claude retries a broken stream (even with CLAUDE_CODE_MAX_RETRIES=0): usually once without
    # streaming; on a loaded machine it was also seen to stream again, or to retry twice. How it
    # retries is claude's business; every retry is cut here, and the turn must fail with its reason
    srv = real.use("claude", [broken_stream(text("Partial answer")), *[broken_stream()] * 3])
    sid = real.spawn("Say hi.", "claude")
    d = real.wait(sid)

    reason = agent_failure(real, sid, "claude")
    assert reason.startswith("API Error: Connection to the API was lost")
    (t,) = d["turns_detail"]
    assert (d["status"], t["exit_code"], d["error"]) == ("failed", 1, reason)
    assert 2 <= len(srv.requests) <= 3 and srv.requests[0].body["stream"] is True
    # claude either drops the partial text, or keeps it and asks the model to resume from it
    # (both seen with this version): the final message is then that text, never the error
    kept = any(e.get("type") == "assistant" and e["message"].get("model") != "<synthetic>"
               for e in real.events(sid))  # fmt: skip
    assert t["final_message"] == ("Partial answer" if kept else None)


def test_claude_broken_stream_recovered_by_its_fallback_completes(real: RealWorld) -> None:
    srv = real.use("claude", [broken_stream(text("Partial")), Reply([text("Recovered.")])])
    sid = real.spawn("Say hi.", "claude")
    d = real.wait(sid)

    assert (d["status"], d["turns_detail"][0]["exit_code"]) == ("completed", 0)
    assert d["last_message"] == "Recovered."
    # its retry is usually not streamed; under load it was seen streamed: either way, one retry
    assert len(srv.requests) == 2 and srv.requests[0].body["stream"] is True


# --------------------------------------------------------------------------- 6 claude limits


def test_claude_max_turns_fails_with_its_reason(real: RealWorld) -> None:
    script = [Reply([shell("echo hi")], Usage(200, 0, 20)), Reply([text("never sent")])]
    srv = real.use("claude", script, extra_args=[*ALLOW_BASH, "--max-turns", "1"])
    sid = real.spawn("Run a command.", "claude")
    d = real.wait(sid)

    (t,) = d["turns_detail"]
    assert (d["status"], t["exit_code"]) == ("failed", 1)
    assert d["error"] == "Reached maximum number of turns (1)"
    assert [(s["kind"], s.get("exit_code")) for s in real.steps(sid)] == [
        ("command", 0),  # the tool ran; the turn limit stopped the next model call
        ("error", None),
    ]
    assert real.steps(sid)[-1]["fatal"] is True
    assert t["usage"]["output_tokens"] == 20  # a failed run still reports what it used
    assert len(srv.requests) == 1


def test_claude_tool_refused_by_permission_mode_completes(real: RealWorld) -> None:
    script = [Reply([shell("touch refused.txt")]), Reply([text("I was not allowed to.")])]
    srv = real.use("claude", script, permission_mode="default")
    sid = real.spawn("Create refused.txt.", "claude")
    d = real.wait(sid)

    assert (d["status"], d["turns_detail"][0]["exit_code"]) == ("completed", 0)
    assert d["last_message"] == "I was not allowed to."
    assert not (real.work / "refused.txt").exists()
    command, message, denial = real.steps(sid)
    assert (command["kind"], command["command"]) == ("command", "touch refused.txt")
    assert (command["status"], command["exit_code"]) == ("declined", None)  # it never ran
    assert "needs approval" in command["output"]
    assert message["text"] == "I was not allowed to."
    assert (denial["kind"], denial["message"], denial["fatal"]) == (
        "error",
        "permission denied: Bash",
        False,
    )
    shown = real.cli("trajectory", sid).stdout
    assert "$ touch refused.txt (declined)" in shown
    assert "warning permission denied: Bash" in shown
    assert srv.requests[1].contains(command["output"])  # the refusal went back to the model
