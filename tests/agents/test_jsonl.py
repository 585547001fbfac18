"""zwarm.agents.jsonl: ``decode`` agrees with ``json.loads`` on object lines, never raises and
never yields a string that cannot be written as UTF-8; ``read_lines`` never loads a line over the
cap (checked with tracemalloc on a 200 MB line); the typed accessors read a wrong-typed field as
empty."""

from __future__ import annotations

import io
import json
import tracemalloc
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from zwarm.agents import jsonl

pytestmark = pytest.mark.unit

OBJECT_LINES: list[object] = [
    b'{"type":"turn.completed","usage":{"input_tokens":3}}\n',
    b'{"type":"x"}',
    b'{"type":"x"}\r\n',
    b'{"a":"\\u00e9\xc3\xa9","b":[1,2.5,null,true]}\n',
    b'{"a":1}   \n',
    '{"type":"str line"}\n',
    bytearray(b'{"type":"bytearray"}\n'),
    b' {"lead":"space"}\n',
]
NOT_OBJECTS: list[object] = [
    b"",
    b"\n",
    b"not json\n",
    b'{"type":"truncated',
    b'{"a":1} trailing\n',
    b"[1, 2]\n",
    b'"just a string"\n',
    b"\xff\xfe{garbage",
    b'{"x":' * 100_000,
    None,
    42,
]


@pytest.mark.parametrize("line", OBJECT_LINES)
def test_decode_matches_json_loads_on_objects(line: object) -> None:
    assert jsonl.decode(line) == json.loads(line)  # type: ignore[arg-type]


@pytest.mark.parametrize("line", NOT_OBJECTS, ids=range(len(NOT_OBJECTS)))
def test_decode_returns_none_and_never_raises(line: object) -> None:
    assert jsonl.decode(line) is None


def test_as_bytes() -> None:
    assert jsonl.as_bytes("é") == "é".encode()
    assert jsonl.as_bytes(bytearray(b"ab")) == b"ab"
    assert jsonl.as_bytes(memoryview(b"cd")) == b"cd"
    assert jsonl.as_bytes("\ud800") == b"?"  # a lone surrogate cannot raise
    assert jsonl.as_bytes(None) == b""


@pytest.mark.parametrize("bad", [None, 1, 1.5, True, "s", [], {}])
def test_accessors_read_wrong_types_as_empty(bad: Any) -> None:
    assert jsonl.str_(bad) == (bad if isinstance(bad, str) else "")
    assert jsonl.dict_(bad) == (bad if isinstance(bad, dict) else {})
    assert jsonl.list_(bad) == (bad if isinstance(bad, list) else [])
    assert jsonl.int_(bad) == (1 if bad == 1 and type(bad) is int else None)
    assert jsonl.count(bad) == (1 if bad == 1 and type(bad) is int else 0)


def test_count_rejects_negative_and_bool() -> None:
    assert jsonl.count(-5) == 0
    assert jsonl.count(True) == 0
    assert jsonl.count(7) == 7


def test_obj_wraps_non_objects() -> None:
    assert jsonl.obj({"a": 1}) == {"a": 1}
    assert jsonl.obj(None) == {}
    assert jsonl.obj("ls -la") == {"value": "ls -la"}


def test_newest_takes_the_last_line_that_yields() -> None:
    lines = deque([b'{"t":"a"}', b'{"t":"b"}', b"broken {", b'{"u":1}'])
    assert jsonl.newest(lines, lambda e: e.get("t")) == "b"
    assert jsonl.newest(deque(), lambda e: "x") is None


# --------------------------------------------------------------------------- bad text
def _utf8_ok(value: Any) -> bool:
    """True when ``value`` encodes as UTF-8 (what writing it to a file or a pipe needs)."""
    json.dumps(value, ensure_ascii=False).encode("utf-8")
    return True


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (b'{"a":"ok \xff end"}\n', {"a": "ok \ufffd end"}),
        (b'{"a":"\xed\xa0\xbd"}', {"a": "\ufffd\ufffd\ufffd"}),  # a surrogate in raw UTF-8
        (b'{"k\xc3":1}', {"k\ufffd": 1}),
    ],
)
def test_invalid_utf8_is_replaced_not_dropped(line: bytes, expect: dict[str, Any]) -> None:
    """Old code gave None for the whole line (json.loads refuses it) or kept the surrogate."""
    assert jsonl.decode(line) == expect


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (b'{"t":"cut \\ud83d"}', {"t": "cut \ufffd"}),  # JavaScript's cut emoji
        (b'{"t":"\\udc00x"}', {"t": "\ufffdx"}),
        (b'{"t":"\\ud83d\\ude00"}', {"t": "\U0001f600"}),  # a pair is one character
        (
            b'{"\\ud800":["\\uDFFF",{"d":"\\ud800\\ud800"}]}',
            {"\ufffd": ["\ufffd", {"d": "\ufffd\ufffd"}]},
        ),
        (b'{"t":"\\\\ud800"}', {"t": "\\ud800"}),  # an escaped backslash: no surrogate
        ('{"t":"\ud83d"}', {"t": "?"}),  # a str line holding a lone surrogate
    ],
)
def test_lone_surrogates_become_replacement_characters(line: object, expect: Any) -> None:
    """json.loads keeps a lone surrogate; the str then cannot be encoded to UTF-8 (a crash in
    ``trajectory --json`` or ``zwarm mcp`` with old code)."""
    got = jsonl.decode(line)
    assert got == expect
    assert _utf8_ok(got)


def test_surrogates_deep_in_nesting() -> None:
    line = b'{"a":' + b"[" * 500 + b'"\\ud83d"' + b"]" * 500 + b"}"
    got = jsonl.decode(line)
    assert got is not None and _utf8_ok(got)
    inner = got["a"]
    while isinstance(inner, list):
        inner = inner[0]
    assert inner == "\ufffd"


def test_clean_text() -> None:
    assert jsonl.clean_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert jsonl.clean_text("fine \U0001f600") == "fine \U0001f600"


# --------------------------------------------------------------------------- bounded lines
def test_read_lines_of_a_file_keep_bytes_and_last_line_without_newline() -> None:
    f = io.BytesIO(b'{"a":1}\n\n{"b":2}\r\n{"c":')
    assert list(jsonl.read_lines(f)) == [b'{"a":1}\n', b"\n", b'{"b":2}\r\n', b'{"c":']


def test_read_lines_skips_a_line_over_the_cap_and_goes_on() -> None:
    f = io.BytesIO(b"short\n" + b"x" * 100 + b"\n" + b"y" * 50 + b"\nlast")
    got = list(jsonl.read_lines(f, cap=40))
    assert got == [b"short\n", jsonl.Skipped(2, 101, 40), jsonl.Skipped(3, 51, 40), b"last"]
    assert "line 2" in got[1].note and "101 bytes" in got[1].note  # type: ignore[union-attr]


def test_read_lines_at_exactly_the_cap() -> None:
    f = io.BytesIO(b"a" * 9 + b"\n" + b"b" * 10 + b"\n")
    assert list(jsonl.read_lines(f, cap=10)) == [b"a" * 9 + b"\n", jsonl.Skipped(2, 11, 10)]


def test_read_lines_of_given_lines() -> None:
    lines = [b"ok\n", b"z" * 20, "s" * 30, bytearray(b"b")]
    assert list(jsonl.read_lines(lines, cap=10)) == [
        b"ok\n",
        jsonl.Skipped(2, 20, 10),
        jsonl.Skipped(3, 30, 10),
        bytearray(b"b"),
    ]


def test_a_200_mb_line_is_never_loaded(tmp_path: Path) -> None:
    """A 200 MB single line (sparse file: no disk) costs about the cap in memory, not 200 MB:
    Python's own file iteration (old code) would hold the whole line."""
    path = tmp_path / "turn_1.jsonl"
    size = 200 << 20
    with open(path, "wb") as f:
        f.write(b'{"type":"item.completed","item":{"text":"')
        f.seek(size)
        f.write(b'"}}\n{"type":"after"}')
    tracemalloc.start()
    try:
        with open(path, "rb") as f:
            got = list(jsonl.read_lines(f))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == [jsonl.Skipped(1, size + 4, jsonl.LINE_CAP), b'{"type":"after"}']
    assert peak < jsonl.LINE_CAP + (4 << 20), f"peak {peak:,} bytes"
