"""``zwarm.cli.output.emit_json``: one line of compact JSON, a list written in chunks.

A listing of 10,000 rows is 14 MB of JSON; encoded whole (and then copied to add the newline)
its fresh pages cost a cold ``ls --json`` more than the encoding itself. Proves the output is
byte for byte msgspec's encoding of the whole value plus a newline, that a long list reaches
stdout a chunk at a time, and that a value msgspec cannot encode still makes one valid line.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tests.support import StdoutRecorder
from zwarm.cli.output import OUT_CHUNK, emit_json

pytestmark = pytest.mark.unit


def _emit(monkeypatch: pytest.MonkeyPatch, data: Any) -> StdoutRecorder:
    out = StdoutRecorder()
    monkeypatch.setattr("sys.stdout", out)
    emit_json(data)
    return out


ROW = {"id": "x", "task": "fix the parser é😀\u2028", "tokens": 2**40, "cost": 0.5, "n": None}


@pytest.mark.parametrize(
    "data",
    [[], [ROW], {"a": [1, 2]}, "text", 3, None, [dict(ROW, i=i) for i in range(3)]],
    ids=["empty", "one", "dict", "str", "int", "null", "three"],
)
def test_the_line_is_msgspecs_encoding_of_the_whole(
    monkeypatch: pytest.MonkeyPatch, data: Any
) -> None:
    assert _emit(monkeypatch, data).value() == msgspec.json.encode(data) + b"\n"


def test_a_long_list_is_written_a_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [dict(ROW, i=i, output="y" * 1000) for i in range(20 * OUT_CHUNK // 1000)]
    out = _emit(monkeypatch, rows)
    assert out.value() == msgspec.json.encode(rows) + b"\n"
    assert len(out.writes) >= 19 and max(map(len, out.writes)) < OUT_CHUNK + 2000


def test_a_value_msgspec_cannot_encode_still_makes_one_valid_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = [ROW, {"task": "a\ud83d"}, ROW]  # a lone surrogate: the stdlib's ASCII escapes
    out = _emit(monkeypatch, rows).value()
    assert out.count(b"\n") == 1 and out.endswith(b"\n")
    assert json.loads(out) == rows
    first = msgspec.json.encode(ROW)
    assert out.startswith(b"[" + first + b",") and out.endswith(b"," + first + b"]\n")
