"""``zwarm.agents.codex.events``: codex ``exec --json`` lines -> steps and turn outcome.

Exact expectations over every real sample in ``tests/fixtures/samples`` and every recorded run,
synthetic events for item types the samples lack, codex-specific robustness (unknown item types,
wrong-typed fields, keys in another order), and ``scan_outcome`` decoding only the lines that
can matter. What every agent must do (noise, truncation, JSON spacing, resume usage, failure
rules) is checked by the conformance kit, ``tests/agents/test_conformance.py``.
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
from zwarm.agents.codex import events as codex_events
from zwarm.agents.codex.events import iter_steps, scan_outcome
from zwarm.model import Reason, Status, TurnOutcome, Usage
from zwarm.model.steps import KINDS

pytestmark = pytest.mark.unit

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "samples"
RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"

SHELL = "/bin/bash -lc 'echo hello > out.txt && cat out.txt'"
HIGH_DEMAND = "We’re currently experiencing high demand, which may cause temporary errors."


def sample(name: str) -> list[bytes]:
    return (SAMPLES / name).read_bytes().splitlines(keepends=True)


def jl(*events: Any) -> list[bytes]:
    """Events as codex writes them: compact JSON, one a line."""
    return [
        json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for e in events
    ]


def done(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "item.completed", "item": item}


def started(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "item.started", "item": item}


def msg(text: str) -> dict[str, Any]:
    return {"kind": "message", "text": text}


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
    {"kind": "reasoning", "text": "I should create the file with a shell command."},
    msg("I'll create out.txt now."),
    command(SHELL, 0, "hello\n", "completed"),
    msg("Done: wrote hello to out.txt."),
]

EXPECTED: dict[str, tuple[list[dict[str, Any]], TurnOutcome]] = {
    "codex_simple.jsonl": (
        [msg("Hi there! This is the fake server.")],
        TurnOutcome(
            status=Status.COMPLETED,
            final_message="Hi there! This is the fake server.",
            agent_session_id="01a1ffe6-3595-7f80-954f-f6552aa38b0a",
            usage=Usage(100, 40, 9, 0),
        ),
    ),
    "codex_toolcall.jsonl": (
        TOOLCALL_STEPS,
        TurnOutcome(
            status=Status.COMPLETED,
            final_message="Done: wrote hello to out.txt.",
            agent_session_id="01a1ffe6-40d4-7d42-8089-790d2ae1459f",
            usage=Usage(460, 200, 30, 0),
        ),
    ),
    "codex_resume_turn1.jsonl": (
        TOOLCALL_STEPS,
        TurnOutcome(
            status=Status.COMPLETED,
            final_message="Done: wrote hello to out.txt.",
            agent_session_id="01a1ffe7-1cd8-73d1-b100-1335f36dd616",
            usage=Usage(460, 200, 30, 0),
        ),
    ),
    # Resumed thread: same id, usage cumulative over the thread, reported raw (760, not 300).
    "codex_resume.jsonl": (
        [msg("Follow-up answer: the file contains hello.")],
        TurnOutcome(
            status=Status.COMPLETED,
            final_message="Follow-up answer: the file contains hello.",
            agent_session_id="01a1ffe7-1cd8-73d1-b100-1335f36dd616",
            usage=Usage(760, 450, 38, 0),
        ),
    ),
    "codex_error.jsonl": (
        [error(HIGH_DEMAND, False), error(HIGH_DEMAND, True)],
        TurnOutcome(
            status=Status.FAILED,
            error=HIGH_DEMAND,
            agent_session_id="01a1ffe6-6165-7fa3-918c-80d4871f4d92",
            reason=Reason.OVERLOADED,  # codex's text for a 5xx
            unanswered=True,  # no item: the model never answered
        ),
    ),
    "codex_err500_then_ok_with_retries.jsonl": (
        [msg("recovered after retries")],
        TurnOutcome(
            status=Status.COMPLETED,
            final_message="recovered after retries",
            agent_session_id="01a1ffe6-7909-7102-9de0-4809b54fd13c",
            usage=Usage(12, 0, 5, 0),
        ),
    ),
}


def test_every_codex_sample_has_expectations() -> None:
    assert {p.name for p in SAMPLES.glob("codex_*.jsonl")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_steps(name: str) -> None:
    assert list(iter_steps(sample(name))) == EXPECTED[name][0]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_outcome(name: str) -> None:
    assert scan_outcome(sample(name)) == EXPECTED[name][1]


def test_err500_then_ok_completes_even_after_error_events() -> None:
    lines = (
        jl(
            {"type": "thread.started", "thread_id": "t"},
            {"type": "error", "message": "Reconnecting... 1/5"},
            {"type": "error", "message": "Reconnecting... 2/5"},
        )
        + sample("codex_err500_then_ok_with_retries.jsonl")[1:]
    )
    outcome = scan_outcome(lines)
    assert outcome.status is Status.COMPLETED
    assert outcome.error is None
    assert outcome.final_message == "recovered after retries"
    assert [s["kind"] for s in iter_steps(lines)] == ["error", "error", "message"]


def test_killed_after_error_event_reports_last_error() -> None:
    lines = jl(
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "error", "message": "first"},
        done({"id": "item_0", "type": "error", "message": "an item warning"}),
        {"type": "error", "message": "Reconnecting... 2/5"},
    )
    outcome = scan_outcome(lines)
    assert outcome.status is None
    assert outcome.error == "Reconnecting... 2/5"  # the top-level event, not the item


def test_unknown_event_and_item_types_are_skipped() -> None:
    lines = jl(
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "session.configured", "model": "gpt-9"},
        {"type": "item.completed", "item": {"id": "item_0", "type": "hologram", "x": 1}},
        {"type": "item.started", "item": {"id": "item_1", "type": "hologram"}},
        done({"id": "item_2", "type": "agent_message", "text": "ok"}),
        {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 2}},
    )
    assert list(iter_steps(lines)) == [msg("ok")]
    assert scan_outcome(lines) == TurnOutcome(
        status=Status.COMPLETED, final_message="ok", agent_session_id="t", usage=Usage(1, 0, 2, 0)
    )


def test_file_change() -> None:
    change = {
        "id": "item_0",
        "type": "file_change",
        "changes": [
            {"path": "/w/a.py", "kind": "add"},
            {"path": "/w/b.py", "kind": "update"},
            {"path": "/w/c.py", "kind": "delete"},
        ],
        "status": "completed",
    }
    lines = jl(started({**change, "status": "in_progress"}), done(change))
    assert list(iter_steps(lines)) == [
        {
            "kind": "file_change",
            "status": "completed",
            "changes": [
                {"path": "/w/a.py", "kind": "add"},
                {"path": "/w/b.py", "kind": "update"},
                {"path": "/w/c.py", "kind": "delete"},
            ],
        }
    ]


def test_mcp_tool_call_success() -> None:
    item = {
        "id": "item_3",
        "type": "mcp_tool_call",
        "server": "docs",
        "tool": "search",
        "arguments": {"q": "json"},
        "status": "completed",
        "error": None,
        "result": {
            "content": [{"type": "text", "text": "hit 1"}, {"type": "text", "text": "hit 2"}],
            "structured_content": None,
        },
    }
    assert list(iter_steps(jl(started({**item, "status": "in_progress"}), done(item)))) == [
        {
            "kind": "tool_call",
            "id": "item_3",
            "name": "search",
            "arguments": {"q": "json"},
            "server": "docs",
        },
        {
            "kind": "tool_result",
            "id": "item_3",
            "name": "search",
            "result": "hit 1\nhit 2",
            "is_error": False,
        },
    ]


def test_mcp_tool_call_structured_content_only() -> None:
    item = {
        "id": "item_3",
        "type": "mcp_tool_call",
        "server": "s",
        "tool": "t",
        "arguments": None,
        "status": "completed",
        "result": {"content": [], "structured_content": {"n": 1}},
    }
    call, result = iter_steps(jl(done(item)))
    assert call["arguments"] == {}
    assert result == {
        "kind": "tool_result",
        "id": "item_3",
        "name": "t",
        "result": '{"n": 1}',
        "is_error": False,
    }


def test_mcp_tool_call_error() -> None:
    item = {
        "id": "item_4",
        "type": "mcp_tool_call",
        "server": "docs",
        "tool": "search",
        "arguments": {},
        "status": "failed",
        "result": None,
        "error": {"message": "tool timed out"},
    }
    assert list(iter_steps(jl(done(item))))[1] == {
        "kind": "tool_result",
        "id": "item_4",
        "name": "search",
        "result": "tool timed out",
        "is_error": True,
    }


def test_web_search_with_repeated_id_key() -> None:
    raw = (
        b'{"type":"item.completed","item":{"id":"item_5","type":"web_search","id":"ws_1",'
        b'"query":"python json","action":{"type":"search","query":"python json"}}}\n'
    )
    action_only = jl(done({"id": "item_6", "type": "web_search", "action": {"query": "q2"}}))
    assert list(iter_steps([raw, *action_only])) == [
        {"kind": "web_search", "query": "python json"},
        {"kind": "web_search", "query": "q2"},
    ]


def test_todo_list() -> None:
    items = [{"text": "read code", "completed": True}, {"text": "fix bug", "completed": False}]
    todo = {"id": "item_7", "type": "todo_list", "items": items}
    lines = jl(started(todo), {"type": "item.updated", "item": todo}, done(todo))
    assert list(iter_steps(lines)) == [{"kind": "todo", "items": items}]


def test_error_item_is_not_fatal() -> None:
    lines = jl(done({"id": "item_8", "type": "error", "message": "model rerouted"}))
    assert list(iter_steps(lines)) == [error("model rerouted", False)]
    assert scan_outcome(lines) == TurnOutcome()


def test_started_never_completed_appears_once_where_it_started() -> None:
    cmd = {
        "id": "item_1",
        "type": "command_execution",
        "command": "sleep 100",
        "aggregated_output": "",
        "exit_code": None,
        "status": "in_progress",
    }
    tool = {
        "id": "item_2",
        "type": "mcp_tool_call",
        "server": "s",
        "tool": "t",
        "arguments": {"a": 1},
        "status": "in_progress",
    }
    lines = jl(
        {"type": "thread.started", "thread_id": "t"},
        started(cmd),
        {"type": "item.updated", "item": {**cmd, "aggregated_output": "partial"}},
        started(tool),
        done({"id": "item_3", "type": "agent_message", "text": "waiting"}),
    )
    assert list(iter_steps(lines)) == [
        command("sleep 100", None, "partial", "in_progress"),
        {"kind": "tool_call", "id": "item_2", "name": "t", "arguments": {"a": 1}, "server": "s"},
        msg("waiting"),
    ]
    assert scan_outcome(lines).status is None


def test_completed_items_are_not_repeated_at_the_end() -> None:
    assert [s["kind"] for s in iter_steps(sample("codex_toolcall.jsonl"))].count("command") == 1


def test_failed_command() -> None:
    item = {
        "id": "item_0",
        "type": "command_execution",
        "command": "false",
        "aggregated_output": "",
        "exit_code": 1,
        "status": "failed",
    }
    assert list(iter_steps(jl(done(item)))) == [command("false", 1, "", "failed")]


def test_turn_failed_without_message() -> None:
    lines = jl({"type": "turn.failed", "error": {}})
    assert list(iter_steps(lines)) == [error("codex reported turn.failed", True)]
    assert scan_outcome(lines) == TurnOutcome(
        status=Status.FAILED, error="codex reported turn.failed", unanswered=True
    )


@pytest.mark.parametrize("seps", [(",", ":"), (", ", ": "), (" , ", " :  ")])
def test_last_agent_message_wins_and_other_layouts_still_work(seps: tuple[str, str]) -> None:
    """Keys in another order (type last), in any spacing, go through the whole-line path,
    same answer."""
    events = [json.loads(line) for line in sample("codex_toolcall.jsonl")]
    reordered = [
        json.dumps(dict(reversed(list(e.items()))), separators=seps).encode() for e in events
    ]
    assert reordered[0].startswith(b'{"thread_id"')
    assert scan_outcome(reordered) == EXPECTED["codex_toolcall.jsonl"][1]
    assert list(iter_steps(reordered)) == TOOLCALL_STEPS


def test_str_lines_are_tolerated() -> None:
    lines = [line.decode() for line in sample("codex_simple.jsonl")]
    assert scan_outcome(lines) == EXPECTED["codex_simple.jsonl"][1]  # type: ignore[arg-type]
    assert list(iter_steps(lines)) == EXPECTED["codex_simple.jsonl"][0]  # type: ignore[arg-type]


def test_scan_decodes_only_lines_that_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = jsonl.decode

    def counting(line: object) -> dict[str, Any] | None:
        calls.append(line)
        return real(line)

    monkeypatch.setattr(codex_events, "_decode", counting)
    monkeypatch.setattr(jsonl, "decode", counting)  # newest() decodes there
    cmd = {
        "id": "item_1",
        "type": "command_execution",
        "command": "make",
        "aggregated_output": "ok\n" * 50,
        "exit_code": 0,
        "status": "completed",
    }
    body = []
    for i in range(10_000):
        body += [started({**cmd, "id": f"item_{i}"}), done({**cmd, "id": f"item_{i}"})]
    lines = sample("codex_toolcall.jsonl")[:2] + jl(*body) + sample("codex_toolcall.jsonl")[2:]
    assert scan_outcome(lines) == EXPECTED["codex_toolcall.jsonl"][1]
    # thread.started, turn.completed, and the last agent message (decoded lazily, once).
    assert len(calls) == 3


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
    {"type": "thread.started", "thread_id": "t"},
    started({"id": "i1", "type": "command_execution", "command": "c", "exit_code": None}),
    done(
        {
            "id": "i1",
            "type": "command_execution",
            "command": "c",
            "aggregated_output": "o",
            "exit_code": 0,
            "status": "completed",
        }
    ),
    done({"id": "i2", "type": "file_change", "changes": [{"path": "p", "kind": "add"}]}),
    done(
        {
            "id": "i3",
            "type": "mcp_tool_call",
            "server": "s",
            "tool": "t",
            "arguments": {},
            "result": {"content": [{"type": "text", "text": "r"}]},
            "error": {"message": "m"},
        }
    ),
    done({"id": "i4", "type": "web_search", "query": "q", "action": {"query": "q"}}),
    done({"id": "i5", "type": "todo_list", "items": [{"text": "t", "completed": True}]}),
    done({"id": "i6", "type": "agent_message", "text": "hi"}),
    {"type": "error", "message": "m"},
    {"type": "turn.failed", "error": {"message": "m"}},
    {
        "type": "turn.completed",
        "usage": {
            "input_tokens": 1,
            "cached_input_tokens": 0,
            "output_tokens": 1,
            "reasoning_output_tokens": 0,
        },
    },
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
        if info.get("adapter") != "codex":
            continue
        lines = (RECORDED / name).read_bytes().splitlines()
        outcome = scan_outcome(lines)
        assert outcome.agent_session_id, name
        steps = list(iter_steps(lines))
        if info["exit_code"] == 0:
            assert outcome.status is Status.COMPLETED and outcome.usage, name
            assert outcome.final_message == next(
                s["text"] for s in reversed(steps) if s["kind"] == "message"
            ), name
        else:
            assert outcome.status is Status.FAILED and outcome.error, name
            assert steps[-1] == error(outcome.error, True), name


# --------------------------------------------------------------------------- recorded fixtures
# Exact expectations over every run recorded from the real codex by tests/record_fixtures.py
# (tests/fixtures/recorded, version in its index.json). Thread ids and temp paths change with
# each recording, so they are read from the fixture (ids) or matched by pattern (paths).


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


def recorded_thread(name: str) -> str:
    thread_id: str = json.loads(recorded(name)[0])["thread_id"]
    return thread_id


DISCONNECTED = (
    "stream disconnected before completion: Transport error: network error: "
    "error decoding response body"
)
TOOL_USAGE = Usage(460, 200, 30, 0)  # two replies: 200+260 input, 0+200 cached, 20+10 output

RECORDED_EXPECTED: dict[str, tuple[list[dict[str, Any]], TurnOutcome]] = {
    "codex_simple.jsonl": (
        [msg("Hi there! This is the fake server.")],
        TurnOutcome(
            Status.COMPLETED, "Hi there! This is the fake server.", usage=Usage(100, 40, 9, 0)
        ),
    ),
    "codex_toolcall.jsonl": (
        TOOLCALL_STEPS,
        TurnOutcome(Status.COMPLETED, "Done: wrote hello to out.txt.", usage=TOOL_USAGE),
    ),
    "codex_shell_fail.jsonl": (
        [
            command("/bin/bash -lc 'echo oops >&2; exit 3'", 3, "oops\n", "failed"),
            msg("The command failed with exit code 3."),
        ],
        TurnOutcome(Status.COMPLETED, "The command failed with exit code 3.", usage=TOOL_USAGE),
    ),
    # the fake's write_file part is an apply_patch custom_tool_call: codex reports file_change
    "codex_file_write.jsonl": (
        [
            {
                "kind": "file_change",
                "changes": [{"path": Like(r"/\S+/work/hello\.txt"), "kind": "add"}],
                "status": "completed",
            },
            msg("Wrote hello.txt."),
        ],
        TurnOutcome(Status.COMPLETED, "Wrote hello.txt.", usage=TOOL_USAGE),
    ),
    # a 5xx: codex shows its own text, not the server's; it also printed a non-fatal error event
    "codex_error_500.jsonl": (
        [error(HIGH_DEMAND, False), error(HIGH_DEMAND, True)],
        TurnOutcome(Status.FAILED, error=HIGH_DEMAND, reason=Reason.OVERLOADED, unanswered=True),
    ),
    # the text streamed before the cut stays the turn's last message
    "codex_broken_stream.jsonl": (
        [msg("Partial answer"), error(DISCONNECTED, False), error(DISCONNECTED, True)],
        TurnOutcome(Status.FAILED, "Partial answer", DISCONNECTED),
    ),
    "codex_resume_turn1.jsonl": (
        TOOLCALL_STEPS,
        TurnOutcome(Status.COMPLETED, "Done: wrote hello to out.txt.", usage=TOOL_USAGE),
    ),
    # resumed thread: usage is cumulative over the thread (460+300, 200+250, 30+8), raw
    "codex_resume_turn2.jsonl": (
        [msg("Follow-up answer: the file contains hello.")],
        TurnOutcome(
            Status.COMPLETED,
            "Follow-up answer: the file contains hello.",
            usage=Usage(760, 450, 38, 0),
        ),
    ),
}


def test_every_recorded_codex_fixture_has_expectations() -> None:
    assert {p.name for p in RECORDED.glob("codex_*.jsonl")} == set(RECORDED_EXPECTED)


@pytest.mark.parametrize("name", sorted(RECORDED_EXPECTED))
def test_recorded_steps(name: str) -> None:
    assert list(iter_steps(recorded(name))) == RECORDED_EXPECTED[name][0]


@pytest.mark.parametrize("name", sorted(RECORDED_EXPECTED))
def test_recorded_outcome(name: str) -> None:
    thread_id = recorded_thread(name)
    expected = msgspec.structs.replace(RECORDED_EXPECTED[name][1], agent_session_id=thread_id)
    assert scan_outcome(recorded(name)) == expected


def test_recorded_resume_keeps_the_thread_id() -> None:
    first, second = (recorded_thread(f"codex_resume_turn{n}.jsonl") for n in (1, 2))
    assert first == second


def test_steps_keep_the_order_the_agent_started_them() -> None:
    """Issue 30: a command that completes after later items, and one that never completes
    before the final message, each stay where they started."""
    slow = {"id": "c1", "type": "command_execution", "command": "make", "aggregated_output": "",
            "exit_code": None, "status": "in_progress"}  # fmt: skip
    lost = {**slow, "id": "c2", "command": "sleep 100"}
    lines = jl(
        started(slow),
        done({"id": "m1", "type": "agent_message", "text": "while make runs"}),
        done({**slow, "aggregated_output": "ok", "exit_code": 0, "status": "completed"}),
        started(lost),
        done({"id": "m2", "type": "agent_message", "text": "Done."}),
        {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}},
    )
    assert list(iter_steps(lines)) == [
        command("make", 0, "ok", "completed"),
        msg("while make runs"),
        command("sleep 100", None, "", "in_progress"),
        msg("Done."),
    ]


def test_steps_held_behind_an_open_item_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import zwarm.agents.ordering as ordering

    monkeypatch.setattr(ordering, "HOLD_STEPS", 3)
    lost = {"id": "c1", "type": "command_execution", "command": "sleep 100",
            "aggregated_output": "", "exit_code": None, "status": "in_progress"}  # fmt: skip
    says = [done({"id": f"m{i}", "type": "agent_message", "text": f"{i}"}) for i in range(6)]
    out = iter_steps(jl(started(lost), *says))
    assert next(out) == command("sleep 100", None, "", "in_progress")  # given up, in its place
    assert [s["text"] for s in out] == [str(i) for i in range(6)]
