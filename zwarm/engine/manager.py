"""``BaseSessionManager``: the session life cycle, the same for every agent CLI.

Owns starting, continuing, recording, reconciling and killing turns. Everything that differs
between agents (argv, permissions, event parsing, how usage/cost accumulate over a native
resume, prices) is the bound ``Agent``'s (``zwarm.agents.base``); subclasses only bind one.
How a turn runs is the ``Launcher``'s (``zwarm.runtime``): this module never starts, inspects
or signals a process itself. Must stay true:
- every change to meta.json happens in ``Store.transaction`` (one locked load-modify-save), and
  every status change goes through ``engine.transitions``;
- a turn is recorded running and its launcher started in the same transaction, so ``kill``
  either sees what runs it or prevents it from starting;
- what decides what runs (agent, working directory, sandbox bypass) comes from the session's
  launch pin and the trusted config, never from meta.json (``agent_launch``);
- a turn marked ``running`` whose launcher is not verifiably alive is reconciled to ``failed``
  (``supervisor_lost``) on the next read, and whatever still carries its marker is stopped;
- per-turn usage and cost are deltas; session totals are sums of turn figures.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from zwarm.agents.base import Agent, AgentOptions
from zwarm.config import Config
from zwarm.engine import transitions
from zwarm.engine.context import Digest, build_followup, digest_steps, dump_digest, load_digest
from zwarm.env import Env, parse_iso
from zwarm.errors import InvalidInput, SessionStateError, StoreError
from zwarm.model import QueuedMessage, Reason, Session, Status, Turn, TurnOutcome, Usage
from zwarm.model.steps import Step
from zwarm.runtime import get_launcher, procs
from zwarm.runtime.launcher import Launcher
from zwarm.store import Store, pins, write_private
from zwarm.store.files import open_read

TASK_PREVIEW_CHARS = 4000
MESSAGE_KEEP_CHARS = 16000
MODEL_CHARS = 200
START_GRACE_S = 15.0


class BaseSessionManager(abc.ABC):
    """Subclasses are bound to one ``Agent`` (``agent``, ``name``): ``engine.manager_class``."""

    agent: ClassVar[Agent]
    name: ClassVar[str]

    def __init__(self, store: Store, config: Config, env: Env) -> None:
        self.store = store
        self.config = config
        self.env = env
        self._launchers: dict[str, Launcher] = {}

    # ------------------------------------------------------------------ the bound agent
    @property
    def usage_cumulative_on_resume(self) -> bool:
        return self.agent.usage_cumulative_on_resume

    @property
    def cost_cumulative_on_resume(self) -> bool:
        return self.agent.cost_cumulative_on_resume

    @property
    def reports_cost(self) -> bool:
        return self.agent.reports_cost

    def build_argv(self, opts: AgentOptions, resume_id: str | None = None) -> list[str]:
        """The agent's argv for one turn (the prompt goes on stdin, never here); a resume id
        that is not safe in argv raises ``UnsafeResumeId``."""
        return self.agent.argv(opts, resume_id)

    def iter_steps(self, lines: Any) -> Iterator[Step]:
        """Normalized steps from one turn's stdout (a binary file or lines), bounded memory."""
        return self.agent.steps(lines)

    def scan_outcome(self, lines: Any) -> TurnOutcome:
        """The turn's outcome (status, final message, usage as reported) from its stdout."""
        return self.agent.outcome(lines)

    def options(self, session: Session) -> AgentOptions:
        return self.agent.options(
            self.config.table(self.name),
            cwd=session.cwd,
            model=session.requested_model,
            dangerous=session.bypass,
        )

    def permissions(self, bypass: bool) -> tuple[str, bool]:
        """(the permission flags a turn runs with, whether they disable the agent's checks)."""
        return self.agent.permissions(self.config.table(self.name), bypass)

    def agent_env(self) -> dict[str, str]:
        env = dict(self.env.environ)
        env.update(self.config.table(self.name)["env"])
        return env

    def estimate_cost(self, usage: Usage, model: str | None) -> float | None:
        return self.agent.estimate_cost(usage, model, self.config.table(self.name))

    def cost_source(self, model: str | None) -> str:
        return self.agent.cost_source(model, self.config.table(self.name))

    # ------------------------------------------------------------------ starting turns
    def spawn(
        self,
        task: str,
        *,
        cwd: Path,
        model: str | None = None,
        name: str | None = None,
        timeout: float | None = None,
        context: str = "summary",
        source: str = "cli",
        dangerous: bool = False,
    ) -> Session:
        """Create a session and start its first turn (the launcher runs it detached)."""
        now = self.env.now_iso()
        sid = self.store.new_id()
        s = self._new_session(sid, task, cwd, now, model, name, context, source, dangerous)
        transitions.begin(s, _first_turn(task, now, timeout))
        self.store.ensure()
        root = os.path.realpath(self.store.root)
        pins.write(self.env.environ, pins.Pin(sid, root, self.name, str(cwd), dangerous))
        self.store.create(s, task.encode("utf-8", "surrogateescape"))
        if name:  # claimed after create: a claim whose session dir is missing counts as stale
            try:
                self.store.claim_name(name, sid)
            except BaseException:
                self.store.remove(sid, None)
                raise
        try:
            with self.store.transaction(sid) as s:
                self._start(s, s.turns[0])
        except BaseException:
            self.store.release_name(name, sid)
            raise
        return s

    def _new_session(
        self,
        sid: str,
        task: str,
        cwd: Path,
        now: str,
        model: str | None,
        name: str | None,
        context: str,
        source: str,
        dangerous: bool,
    ) -> Session:
        s = Session(
            id=sid,
            adapter=self.name,
            task=task[:TASK_PREVIEW_CHARS],
            task_truncated=len(task) > TASK_PREVIEW_CHARS,
            cwd=str(cwd),
            created_at=now,
            updated_at=now,
            name=name,
            model=self._asked_model(cwd, model, dangerous),
            requested_model=model,
            context_mode="native" if context == "native" else "summary",
            source=source[:200],
            bypass=dangerous,
        )
        s.cost_source = self.cost_source(s.model)  # type: ignore[assignment]
        s.permissions, unsafe = self.permissions(dangerous)
        s.dangerous = dangerous or unsafe
        return s

    def _asked_model(self, cwd: Path, model: str | None, dangerous: bool) -> str | None:
        """The model the session's turns ask for (``-m``, or the agent config's own way of
        choosing one): recorded until the agent reports the model it used."""
        table = self.config.table(self.name)
        opts = self.agent.options(table, cwd=str(cwd), model=model, dangerous=dangerous)
        asked = self.agent.asked_model(opts)
        return asked[:MODEL_CHARS] if asked else None

    def inject(
        self, sid: str, message: str, *, context: str | None = None, timeout: float | None = None
    ) -> tuple[Session, str]:
        """Start the next turn, or queue ``message`` if a turn is running. Returns the state
        as it was under the lock (once released, the turn may end and the next one start);
        messages left queued by a lost supervisor run first, and then ours is queued."""
        with self.store.transaction(sid) as s:
            self._reconcile_locked(s)
            now = self.env.now_iso()
            native = (context or s.context_mode) == "native"
            s.queue.append(QueuedMessage(message, "native" if native else "summary", now, timeout))
            s.updated_at = now
            if s.status is not Status.RUNNING:
                self._start(s, self._begin_next(s))
        return s, "queued" if s.queue else "started"

    def _begin_next(self, s: Session) -> Turn:
        """Pop the first queued message into a new running turn (prompt written). Lock held."""
        q = s.queue.pop(0)
        n = len(s.turns) + 1
        mode = q.context
        if mode == "native" and not s.agent_session_id:
            mode = "summary"  # the agent never reported a session id to resume
        prompt = q.message if mode == "native" else self._followup_prompt(s, q.message)
        write_private(self.store.turn_path(s.id, n, "prompt"), prompt.encode("utf-8", "replace"))
        now = self.env.now_iso()
        # the session's limit (its first turn's: spawn's --timeout or [defaults] timeout)
        # applies to every turn unless the follow-up gave its own
        first = s.turns[0].timeout if s.turns else None
        limit = q.timeout if q.timeout is not None else first
        t = Turn(n, Status.RUNNING, q.message[:MESSAGE_KEEP_CHARS], mode, now, timeout=limit)
        transitions.begin(s, t)
        return t

    def _start(self, s: Session, t: Turn) -> None:
        """Have the launcher start running turn ``t`` (inside the transaction that made it)."""
        try:
            self.launcher(t).start(s.id, t)
        except OSError as e:
            why = f"could not start the turn's supervisor: {e.strerror or e}"
            transitions.end(s, t, Status.FAILED, self.env.now_iso(), Reason.START_FAILED, why)

    def launcher(self, t: Turn) -> Launcher:
        if t.launcher not in self._launchers:
            self._launchers[t.launcher] = get_launcher(t.launcher, self.store, self.env)
        return self._launchers[t.launcher]

    # ------------------------------------------------------------------ follow-up context
    def _followup_prompt(self, s: Session, message: str) -> str:
        digests = [self.digest(s, t) for t in s.turns]
        task = self._full_task(s)
        table = self.config.table("summary")
        return build_followup(task, digests, message, table["budget_chars"], table["full_turns"])

    def _full_task(self, s: Session) -> str:
        try:
            return self.store.turn_path(s.id, 1, "prompt").read_bytes().decode("utf-8", "replace")
        except OSError:
            return s.task

    def digest(self, s: Session, t: Turn) -> Digest:
        """A turn's digest, from the cache when the log is unchanged since it was made."""
        log = self.store.turn_path(s.id, t.n)
        cache = self.store.turn_path(s.id, t.n, "digest.json")
        size = log.stat().st_size if log.exists() else -1
        try:
            d = load_digest(cache.read_bytes())
            if d.status == t.status.value and d.log_size == size:
                return d
        except (OSError, ValueError, KeyError, TypeError):
            pass
        d = digest_steps(
            t.n, t.status.value, t.message, t.final_message, t.error, self.turn_steps(s.id, t.n)
        )
        d.log_size = size
        if t.status is not Status.RUNNING:
            try:
                write_private(cache, dump_digest(d))
            except (OSError, StoreError):
                pass  # a cache is optional
        return d

    # ------------------------------------------------------------------ reading
    def turn_steps(self, sid: str, n: int) -> Iterator[Step]:
        """Turn ``n``'s steps (none if its log is missing). A log that is not a regular file
        (a planted link or FIFO) is one error step: never followed, never opened blocking."""
        path = self.store.turn_path(sid, n)
        try:
            f = os.fdopen(open_read(path), "rb")
        except FileNotFoundError:
            return iter(())
        except OSError as e:
            why = f"turn {n}'s log cannot be read: {e.strerror or e}"
            return iter([{"kind": "error", "message": why, "fatal": False}])
        return _closing_iter(f, self.iter_steps(f))

    def read_outcome(self, sid: str, n: int) -> TurnOutcome:
        """The outcome of turn ``n`` from its log: one pass, any JSON layout, bounded memory.
        A turn that ended without a result (killed, timed out) keeps the usage its agent had
        reported so far (a second pass, only then)."""
        path = self.store.turn_path(sid, n)
        try:
            with open(path, "rb") as f:
                o = self.scan_outcome(f)
            if o.status is None and o.usage is None:
                with open(path, "rb") as f:
                    o.usage = self.agent.partial_usage(f)
            return o
        except FileNotFoundError:
            return TurnOutcome()

    # ------------------------------------------------------------------ supervisor side
    def agent_launch(self, s: Session, t: Turn) -> AgentLaunch:
        """What to run for turn ``t`` (session lock held). Security-relevant facts (agent, cwd,
        sandbox bypass) come from the session's pin and the trusted config, never from
        ``meta.json``, which the agent may have rewritten. ``StartRefused`` if they disagree."""
        pin = pins.read(self.env.environ, s.id, Path(os.path.realpath(self.store.root)))
        if pin is None:
            raise StartRefused(
                "no launch record for this session (it was not started by you with this "
                "zwarm and state dir): refusing to run it"
            )
        if pin.adapter != s.adapter or pin.cwd != s.cwd:
            raise StartRefused("meta.json disagrees with the session's launch record: refused")
        resume = s.agent_session_id if t.context == "native" else None
        opts = dataclasses.replace(self.options(s), cwd=pin.cwd, dangerous=pin.bypass)
        env = self.agent_env()
        env[procs.MARKER] = s.id
        env.pop(procs.SUPERVISOR_MARKER, None)
        return AgentLaunch(self.build_argv(opts, resume), pin.cwd, env)

    def fail_start(self, s: Session, t: Turn, why: str) -> None:
        """Record that turn ``t``'s agent could not be started (lock held)."""
        transitions.end(s, t, Status.FAILED, self.env.now_iso(), Reason.START_FAILED, why)

    def finish_turn(self, sid: str, n: int, returncode: int, timed_out: bool) -> Turn | None:
        """Record turn ``n``'s end; begin the next queued turn and return it, or None."""
        outcome = self.read_outcome(sid, n)
        stderr_tail = _tail(self.store, sid, n)
        with self.store.transaction(sid) as s:
            t = s.turns[n - 1]
            self._record(s, t, outcome, returncode, timed_out, stderr_tail)
            if t.status is Status.KILLED or not s.queue:
                return None
            return self._begin_next(s)

    def _record(
        self,
        s: Session,
        t: Turn,
        o: TurnOutcome,
        returncode: int,
        timed_out: bool,
        stderr_tail: str,
    ) -> None:
        t.exit_code = returncode if returncode >= 0 else None
        t.signal = -returncode if 0 < -returncode <= 128 else None
        self._apply_outcome(s, t, o)
        if t.status is not Status.RUNNING:
            return  # killed meanwhile: keep that, with the facts filled in
        now = self.env.now_iso()
        if timed_out:
            why = f"timeout: killed after {t.timeout or 0:g} s"
            transitions.end(s, t, Status.FAILED, now, Reason.TIMEOUT, why)
        elif o.status is Status.COMPLETED:
            transitions.end(s, t, Status.COMPLETED, now)
        else:
            why = _exit_reason(returncode, stderr_tail)
            if o.status is Status.FAILED:
                why = o.error or why
            else:
                why = f"{why}; no turn result in its output" + (f" ({o.error})" if o.error else "")
            transitions.end(s, t, Status.FAILED, now, Reason.AGENT_ERROR, why)

    def _apply_outcome(self, s: Session, t: Turn, o: TurnOutcome) -> None:
        if o.agent_session_id:
            t.agent_session_id = o.agent_session_id
            s.agent_session_id = o.agent_session_id
        if o.model:
            s.model = o.model
        if o.final_message is not None:
            t.final_message = o.final_message[:MESSAGE_KEEP_CHARS]
        prev = self._resumed_from(s, t)
        if o.usage is not None:
            t.reported_usage = o.usage
            base = prev.reported_usage if prev and self.usage_cumulative_on_resume else None
            t.usage = o.usage.minus(base) if base else o.usage
        if self.reports_cost:
            t.reported_cost_usd = o.cost_usd
            base_cost = prev.reported_cost_usd if prev and self.cost_cumulative_on_resume else None
            if o.cost_usd is not None:
                t.cost_usd = round(max(0.0, o.cost_usd - (base_cost or 0.0)), 8)
        else:
            t.cost_usd = self.estimate_cost(t.usage, s.model) if o.usage else None

    @staticmethod
    def _resumed_from(s: Session, t: Turn) -> Turn | None:
        """The latest earlier turn of the same agent session, when ``t`` resumed it natively."""
        if t.context != "native" or not t.agent_session_id:
            return None
        for prev in reversed(s.turns[: t.n - 1]):
            if prev.agent_session_id == t.agent_session_id:
                return prev
        return None

    # ------------------------------------------------------------------ reconcile and kill
    def reconcile(self, s: Session) -> Session:
        """``s`` with a dead-but-running turn fixed on disk (cheap when nothing is wrong)."""
        if not self._looks_lost(s):
            return s
        with self.store.transaction(s.id) as fresh:
            self._reconcile_locked(fresh)
        return fresh

    def _looks_lost(self, s: Session) -> bool:
        t = s.current
        if t is None or t.status is not Status.RUNNING:
            return False
        if t.supervisor is None:
            return self.env.clock() - parse_iso(t.started_at) > START_GRACE_S
        return not self.launcher(t).alive(s.id, t)

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
        what = "supervisor never started" if t.supervisor is None else "supervisor lost"
        if orphan:
            what += "; its orphaned agent was terminated"
        if o.status is not None:
            what += f"; the turn log shows the agent reported {o.status.value}"
        transitions.end(s, t, Status.FAILED, self.env.now_iso(), Reason.SUPERVISOR_LOST, what)
        return True

    def kill(self, sid: str) -> tuple[Session, int]:
        """Kill the running turn (agent's whole tree) and drop the queue. Returns (s, dropped)."""
        with self.store.transaction(sid) as s:
            self._reconcile_locked(s)
            t = s.current
            running = t is not None and t.status is Status.RUNNING
            dropped = len(s.queue) if running else 0
            if t is not None and running:
                now = self.env.now_iso()
                transitions.end(s, t, Status.KILLED, now, Reason.KILLED, "killed by user")
                s.queue.clear()
        if t is None or not running:
            raise SessionStateError(f"session {sid} is not running ({s.status.value})")
        self.launcher(t).stop(sid, t)
        return self.store.load(sid), dropped


class StartRefused(Exception):
    """A turn's agent must not be started (its session's records disagree); says why."""


@dataclasses.dataclass(frozen=True)
class AgentLaunch:
    """How to run one turn's agent: its argv, working directory and environment."""

    argv: list[str]
    cwd: str
    env: dict[str, str]


# ---------------------------------------------------------------------- helpers
def _first_turn(task: str, now: str, timeout: float | None) -> Turn:
    return Turn(1, Status.RUNNING, task[:MESSAGE_KEEP_CHARS], "task", now, timeout=timeout)


def _exit_reason(returncode: int, stderr_tail: str) -> str:
    if returncode < 0:
        why = f"agent killed by signal {-returncode}"
    else:
        why = f"agent exited with code {returncode}"
    return f"{why}: {stderr_tail}" if stderr_tail else why


def _tail(store: Store, sid: str, n: int, limit: int = 400) -> str:
    """The last non-blank line of turn ``n``'s stderr (at most ``limit`` characters)."""
    try:
        fd = open_read(store.turn_path(sid, n, "stderr"))
    except OSError:
        return ""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - 4096), os.SEEK_SET)
        text = os.read(fd, 4096).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""


def _closing_iter(f: Any, it: Iterator[Step]) -> Iterator[Step]:
    try:
        yield from it
    finally:
        f.close()


def check_cwd(path: Path) -> Path:
    if not path.exists():
        raise InvalidInput(f"working directory {str(path)!r} does not exist")
    if not path.is_dir():
        raise InvalidInput(f"working directory {str(path)!r} is not a directory")
    resolved = path.resolve()
    try:
        str(resolved).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            f"working directory {str(resolved)!r} is not valid UTF-8, which agents cannot use"
        ) from None
    return resolved
