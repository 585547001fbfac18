"""The state machine of turns as a table: every (from, event, to) it allows, and nothing else.

Enumerates every combination ``zwarm/engine/transitions.py`` knows (each status a turn can be
in, each event function, each status an event can aim at) and checks the allowed ones are
exactly the rows below; every other one raises ``TransitionError`` and leaves the session
untouched. Adding or removing a transition, or an event function, fails this test: update the
table (and the module's docstring) on purpose.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from itertools import product

import pytest

from tests.support import bare_session, bare_turn
from zwarm.engine import transitions
from zwarm.engine.transitions import TransitionError
from zwarm.model import FINISHED, Reason, Session, Status, Turn

pytestmark = pytest.mark.unit

R, S, Q, P = Status.RUNNING, Status.STALLED, Status.QUEUED, Status.PARKED
C, F, K = Status.COMPLETED, Status.FAILED, Status.KILLED

# (from, event, to): every move of an existing turn the state machine allows.
TABLE: frozenset[tuple[Status, str, Status]] = frozenset(
    {
        (R, "defer", Q),  # a turn that never started goes back to the queue
        (Q, "start", R),
        (S, "start", R),  # the same status change as unstall (only ALLOWED is asserted)
        (R, "stall", S),
        (S, "unstall", R),
        (Q, "unstall", R),  # the same status change as start (only ALLOWED is asserted)
        (R, "park", P),
        (S, "park", P),
        *((frm, "end", to) for frm in (R, S) for to in (C, F, K)),
        *((frm, "end", to) for frm in (Q, P) for to in (F, K)),
    }
)
# (status of the session's current turn or None, status of the new turn): begin's table.
BEGIN: frozenset[tuple[Status | None, Status]] = frozenset(
    (cur, new) for cur in (None, *FINISHED) for new in (R, Q)
)

NOW = "2026-11-23T15:00:00+00:00"
EVENTS: dict[str, tuple[Callable[[Session, Turn, Status], None], frozenset[Status]]] = {
    # event -> (how to call it aiming at ``to``, the statuses it can aim at)
    "defer": (lambda s, t, to: transitions.defer(s, t, NOW), frozenset({Q})),
    "start": (lambda s, t, to: transitions.start(s, t, NOW), frozenset({R})),
    "stall": (lambda s, t, to: transitions.stall(s, t, NOW, NOW), frozenset({S})),
    "unstall": (lambda s, t, to: transitions.unstall(s, t, NOW), frozenset({R})),
    "park": (
        lambda s, t, to: transitions.park(s, t, NOW, NOW, Reason.USAGE_LIMIT, "limit"),
        frozenset({P}),
    ),
    "end": (
        lambda s, t, to: transitions.end(
            s, t, to, NOW, None if to is C else Reason.KILLED, None if to is C else "x"
        ),
        frozenset(Status),  # end is told its target: every status, finished or not
    ),
}


def _refused(s: Session, call: Callable[..., None], *args: object) -> None:
    before = copy.deepcopy(s)
    with pytest.raises(TransitionError):
        call(*args)
    assert s == before, "a refused transition changed the session"


def test_the_events_are_the_module_s_public_functions() -> None:
    public = {
        name
        for name, f in inspect.getmembers(transitions, inspect.isfunction)
        if f.__module__ == transitions.__name__ and not name.startswith("_")
    }
    assert public == {"begin", *EVENTS}


def test_allowed_is_the_table_s_status_changes() -> None:
    pairs: dict[Status, set[Status]] = {}
    for frm, _, to in TABLE:
        pairs.setdefault(frm, set()).add(to)
    assert {k: set(v) for k, v in transitions.ALLOWED.items()} == pairs


@pytest.mark.parametrize(
    ("frm", "event", "to"),
    [(frm, ev, to) for frm, ev in product(Status, EVENTS) for to in sorted(EVENTS[ev][1])],
    ids=lambda v: str(v),
)
def test_every_move_is_allowed_exactly_as_the_table_says(
    frm: Status, event: str, to: Status
) -> None:
    s = bare_session(bare_turn(1, frm))
    t = s.turns[0]
    call, _ = EVENTS[event]
    if (frm, event, to) in TABLE:
        call(s, t, to)
        assert t.status is to and s.updated_at == NOW
    else:
        _refused(s, call, s, t, to)


@pytest.mark.parametrize("frm", list(Status), ids=str)
def test_end_refuses_a_reason_that_does_not_match_its_status(frm: Status) -> None:
    s = bare_session(bare_turn(1, frm))
    t = s.turns[0]
    _refused(s, transitions.end, s, t, C, NOW, Reason.KILLED, "x")
    for to in (F, K):
        _refused(s, transitions.end, s, t, to, NOW, None, None)


def test_a_started_turn_is_never_deferred() -> None:
    for field, value in (("supervisor", 1), ("agent", 1), ("handle", {"job": "1"})):
        s = bare_session(bare_turn(1, R))
        setattr(s.turns[0], field, value)
        _refused(s, transitions.defer, s, s.turns[0], NOW)


@pytest.mark.parametrize(
    ("cur", "new"), list(product((None, *Status), Status)), ids=lambda v: str(v)
)
def test_begin_is_allowed_exactly_as_the_table_says(cur: Status | None, new: Status) -> None:
    s = bare_session() if cur is None else bare_session(bare_turn(1, cur))
    turn = bare_turn(s.count + 1, new)
    if (cur, new) in BEGIN:
        transitions.begin(s, turn)
        assert s.turns[-1] is turn and s.current is turn
    else:
        _refused(s, transitions.begin, s, turn)
    if (cur, new) in BEGIN:  # and never with a turn number out of sequence
        for n in (s.count, s.count + 2):
            _refused(s, transitions.begin, s, bare_turn(n, new))
