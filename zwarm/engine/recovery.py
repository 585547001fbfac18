"""``Recovery``: reconciling a lost turn, killing one, and running one again.

Owns ``reconcile`` (a turn marked running whose launcher is not verifiably alive is ended
``failed``, with ``supervisor_lost`` or the launcher's reason, ``Launcher.lost``), ``kill`` and
``end_killed`` (the running, queued or parked turn ended killed and the queue dropped, recorded
before anything is signalled), and ``rerun`` (``retry`` a failed or killed turn, ``resume`` a
parked one). Must stay true:
- every change happens in ``Store.transaction`` and goes through ``engine.transitions``;
- a lost turn's orphaned agent (whatever still carries its verified marker) is stopped;
- what carries a session's marker is stopped by ``kill`` (and ``rm``, ``zwarm.ops.removal``)
  even when meta.json says nothing runs (``stop_strays``): a running agent that rewrote its
  record as finished, or as zwarm 3.x's, is never out of the user's reach (an agent cannot
  add the marker to a process it did not start, so nothing else is signalled);
- reconciling is cheap when nothing is wrong; when it cannot be written (a full disk), the
  session is returned as it will be recorded;
- a rerun refused by a budget (its own or an ancestor's) starts nothing.
"""

import os
from collections.abc import Mapping
from pathlib import Path

from zwarm.engine import limits, transitions, tree
from zwarm.engine.core import MESSAGE_KEEP_CHARS, PROMPT_MAX_BYTES, START_GRACE_S
from zwarm.engine.finishing import Finishing
from zwarm.env import parse_iso
from zwarm.errors import SessionStateError, WriteFailed
from zwarm.model import ACTIVE, RUNS, Reason, Session, Status, Turn
from zwarm.store import pins
from zwarm.system import procs
from zwarm.system.files import read_file


class Recovery(Finishing):
    """Reconcile, kill, retry and resume."""

    def reconcile(self, s: Session) -> Session:
        """``s`` with a dead-but-running turn fixed on disk (cheap when nothing is wrong). If
        that cannot be written (a full disk), the session as it will be recorded: ended in
        memory, its orphaned agent stopped; the next command with room records it."""
        if not self._looks_lost(s):
            return s
        fresh: Session | None = None
        try:
            with self.store.transaction(s.id, history=not s.head_only) as fresh:
                self._reconcile_locked(fresh)
        except WriteFailed:
            if fresh is None:
                raise
            fresh.refresh()
        assert fresh is not None
        return fresh

    def _looks_lost(self, s: Session) -> bool:
        t = s.current
        if t is None or t.status not in RUNS:
            return False
        if t.supervisor is None and t.handle is None:  # a launcher's handle: asked instead
            return self.env.clock() - parse_iso(t.started_at) > START_GRACE_S
        return not self.launcher(t).alive(s.id, t)

    def is_lost(self, s: Session) -> bool:
        """Whether ``s``'s running turn has lost what runs it (a turn just started, whose
        supervisor is not recorded yet, is not lost)."""
        return s.status in RUNS and self._looks_lost(s)

    def end_lost(self, s: Session) -> bool:
        """``s`` with a lost turn ended in memory only (its orphaned agent stopped), nothing
        written: for ``rm``, which deletes the session next (lock held). Whether it was lost."""
        lost = self._reconcile_locked(s)
        s.refresh()
        return lost

    def _reconcile_locked(self, s: Session) -> bool:
        """Fail a running turn whose supervisor is gone, stopping whatever of its agent still
        runs (found by its verified marker, even if it was never recorded). Lock held."""
        if not self._looks_lost(s):
            return False
        t = s.current
        assert t is not None
        orphan = procs.kill_session(t.agent, s.id)
        o = self.read_outcome(s.id, t.n)
        self._apply_outcome(s, t, o)
        runner = self.launcher(t)
        reason, what = runner.lost(s.id, t)  # e.g. slurm_timeout: its job's end
        reason = runner.recordable(reason)
        if orphan:
            what += "; its orphaned agent was terminated"
        if o.status is not None:
            what += f"; the turn log shows the agent reported {o.status.value}"
        transitions.end(s, t, Status.FAILED, self.env.now_iso(), reason, what)
        return True

    def kill(self, sid: str) -> tuple[Session, int]:
        """Kill the running turn (agent's whole tree) and drop the queue. Returns (s, dropped).
        A session whose record says nothing runs is not running (``SessionStateError``),
        but whatever still carries its marker is stopped first (``stop_strays``), and then it
        is killed, whatever the record says."""
        try:
            _, dropped, t = self.end_killed(sid)
        except SessionStateError:
            if stop_strays(self.env.environ, self.store.root, [sid]):
                return self.store.load(sid), 0
            raise
        if t is not None:
            self.launcher(t).stop(sid, t)
        return self.store.load(sid), dropped

    def end_killed(self, sid: str) -> tuple[Session, int, Turn | None]:
        """``kill``'s record: the running turn ended killed and the queue dropped, in one
        transaction, before anything is signalled. Returns (s, dropped, the turn whose
        processes its launcher must now stop, or None: a queued turn has none). ``kill
        --all`` records every session first, then stops them together (``stop_many``)."""
        with self.store.transaction(sid) as s:
            self._reconcile_locked(s)
            t = s.current
            running = t is not None and t.status in ACTIVE
            dropped = len(s.queue) if running else 0
            if t is not None and running:
                now = self.env.now_iso()
                why = _KILLED_WHILE.get(t.status, "killed by user")
                transitions.end(s, t, Status.KILLED, now, Reason.KILLED, why)
                s.queue.clear()
        if t is None or not running:
            raise SessionStateError(f"session {sid} is not running ({s.status.value})")
        # a parked turn's supervisor waits for its time: stopped too
        return s, dropped, t if t.started else None

    # ------------------------------------------------------------------ retry and resume
    def rerun(self, sid: str, kind: str, schedule: bool = True) -> tuple[Session, bool]:
        """Run the session's last turn again as a new turn: ``retry`` one that failed or was
        killed, ``resume`` (the user) or ``auto`` (the scheduler, at its time) one that is
        parked, which then ends failed with its reason. Returns (the session, whether the new
        turn is queued); a queued one is started by a scheduler pass unless ``schedule`` is
        false (the scheduler's own pass calls this)."""
        with self.store.transaction(sid) as s:
            self._reconcile_locked(s)
            t = s.current
            self._check_rerun(s, t, kind)
            assert t is not None
            if t.status is Status.PARKED:
                by = "zwarm" if kind == "auto" else "the user"
                why = f"{t.error or t.reason}; resumed by {by} as turn {s.count + 1}"
                transitions.end(s, t, Status.FAILED, self.env.now_iso(), t.reason, why)
                s.auto_resumes += 1 if kind == "auto" else 0
            queued = self._admit(s, self._begin_rerun(s, t))
        if queued and schedule:
            self.scheduler().run()
        return (self.store.load(sid) if queued and schedule else s), queued

    def _check_rerun(self, s: Session, t: Turn | None, kind: str) -> None:
        want = (Status.FAILED, Status.KILLED) if kind == "retry" else (Status.PARKED,)
        if t is None or t.status not in want:
            what = "failed or killed" if kind == "retry" else "parked"
            now = t.status.value if t is not None else "empty"
            raise SessionStateError(f"session {s.id} is not {what} ({now}): nothing to {kind}")
        if t.reason == Reason.DEPENDENCY_FAILED and not t.started:
            raise SessionStateError(
                f"session {s.id} never started: a session it runs after failed; spawn it again"
            )
        over = limits.over_budget(s) or tree.over_budget(self.store, s)
        if over is not None:
            raise SessionStateError(f"session {s.id}: {over}")

    def _begin_rerun(self, s: Session, t: Turn) -> Turn:
        """A new running turn with ``t``'s prompt: natively resumed when ``t``'s own agent
        session is known (with the prompt's message), else the same prompt file as a fresh
        run (the task, or the same summary follow-up). Lock held."""
        n = s.count + 1
        try:
            prompt, _ = read_file(self.store.turn_path(s.id, t.n, "prompt"), PROMPT_MAX_BYTES)
        except OSError as e:
            raise SessionStateError(f"turn {t.n}'s prompt cannot be read: {e.strerror}") from None
        context = t.context
        switched = s.account is None and t.account is not None  # its account hit a limit
        if switched and t.n > 1:  # a new native session elsewhere: the summarized context
            # (turn 1: its task, as it was)
            prompt = self._followup_prompt(s, t.message).encode("utf-8", "replace")
            context = "summary"
        if switched:  # its agent session was the other account's: never resumed here
            s.agent_session_id = None
        elif self.agent.native_resume and t.agent_session_id and t.started:
            if t.context == "summary" and len(t.message) < MESSAGE_KEEP_CHARS:
                prompt = t.message.encode("utf-8", "surrogateescape")
                context = "native"
            elif t.context != "summary":
                context = "native"
        self.store.write_turn_prompt(s.id, n, prompt)
        new = Turn(n, Status.RUNNING, t.message, context, self.env.now_iso(), timeout=t.timeout)
        new.retry_of = t.retry_of or t.n
        new.switched_from = t.account if switched else None
        new.launcher = self._pinned_launcher(s)
        transitions.begin(s, new)
        return new


_KILLED_WHILE = {
    Status.QUEUED: "killed by user while queued (never started)",
    Status.PARKED: "killed by user while parked (waiting for a usage or rate limit to reset)",
}


def stop_strays(environ: Mapping[str, str], state_dir: Path, sids: list[str]) -> list[str]:
    """Stop every process of this user that carries the marker of one of ``sids`` (and its
    tree), whatever their records say: an agent that rewrote its meta.json as finished (or
    as zwarm 3.x's) still carries its session's marker, which it cannot add to a process it
    did not start. Only sessions this zwarm started in ``state_dir`` (their launch pins say
    so): a record copied or planted here, or zwarm 3.x's, names an id that may be running
    elsewhere, never stopped on its word. One scan of /proc for all; the ids that had any."""
    live = procs.marked_ids() if sids else set()
    root = Path(os.path.realpath(state_dir))
    ours = [sid for sid in sids if sid in live and pins.read(environ, sid, root) is not None]
    return procs.kill_sessions([(None, sid) for sid in ours]) if ours else []
