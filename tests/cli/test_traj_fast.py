"""The fast trajectory path (issue 16): typed decoding of the hot event shapes gives exactly the
steps of the dict path, on every recorded sample and on hostile variants of each shape; the
``--json`` output is encoded incrementally (never the whole array in memory) with the same
bytes as the stdlib encoder; an over-long line is still skipped unread.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import StdoutRecorder
from zwarm.agents import jsonl
from zwarm.agents.claude import events as claude_events
from zwarm.agents.codex import events as codex_events
from zwarm.cli.output import OUT_CHUNK, stream_json_array

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parent.parent
SAMPLE_DIRS = [TESTS / "fixtures" / "samples", TESTS.parent.parent / "shared/reference/samples"]
CODEX_SAMPLES = sorted(p for d in SAMPLE_DIRS if d.is_dir() for p in d.glob("*codex*.jsonl"))


def _no_fast(shape: Any) -> Callable[[Any], Any]:
    def decode(line: Any) -> Any:
        raise ValueError("fast path off")

    return decode


def dict_path_steps(
    monkeypatch: pytest.MonkeyPatch, module: Any, lines: Iterable[bytes]
) -> list[dict[str, Any]]:
    """``module.iter_steps`` with the typed decoder off: every line takes the dict path."""
    with monkeypatch.context() as m:
        m.setattr(module, "struct_decoder", _no_fast)
        return list(module.iter_steps(lines))


def raw_mode_steps(module: Any, lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """``module.iter_steps`` inside ``jsonl.raw_strings`` (Raw strings copied as JSON), read
    back as the consumer of that mode sees them: encoded by msgspec, decoded."""
    import msgspec

    with jsonl.raw_strings():
        steps = list(module.iter_steps(lines))
    assert not jsonl.raw_strings_wanted()
    out: list[dict[str, Any]] = json.loads(msgspec.json.encode(steps))
    return out


def assert_same_steps(monkeypatch: pytest.MonkeyPatch, module: Any, lines: list[Any]) -> None:
    """The fast path, with and without raw strings, gives the dict path's steps."""
    want = dict_path_steps(monkeypatch, module, lines)
    got = list(module.iter_steps(lines))
    assert got == want
    assert raw_mode_steps(module, lines) == want
    for step in got:
        json.dumps(step, ensure_ascii=False).encode()  # always valid UTF-8


def test_there_are_codex_samples() -> None:
    assert len(CODEX_SAMPLES) >= 5


@pytest.mark.parametrize("path", CODEX_SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_codex_fast_path_gives_the_dict_path_steps_on_samples(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_same_steps(monkeypatch, codex_events, path.read_bytes().splitlines(keepends=True))


def _item_event(kind: str, **item: Any) -> dict[str, Any]:
    return {"type": kind, "item": {"id": "item_1", **item}}


CODEX_VARIANTS: list[object] = [
    # the hot shapes as codex writes them, and in other spellings
    _item_event("item.completed", type="agent_message", text="hi"),
    _item_event("item.completed", type="reasoning", text=""),
    _item_event("item.completed", type="reasoning", text="thinking"),
    _item_event("item.started", type="command_execution", command="ls", exit_code=None),
    _item_event("item.updated", type="command_execution", command="ls"),
    _item_event("item.completed", type="command_execution", command="ls", exit_code=2),
    _item_event("item.completed", type="command_execution", exit_code=0, status="declined"),
    _item_event("item.completed", type="command_execution", exit_code=2**70),
    _item_event("item.completed", type="command_execution", aggregated_output='a\n"b"\\\x1b'),
    _item_event("item.completed", type="command_execution", aggregated_output="é 😀 \u2028"),
    _item_event("item.completed", type="command_execution", aggregated_output=None),
    _item_event("item.completed", type="command_execution", aggregated_output=[1]),
    _item_event("item.completed", type="command_execution", aggregated_output=7),
    b'{"type":"item.completed","item":{"type":"command_execution","aggregated_output":'
    b'"\\u00e9\\/\\ud83d\\ude00"}}\n',
    b'{"type":"item.completed","item":{"type":"command_execution","aggregated_output":'
    b'"bad \xff"}}\n',
    b'{"type":"item.completed","item":{"type":"command_execution","aggregated_output":'
    b'"lone \\ud83d"}}\n',
    # wrong-typed fields: read as empty by the dict path, never as the typed default
    _item_event("item.completed", type="agent_message", text=None),
    _item_event("item.completed", type="agent_message", text=5),
    _item_event("item.completed", type="command_execution", exit_code=True),
    _item_event("item.completed", type="command_execution", exit_code=1.0),
    _item_event("item.completed", type="command_execution", command=["ls"]),
    _item_event("item.completed", type="command_execution", aggregated_output={"a": 1}),
    {"type": "item.completed", "item": None},
    {"type": "item.completed", "item": [1]},
    {"type": "item.completed"},
    {"type": 7, "item": {"type": "agent_message", "text": "x"}},
    {"type": "item.started", "item": {"id": 5, "type": "command_execution"}},
    {"type": "item.started", "item": {"id": "", "type": "command_execution"}},
    # the shapes the fast path leaves to the dict path
    _item_event("item.started", type="file_change", changes=[{"path": "a", "kind": "add"}]),
    _item_event("item.completed", type="file_change", changes=[{"path": "a", "kind": "add"}]),
    _item_event("item.started", type="mcp_tool_call", tool="t", arguments={"a": 1}),
    _item_event("item.completed", type="mcp_tool_call", tool="t", status="failed"),
    _item_event("item.completed", type="todo_list", items=[{"text": "a", "completed": True}]),
    _item_event("item.completed", type="web_search", query="q"),
    _item_event("item.completed", type="error", message="m"),
    _item_event("item.completed", type="something_new", text="x"),
    {"type": "error", "message": "retrying"},
    {"type": "turn.failed", "error": {"message": "boom"}},
    {"type": "turn.completed", "usage": {"input_tokens": 1}},
    {"type": "thread.started", "thread_id": "t"},
    # raw lines: what only the dict path can read right
    b'{"type":"item.completed","item":{"type":"agent_message","text":"a\\ud83d b"}}\n',
    b'{"type":"item.completed","item":{"type":"agent_message","text":"a\\udc00"}}\n',
    b'{"type":"item.completed","item":{"type":"agent_message","text":"\\ud83d\\ude00"}}\n',
    b'{"type":"item.completed","item":{"type":"agent_message","text":"bad \xff utf8"}}\n',
    b'{"type":"item.completed","item":{"type":"agent_message","text":"ok"},"x":"\xff"}\n',
    b'{"type":"item.completed","item":{"type":"agent_message","text":"a","text":"b"}}\n',
    b'{"type":"item.completed","item":{"type":"agent_message","text":"x"},"n":NaN}\n',
    b'{"type":"item.completed","item":{"type":"agent_message","text":"x"}} trailing\n',
    b'{"type":"item.completed","item":{"type":"agent_message","text":"tab\there"}}\n',
    b'\xef\xbb\xbf{"type":"item.completed","item":{"type":"agent_message","text":"bom"}}\n',
    b' { "type" : "item.completed" , "item" : { "type" : "agent_message", "text" : "sp" } }\n',
    b'{"type":"item.completed","item":{"type":"agent_message","text":"no newline"}}',
    b"[1,2]\n",
    b"not json\n",
    b"\n",
    '{"type":"item.completed","item":{"type":"agent_message","text":"a str line"}}\n',
]


def _as_line(v: object) -> bytes | str:
    if isinstance(v, (bytes, str)):
        return v
    return json.dumps(v, separators=(",", ":")).encode() + b"\n"


@pytest.mark.parametrize("variant", range(len(CODEX_VARIANTS)))
def test_codex_fast_path_gives_the_dict_path_steps_on_hostile_lines(
    variant: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = _as_line(CODEX_VARIANTS[variant])
    started = _as_line(_item_event("item.started", type="command_execution", command="c"))
    for lines in ([line], [started, line], [line, line]):
        assert_same_steps(monkeypatch, codex_events, lines)


def test_codex_hot_lines_are_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages, reasoning and commands never reach the dict decoder."""
    calls: list[object] = []
    real = codex_events._decode
    monkeypatch.setattr(codex_events, "_decode", lambda line: calls.append(line) or real(line))
    hot = [_as_line(v) for v in CODEX_VARIANTS[:8]]
    steps = list(codex_events.iter_steps(hot))  # type: ignore[arg-type]
    kinds = ["message", "reasoning", "command", "command", "command"]
    assert calls == [] and [s["kind"] for s in steps] == kinds


def test_codex_started_command_left_open_is_in_progress_once() -> None:
    lines = [
        _as_line(_item_event("item.started", type="command_execution", command="sleep 9")),
        _as_line(_item_event("item.updated", type="command_execution", command="sleep 9")),
    ]
    assert list(codex_events.iter_steps(lines)) == [  # type: ignore[arg-type]
        {
            "kind": "command",
            "command": "sleep 9",
            "exit_code": None,
            "output": "",
            "status": "in_progress",
        }
    ]


def test_an_over_long_line_is_still_skipped_unread() -> None:
    from zwarm.agents.codex import CodexAgent

    big = b'{"type":"item.completed","item":{"type":"agent_message","text":"'
    big += b"x" * (jsonl.LINE_CAP + 10) + b'"}}\n'
    ok = _as_line(_item_event("item.completed", type="agent_message", text="after"))
    steps = list(CodexAgent().steps(io.BytesIO(big + ok)))  # type: ignore[arg-type]
    assert steps[0]["kind"] == "error" and "skipped unread" in steps[0]["message"]
    assert steps[1:] == [{"kind": "message", "text": "after"}]


# --------------------------------------------------------------------------- --json output


def _old_bytes(items: list[Any]) -> bytes:
    """What the stdlib encoder wrote before (``ensure_ascii=False``, compact, one a line)."""
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    return ("[" + ",".join(dumps(i) + "\n" for i in items) + "]\n").encode()


def _stream(
    monkeypatch: pytest.MonkeyPatch, items: Iterable[Any], flush: bool = False
) -> StdoutRecorder:
    out = StdoutRecorder()
    monkeypatch.setattr("sys.stdout", out)
    stream_json_array(items, flush=flush)
    return out


@pytest.mark.parametrize("path", CODEX_SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_json_output_is_byte_for_byte_the_stdlib_encoding(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = list(codex_events.iter_steps(path.read_bytes().splitlines(keepends=True)))
    for i, s in enumerate(steps):
        s.update(turn=1, index=i)
    assert _stream(monkeypatch, steps).value() == _old_bytes(steps)


def test_json_output_of_odd_values(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "".join(map(chr, range(32))) + '\x7f\u2028\u2029/"\\é😀'
    items = [{"kind": "message", "text": text, "n": 2**70, "a": [None, True, -1]}, {}]
    assert _stream(monkeypatch, items).value() == _old_bytes(items)
    assert _stream(monkeypatch, []).value() == b"[]\n"
    lone = [{"text": "a\ud83d"}]  # never from a parser; still one valid line, not a crash
    assert json.loads(_stream(monkeypatch, lone).value()) == lone


def test_json_output_is_written_while_steps_come(monkeypatch: pytest.MonkeyPatch) -> None:
    """RSS is bounded by design: the array is written in chunks as the steps are produced,
    never built whole (the writes seen while the generator still runs)."""
    out = StdoutRecorder()
    step = {"kind": "command", "command": "cat", "output": "y" * 1000, "status": "completed"}
    seen: list[int] = []
    n = 20 * OUT_CHUNK // 1000

    def steps() -> Iterator[dict[str, Any]]:
        for i in range(n):
            seen.append(len(out.value()))
            yield {**step, "index": i}

    monkeypatch.setattr("sys.stdout", out)
    stream_json_array(steps())
    assert seen[-1] >= n * 1000 - 2 * OUT_CHUNK  # all but the last chunk already written
    assert max(map(len, out.writes)) < OUT_CHUNK + 2000  # one chunk at a time
    assert len(json.loads(out.value())) == n


def test_json_output_with_flush_writes_each_step_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [{"kind": "message", "text": str(i)} for i in range(3)]
    out = _stream(monkeypatch, items, flush=True)
    assert b"".join(out.writes) == _old_bytes(items)
    assert len(out.writes) == 4  # one per step, and the closing bracket


# --------------------------------------------------------------------------- claude

CLAUDE_SAMPLES = sorted(p for d in SAMPLE_DIRS if d.is_dir() for p in d.glob("*claude*.jsonl"))


@pytest.mark.parametrize("path", CLAUDE_SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_claude_fast_path_gives_the_dict_path_steps_on_samples(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_same_steps(monkeypatch, claude_events, path.read_bytes().splitlines(keepends=True))


def _assistant(*blocks: Any) -> dict[str, Any]:
    return {"type": "assistant", "message": {"role": "assistant", "content": list(blocks)}}


def _user(*blocks: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": list(blocks)}, **extra}


def _result(tid: str, content: Any = "out", is_error: Any = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": content, "is_error": is_error}


BASH = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
WRITE = {"type": "tool_use", "id": "t1", "name": "Write", "input": {"file_path": "a.py"}}
READ = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a.py"}}
CLAUDE_CALLS = [BASH, WRITE, READ]
CLAUDE_VARIANTS: list[object] = [
    _assistant({"type": "text", "text": "hi"}, {"type": "thinking", "thinking": ""}),
    _assistant({"type": "thinking", "thinking": "hmm"}, {"type": "new_kind", "x": 1}),
    _assistant({"type": "text", "text": None}),
    _assistant({"type": "text", "text": "a"}, "not a block"),
    _assistant({"type": "tool_use", "id": "t2", "name": "X", "input": "not an object"}),
    _assistant({"type": "tool_use", "id": "t2", "name": "X", "input": None}),
    {"type": "assistant", "message": "text"},
    {"type": "assistant", "message": {"content": "a string"}},
    _user(_result("t1")),
    _user(_result("t1", is_error=True), tool_use_result="Error: Exit code 3"),
    _user(_result("t1", content="Exit code 4\nboom", is_error=True)),
    _user(_result("t1", content=[{"type": "text", "text": "a"}, {"text": ""}, {"text": "b"}])),
    _user(_result("t1", content=[{"type": "text", "text": "a"}, "raw"])),
    _user(_result("t1", content={"text": "a"})),
    _user(_result("t1", content=None)),
    _user(_result("t1", content=5)),
    _user(_result("t1", content="")),
    _user(_result("t1", content="Error: Exit code 5\nno")),
    _user(_result("t1", content="\u0045xit code 6")),
    _user(_result("t1", content="Exit code x")),
    _user(_result("t1", content=[])),
    b'{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1",'
    b'"content":"\\u0045xit code 7 \\ud83d\\ude00"}]}}\n',
    b'{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1",'
    b'"content":"Exit code 8 \xc3\xa9"}]}}\n',
    b'{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1",'
    b'"content":"bad \xff"}]}}\n',
    _user(_result("t1"), _result("t2", content=[{"text": 1}])),
    _user(_result("t1", content=[{"text": "a"}]), _result("t2", content=["x"])),
    _user(_result("t1", is_error="yes")),
    _user(_result("t1"), tool_use_result={"type": "create", "filePath": "a.py"}),
    _user(_result("t1"), tool_use_result={"type": "update"}),
    _user(_result("t1"), _result("t9"), tool_use_result={"type": "create"}),
    _user(_result("t1"), tool_use_result=None),
    _user(_result("t1"), tool_result_meta=[{"id": "t1", "non_execution_kind": "user-rejected"}]),
    _user(_result("t1"), tool_result_meta=None),
    {"type": "result", "is_error": True, "result": "boom", "permission_denials": []},
    {"type": "system", "subtype": "api_retry", "attempt": 1, "error": "overloaded"},
    {"type": "system", "subtype": "init"},
    {"type": "rate_limit_event"},
    b'{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1",'
    b'"content":"ok"}]},"tool_use_result":{"stdout":"bad \xff"}}\n',
    b'{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1",'
    b'"content":"ok"}]},"tool_use_result":{"stdout":"lone \\ud83d"}}\n',
    b'{"type":"assistant","message":{"content":[{"type":"text","text":"\\udc00"}]}}\n',
    b'{"type":"assistant","message":{"content":[{"type":"text","text":"x"}]},"n":NaN}\n',
]


@pytest.mark.parametrize("variant", range(len(CLAUDE_VARIANTS)))
def test_claude_fast_path_gives_the_dict_path_steps_on_hostile_lines(
    variant: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = _as_line(CLAUDE_VARIANTS[variant])
    for call in CLAUDE_CALLS:
        for lines in ([line], [_as_line(_assistant(call)), line, line]):
            assert_same_steps(monkeypatch, claude_events, lines)


def test_claude_hot_lines_are_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Assistant and user lines never reach the dict decoder, nor does a tool's output copy
    unless a step needs it."""
    calls: list[object] = []
    real = claude_events._decode
    monkeypatch.setattr(claude_events, "_decode", lambda line: calls.append(line) or real(line))
    lines = [
        _as_line(_assistant(BASH)),
        _as_line(_user(_result("t1"), tool_use_result="x")),
        _as_line(_assistant(READ)),
        _as_line(_user(_result("t1"), tool_use_result="y")),
    ]
    steps = list(claude_events.iter_steps(lines))  # type: ignore[arg-type]
    assert calls == [] and [s["kind"] for s in steps] == ["command", "tool_call", "tool_result"]


def test_raw_strings_copy_the_bulk_only_from_ascii_lines() -> None:
    import msgspec

    out = _item_event("item.completed", type="command_execution", aggregated_output='a\n"')
    wide = _item_event("item.completed", type="command_execution", aggregated_output="é")
    wide_line = json.dumps(wide, ensure_ascii=False).encode()  # not ASCII: decoded as str
    res = _user(_result("t1", content="x\ny"))
    with jsonl.raw_strings():
        a, b = codex_events.iter_steps([_as_line(out), wide_line])  # type: ignore[list-item]
        (c,) = claude_events.iter_steps([_as_line(_assistant(BASH)), _as_line(res)])  # type: ignore[list-item]
    assert bytes(a["output"]) == b'"a\\n\\""' and isinstance(a["output"], msgspec.Raw)
    assert b["output"] == "é"
    assert bytes(c["output"]) == b'"x\\ny"' and c["exit_code"] == 0
    (plain,) = codex_events.iter_steps([_as_line(out)])  # type: ignore[list-item]
    assert plain["output"] == 'a\n"'  # outside raw_strings: a str


@pytest.mark.parametrize(
    "path", CODEX_SAMPLES + CLAUDE_SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_json_output_in_raw_mode_is_byte_for_byte_the_stdlib_encoding(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = codex_events if "codex" in path.name else claude_events
    lines = path.read_bytes().splitlines(keepends=True)
    want = list(module.iter_steps(lines))
    with jsonl.raw_strings():
        got = list(module.iter_steps(lines))
    assert _stream(monkeypatch, got).value() == _old_bytes(want)


def test_a_trajectory_iterates_its_own_generator(tmp_path: Path) -> None:
    """``for`` runs the steps' generator itself (no Python ``__next__`` per step); ``next``
    and ``for`` share it, and the problems are known once it is exhausted."""
    from types import SimpleNamespace

    from zwarm.ops.reading import Trajectory

    (tmp_path / "turn_2.jsonl").write_bytes(b"")
    store = SimpleNamespace(turn_path=lambda sid, n: tmp_path / f"turn_{n}.jsonl")
    steps = [{"kind": "message", "text": str(i)} for i in range(3)]
    mgr = SimpleNamespace(store=store, turn_steps=lambda sid, n: iter([dict(s) for s in steps]))
    t = Trajectory(mgr, "sid", [(1, False), (2, False)])  # type: ignore[arg-type]
    assert iter(t) is t._items
    first = next(t)
    rest = list(t)
    assert first["kind"] == "error" and "turn 1's log is missing" in first["message"]
    assert [s["index"] for s in rest] == [1, 2, 3] and {s["turn"] for s in rest} == {2}
    assert len(t.problems) == 1
