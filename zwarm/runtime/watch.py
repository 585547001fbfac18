"""The supervisor's watch over a running turn: the stall watchdog and the session's budget.

Owns what the supervisor checks while the agent streams: a thread that reads the turn log as
it grows (from the file the agent writes, never a copy) and
- marks the turn ``stalled`` when the agent has written nothing for the session's ``stall_s``,
  and ``running`` again when it writes; with ``[limits] on_stall = "kill"`` it stops the agent
  instead, and the turn ends ``failed`` (reason ``stalled``);
- feeds each new line to the agent's live usage reader (``Agent.live_usage``: claude reports
  usage with every message; codex only when a turn ends, so its budget is checked then, by
  ``engine.limits`` through ``finish_turn``) and stops the agent as soon as the session's
  tokens, or cost (estimated from ``[agent.prices]`` when the agent reports none while it
  streams), pass its budget: the turn ends ``failed`` (reason ``budget_exceeded``).
Must stay true: status changes go through ``engine.transitions`` in a session transaction;
the agent is stopped only through ``procs.kill_session`` with its verified identity and the
session's marker; the thread never raises into the supervisor (a failure is one line on its
stderr, and the turn goes on unwatched); memory is bounded (a line longer than
``jsonl.LINE_CAP`` is skipped).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from zwarm.model import Reason, Status
from zwarm.system import procs

if TYPE_CHECKING:
    from zwarm.agents.base import UsageFeed
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.model import Session, Turn, Usage
    from zwarm.system.boot import ProcRef

INTERVAL_S = 0.2  # how often the log is looked at
CHUNK = 1 << 20


def needed(s: Session) -> bool:
    """Whether ``s``'s turns need watching (a stall time or a budget)."""
    return s.stall_s is not None or s.max_tokens is not None or s.max_cost_usd is not None


class Watch(threading.Thread):
    """Watches turn ``n`` of session ``sid`` while its agent (``agent``) runs. ``stopped`` is
    why it stopped the agent, if it did: pass it to ``finish_turn``."""

    def __init__(self, manager: BaseSessionManager, sid: str, n: int, agent: ProcRef | None):
        super().__init__(name=f"zwarm-watch-{sid[:8]}", daemon=True)
        self.manager, self.sid, self.n, self.agent = manager, sid, n, agent
        self.stopped: tuple[Reason, str] | None = None
        self._done = threading.Event()
        self._session = manager.store.load(sid, history=False)
        self._feed: UsageFeed | None = (
            manager.agent.live_usage() if _budget(self._session) else None
        )
        self._fd: int | None = None
        self._pos = 0
        self._partial = b""
        self._quiet_since = time.time()  # the agent's last output (wall clock, for ls)
        self._quiet_mono = time.monotonic()
        self._stalled = False

    def finish(self) -> None:
        """The agent has exited: read what is left and stop the thread."""
        self._done.set()
        if self.is_alive():
            self.join()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def run(self) -> None:
        try:
            while not self._done.wait(INTERVAL_S) and self.stopped is None:
                self._step()
        except Exception as e:  # never the supervisor's failure: the turn goes on unwatched
            print(f"zwarm watch: stopped watching: {type(e).__name__}: {e}", file=sys.stderr)

    def _step(self) -> None:
        grew = self._read()
        if grew:
            self._quiet_since, self._quiet_mono = time.time(), time.monotonic()
        self._stall(grew)

    # ------------------------------------------------------------------ reading
    def _read(self) -> bool:
        if self._fd is None:
            from zwarm.system.files import open_read

            try:
                self._fd = open_read(self.manager.store.turn_path(self.sid, self.n))
            except OSError:
                return False
        grew = False
        while True:
            chunk = os.pread(self._fd, CHUNK, self._pos)
            if not chunk:
                return grew
            grew = True
            self._pos += len(chunk)
            self._lines(chunk)

    def _lines(self, chunk: bytes) -> None:
        from zwarm.agents.jsonl import LINE_CAP

        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        if len(self._partial) > LINE_CAP:
            self._partial = b""  # an over-long line: skipped (its end is dropped too)
        if self._feed is None:
            return
        changed = False
        for line in lines:
            if len(line) <= LINE_CAP and self._feed.feed(line):
                changed = True
        if changed:
            self._budget()

    # ------------------------------------------------------------------ the budget
    def _budget(self) -> None:
        from zwarm.engine import limits

        s, used = self._session, self._feed.usage if self._feed else None
        if used is None:
            return
        t = s.turn(self.n)
        if t is None:
            return
        delta = _delta(self.manager, s, t, used)
        model = (self._feed.model if self._feed else None) or s.model
        cost = self.manager.estimate_cost(delta, model)
        why = limits.over_budget(s, delta, cost)
        if why is not None:
            self._halt(Reason.BUDGET_EXCEEDED, why + "; stopped while it streamed")

    # ------------------------------------------------------------------ stalls
    def _stall(self, grew: bool) -> None:
        limit = self._session.stall_s
        if limit is None:
            return
        if grew and self._stalled:
            self._stalled = False
            self._change(Status.RUNNING)
        quiet = time.monotonic() - self._quiet_mono
        if not self._stalled and quiet >= limit:
            self._stalled = True
            if self.manager.config.get("limits", "on_stall") == "kill":
                why = f"stalled: the agent wrote nothing for {quiet:.0f} s (stall_s = {limit:g})"
                self._halt(Reason.STALLED, why + "; stopped ([limits] on_stall = kill)")
            else:
                self._change(Status.STALLED)

    def _change(self, to: Status) -> None:
        from zwarm.engine import transitions
        from zwarm.env import iso

        env = self.manager.env
        with self.manager.store.transaction(self.sid, history=False) as s:
            t = s.turn(self.n)
            if t is None:
                return
            if to is Status.STALLED and t.status is Status.RUNNING:
                transitions.stall(s, t, iso(self._quiet_since), env.now_iso())
            elif to is Status.RUNNING and t.status is Status.STALLED:
                transitions.unstall(s, t, env.now_iso())

    def _halt(self, reason: Reason, why: str) -> None:
        self.stopped = (reason, why)
        procs.kill_session(self.agent, self.sid, grace=2.0)


def _budget(s: Session) -> bool:
    return s.max_tokens is not None or s.max_cost_usd is not None


def _delta(manager: BaseSessionManager, s: Session, t: Turn, used: Usage) -> Usage:
    """This turn's usage so far from what the agent reported (cumulative over a native resume
    for some agents: then less what the resumed session had reported before)."""
    if not manager.usage_cumulative_on_resume or t.context != "native":
        return used
    prev = s.resumed(t, s.agent_session_id)
    base = prev.reported_usage if prev else None
    return used.minus(base) if base else used
