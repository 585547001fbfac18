"""The data model: exact round-trips, Usage math, derived fields, malformed input."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from zwarm.models import (
    SCHEMA_VERSION,
    USAGE_KEYS,
    ProcRef,
    QueuedMessage,
    Session,
    Status,
    Turn,
    Usage,
)

NOW = "2026-01-01T00:00:00.000+00:00"
LATER = "2026-01-01T00:01:00.000+00:00"


def full_session() -> Session:
    t1 = Turn(
        1, Status.COMPLETED, "task", "task", NOW, LATER, exit_code=0, timeout=30.0,
        usage=Usage(460, 200, 30, 5), reported_usage=Usage(460, 200, 30, 5), cost_usd=0.00248,
        reported_cost_usd=0.00248, final_message="done", agent_session_id="th-1",
        supervisor=ProcRef(100, 1700000000.25), agent=ProcRef(101, 1700000000.5),
    )
    t2 = Turn(2, Status.FAILED, "again", "native", LATER, LATER, exit_code=None, signal=9,
              usage=Usage(300, 250, 8), reported_usage=Usage(760, 450, 38), cost_usd=0.00141,
              reported_cost_usd=0.00389, error="agent killed by signal 9",
              agent_session_id="th-1")
    s = Session(
        id="0f0f0f0f-0000-4000-8000-000000000001", adapter="claude", task="task", cwd="/w",
        created_at=NOW, updated_at=LATER, name="n1", model="claude-opus-5-5",
        requested_model="opus", context_mode="native", source="tool", dangerous=True,
        task_truncated=True, agent_session_id="th-1", turns=[t1, t2],
        queue=[QueuedMessage("next", "summary", LATER, 5.0)], cost_source="reported",
    )
    s.refresh()
    return s


def test_session_round_trip_exact() -> None:
    s = full_session()
    d = s.to_dict()
    again = Session.from_dict(json.loads(json.dumps(d)))
    assert again == s
    assert again.to_dict() == d
    assert d["schema_version"] == SCHEMA_VERSION


def test_turn_and_queue_round_trip() -> None:
    for t in full_session().turns:
        assert Turn.from_dict(t.to_dict()) == t
    q = QueuedMessage("m", "summary", NOW, None)
    assert QueuedMessage.from_dict(q.to_dict()) == q
    assert ProcRef.from_dict(None) is None


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
    assert s.cost_usd is None


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


def test_usage_math() -> None:
    a = Usage(760, 450, 38, 4)
    b = Usage(460, 200, 30, 1)
    assert a.minus(b) == Usage(300, 250, 8, 3)
    assert b.minus(a) == Usage(0, 0, 0, 0)  # floored: a cumulative counter never goes back
    assert (a.minus(b) + b) == a
    assert Usage().total_tokens == 0
    assert a.to_dict() == {"input_tokens": 760, "cached_input_tokens": 450,
                           "output_tokens": 38, "reasoning_tokens": 4, "total_tokens": 798}
    assert list(a.to_dict()) == list(USAGE_KEYS)
    assert Usage.from_dict(a.to_dict()) == a
    assert Usage.from_dict(None) == Usage()
    assert Usage.from_dict({"input_tokens": 5}) == Usage(5)


@pytest.mark.parametrize("bad", [[], "x", {"input_tokens": -1}, {"output_tokens": "3"},
                                 {"cached_input_tokens": True}, {"input_tokens": 1.5}])
def test_usage_rejects_malformed(bad: Any) -> None:
    with pytest.raises(ValueError):
        Usage.from_dict(bad)


def test_status_finished() -> None:
    assert not Status.RUNNING.finished
    assert all(s.finished for s in (Status.COMPLETED, Status.FAILED, Status.KILLED))


def test_newer_schema_refused() -> None:
    d = full_session().to_dict()
    d["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="newer than this zwarm"):
        Session.from_dict(d)


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
                Session.from_dict(d)
            except ValueError:
                pass
            tried += 1
    assert tried > 500
    for top in (None, [], "x", 3):
        with pytest.raises(ValueError):
            Session.from_dict(top)
