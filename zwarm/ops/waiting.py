"""Waiting: until sessions finish (``wait``), or until one turn has (``wait_turn``).

Owns ``WAIT_EXIT`` (the exit status of ``zwarm wait``), ``WAKE_S`` and what a waiter sleeps
on (``watch``: the sessions' directories, ``system.notify``), and ``resumed_as`` (which run
of a turn answers for it). Must stay true:
- a waiter never polls: it sleeps until a session's meta.json is replaced and reads again
  only the sessions that changed; every ``WAKE_S`` it asks whether what runs each one is
  alive, and reads (reconciles) a lost one: a supervisor killed -9 writes nothing;
- references naming the same session count once; a later turn's outcome never answers for
  turn ``n``, but the run of it that ends last does (a retry, a parked turn resumed).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TypeVar

from zwarm.errors import (
    InvalidInput,
    SessionStateError,
)
from zwarm.model import ACTIVE, Session

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.system import notify

T = TypeVar("T")


def wait(
    api: Zwarm,
    refs: list[str] | None,
    timeout: float | None = None,
    any_: bool = False,
    all_running: bool = False,
) -> dict[str, Any]:
    """Block until all (or any) of ``refs`` finish, or ``timeout``. Never polls: it sleeps
    until a session's meta.json is replaced (``runtime.notify``) and reads again only the
    sessions that changed; every ``WAKE_S`` it also asks whether what runs each one is
    alive, and reads (reconciles) a lost one: a supervisor killed -9 writes nothing.

    References naming the same session count once. With ``all_running``, the sessions
    waited for are every one running when the call starts (none: it returns at once)."""
    ids = [api.store.resolve(r) for r in refs or []]
    if all_running:
        rows = api.sessions() if api.store.exists() else []
        ids += [r["id"] for r in rows if r["status"] in ACTIVE]
    ids = list(dict.fromkeys(ids))
    deadline = None if timeout is None else time.monotonic() + timeout
    found: dict[str, Session] = {}
    with watch_sessions(api, ids) as watch:  # watching first: no change between a read and a sleep
        look = set(ids)
        while True:
            found.update((sid, api.get(sid, history=False)) for sid in ids if sid in look)
            states = {sid: found[sid].status.value for sid in ids}
            done = [sid for sid, st in states.items() if st not in ACTIVE]
            if (any_ and done) or len(done) == len(ids):
                return {"timed_out": False, "statuses": states, "finished": done}
            if deadline is not None and time.monotonic() >= deadline:
                return {"timed_out": True, "statuses": states, "finished": done}
            look = watch.pause(_left(deadline))
            if watch.due:  # no file changed: only a process that died can have
                api.tick()
                look = watch.changed | {sid for sid in ids if lost(api, found[sid])}


def wait_turn(api: Zwarm, ref: str, n: int, timeout: float | None = None) -> tuple[Session, bool]:
    """Block until turn ``n`` of ``ref`` has finished (a queued message becomes turn ``n``
    when it starts), or ``timeout``. Returns (the session, whether it timed out). Unlike
    ``wait``, a later turn's outcome never answers for turn ``n``, but for a turn that is
    run again (``retry``, a parked turn resumed) the run that ends last does: see
    ``resumed_as``."""
    sid = api.store.resolve(ref)
    deadline = None if timeout is None else time.monotonic() + timeout
    with watch_sessions(api, [sid]) as watch:
        while True:
            s = api.get(sid, history=False)  # archived turns: read once it is over
            if n < 1 or n > s.count + len(s.queue):
                raise InvalidInput(f"session {sid} has no turn {n}")
            if n <= s.count and finished(s, n):
                s = api.get(sid)
                if resumed_as(s, n) == n:
                    return s, False
                n = resumed_as(s, n)
                continue
            if n > s.count and s.status.finished and not s.queue:
                raise SessionStateError(f"turn {n} of session {sid} was dropped (killed)")
            if deadline is not None and time.monotonic() >= deadline:
                return s, True
            while not watch.pause(_left(deadline)) and not _past(deadline):
                pass  # nothing of this session changed


def lost(api: Zwarm, s: Session) -> bool:
    """Whether ``s`` (as last read) may have lost what runs it: read it again then."""
    return s.status.value in ACTIVE and not api._alive(s)


def watch_sessions(
    api: Zwarm, sids: list[str], turns: bool = False, wake: bool = True
) -> notify.Sessions:
    """What a waiter sleeps on: ``sids``' directories (and with ``turns`` their turn logs);
    with ``wake``, it also wakes every ``WAKE_S`` (a process that died writes nothing)."""
    from zwarm.system import notify

    dirs = {sid: api.store.session_dir(sid) for sid in sids}
    return notify.Sessions(dirs, turns=turns, every=WAKE_S if wake else None)


WAIT_EXIT = {"completed": 0, "failed": 1, "timeout": 124}


WAKE_S = 3.0  # a waiter reads its sessions again this often even when no file changed


def finished(s: Session, n: int) -> bool:
    """Whether turn ``n`` of ``s`` has finished (an archived turn has: only finished turns
    are archived)."""
    t = s.turn(n)
    return t.status.finished if t is not None else 1 <= n <= s.count


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (None: no deadline; never negative)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def resumed_as(s: Session, n: int) -> int:
    """The turn that last ran turn ``n`` again (a retry, a parked turn resumed), else ``n``."""
    later = [t.n for t in s.turns if t.retry_of == n and t.n > n]
    return later[-1] if later else n
