"""``ManagerCore``: a session manager's bound agent, and beginning a turn.

Owns what every part of the session life cycle needs (``BaseSessionManager``, in
``engine.manager``, is built on it): the agent the manager is bound to (argv, options,
permissions, environment, prices), the launcher a turn runs on and the scheduler, beginning and
starting a turn (``_begin_next``, ``_start``, ``_admit``), the summary follow-up prompt and its
digests, reading a turn's log (``turn_steps``, ``read_outcome``; through the agent's
``reader`` hook) and where a turn's files are for the agent's hooks (``turn_files``); and
which directories an agent may run in (``check_cwd``, ``in_state_dir``). Must stay true:
- a turn is recorded running and its launcher started in the same transaction (``_start`` is
  only called with the session's lock held), so ``kill`` either sees what runs it or prevents
  it from starting; a new turn runs on the launcher its session's launch pin names, never
  meta.json's (``_pinned_launcher``);
- a turn that would make a session run while caps are configured (or that waits for other
  sessions) is made ``queued`` and started only by the scheduler (``_admit``);
- every agent's environment is built from the trusted config and never carries the
  orchestrator's own key (``agent_env``);
- no agent runs inside the state dir (``check_cwd``, ``in_state_dir``);
- a turn's file (its log, prompt or digest cache) that is not a regular file is never
  followed nor opened blocking (``turn_steps``, ``read_outcome``, ``digest``, ``_full_task``):
  an agent that made one a named pipe gets no outcome or summary from it, never a wait.
"""

import abc
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from zwarm.agents.base import Agent, AgentOptions, TurnFiles
from zwarm.config import Config
from zwarm.engine import transitions, tree
from zwarm.engine.context import Digest, build_followup, digest_steps, dump_digest, load_digest
from zwarm.env import Env
from zwarm.env.children import for_children
from zwarm.errors import InvalidInput, StoreError, ZwarmError
from zwarm.launchers import get_launcher
from zwarm.launchers.base import Launcher
from zwarm.model import Reason, Session, Status, Turn, TurnOutcome, Usage
from zwarm.model.steps import Step
from zwarm.store import Store, pins
from zwarm.system.files import NotRegularFile, open_read, read_file, write_private

if TYPE_CHECKING:
    from zwarm.engine import scheduler as scheduler_mod

TASK_PREVIEW_CHARS = 4000
MESSAGE_KEEP_CHARS = 16000
MODEL_CHARS = 200
START_GRACE_S = 15.0
PROMPT_MAX_BYTES = 64 * 1024 * 1024  # a turn's prompt file read back to run it again
DIGEST_MAX_BYTES = 16 * 1024 * 1024  # a turn's cached digest (larger: made again)


class ManagerCore(abc.ABC):
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
        env = for_children(self.env.environ)  # never the orchestrator's own key
        configured = self.config.table(self.name)["env"]
        env.update(configured)
        if "PATH" not in configured:  # a child's agent: where its parent's agent was found
            env["PATH"] = tree.agent_path(env)
        return env

    def estimate_cost(self, usage: Usage, model: str | None) -> float | None:
        return self.agent.estimate_cost(usage, model, self.config.table(self.name))

    def cost_source(self, model: str | None) -> str:
        return self.agent.cost_source(model, self.config.table(self.name))

    # ------------------------------------------------------------------ starting turns
    def _begin_next(self, s: Session) -> Turn:
        """Pop the first queued message into a new running turn (prompt written). Lock held."""
        q = s.queue.pop(0)
        n = s.count + 1
        mode = q.context
        if mode == "native" and not s.agent_session_id:
            mode = "summary"  # the agent never reported a session id to resume
        prompt = q.message if mode == "native" else self._followup_prompt(s, q.message)
        self.store.write_turn_prompt(s.id, n, prompt.encode("utf-8", "replace"))
        now = self.env.now_iso()
        # the session's limit (its first turn's: spawn's --timeout or [defaults] timeout)
        # applies to every turn unless the follow-up gave its own
        first = s.turns[0].timeout if s.turns else None
        limit = q.timeout if q.timeout is not None else first
        t = Turn(n, Status.RUNNING, q.message[:MESSAGE_KEEP_CHARS], mode, now, timeout=limit)
        t.launcher = self._pinned_launcher(s)
        transitions.begin(s, t)
        return t

    def _pinned_launcher(self, s: Session) -> str:
        """What runs ``s``'s new turns: its launch pin's launcher, never meta.json's (without
        a pin, ``local``, whose supervisor then refuses to run the turn)."""
        pin = pins.read(self.env.environ, s.id, Path(os.path.realpath(self.store.root)))
        return pin.launcher if pin is not None else "local"

    def _start(
        self, s: Session, t: Turn, after: Sequence[Turn] = (), after_any: bool = False
    ) -> None:
        """Have the launcher start running turn ``t`` (inside the transaction that made it);
        ``after``: running turns its launcher makes it wait for (``Launcher.can_wait_for``)."""
        runner = self.launcher(t)
        t.account = s.account
        try:
            try:
                settings = self._launcher_settings(s, runner)
            except ZwarmError as e:  # its table is not trusted, a pin's option is invalid
                raise OSError(str(e)) from None
            runner.start(s.id, t, after, after_any, settings)
        except OSError as e:
            why = f"could not start the turn's supervisor: {e.strerror or e}"
            transitions.end(s, t, Status.FAILED, self.env.now_iso(), Reason.START_FAILED, why)

    def use_account(self, s: Session, name: str) -> None:
        """Put ``s`` on account ``name`` of its agent: recorded in its launch pin (what its
        agent's env comes from: ``agent_launch``), then in ``s``. A session moves only when
        its turn is routed afresh (a new session, or one whose account hit its usage limit:
        meta.json names no account); one whose meta.json names another account than its pin
        does is refused (``StoreError``), as is one without a pin or whose pin cannot be
        written. Lock held."""
        root = Path(os.path.realpath(self.store.root))
        pin = pins.read(self.env.environ, s.id, root)
        if pin is None:
            raise StoreError(f"session {s.id} has no launch record: no account given to it")
        if pin.account is not None and s.account is not None and pin.account != s.account:
            raise StoreError(
                "meta.json disagrees with the session's launch record about its account: refused"
            )
        if pin.account != name:
            pin.account = name
            pins.write(self.env.environ, pin)
        if s.account is not None and s.account != name:
            s.agent_session_id = None  # its agent's session lives with the other login
        s.account = name

    def _launcher_settings(self, s: Session, runner: Launcher) -> dict[str, Any]:
        """The launcher's ``[name]`` table as trust allows it (``UntrustedConfig`` if a value
        it uses is not trusted) and its families' tables (``[hosts]``), with the session's
        spawn options from its launch pin over it: checked again (a pin is read as untrusted
        input), and only the keys the launcher takes per session."""
        name = runner.name
        # its families' tables ([hosts]: members read as trust allows, each when used)
        families = {t: self.config.table(t) for t in runner.families if t in self.config.data}
        if name not in self.config.data:
            return families
        table = self.config.table(name)
        values = {**families, **{k: table[k] for k in self.config.data[name]}}
        pin = pins.read(self.env.environ, s.id, Path(os.path.realpath(self.store.root)))
        given = dict(pin.launcher_options) if pin is not None else {}
        if given:
            from zwarm import config as config_mod

            checked = config_mod.validate({name: given}, "the session's launch pin")[name]
            values.update({k: checked[k] for k in given if k in runner.spawn_options})
        return values

    def _admit(self, s: Session, t: Turn) -> bool:
        """Start just-begun turn ``t`` of a session that was not running, or, while caps are
        configured, hold it queued for the scheduler (run a pass once the lock is released).
        Whether it was queued. Lock held."""
        if not self._must_queue(s):
            self._start(s, t)
            return False
        transitions.defer(s, t, self.env.now_iso())
        self.scheduler().mark(s.id)
        return True

    def _must_queue(self, s: Session) -> bool:
        from zwarm.engine import scheduler as scheduler_mod

        return scheduler_mod.capped(self.config) or (s.count == 1 and bool(s.after))

    @abc.abstractmethod
    def scheduler(self) -> "scheduler_mod.Scheduler":
        """The state dir's scheduler (``engine.scheduler``), with this manager's config (made
        in ``engine.manager``, which hands it ``manager_class``)."""

    def launcher(self, t: Turn) -> Launcher:
        if t.launcher not in self._launchers:
            self._launchers[t.launcher] = get_launcher(t.launcher, self.store, self.env)
        return self._launchers[t.launcher]

    # ------------------------------------------------------------------ follow-up context
    def _followup_prompt(self, s: Session, message: str) -> str:
        """The summary-mode prompt of a follow-up: every earlier turn's digest (archived
        ones read from the history: the lock is held, so it cannot change)."""
        turns = s.turns
        if s.head_only:
            last = s.archive.turns + 1 if s.archive else 1
            archived = [t for t in self.store.load(s.id).turns if 1 < t.n <= last]
            turns = [turns[0], *archived, *turns[1:]]
        digests = [self.digest(s, t) for t in turns]
        task = self._full_task(s)
        table = self.config.table("summary")
        return build_followup(task, digests, message, table["budget_chars"], table["full_turns"])

    def _full_task(self, s: Session) -> str:
        try:
            data, _ = read_file(self.store.turn_path(s.id, 1, "prompt"), PROMPT_MAX_BYTES)
            return data.decode("utf-8", "replace")
        except OSError:  # (gone, a link, a FIFO or too large: the task as recorded)
            return s.task

    def digest(self, s: Session, t: Turn) -> Digest:
        """A turn's digest, from the cache when the log is unchanged since it was made."""
        log = self.store.turn_path(s.id, t.n)
        cache = self.store.turn_path(s.id, t.n, "digest.json")
        size = log.stat().st_size if log.exists() else -1
        try:
            d = load_digest(read_file(cache, DIGEST_MAX_BYTES)[0])
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
        return _closing_iter(f, self._reader(sid, n).steps(f))

    def turn_files(self, sid: str, n: int) -> TurnFiles:
        """Where turn ``n``'s files are, for the bound agent's hooks (its sidecar, if it
        declares one, beside the log)."""
        ext = self.agent.turn_sidecar
        sidecar = self.store.turn_path(sid, n, ext) if ext else None
        return TurnFiles(self.store.session_dir(sid), self.store.turn_path(sid, n), sidecar)

    def _reader(self, sid: str, n: int) -> Agent:
        """The agent that reads turn ``n``'s log (``Agent.reader``: gemini's joins the facts
        its sidecar holds); the bound agent itself if the hook fails."""
        try:
            return self.agent.reader(self.turn_files(sid, n))
        except Exception as e:  # a plugin's hook: the log is still read, without its extras
            print(f"zwarm: the {self.name} agent's reader failed: {why(e)}", file=sys.stderr)
            return self.agent

    def read_outcome(self, sid: str, n: int) -> TurnOutcome:
        """The outcome of turn ``n`` from its log: one pass, any JSON layout, bounded memory.
        A turn that ended without a result (killed, timed out) keeps the usage its agent had
        reported so far (a second pass, only then)."""
        path = self.store.turn_path(sid, n)
        try:  # (a link or a FIFO in the log's place: no outcome, never a wait)
            with os.fdopen(open_read(path), "rb") as f:
                o = self.scan_outcome(f)
                if o.status is None and o.usage is None:
                    f.seek(0)
                    o.usage = self.agent.partial_usage(f)
            return o
        except (FileNotFoundError, NotRegularFile):
            return TurnOutcome()


def why(e: Exception) -> str:
    """An exception of a plugin's hook as one line."""
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def _closing_iter(f: Any, it: Iterator[Step]) -> Iterator[Step]:
    try:
        yield from it
    finally:
        f.close()


def check_cwd(path: Path, state_dir: Path | None = None) -> Path:
    """The real directory ``path`` names (symlinks followed), where an agent may run: it exists,
    is valid UTF-8, and is neither ``state_dir`` nor inside it (an agent there would write over
    zwarm's own records)."""
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
    if state_dir is not None and in_state_dir(resolved, state_dir):
        raise InvalidInput(
            f"working directory {str(path)!r} is inside zwarm's state dir ({state_dir}): "
            "no agent runs there"
        )
    return resolved


def in_state_dir(path: Path, state_dir: Path) -> bool:
    """Whether ``path`` (symlinks followed, now) is ``state_dir`` or inside it: checked when a
    session is made (``check_cwd``) and again before each of its turns starts (a directory
    of the project may have been replaced by a link into the state dir since)."""
    real, state = path.resolve(), state_dir.resolve()
    return real == state or real.is_relative_to(state)
