"""The state machine of turns (and so of sessions): every status change goes through here.

Owns which transitions exist and what each one records, as Supervisor's ``change_state`` does:
one function per kind of change, each asserting the state it leaves (``ALLOWED``). Must stay
true:
- a turn is created ``running`` or ``queued`` only when the session has no active turn
  (``begin``); a ``queued`` turn becomes ``running`` only through ``start`` (the scheduler's,
  under its lock, so caps hold), and a turn that never started can be held back (``defer``);
- ``running`` and ``stalled`` go back and forth (``stall``/``unstall``) while the agent runs;
  a turn whose agent exited on a usage or rate limit may be ``parked`` (``park``) until a
  time, and is then ended (``end``) when a new turn resumes it;
- a turn reaches a finished status exactly once (``end``): ``completed``, or ``failed``/
  ``killed`` with a typed ``Reason`` and a message; a finished turn never changes again;
  one whose agent never started (``started`` False) ends costing exactly 0;
- callers apply these inside ``Store.transaction`` (one locked read-modify-write).
"""

from __future__ import annotations

from zwarm.errors import SessionStateError
from zwarm.model import ACTIVE, FINISHED, Reason, Session, Status, Turn

_NEVER_RAN = frozenset({Status.FAILED, Status.KILLED})
ALLOWED: dict[Status, frozenset[Status]] = {
    Status.RUNNING: FINISHED | {Status.STALLED, Status.PARKED, Status.QUEUED},
    Status.STALLED: FINISHED | {Status.RUNNING, Status.PARKED},
    Status.QUEUED: _NEVER_RAN | {Status.RUNNING},
    Status.PARKED: _NEVER_RAN,
}


class TransitionError(SessionStateError):
    """A status change the state machine does not allow (a bug, or a lost race)."""


def _move(s: Session, t: Turn, to: Status) -> None:
    if to not in ALLOWED.get(t.status, frozenset()):
        raise TransitionError(f"turn {t.n} of session {s.id} cannot go {t.status} -> {to}")
    t.status = to


def begin(s: Session, turn: Turn) -> None:
    """Append ``turn`` (running or queued) to ``s``; refused while another turn is active."""
    cur = s.current
    if cur is not None and cur.status in ACTIVE:
        raise TransitionError(f"session {s.id} already has an active turn ({cur.n}, {cur.status})")
    if turn.status not in (Status.RUNNING, Status.QUEUED) or turn.n != s.count + 1:
        raise TransitionError(f"turn {turn.n} of session {s.id} cannot begin")
    if turn.status is Status.QUEUED:
        turn.started = False
        turn.queued_at = turn.queued_at or turn.started_at
    s.turns.append(turn)
    s.updated_at = turn.started_at


def defer(s: Session, t: Turn, now: str) -> None:
    """Hold running turn ``t``, which has not started yet (nothing runs it), in the queue."""
    if t.supervisor is not None or t.agent is not None or t.handle is not None:
        raise TransitionError(f"turn {t.n} of session {s.id} has started: it cannot be queued")
    _move(s, t, Status.QUEUED)
    t.started, t.queued_at = False, now
    s.updated_at = now


def start(s: Session, t: Turn, now: str) -> None:
    """Queued turn ``t`` starts (its launcher is told next, in the same transaction)."""
    _move(s, t, Status.RUNNING)
    t.started, t.started_at, t.wait = True, now, None
    s.updated_at = now


def stall(s: Session, t: Turn, quiet_since: str, now: str) -> None:
    """Running turn ``t``'s agent has written nothing since ``quiet_since``."""
    _move(s, t, Status.STALLED)
    t.quiet_since = quiet_since
    s.updated_at = now


def unstall(s: Session, t: Turn, now: str) -> None:
    """Stalled turn ``t``'s agent writes again."""
    _move(s, t, Status.RUNNING)
    t.quiet_since = None
    s.updated_at = now


def park(s: Session, t: Turn, now: str, until: str, reason: Reason, error: str) -> None:
    """``t``'s agent exited on a usage or rate limit: parked until ``until``, then resumed."""
    _move(s, t, Status.PARKED)
    t.reason, t.error, t.parked_until, t.quiet_since = reason, error, until, None
    t.ended_at = s.updated_at = now


def end(
    s: Session,
    t: Turn,
    to: Status,
    now: str,
    reason: str | None = None,
    error: str | None = None,
) -> None:
    """Move active turn ``t`` of ``s`` to finished status ``to`` (with ``reason`` unless
    completed: a ``Reason``, or the turn's launcher's own). A parked turn keeps the time its
    agent ended."""
    if to not in FINISHED:
        raise TransitionError(f"turn {t.n} of session {s.id}: {to} is not a finished status")
    if (to is Status.COMPLETED) != (reason is None):
        raise TransitionError(f"turn {t.n}: {to} needs {'no ' if reason is None else ''}reason")
    was = t.status
    _move(s, t, to)
    t.reason, t.error, t.wait, t.quiet_since = reason, error, None, None
    if not t.started and t.cost_usd is None:
        t.cost_usd = 0.0  # its agent never started: nothing was billed
    if was is not Status.PARKED or t.ended_at is None:
        t.ended_at = now
    s.updated_at = now
