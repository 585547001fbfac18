"""``BaseSessionManager``: the session life cycle, the same for every agent CLI.

Owns starting, continuing, recording, reconciling and killing turns. Subclasses own only what
differs between agents: argv building, event parsing, and how usage/cost accumulate over a
native resume (class flags). Must stay true:
- every change to meta.json happens under the session lock, in one load-modify-save;
- a turn is started (agent process created) under the lock, so ``kill`` either sees the agent
  recorded or prevents it from starting;
- a turn marked ``running`` whose supervisor is not alive (pid + create time) is reconciled to
  ``failed`` on the next read, and an orphaned agent is killed (identity-checked);
- per-turn usage and cost are deltas; session totals are sums of turn figures.
"""

from __future__ import annotations

import abc
import json
import os
import subprocess
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from zwarm import procs
from zwarm.config import Config
from zwarm.context import Digest, build_followup, digest_steps, dump_digest, load_digest
from zwarm.env import Env, parse_iso
from zwarm.errors import InvalidInput, SessionStateError, StoreError
from zwarm.models import ProcRef, QueuedMessage, Session, Status, Turn, TurnOutcome, Usage
from zwarm.steps import Step
from zwarm.store import Store, write_private

TASK_PREVIEW_CHARS = 4000
MESSAGE_KEEP_CHARS = 16000
START_GRACE_S = 15.0


@dataclass(frozen=True)
class AgentOptions:
    """Everything an adapter's argv builder needs; built from config plus the session."""

    command: tuple[str, ...]
    cwd: str
    model: str | None = None
    extra_args: tuple[str, ...] = ()
    config: tuple[tuple[str, Any], ...] = ()  # codex -c overrides
    sandbox: str = "workspace-write"
    permission_mode: str = "acceptEdits"
    dangerous: bool = False


class BaseSessionManager(abc.ABC):
    name: ClassVar[str]
    usage_cumulative_on_resume: ClassVar[bool] = False
    cost_cumulative_on_resume: ClassVar[bool] = False
    reports_cost: ClassVar[bool] = False

    def __init__(self, store: Store, config: Config, env: Env) -> None:
        self.store = store
        self.config = config
        self.env = env

    # ------------------------------------------------------------------ adapter-specific
    @staticmethod
    @abc.abstractmethod
    def build_argv(opts: AgentOptions, resume_id: str | None = None) -> list[str]:
        """The agent's argv for one turn (the prompt goes on stdin, never here)."""

    @abc.abstractmethod
    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        """Normalized steps from one turn's raw stdout lines."""

    @abc.abstractmethod
    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        """The turn's outcome (status, final message, usage as reported) from its stdout."""

    def options(self, session: Session) -> AgentOptions:
        t = self.config.table(self.name)
        return AgentOptions(
            command=tuple(self.config.command(self.name)),
            cwd=session.cwd,
            model=session.requested_model,
            extra_args=tuple(t["extra_args"]),
            config=tuple(t.get("config", {}).items()),
            sandbox=t.get("sandbox", "workspace-write"),
            permission_mode=t.get("permission_mode", "acceptEdits"),
            dangerous=session.bypass,
        )

    @abc.abstractmethod
    def permissions(self, bypass: bool) -> tuple[str, bool]:
        """(the permission flags a turn runs with, whether they disable the agent's checks)."""

    def agent_env(self) -> dict[str, str]:
        env = dict(self.env.environ)
        env.update(self.config.table(self.name)["env"])
        return env

    def estimate_cost(self, usage: Usage, model: str | None) -> float | None:
        price = self.config.price(self.name, model)
        if price is None:
            return None
        fresh = usage.input_tokens - usage.cached_input_tokens
        cost = (
            fresh * price["input"]
            + usage.cached_input_tokens * price["cached_input"]
            + usage.output_tokens * price["output"]
        ) / 1_000_000
        return round(cost, 8)

    def cost_source(self, model: str | None) -> str:
        if self.reports_cost:
            return "reported"
        return "estimated" if self.config.price(self.name, model) else "unknown"

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
        """Create a session and start its first turn under a detached supervisor."""
        now = self.env.now_iso()
        sid = self.store.new_id()
        session = Session(
            id=sid,
            adapter=self.name,
            task=task[:TASK_PREVIEW_CHARS],
            task_truncated=len(task) > TASK_PREVIEW_CHARS,
            cwd=str(cwd),
            created_at=now,
            updated_at=now,
            name=name,
            model=model,
            requested_model=model,
            context_mode=context,
            source=source,
            bypass=dangerous,
            cost_source=self.cost_source(model),
            turns=[_first_turn(task, now, timeout)],
        )
        session.permissions, unsafe = self.permissions(dangerous)
        session.dangerous = dangerous or unsafe
        self.store.ensure()
        self.store.create(session, task.encode("utf-8", "surrogateescape"))
        if name:  # claimed after create: a claim whose session dir is missing counts as stale
            try:
                self.store.claim_name(name, sid)
            except BaseException:
                self.store.remove(sid, None)
                raise
        try:
            with self.store.lock(sid):
                self._launch(sid, 1)
        except BaseException:
            self.store.release_name(name, sid)
            raise
        return self.store.load(sid)

    def inject(
        self, sid: str, message: str, *, context: str | None = None, timeout: float | None = None
    ) -> tuple[Session, str]:
        """Start the next turn, or queue ``message`` if a turn is running. Returns the state."""
        with self.store.lock(sid):
            s = self.store.load(sid)
            self._reconcile_locked(s)
            mode = context or s.context_mode
            s.queue.append(QueuedMessage(message, mode, self.env.now_iso(), timeout))
            if s.status is Status.RUNNING:
                s.updated_at = self.env.now_iso()
                self.store.save(s)
                return s, "queued"
            n = self._begin_next(s, supervisor=None)
            self.store.save(s)
            self._launch(sid, n)
            # read under the lock: once released, turn n may end and the next one start.
            # Messages left queued by a lost supervisor run first: then ours is queued.
            s = self.store.load(sid)
        return s, "queued" if s.queue else "started"

    def _begin_next(self, s: Session, supervisor: ProcRef | None) -> int:
        """Pop the first queued message into a new running turn (prompt written). Lock held."""
        q = s.queue.pop(0)
        n = len(s.turns) + 1
        mode = q.context
        if mode == "native" and not s.agent_session_id:
            mode = "summary"  # the agent never reported a session id to resume
        prompt = q.message if mode == "native" else self._followup_prompt(s, q.message)
        write_private(self.store.turn_path(s.id, n, "prompt"), prompt.encode("utf-8", "replace"))
        now = self.env.now_iso()
        t = Turn(n, Status.RUNNING, q.message[:MESSAGE_KEEP_CHARS], mode, now, timeout=q.timeout)
        t.supervisor = supervisor
        s.turns.append(t)
        s.updated_at = now
        return n

    def _launch(self, sid: str, n: int) -> None:
        """Start the detached supervisor for turn ``n`` and record it. Lock held."""
        sdir = self.store.session_dir(sid)
        log = os.open(sdir / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(
                [self.env.python, "-m", "zwarm.supervisor", str(self.store.root), sid],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=sdir,
                env=dict(self.env.environ),
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(log)
        _reap_later(proc)
        ref = procs.identify(proc.pid) or ProcRef(proc.pid, 0.0)
        s = self.store.load(sid)
        s.turns[n - 1].supervisor = ref
        self.store.save(s)

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
        path = self.store.turn_path(sid, n)
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed when the iterator ends
        except FileNotFoundError:
            return iter(())
        return _closing_iter(f, self.iter_steps(f))

    def read_outcome(self, sid: str, n: int) -> TurnOutcome:
        """The outcome via the adapter's fast scan; if that finds no terminal event, once more
        over lines re-encoded compactly (the fast scan matches the CLIs' compact layout)."""
        path = self.store.turn_path(sid, n)
        try:
            with open(path, "rb") as f:
                outcome = self.scan_outcome(f)
            if outcome.status is None:
                with open(path, "rb") as f:
                    slow = self.scan_outcome(_compact_lines(f))
                if slow.status is not None:
                    return slow
            return outcome
        except FileNotFoundError:
            return TurnOutcome()

    # ------------------------------------------------------------------ supervisor side
    def start_agent(self, sid: str, n: int, me: ProcRef) -> subprocess.Popen[bytes] | None:
        """Start turn ``n``'s agent (lock held while starting); None if the turn was killed."""
        with self.store.lock(sid):
            s = self.store.load(sid)
            t = s.turns[n - 1]
            if t.status is not Status.RUNNING:
                return None
            t.supervisor = me
            resume = s.agent_session_id if t.context == "native" else None
            argv = self.build_argv(self.options(s), resume)
            try:
                proc = self._popen_agent(sid, n, argv, s.cwd)
            except OSError as e:
                t.status, t.error, t.ended_at = Status.FAILED, _start_error(argv, e), _now(self)
                self.store.save(s)
                return None
            t.agent = procs.identify(proc.pid) or ProcRef(proc.pid, 0.0)
            self.store.save(s)
            return proc

    def _popen_agent(self, sid: str, n: int, argv: list[str], cwd: str) -> subprocess.Popen[bytes]:
        with (
            open(self.store.turn_path(sid, n, "prompt"), "rb") as stdin,
            _private_append(self.store.turn_path(sid, n)) as out,
            _private_append(self.store.turn_path(sid, n, "stderr")) as err,
        ):
            return subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=out,
                stderr=err,
                cwd=cwd,
                env=self.agent_env(),
                start_new_session=True,
                close_fds=True,
            )

    def finish_turn(
        self, sid: str, n: int, returncode: int, timed_out: bool, me: ProcRef
    ) -> int | None:
        """Record turn ``n``'s end; start the next queued turn. Returns its number, or None."""
        outcome = self.read_outcome(sid, n)
        stderr_tail = _tail(self.store.turn_path(sid, n, "stderr"))
        with self.store.lock(sid):
            s = self.store.load(sid)
            t = s.turns[n - 1]
            self._record(s, t, outcome, returncode, timed_out, stderr_tail)
            if t.status is Status.KILLED or not s.queue:
                self.store.save(s)
                return None
            nxt = self._begin_next(s, supervisor=me)
            self.store.save(s)
            return nxt

    def _record(
        self,
        s: Session,
        t: Turn,
        o: TurnOutcome,
        returncode: int,
        timed_out: bool,
        stderr_tail: str,
    ) -> None:
        t.ended_at = self.env.now_iso()
        s.updated_at = t.ended_at
        t.exit_code = returncode if returncode >= 0 else None
        t.signal = -returncode if returncode < 0 else None
        self._apply_outcome(s, t, o)
        if t.status is not Status.RUNNING:
            return  # killed meanwhile: keep that, with the facts filled in
        if timed_out:
            t.status, t.error = Status.FAILED, f"timeout: killed after {t.timeout:g} s"
        elif o.status is Status.COMPLETED:
            t.status = Status.COMPLETED
        elif o.status is Status.FAILED:
            t.status = Status.FAILED
            t.error = o.error or _exit_reason(returncode, stderr_tail)
        else:
            t.status = Status.FAILED
            why = _exit_reason(returncode, stderr_tail)
            t.error = f"{why}; no turn result in its output" + (f" ({o.error})" if o.error else "")

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
        with self.store.lock(s.id):
            fresh = self.store.load(s.id)
            if self._reconcile_locked(fresh):
                self.store.save(fresh)
            return fresh

    def _looks_lost(self, s: Session) -> bool:
        t = s.current
        if t is None or t.status is not Status.RUNNING:
            return False
        if t.supervisor is None:
            return self.env.clock() - parse_iso(t.started_at) > START_GRACE_S
        return not procs.is_alive(t.supervisor)

    def _reconcile_locked(self, s: Session) -> bool:
        if not self._looks_lost(s):
            return False
        t = s.current
        assert t is not None
        orphan = procs.is_alive(t.agent)
        if orphan and t.agent is not None:
            procs.kill_tree(t.agent)
        o = self.read_outcome(s.id, t.n)
        self._apply_outcome(s, t, o)
        t.status = Status.FAILED
        t.ended_at = self.env.now_iso()
        what = "supervisor never started" if t.supervisor is None else "supervisor lost"
        if orphan:
            what += "; its orphaned agent was terminated"
        if o.status is not None:
            what += f"; the turn log shows the agent reported {o.status.value}"
        t.error = what
        s.updated_at = t.ended_at
        return True

    def kill(self, sid: str) -> tuple[Session, int]:
        """Kill the running turn (agent's whole tree) and drop the queue. Returns (s, dropped)."""
        with self.store.lock(sid):
            s = self.store.load(sid)
            self._reconcile_locked(s)
            t = s.current
            if t is None or t.status is not Status.RUNNING:
                self.store.save(s)
                raise SessionStateError(f"session {sid} is not running ({s.status.value})")
            t.status, t.error, t.ended_at = Status.KILLED, "killed by user", self.env.now_iso()
            dropped = len(s.queue)
            s.queue.clear()
            s.updated_at = t.ended_at
            self.store.save(s)
        if t.agent is not None:
            procs.kill_tree(t.agent)
        if t.supervisor is not None and not procs.wait_gone(t.supervisor, 10.0):
            procs.terminate(t.supervisor)
        return self.store.load(sid), dropped


# ---------------------------------------------------------------------- helpers
def _first_turn(task: str, now: str, timeout: float | None) -> Turn:
    return Turn(1, Status.RUNNING, task[:MESSAGE_KEEP_CHARS], "task", now, timeout=timeout)


def _now(m: BaseSessionManager) -> str:
    return m.env.now_iso()


def _start_error(argv: list[str], e: OSError) -> str:
    return f"could not start agent {argv[0]!r}: {e.strerror or e}"


def _exit_reason(returncode: int, stderr_tail: str) -> str:
    if returncode < 0:
        why = f"agent killed by signal {-returncode}"
    else:
        why = f"agent exited with code {returncode}"
    return f"{why}: {stderr_tail}" if stderr_tail else why


def _tail(path: Path, limit: int = 400) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4096))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""


class _private_append:
    """Open a file for appending with mode 0600 (context manager yielding the file object)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _compact_lines(lines: Iterable[bytes]) -> Iterator[bytes]:
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        yield json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _closing_iter(f: Any, it: Iterator[Step]) -> Iterator[Step]:
    try:
        yield from it
    finally:
        f.close()


_reaping: set[subprocess.Popen[bytes]] = set()


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    """Reap a detached supervisor when it exits, so a long-lived caller keeps no zombies."""
    _reaping.add(proc)

    def wait() -> None:
        proc.wait()
        _reaping.discard(proc)

    threading.Thread(target=wait, name=f"zwarm-reap-{proc.pid}", daemon=True).start()


def check_cwd(path: Path) -> Path:
    if not path.exists():
        raise InvalidInput(f"working directory {str(path)!r} does not exist")
    if not path.is_dir():
        raise InvalidInput(f"working directory {str(path)!r} is not a directory")
    return path.resolve()
