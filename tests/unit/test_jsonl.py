"""zwarm.adapters.jsonl: ``decode`` agrees with ``json.loads`` on object lines and never raises;
the typed accessors read a wrong-typed field as empty."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest

from zwarm.adapters import jsonl

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
    b'{"a":"\xff"}\n',
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
