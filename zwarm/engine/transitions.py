"""The state machine of turns (and so of sessions): every status change goes through here.

Owns which transitions exist and what each one records, as Supervisor's ``change_state`` does:
one function per kind of change, each asserting the state it leaves. Must stay true:
- a turn is created ``running`` only when the session has no running turn (``begin``);
- it leaves ``running`` exactly once (``end``): to ``completed``, or to ``failed``/``killed``
  with a typed ``Reason`` and a message; a finished turn never changes status again;
- callers apply these inside ``Store.transaction`` (one locked read-modify-write).
"""

from __future__ import annotations

from zwarm.errors import SessionStateError
from zwarm.model import ACTIVE, FINISHED, Reason, Session, Status, Turn

ALLOWED: dict[Status, frozenset[Status]] = {Status.RUNNING: FINISHED}


class TransitionError(SessionStateError):
    """A status change the state machine does not allow (a bug, or a lost race)."""


def begin(s: Session, turn: Turn) -> None:
    """Append ``turn`` (running) to ``s``; refused while another turn runs."""
    cur = s.current
    if cur is not None and cur.status in ACTIVE:
        raise TransitionError(f"session {s.id} already has a running turn ({cur.n})")
    if turn.status is not Status.RUNNING or turn.n != len(s.turns) + 1:
        raise TransitionError(f"turn {turn.n} of session {s.id} cannot begin")
    s.turns.append(turn)
    s.updated_at = turn.started_at


def end(
    s: Session,
    t: Turn,
    to: Status,
    now: str,
    reason: Reason | None = None,
    error: str | None = None,
) -> None:
    """Move running turn ``t`` of ``s`` to ``to`` (with ``reason`` unless completed)."""
    if to not in ALLOWED.get(t.status, frozenset()):
        raise TransitionError(f"turn {t.n} of session {s.id} cannot go {t.status} -> {to}")
    if (to is Status.COMPLETED) != (reason is None):
        raise TransitionError(f"turn {t.n}: {to} needs {'no ' if reason is None else ''}reason")
    t.status, t.reason, t.error = to, reason, error
    t.ended_at = s.updated_at = now
