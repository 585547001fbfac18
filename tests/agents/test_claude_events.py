"""``zwarm.agents.claude.events``: claude ``stream-json`` lines -> steps and turn outcome.

Exact expectations over every real sample in ``tests/fixtures/samples`` and every recorded run,
synthetic lines for what the samples lack (file edits, denials, block-list tool results,
retries), claude-specific robustness (unknown subtypes and blocks, wrong-typed fields, keys in
another order), and ``scan_outcome`` decoding only the lines that can matter. What every agent
must do (noise, truncation, JSON spacing, resume usage, failure rules) is checked by the
conformance kit, ``tests/agents/test_conformance.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from zwarm.agents import jsonl
from zwarm.agents.claude import events as claude_events
from zwarm.agents.claude.events import iter_steps, scan_outcome
from zwarm.model import Reason, Status, TurnOutcome, Usage
from zwarm.model.steps import KINDS

pytestmark = pytest.mark.unit

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "samples"
RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"

SHELL = "echo hello > out.txt && cat out.txt"
API_500 = (
    "API Error: 500 fake internal server error. This is a server-side issue, usually temporary"
    " — try again in a moment. If it persists, check your inference gateway (127.0.0.1:41757)."
)
MODEL = "claude-opus-5-5"


def sample(name: str) -> list[bytes]:
    return (SAMPLES / name).read_bytes().splitlines(keepends=True)


def jl(*events: Any) -> list[bytes]:
    """Lines as claude writes them: compact JSON, one a line."""
    return [
        json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for e in events
    ]


def init(session: str = "sess-1", model: str = MODEL) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "init",
        "session_id": session,
        "model": model,
        "tools": ["Bash", "Write"],
        "permissionMode": "bypassPermissions",
    }


def assistant(block: dict[str, Any], **extra: Any) -> dict[str, Any]:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [block],
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    return {"type": "assistant", "message": message, "session_id": "sess-1", **extra}


def tool_use(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return assistant({"type": "tool_use", "id": call_id, "name": name, "input": args})


def tool_result(
    call_id: str, content: Any, is_error: bool = False, extra: Any = None
) -> dict[str, Any]:
    block = {
        "type": "tool_result",
        "tool_use_id": call_id,
        "content": content,
        "is_error": is_error,
    }
    line: dict[str, Any] = {
        "type": "user",
        "message": {"role": "user", "content": [block]},
        "session_id": "sess-1",
    }
    if extra is not None:
        line["tool_use_result"] = extra
    return line


def result(**fields: Any) -> dict[str, Any]:
    """A result line; like the real ones, "type" is not its first key."""
    line = {
        "duration_ms": 10,
        "subtype": "success",
        "is_error": False,
        "result": "done",
        "session_id": "sess-1",
        "total_cost_usd": 0.01,
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 2,
            "cache_read_input_tokens": 3,
            "output_tokens": 4,
            "output_tokens_details": {"thinking_tokens": 1},
        },
        "modelUsage": {MODEL: {"costUSD": 0.01}},
        "permission_denials": [],
    }
    line.update(fields)
    line["type"] = "result"
    return line


def text(t: str) -> dict[str, Any]:
    return assistant({"type": "text", "text": t})


def msg(t: str) -> dict[str, Any]:
    return {"kind": "message", "text": t}


def command(cmd: str, exit_code: int | None, output: str, status: str) -> dict[str, Any]:
    return {
        "kind": "command",
        "command": cmd,
        "exit_code": exit_code,
        "output": output,
        "status": status,
    }


def error(message: str, fatal: bool) -> dict[str, Any]:
    return {"kind": "error", "message": message, "fatal": fatal}


TOOLCALL_STEPS = [
    {"kind": "reasoning", "text": "I should run a shell command."},
    msg("I'll create out.txt."),
    command(SHELL, 0, "hello", "completed"),
    msg("Done: wrote hello to out.txt."),
]

EXPECTED: dict[str, tuple[list[dict[str, Any]], TurnOutcome]] = {
    "claude_simple.jsonl": (
        [msg("Hi there! This is the fake Anthropic server.")],
        TurnOutcome(
            status=Status.COMPLETED,
            final_message="Hi there! This is the fake Anthropic server.",
            agent_session_id="22e8f4b3-ff5b-4e01-97f3-f562bdac3543",
            model=MODEL,
            usage=Usage(150, 40, 9, 0),  # input 100 + cache creation 10 + cache read 40
            cost_usd=0.000638,
        ),
    ),
    "claude_toolcall.jsonl": (
        TOOLCALL_STEPS,
        TurnOutcome(
            status=Status.COMPLETED,
            final_message="Done: wrote hello to out.txt.",
            agent_session_id="bc2faf4c-5aa4-44a0-a2d5-e4724d65e58d",
            model=MODEL,
            usage=Usage(660, 200, 30, 0),
            cost_usd=0.0024800000000000004,
        ),
    ),
    "claude_resume_turn1.jsonl": (
        TOOLCALL_STEPS,
        TurnOutcome(
            status=Status.COMPLETED,
            final_message="Done: wrote hello to out.txt.",
            agent_session_id="03f9693c-9b91-442a-8d50-c2baf6bdb463",
            model=MODEL,
            usage=Usage(660, 200, 30, 0),
            cost_usd=0.0024800000000000004,
        ),
    ),
    # Resumed session: usage is this run's, total_cost_usd cumulative; both reported raw.
    "claude_resume.jsonl": (
        [msg("Follow-up answer: the file contains hello.")],
        TurnOutcome(
            status=Status.COMPLETED,
            final_message="Follow-up answer: the file contains hello.",
            agent_session_id="03f9693c-9b91-442a-8d50-c2baf6bdb463",
            model=MODEL,
            usage=Usage(550, 250, 8, 0),
            cost_usd=0.0038900000000000002,
        ),
    ),
    # subtype "success" but is_error: FAILED with the agent's own text. The synthetic API-error
    # message is a message step, but not the final message.
    "claude_error.jsonl": (
        [msg(API_500), error(API_500, True)],
        TurnOutcome(
            status=Status.FAILED,
            error=API_500,
            agent_session_id="20ad9706-e069-4cad-ac63-b6a458e027f1",
            model=MODEL,
            usage=Usage(0, 0, 0, 0),
            cost_usd=0.0,
            reason=Reason.OVERLOADED,  # api_error_status 500
        ),
    ),
    "claude_max_turns.jsonl": (
        [*TOOLCALL_STEPS[:3], error("Reached maximum number of turns (1)", True)],
        TurnOutcome(
            status=Status.FAILED,
            final_message="I'll create out.txt.",
            error="Reached maximum number of turns (1)",
            agent_session_id="bc7511a7-b9aa-4234-be57-ba903a395bd0",
            model=MODEL,
            usage=Usage(200, 0, 20, 0),
            cost_usd=0.0012000000000000001,
        ),
    ),
}


def test_every_claude_sample_has_expectations() -> None:
    assert {p.name for p in SAMPLES.glob("claude_*.jsonl")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_steps(name: str) -> None:
    assert list(iter_steps(sample(name))) == EXPECTED[name][0]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_outcome(name: str) -> None:
    assert scan_outcome(sample(name)) == EXPECTED[name][1]


def test_resume_cost_is_raw_cumulative() -> None:
    assert scan_outcome(sample("claude_resume.jsonl")).cost_usd == pytest.approx(0.00389)


def test_killed_after_api_error_message_reports_it() -> None:
    lines = sample("claude_error.jsonl")[:-1]
    assert scan_outcome(lines) == TurnOutcome(
        error=API_500, agent_session_id="20ad9706-e069-4cad-ac63-b6a458e027f1", model=MODEL
    )


def test_api_error_status_is_added_when_missing() -> None:
    lines = jl(init(), result(is_error=True, result="API Error: overloaded", api_error_status=529))
    assert scan_outcome(lines).error == "API Error: overloaded (API error status 529)"
    lines = jl(
        init(),
        assistant(
            {"type": "text", "text": "API Error: boom"},
            is_api_error_message=True,
            api_error_status=503,
        ),
    )
    assert scan_outcome(lines).error == "API Error: boom (API error status 503)"


def test_synthetic_message_without_flag_is_an_api_error_not_a_final_message() -> None:
    synthetic = assistant({"type": "text", "text": "API Error: 401 bad key"})
    synthetic["message"]["model"] = "<synthetic>"
    lines = jl(init(), text("working on it"), synthetic)
    outcome = scan_outcome(lines)
    assert outcome.status is None
    assert outcome.error == "API Error: 401 bad key"
    assert outcome.final_message == "working on it"
    assert list(iter_steps(lines)) == [msg("working on it"), msg("API Error: 401 bad key")]


def test_error_without_text_or_errors_names_the_subtype() -> None:
    lines = jl(init(), result(is_error=True, subtype="error_during_execution", result=""))
    outcome = scan_outcome(lines)
    assert outcome.status is Status.FAILED
    assert outcome.error == "claude reported error_during_execution"
    assert list(iter_steps(lines)) == [error("claude reported error_during_execution", True)]


def test_failure_is_is_error_not_subtype() -> None:
    ok = scan_outcome(jl(result(subtype="error_max_turns", is_error=False, result="fine")))
    assert ok.status is Status.COMPLETED and ok.final_message == "fine" and ok.error is None
    bad = scan_outcome(jl(result(subtype="success", is_error=True, errors=["a", "b"], result=None)))
    assert bad.status is Status.FAILED and bad.error == "a; b" and bad.final_message is None


def test_usage_normalization_and_reasoning_tokens() -> None:
    outcome = scan_outcome(jl(init(), result()))
    assert outcome.usage == Usage(15, 3, 4, 1)
    assert outcome.cost_usd == 0.01
    assert outcome.final_message == "done"


def test_model_and_session_without_init() -> None:
    usage = {"claude-haiku-4-5": {"costUSD": 0.001}, "claude-sonnet-5": {"costUSD": 0.2}}
    outcome = scan_outcome(jl(result(modelUsage=usage, session_id="s9")))
    assert outcome.model == "claude-sonnet-5"
    assert outcome.agent_session_id == "s9"


def test_write_and_edit_yield_file_changes() -> None:
    lines = jl(
        tool_use("t1", "Write", {"file_path": "/w/new.py", "content": "x"}),
        tool_result(
            "t1",
            "File created successfully at: /w/new.py",
            extra={"type": "create", "filePath": "/w/new.py"},
        ),
        tool_use("t2", "Edit", {"file_path": "/w/old.py", "old_string": "a", "new_string": "b"}),
        tool_result("t2", [{"type": "text", "text": "edited"}]),
        tool_use("t3", "Write", {"file_path": "/w/existing.py", "content": "y"}),
        tool_result("t3", "updated", extra={"type": "update", "filePath": "/w/existing.py"}),
    )
    assert list(iter_steps(lines)) == [
        {
            "kind": "tool_call",
            "id": "t1",
            "name": "Write",
            "arguments": {"file_path": "/w/new.py", "content": "x"},
            "server": None,
        },
        {
            "kind": "tool_result",
            "id": "t1",
            "name": "Write",
            "result": "File created successfully at: /w/new.py",
            "is_error": False,
        },
        {
            "kind": "file_change",
            "changes": [{"path": "/w/new.py", "kind": "add"}],
            "status": "completed",
        },
        {
            "kind": "tool_call",
            "id": "t2",
            "name": "Edit",
            "arguments": {"file_path": "/w/old.py", "old_string": "a", "new_string": "b"},
            "server": None,
        },
        {"kind": "tool_result", "id": "t2", "name": "Edit", "result": "edited", "is_error": False},
        {
            "kind": "file_change",
            "changes": [{"path": "/w/old.py", "kind": "update"}],
            "status": "completed",
        },
        {
            "kind": "tool_call",
            "id": "t3",
            "name": "Write",
            "arguments": {"file_path": "/w/existing.py", "content": "y"},
            "server": None,
        },
        {
            "kind": "tool_result",
            "id": "t3",
            "name": "Write",
            "result": "updated",
            "is_error": False,
        },
        {
            "kind": "file_change",
            "changes": [{"path": "/w/existing.py", "kind": "update"}],
            "status": "completed",
        },
    ]


def test_failed_write_yields_no_file_change() -> None:
    lines = jl(
        tool_use("t1", "Write", {"file_path": "/w/a.py", "content": "x"}),
        tool_result(
            "t1", "<tool_use_error>File has not been read yet</tool_use_error>", is_error=True
        ),
    )
    assert [s["kind"] for s in iter_steps(lines)] == ["tool_call", "tool_result"]


def test_tool_result_content_as_block_list_and_unknown_tool_name() -> None:
    content = [
        {"type": "text", "text": "line 1"},
        {"type": "image", "source": {}},
        {"type": "text", "text": "line 2"},
    ]
    lines = jl(
        tool_use("t1", "mcp__docs__search", {"q": "x"}),
        tool_result("t1", content),
        tool_result("t-unknown", "orphan", is_error=True),
    )
    assert list(iter_steps(lines)) == [
        {
            "kind": "tool_call",
            "id": "t1",
            "name": "mcp__docs__search",
            "arguments": {"q": "x"},
            "server": None,
        },
        {
            "kind": "tool_result",
            "id": "t1",
            "name": "mcp__docs__search",
            "result": "line 1\nline 2",
            "is_error": False,
        },
        {
            "kind": "tool_result",
            "id": "t-unknown",
            "name": None,
            "result": "orphan",
            "is_error": True,
        },
    ]


def test_failed_bash_takes_exit_code_from_its_output() -> None:
    lines = jl(
        tool_use("b1", "Bash", {"command": "exit 3"}),
        tool_result("b1", "Exit code 3\noops", is_error=True, extra="Error: Exit code 3\noops"),
        tool_use("b2", "Bash", {"command": "bad"}),
        tool_result("b2", "permission refused", is_error=True),
    )
    assert list(iter_steps(lines)) == [
        command("exit 3", 3, "Exit code 3\noops", "failed"),
        command("bad", 1, "permission refused", "failed"),
    ]


def test_pending_bash_appears_once_where_it_was_called() -> None:
    lines = jl(init(), tool_use("b1", "Bash", {"command": "sleep 100"}), text("waiting"))
    assert list(iter_steps(lines)) == [
        command("sleep 100", None, "", "in_progress"),
        msg("waiting"),
    ]


def test_a_bash_call_stays_where_it_was_made() -> None:
    """Issue 30: steps keep the order the agent started them, a slow command's included."""
    lines = jl(
        init(),
        tool_use("b1", "Bash", {"command": "make"}),
        text("while make runs"),
        tool_result("b1", "ok"),
        tool_use("b2", "Bash", {"command": "sleep 100"}),
        text("Done."),
    )
    assert list(iter_steps(lines)) == [
        command("make", 0, "ok", "completed"),
        msg("while make runs"),
        command("sleep 100", None, "", "in_progress"),
        msg("Done."),
    ]
    assert scan_outcome(lines).status is None


def test_permission_denials() -> None:
    denials = [
        {"tool_name": "Write", "tool_use_id": "t1", "tool_input": {}},
        {"tool_name": "Bash", "tool_use_id": "t2", "tool_input": {}},
    ]
    lines = jl(init(), result(permission_denials=denials))
    assert list(iter_steps(lines)) == [
        error("permission denied: Write", False),
        error("permission denied: Bash", False),
    ]
    assert scan_outcome(lines).status is Status.COMPLETED


def test_api_retry_is_a_non_fatal_error() -> None:
    retry = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "max_retries": 10,
        "retry_delay_ms": 500,
        "error_status": 500,
        "error": "server_error",
    }
    steps = list(iter_steps(jl(retry, {**retry, "attempt": None, "error_status": None})))
    assert steps == [
        error("API error (500 server_error), retrying (attempt 1 of 10) in 0.5s", False),
        error("API error (server_error), retrying in 0.5s", False),
    ]
    assert scan_outcome(jl(retry)) == TurnOutcome()


def test_unknown_lines_subtypes_and_blocks_are_skipped() -> None:
    lines = jl(
        init(),
        {"type": "system", "subtype": "thinking_tokens", "estimated_tokens": 8},
        {"type": "stream_event", "event": {"type": "content_block_delta"}},
        {"type": "tool_use_summary", "summary": "x"},
        assistant({"type": "redacted_thinking", "data": "zzz"}),
        assistant({"type": "thinking", "thinking": ""}),
        assistant({"type": "server_tool_use", "id": "s1", "name": "web_search"}),
        {"type": "user", "message": {"role": "user", "content": "plain prompt"}},
        text("ok"),
        result(result="ok"),
    )
    assert list(iter_steps(lines)) == [msg("ok")]
    assert scan_outcome(lines).final_message == "ok"


@pytest.mark.parametrize("seps", [(",", ":"), (", ", ": "), (" , ", " :  ")])
def test_other_layouts_still_work(seps: tuple[str, str]) -> None:
    """Keys in another order, in any spacing, go through the whole-line path, same answer."""
    events = [json.loads(line) for line in sample("claude_max_turns.jsonl")]
    reordered = [
        json.dumps(dict(reversed(list(e.items()))), separators=seps).encode() for e in events
    ]
    assert not any(line.startswith(b'{"type"') for line in reordered)
    assert scan_outcome(reordered) == EXPECTED["claude_max_turns.jsonl"][1]
    assert list(iter_steps(reordered)) == EXPECTED["claude_max_turns.jsonl"][0]


def test_str_lines_are_tolerated() -> None:
    lines = [line.decode() for line in sample("claude_simple.jsonl")]
    assert scan_outcome(lines) == EXPECTED["claude_simple.jsonl"][1]  # type: ignore[arg-type]
    assert list(iter_steps(lines)) == EXPECTED["claude_simple.jsonl"][0]  # type: ignore[arg-type]


def test_scan_decodes_only_lines_that_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = jsonl.decode

    def counting(line: object) -> dict[str, Any] | None:
        calls.append(line)
        return real(line)

    monkeypatch.setattr(claude_events, "_decode", counting)
    monkeypatch.setattr(jsonl, "decode", counting)  # newest() decodes there
    body = []
    for i in range(10_000):
        body += [
            tool_use(f"b{i}", "Bash", {"command": "make"}),
            tool_result(f"b{i}", "ok\n" * 50, extra={"stdout": "ok\n" * 50}),
        ]
    head, tail = sample("claude_toolcall.jsonl")[:2], sample("claude_toolcall.jsonl")[2:]
    assert scan_outcome(head + jl(*body) + tail) == EXPECTED["claude_toolcall.jsonl"][1]
    assert len(calls) == 2  # init and result; the final message comes from the result
    calls.clear()
    killed = head + jl(*body) + tail[:-1]
    assert scan_outcome(killed).final_message == "Done: wrote hello to out.txt."
    assert len(calls) == 2  # init and the last text line, decoded lazily


def _mutations(value: Any) -> Iterator[Any]:
    """``value`` with one field at a time replaced by a value of the wrong type."""
    wrong: list[Any] = [None, 0, -1, True, "x", [], {}, [1], {"a": 1}, 1.5]
    yield from wrong
    if isinstance(value, dict):
        for key, sub in value.items():
            for m in _mutations(sub):
                yield {**value, key: m}
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            for m in _mutations(sub):
                yield [*value[:i], m, *value[i + 1 :]]


FUZZ_EVENTS = [
    init(),
    {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "max_retries": 2,
        "retry_delay_ms": 5,
        "error_status": 500,
        "error": "e",
    },
    assistant({"type": "thinking", "thinking": "hm"}),
    text("hello"),
    assistant(
        {"type": "text", "text": "API Error"}, is_api_error_message=True, api_error_status=500
    ),
    tool_use("b1", "Bash", {"command": "ls"}),
    tool_result("b1", "Exit code 2", True, "Error: Exit code 2"),
    tool_use("w1", "Write", {"file_path": "/a", "content": "x"}),
    tool_result("w1", [{"type": "text", "text": "ok"}], False, {"type": "create"}),
    result(
        is_error=True,
        errors=["e"],
        api_error_status=500,
        permission_denials=[{"tool_name": "Write"}],
    ),
]


@pytest.mark.parametrize("index", range(len(FUZZ_EVENTS)))
def test_wrong_typed_fields_never_raise(index: int) -> None:
    for mutated in _mutations(FUZZ_EVENTS[index]):
        lines = jl(*FUZZ_EVENTS[:index], mutated, *FUZZ_EVENTS[index + 1 :])
        steps = list(iter_steps(lines))
        assert all(s["kind"] in KINDS for s in steps)
        outcome = scan_outcome(lines)
        assert outcome.status in (None, Status.COMPLETED, Status.FAILED)


@pytest.mark.skipif(not (RECORDED / "index.json").exists(), reason="no recorded fixtures")
def test_recorded_fixtures_agree_with_exit_codes() -> None:
    """Every recorded real run: exit 0 <-> COMPLETED, exit 1 <-> FAILED with an error."""
    index = json.loads((RECORDED / "index.json").read_text())["fixtures"]
    for name, info in index.items():
        if info.get("adapter") != "claude":
            continue
        lines = (RECORDED / name).read_bytes().splitlines()
        outcome = scan_outcome(lines)
        assert outcome.agent_session_id and outcome.model, name
        steps = list(iter_steps(lines))
        assert all(s["kind"] in KINDS for s in steps), name
        if info["exit_code"] == 0:
            assert outcome.status is Status.COMPLETED and outcome.usage, name
            assert outcome.final_message == next(
                s["text"] for s in reversed(steps) if s["kind"] == "message"
            ), name
        else:
            assert outcome.status is Status.FAILED and outcome.error, name
            assert steps[-1] == error(outcome.error, True), name


def test_bash_refused_by_permission_mode_is_declined_not_run() -> None:
    """A refused Bash call never ran: ``declined``, no exit code (claude 2.1.330's meta)."""
    why = "touch in '/w/x' needs approval."
    refused = tool_result("b1", why, is_error=True, extra=f"Error: {why}")
    refused["tool_result_meta"] = [
        {
            "id": "b1",
            "non_execution_kind": "user-rejected",
            "permission_decision": {"decision": "reject", "source": "config"},
        }
    ]
    ran = tool_result("b2", "Exit code 1", is_error=True, extra="Error: Exit code 1")
    ran["tool_result_meta"] = [
        {"id": "b2", "permission_decision": {"decision": "accept", "source": "config"}}
    ]
    denials = [{"tool_name": "Bash", "tool_use_id": "b1", "tool_input": {"command": "touch x"}}]
    lines = jl(
        init(),
        tool_use("b1", "Bash", {"command": "touch x"}),
        refused,
        tool_use("b2", "Bash", {"command": "false"}),
        ran,
        text("not allowed"),
        result(result="not allowed", permission_denials=denials),
    )
    assert list(iter_steps(lines)) == [
        command("touch x", None, why, "declined"),
        command("false", 1, "Exit code 1", "failed"),
        msg("not allowed"),
        error("permission denied: Bash", False),
    ]
    assert scan_outcome(lines).status is Status.COMPLETED


# --------------------------------------------------------------------------- recorded fixtures
# Exact expectations over every run recorded from the real claude by tests/record_fixtures.py
# (tests/fixtures/recorded, version in its index.json). Session and tool ids, temp paths and
# the fake's port change with each recording, so ids are read from the fixture and the rest
# is matched by pattern. Costs are claude's own (its price for the model the fake echoes).


class Like:
    """Equal to any string that fully matches ``pattern`` (a regex)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and re.fullmatch(self.pattern, other, re.S) is not None

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"Like({self.pattern!r})"


def recorded(name: str) -> list[bytes]:
    return (RECORDED / name).read_bytes().splitlines(keepends=True)


def recorded_session(name: str) -> str:
    (result_event,) = [e for e in map(json.loads, recorded(name)) if e.get("type") == "result"]
    session_id: str = result_event["session_id"]
    return session_id


REC_MODEL = "claude-opus-5-5"  # claude's default model, echoed back by the fake
REC_SHELL = "echo hello > out.txt && cat out.txt"
REC_TOOL_STEPS = [
    {"kind": "reasoning", "text": "I should create the file with a shell command."},
    msg("I'll create out.txt now."),
    command(REC_SHELL, 0, "hello", "completed"),
    msg("Done: wrote hello to out.txt."),
]
REC_TOOL_COST = 0.0024800000000000004
# two replies: 200+260 input plus 0+200 cache reads (zwarm counts them as input), 20+10 output
REC_TOOL_USAGE = Usage(660, 200, 30, 0)
REC_500 = Like(
    r"API Error: 500 fake internal server error\. This is a server-side issue, usually "
    r"temporary — try again in a moment\. If it persists, check your inference gateway "
    r"\(127\.0\.0\.1:\d+\)\."
)
REC_LOST = (
    "API Error: Connection to the API was lost (ECONNRESET). This is usually temporary — try again."
)
REC_WRITTEN = Like(r"/\S+/work/hello\.txt")
REC_TOOL_ID = Like(r"toolu_[0-9a-f]+")


def rec_outcome(status: Status, final: str | None = None, error: Any = None, **kw: Any) -> Any:
    return TurnOutcome(status, final, error, model=REC_MODEL, **kw)


RECORDED_EXPECTED: dict[str, tuple[list[dict[str, Any]], TurnOutcome]] = {
    "claude_simple.jsonl": (
        [msg("Hi there! This is the fake server.")],
        # 100 input + 10 cache creation + 40 cache read
        rec_outcome(
            Status.COMPLETED,
            "Hi there! This is the fake server.",
            usage=Usage(150, 40, 9, 0),
            cost_usd=0.000638,
        ),
    ),
    "claude_toolcall.jsonl": (
        REC_TOOL_STEPS,
        rec_outcome(
            Status.COMPLETED,
            "Done: wrote hello to out.txt.",
            usage=REC_TOOL_USAGE,
            cost_usd=REC_TOOL_COST,
        ),
    ),
    "claude_shell_fail.jsonl": (
        [
            command("echo oops >&2; exit 3", 3, "Exit code 3\noops", "failed"),
            msg("The command failed with exit code 3."),
        ],
        rec_outcome(
            Status.COMPLETED,
            "The command failed with exit code 3.",
            usage=REC_TOOL_USAGE,
            cost_usd=REC_TOOL_COST,
        ),
    ),
    "claude_file_write.jsonl": (
        [
            {
                "kind": "tool_call",
                "id": REC_TOOL_ID,
                "name": "Write",
                "arguments": {"file_path": REC_WRITTEN, "content": "hello\n"},
                "server": None,
            },
            {
                "kind": "tool_result",
                "id": REC_TOOL_ID,
                "name": "Write",
                "result": Like(r"File created successfully at: /\S+/work/hello\.txt .*"),
                "is_error": False,
            },
            {
                "kind": "file_change",
                "changes": [{"path": REC_WRITTEN, "kind": "add"}],  # Write said "create"
                "status": "completed",
            },
            msg("Wrote hello.txt."),
        ],
        rec_outcome(
            Status.COMPLETED, "Wrote hello.txt.", usage=REC_TOOL_USAGE, cost_usd=REC_TOOL_COST
        ),
    ),
    # is_error with subtype "success"; the synthetic API-error text is no final message
    "claude_error_500.jsonl": (
        [msg(REC_500), error(REC_500, True)],
        rec_outcome(
            Status.FAILED, None, REC_500, usage=Usage(), cost_usd=0.0, reason=Reason.OVERLOADED
        ),
    ),
    # the stream broke, then claude's one non-streaming retry broke too
    "claude_broken_stream.jsonl": (
        [msg(REC_LOST), error(REC_LOST, True)],
        rec_outcome(Status.FAILED, None, REC_LOST, usage=Usage(), cost_usd=0.0),
    ),
    # --max-turns 1: the tool ran, the next model call was not made; the last text is kept
    "claude_max_turns.jsonl": (
        [*REC_TOOL_STEPS[:3], error("Reached maximum number of turns (1)", True)],
        rec_outcome(
            Status.FAILED,
            "I'll create out.txt now.",
            "Reached maximum number of turns (1)",
            usage=Usage(200, 0, 20, 0),
            cost_usd=0.0012000000000000001,
        ),
    ),
    "claude_resume_turn1.jsonl": (
        REC_TOOL_STEPS,
        rec_outcome(
            Status.COMPLETED,
            "Done: wrote hello to out.txt.",
            usage=REC_TOOL_USAGE,
            cost_usd=REC_TOOL_COST,
        ),
    ),
    # resumed: usage covers this run only (300 + 250 cache read), the cost the whole session
    "claude_resume_turn2.jsonl": (
        [msg("Follow-up answer: the file contains hello.")],
        rec_outcome(
            Status.COMPLETED,
            "Follow-up answer: the file contains hello.",
            usage=Usage(550, 250, 8, 0),
            cost_usd=0.0038900000000000002,
        ),
    ),
}


def test_every_recorded_claude_fixture_has_expectations() -> None:
    assert {p.name for p in RECORDED.glob("claude_*.jsonl")} == set(RECORDED_EXPECTED)


@pytest.mark.parametrize("name", sorted(RECORDED_EXPECTED))
def test_recorded_steps(name: str) -> None:
    assert list(iter_steps(recorded(name))) == RECORDED_EXPECTED[name][0]


@pytest.mark.parametrize("name", sorted(RECORDED_EXPECTED))
def test_recorded_outcome(name: str) -> None:
    session_id = recorded_session(name)
    expected = msgspec.structs.replace(RECORDED_EXPECTED[name][1], agent_session_id=session_id)
    assert scan_outcome(recorded(name)) == expected


def test_recorded_resume_keeps_the_session_and_its_cost_is_cumulative() -> None:
    first, second = (f"claude_resume_turn{n}.jsonl" for n in (1, 2))
    assert recorded_session(first) == recorded_session(second)
    cost1, cost2 = (scan_outcome(recorded(n)).cost_usd for n in (first, second))
    assert cost1 is not None and cost2 is not None and cost2 > cost1  # a running total


@pytest.mark.parametrize("cost", [b"1e999", b"-1e999", b"NaN", b"1" + b"0" * 400])
def test_a_cost_that_is_not_a_finite_number_is_no_cost(cost: bytes) -> None:
    """JSON allows 1e999 (read as inf) and json reads NaN; neither is a cost."""
    line = jl(result())[0].replace(b'"total_cost_usd":0.01', b'"total_cost_usd":' + cost)
    assert cost in line
    outcome = scan_outcome([line])
    assert outcome.status is Status.COMPLETED and outcome.cost_usd is None
