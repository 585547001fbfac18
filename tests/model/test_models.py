"""The data model: exact round-trips, Usage math, derived fields, malformed input."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest

from zwarm.model import (
    SCHEMA_VERSION,
    USAGE_KEYS,
    QueuedMessage,
    Reason,
    Session,
    Status,
    Turn,
    Usage,
    schema,
)
from zwarm.system.boot import ProcRef

pytestmark = pytest.mark.unit

NOW = "2026-01-01T00:00:00.000+00:00"
LATER = "2026-01-01T00:01:00.000+00:00"


def full_session() -> Session:
    t1 = Turn(
        1,
        Status.COMPLETED,
        "task",
        "task",
        NOW,
        LATER,
        exit_code=0,
        timeout=30.0,
        usage=Usage(460, 200, 30, 5),
        reported_usage=Usage(460, 200, 30, 5),
        cost_usd=0.00248,
        reported_cost_usd=0.00248,
        final_message="done",
        agent_session_id="th-1",
        supervisor=ProcRef(100, 12345, "0b6d1f3e-1c1b-4f5e-9a7d-2f1e0c9b8a77"),
        agent=ProcRef(101, 12346, "0b6d1f3e-1c1b-4f5e-9a7d-2f1e0c9b8a77"),
    )
    t2 = Turn(
        2,
        Status.FAILED,
        "again",
        "native",
        LATER,
        LATER,
        exit_code=None,
        signal=9,
        usage=Usage(300, 250, 8),
        reported_usage=Usage(760, 450, 38),
        cost_usd=0.00141,
        reported_cost_usd=0.00389,
        error="agent killed by signal 9",
        reason=Reason.AGENT_ERROR,
        agent_session_id="th-1",
    )
    s = Session(
        id="0f0f0f0f-0000-4000-8000-000000000001",
        adapter="claude",
        task="task",
        cwd="/w",
        created_at=NOW,
        updated_at=LATER,
        name="n1",
        model="claude-opus-5-5",
        requested_model="opus",
        context_mode="native",
        source="tool",
        dangerous=True,
        task_truncated=True,
        agent_session_id="th-1",
        turns=[t1, t2],
        queue=[QueuedMessage("next", "summary", LATER, 5.0)],
        cost_source="reported",
    )
    s.refresh()
    return s


def test_session_round_trip_exact() -> None:
    s = full_session()
    d = s.to_dict()
    again = schema.from_builtins(json.loads(json.dumps(d)))
    assert again == s
    assert again.to_dict() == d
    assert d["schema_version"] == SCHEMA_VERSION


def test_turn_and_queue_round_trip() -> None:
    for t in full_session().turns:
        assert msgspec.convert(t.to_dict(), Turn) == t
    q = QueuedMessage("m", "summary", NOW, None)
    assert msgspec.convert(q.to_dict(), QueuedMessage) == q


def test_encode_decode_bytes_round_trip() -> None:
    s = full_session()
    assert schema.decode(schema.encode(s)) == s


def test_derived_fields() -> None:
    s = full_session()
    assert s.status is Status.FAILED
    assert s.usage == Usage(760, 450, 38, 5)
    assert s.usage.total_tokens == 798
    assert s.cost_usd == pytest.approx(0.00389)
    assert s.last_message == "done"
    assert s.error == "agent killed by signal 9"


def test_cost_unknown_when_any_finished_turn_unknown() -> None:
    s = full_session()
    s.turns[1].cost_usd = None
    s.refresh()
    assert (s.cost_usd, s.cost_complete) == (pytest.approx(0.00248), False)  # a lower bound
    s.turns[0].cost_usd = None
    s.refresh()
    assert (s.cost_usd, s.cost_complete) == (None, False)  # nothing known: never zero


def test_running_turn_cost_ignored_and_no_error_while_completed() -> None:
    s = full_session()
    s.turns[1].status = Status.COMPLETED
    s.turns[1].error = None
    s.turns.append(Turn(3, Status.RUNNING, "more", "summary", LATER))
    s.refresh()
    assert s.status is Status.RUNNING
    assert s.cost_usd == pytest.approx(0.00389)
    s.turns.pop()
    s.refresh()
    assert s.status is Status.COMPLETED and s.error is None


def test_refresh_skips_unstarted_turns_and_keeps_the_latest_message() -> None:
    """``refresh`` is one pass over the turns (every ls row runs it): an unstarted turn (ended
    while queued) never makes the cost unknown, and the last message is the latest non-empty."""
    s = full_session()
    s.turns[0].final_message, s.turns[1].final_message = "first", None
    s.turns.append(Turn(3, Status.KILLED, "queued", "summary", LATER, started=False))
    s.refresh()
    assert s.cost_usd == pytest.approx(0.00389)
    assert s.last_message == "first"
    s.turns[0].cost_usd = 0.0
    s.turns[1].cost_usd = 0.0
    s.refresh()
    assert s.cost_usd == 0.0  # priced at zero is known, not unknown
    s.turns = []
    s.refresh()
    assert (s.status, s.cost_usd, s.last_message, s.error) == (Status.FAILED, None, None, None)


def test_usage_math() -> None:
    a = Usage(760, 450, 38, 4)
    b = Usage(460, 200, 30, 1)
    assert a.minus(b) == Usage(300, 250, 8, 3)
    assert b.minus(a) == Usage(0, 0, 0, 0)  # floored: a cumulative counter never goes back
    assert (a.minus(b) + b) == a
    assert Usage().total_tokens == 0
    assert a.to_dict() == {
        "input_tokens": 760,
        "cached_input_tokens": 450,
        "output_tokens": 38,
        "reasoning_tokens": 4,
        "total_tokens": 798,
    }
    assert list(a.to_dict()) == list(USAGE_KEYS)
    assert msgspec.convert(a.to_dict(), Usage) == a
    assert msgspec.convert({"input_tokens": 5}, Usage) == Usage(5)
    assert msgspec.convert({"input_tokens": 5, "total_tokens": 99}, Usage).total_tokens == 5


@pytest.mark.parametrize(
    "bad",
    [
        [],
        "x",
        {"input_tokens": -1},
        {"output_tokens": "3"},
        {"cached_input_tokens": True},
        {"input_tokens": 1.5},
    ],
)
def test_usage_rejects_malformed(bad: Any) -> None:
    d = full_session().to_dict()
    d["turns"][0]["usage"] = bad
    with pytest.raises(ValueError):
        schema.from_builtins(d)


def test_status_finished() -> None:
    assert not Status.RUNNING.finished
    assert all(s.finished for s in (Status.COMPLETED, Status.FAILED, Status.KILLED))


def test_newer_schema_refused() -> None:
    d = full_session().to_dict()
    d["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="newer than this zwarm"):
        schema.from_builtins(d)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _set(obj: Any, path: tuple, value: Any) -> Any:
    obj = copy.deepcopy(obj)
    cur = obj
    for p in path[:-1]:
        cur = cur[p]
    if value is _DELETE:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return obj


_DELETE = object()
_JUNK = [None, 1, -1, 2.5, True, "x", "", [], {}, [1], {"a": 1}, _DELETE]


def test_from_dict_only_raises_value_error() -> None:
    """Every field replaced by junk: from_dict either accepts it or raises ValueError."""
    base = full_session().to_dict()
    tried = 0
    for path in _paths(base):
        for junk in _JUNK:
            if junk is _DELETE and isinstance(path[-1], int):
                continue
            d = _set(base, path, junk)
            try:
                schema.from_builtins(d)
            except ValueError:
                pass
            tried += 1
    assert tried > 500
    for top in (None, [], "x", 3):
        with pytest.raises(ValueError):
            schema.from_builtins(top)


def _bytes(d: Any) -> bytes:
    return json.dumps(d).encode()


@pytest.mark.parametrize(
    ("path", "value", "why"),
    [
        (("usage",), "x", "usage"),  # was: ls crashed / listed it completed and cached it
        (("schema_version",), True, "schema_version"),  # was: completed in ls, damaged in show
        (("turns", 0, "cost_usd"), float("nan"), ""),
        (("turns", 0, "cost_usd"), float("inf"), ""),
        (("turns", 0, "cost_usd"), 10**400, ""),
        (("turns", 0, "usage", "input_tokens"), 10**400, ""),
        (("turns", 0, "started_at"), "yesterday", "started_at"),
        # digits that are not ASCII: no time parser takes them (was: accepted, ``\d``)
        (("created_at",), "\uff12\uff10\uff12\uff16-11-16T10:08:25Z", "created_at"),
        (("turns", 0, "ended_at"), "\u0662\u0660\u0662\u0666-11-16T10:08:25Z", "ended_at"),
        (("parent_run_id",), "\u0662\u0660\u0662\u0666" * 2 + "-120000-abcd", "parent_run_id"),
        (("turns", 0, "supervisor", "pid"), 1.5, "pid"),
        (("turns", 0, "supervisor", "start_ticks"), float("nan"), ""),
        (("turns", 0, "agent_session_id"), "--dangerously-bypass-approvals-and-sandbox", ""),
        (("cwd",), "relative/dir", "cwd"),
        (("id",), "../../etc", "id"),
    ],
)
def test_one_schema_rejects_what_the_old_readers_let_through(
    path: tuple, value: Any, why: str
) -> None:
    d = _set(full_session().to_dict(), path, value)
    data = json.dumps(d, allow_nan=True).replace("Infinity", "1e999").encode()
    with pytest.raises(ValueError, match=why or None):
        schema.decode(data)


def test_derived_fields_are_recomputed_not_believed() -> None:
    d = full_session().to_dict()
    d["status"], d["cost_usd"], d["usage"]["input_tokens"] = "completed", 0.0, 1
    s = schema.decode(_bytes(d))
    assert s.status is Status.FAILED and s.cost_usd == pytest.approx(0.00389)
    assert s.usage == Usage(760, 450, 38, 5)


def test_deep_nesting_and_garbage_are_value_errors() -> None:
    for data in (b"[" * 100_000, b"{" + b'"a":{' * 50_000, b"\xff\xfe", b"", b"  ", b"null", b"[]"):
        with pytest.raises(ValueError):
            schema.decode(data)
    huge = b'{"schema_version":2,"task":"' + b"x" * (schema.MAX_META_BYTES + 1) + b'"}'
    with pytest.raises(ValueError, match="too large"):
        schema.decode(huge)


def test_version_1_is_migrated_in_memory() -> None:
    """A meta.json written by zwarm before the engine seams (schema 1: process refs were an
    epoch create_time) still reads; its refs are converted, a NaN one dropped."""
    d = full_session().to_dict()
    d["schema_version"] = 1
    for t in d["turns"]:
        del t["reason"], t["launcher"]
    d["turns"][0]["supervisor"] = {"pid": 100, "create_time": 1_700_000_000.25}
    d["turns"][0]["agent"] = {"pid": 101, "create_time": -5.0}
    s = schema.decode(json.dumps(d).encode())
    assert s.schema_version == SCHEMA_VERSION
    assert s.turns[0].agent is None  # not a time: dropped, never trusted
    assert s.turns[0].supervisor is None or s.turns[0].supervisor.pid == 100
    d["turns"][0]["agent"] = {"pid": 1, "create_time": float("nan")}  # the kill-pid-1 file
    with pytest.raises(ValueError, match="not valid JSON"):
        schema.decode(json.dumps(d, allow_nan=True).encode())
    assert s.turns[1].reason is None and s.turns[1].launcher == "local"
    assert schema.encode(s).startswith(b"{")
    assert b'"schema_version":%d' % SCHEMA_VERSION in schema.encode(s)


def test_migrations_are_ordered_one_version_at_a_time() -> None:
    starts = [v for v, _ in schema.MIGRATIONS]
    # from version 0 (zwarm 3.x's meta.json, ``schema.ZWARM3_VERSION``)
    assert starts == sorted(starts) and starts == list(range(0, SCHEMA_VERSION))


def test_the_listing_order_is_creation_time_then_id() -> None:
    """``order_key`` orders rows exactly as ``(created_at or "", id)`` does: a time that is a
    prefix of another first, equal times by id, rows without a time (damaged) first."""
    import itertools
    import random

    from zwarm.model.records import order_key

    times = [None, "2026-11-16T10:08:25Z", "2026-11-16T10:08:25", "2026-11-16T10:08:25.1Z",
             "2026-11-16T10:08:25.1+00:00", "2026-11-16T10:08:25+01:00", "2025-01-01T00:00:00Z",
             "2026-11-16T10:08:25.10Z"]  # fmt: skip
    ids = ["00000000-0000-4000-8000-000000000000", "0fffffff-0000-4000-8000-000000000000",
           "f0000000-0000-4000-8000-000000000000"]  # fmt: skip
    rows = [{"created_at": t, "id": i} for t, i in itertools.product(times, ids)]
    random.Random(7).shuffle(rows)
    want = sorted(rows, key=lambda r: (r["created_at"] or "", r["id"]))
    assert sorted(rows, key=order_key) == want
    assert want[0]["created_at"] is None


# its type is imported only where a config is loaded (zwarm.trust is not on a listing's path);
# msgspec never decodes a Config, so the string is never evaluated
POSTPONED_ON_PURPOSE = {("zwarm.config", "Config", "source")}


@pytest.mark.perf
def test_no_struct_postpones_its_annotations() -> None:
    """Every ``Struct`` in zwarm has its annotations as objects: a postponed one (``from
    __future__ import annotations``) is a string msgspec compiles and evaluates each time a
    process first decodes the type, ~30 µs each, 144 of them before a trajectory's first line."""
    import importlib
    import inspect
    import pkgutil

    import zwarm

    postponed = set()
    for info in pkgutil.walk_packages(zwarm.__path__, "zwarm."):
        if info.name == "zwarm.__main__":
            continue  # runs the CLI
        mod = importlib.import_module(info.name)
        for cls in list(vars(mod).values()):
            if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
                continue
            if cls.__module__ != info.name:
                continue
            for field, a in inspect.get_annotations(cls).items():
                if isinstance(a, str):
                    postponed.add((info.name, cls.__name__, field))
    assert postponed == POSTPONED_ON_PURPOSE
