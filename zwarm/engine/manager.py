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
  launch pin and the trusted config, never from meta.json (``agent_launch``); no agent runs
  inside the state dir: checked when the session is made and before each turn starts
  (``in_state_dir``: a project folder may have become a link into it);
- a turn marked ``running`` whose launcher is not verifiably alive is reconciled to ``failed``
  (``supervisor_lost``, or the launcher's reason: ``Launcher.lost``) on the next read, and
  whatever still carries its marker is stopped; every turn runs on the launcher its
  session's launch pin names (``zwarm.store.pins``);
- per-turn usage and cost are deltas; session totals are sums of turn figures; a turn that
  used no tokens (reported zero, or failed as the agent says before the model answered) costs
  0 whatever the model's price, and any other turn without a known cost stays unknown;
- a turn that would make a session run while caps are configured (or that waits for other
  sessions) is made ``queued`` and started only by the scheduler (``engine.scheduler``), under
  its lock; a turn that ends past the session's budget ends ``budget_exceeded`` and nothing
  queued after it starts (``engine.limits``); a budget covers the session's subtree of
  delegated sessions, and an ancestor's budget covers it (``engine.tree``);
- every agent runs with its session's id as ``ZWARM_PARENT_SESSION`` and the state dir as
  ``ZWARM_DIR``, so what it spawns becomes its child (verified then, ``engine.tree``), and
  with ``ZWARM`` naming a launcher of this zwarm (``env.launcher``; its directory first on
  ``PATH``), so it reaches zwarm however zwarm was installed and whatever its shell does.
"""

import abc
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from zwarm.agents.base import Agent, AgentOptions
from zwarm.config import Config
from zwarm.engine import limits, transitions, tree
from zwarm.engine import workspace as ws_mod
from zwarm.engine.context import Digest, build_followup, digest_steps, dump_digest, load_digest
from zwarm.env import Env, for_children, launcher, parse_iso
from zwarm.errors import InvalidInput, SessionStateError, StoreError, WriteFailed, ZwarmError
from zwarm.launchers import get_launcher
from zwarm.launchers.base import Launcher
from zwarm.model import (
    ACTIVE,
    RUNS,
    QueuedMessage,
    Reason,
    Session,
    Status,
    Turn,
    TurnOutcome,
    Usage,
)
from zwarm.model.records import Changes, Workspace
from zwarm.model.requests import SpawnRequest
from zwarm.model.steps import Step
from zwarm.store import Store, pins, write_private
from zwarm.store.files import open_append, open_read, read_file
from zwarm.system import procs

if TYPE_CHECKING:
    from zwarm.engine import scheduler as scheduler_mod

TASK_PREVIEW_CHARS = 4000
MESSAGE_KEEP_CHARS = 16000
MODEL_CHARS = 200
START_GRACE_S = 15.0
PROMPT_MAX_BYTES = 64 * 1024 * 1024  # a turn's prompt file read back to run it again


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
    def spawn(
        self,
        req: SpawnRequest,
        *,
        cwd: Path,
        workspace: ws_mod.Plan | ws_mod.Found | None = None,
        fleet: limits.Fleet | None = None,
        lineage: tree.Lineage | None = None,
    ) -> Session:
        """Create a session and start its first turn (the launcher runs it detached), as
        ``req`` asks once the caller has settled it (``Zwarm.spawn``: its model routed, its
        defaults from the config, its fleet options in ``fleet``); ``cwd``: the checked
        working directory. With a worktree ``workspace`` plan, its worktree is made first (and
        removed if this fails). ``lineage``: its parent and depth, verified by the caller
        (``engine.tree``). ``req.launcher``: what runs its turns (``zwarm.launchers``),
        pinned with the session."""
        task, name, dangerous = req.task, req.name, bool(req.dangerous)
        now = self.env.now_iso()
        sid = self.store.new_id()
        ws, cwd = self._workspace(workspace, sid, name, cwd)
        try:
            s = self._new_session(sid, req, cwd, now, dangerous)
            s.workspace = ws
            s.notify = req.notify  # a desktop notification when it ends (runtime.hooks)
            (lineage or tree.Lineage()).apply(s)
            transitions.begin(s, _first_turn(task, now, req.timeout, req.launcher or "local"))
            limits.settle(s, fleet or limits.Fleet(), self.config)
            if self._must_queue(s):  # created queued; the scheduler starts it (or not yet)
                return self.scheduler().admit_new(s, lambda: self._create(s, task, name, dangerous))
            self._create(s, task, name, dangerous)
        except BaseException:
            if ws is not None and ws.mode == "worktree":
                with contextlib.suppress(ZwarmError):
                    ws_mod.remove(ws, self.env.environ)
            raise
        try:
            with self.store.transaction(sid) as s:
                self._start(s, s.turns[0])
        except BaseException:
            self.store.release_name(name, sid)
            raise
        return s

    def _workspace(
        self, plan: ws_mod.Plan | ws_mod.Found | None, sid: str, name: str | None, cwd: Path
    ) -> tuple[Workspace | None, Path]:
        """The session's workspace record, and where its agent runs (in a new worktree)."""
        if isinstance(plan, ws_mod.Plan):
            ws = ws_mod.create(plan, sid, name, self.env.environ)
            return ws, ws_mod.session_cwd(ws, plan.found.rel)
        if isinstance(plan, ws_mod.Found):
            return Workspace("shared", str(plan.repo), str(plan.tree)), cwd
        return None, cwd

    def _create(self, s: Session, task: str, name: str | None, dangerous: bool) -> None:
        """Pin the session's launch facts, then write it (and claim its name)."""
        self.store.ensure()
        root = os.path.realpath(self.store.root)
        pin = pins.Pin(s.id, root, self.name, s.cwd, dangerous, workspace=s.workspace)
        pin.launcher = s.turns[0].launcher
        pins.write(self.env.environ, pin)
        self.store.create(s, task.encode("utf-8", "surrogateescape"))
        if name:  # claimed after create: a claim whose session dir is missing counts as stale
            try:
                self.store.claim_name(name, s.id)
            except BaseException:
                self.store.remove(s.id, None)
                raise

    def _new_session(
        self, sid: str, req: SpawnRequest, cwd: Path, now: str, dangerous: bool
    ) -> Session:
        task, model = req.task, req.model
        s = Session(
            id=sid,
            adapter=self.name,
            task=task[:TASK_PREVIEW_CHARS],
            task_truncated=len(task) > TASK_PREVIEW_CHARS,
            cwd=str(cwd),
            created_at=now,
            updated_at=now,
            name=req.name,
            model=self._asked_model(cwd, model, dangerous),
            requested_model=model,
            context_mode="native" if req.context == "native" else "summary",
            source=req.source[:200],
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
        messages left queued by a lost supervisor run first, and then ours is queued.
        Archived turns are not read (a follow-up's summary reads them if it needs them)."""
        with self.store.transaction(sid, history=False) as s:
            self._reconcile_locked(s)
            now = self.env.now_iso()
            message = _with_comments(s, message)
            native = (context or s.context_mode) == "native"
            s.queue.append(QueuedMessage(message, "native" if native else "summary", now, timeout))
            s.updated_at = now
            waiting = False
            if s.status not in ACTIVE:
                waiting = self._admit(s, self._begin_next(s))
        if waiting:
            self.scheduler().run()
        return s, "queued" if s.queue or waiting else "started"

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
        try:
            self.launcher(t).start(s.id, t, after, after_any)
        except OSError as e:
            why = f"could not start the turn's supervisor: {e.strerror or e}"
            transitions.end(s, t, Status.FAILED, self.env.now_iso(), Reason.START_FAILED, why)

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

    def scheduler(self) -> "scheduler_mod.Scheduler":
        """The state dir's scheduler (``engine.scheduler``), with this manager's config."""
        from zwarm.engine import scheduler as scheduler_mod

        return scheduler_mod.Scheduler(self.store, self.config, self.env, manager_class)

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
    def agent_launch(self, s: Session, t: Turn) -> "AgentLaunch":
        """What to run for turn ``t`` (session lock held). Security-relevant facts (agent, cwd,
        sandbox bypass) come from the session's pin and the trusted config, never from
        ``meta.json``, which the agent may have rewritten. ``StartRefused`` if they disagree,
        or if the pinned directory now leads into the state dir (``in_state_dir``)."""
        pin = pins.read(self.env.environ, s.id, Path(os.path.realpath(self.store.root)))
        if pin is None:
            raise StartRefused(
                "no launch record for this session (it was not started by you with this "
                "zwarm and state dir): refusing to run it"
            )
        if pin.adapter != s.adapter or pin.cwd != s.cwd:
            raise StartRefused("meta.json disagrees with the session's launch record: refused")
        if not ws_mod.same(pin.workspace, s.workspace):
            raise StartRefused(
                "meta.json disagrees with the session's launch record about its workspace: refused"
            )
        if in_state_dir(Path(pin.cwd), self.store.root):  # a link put in its place since
            raise StartRefused(
                f"working directory {pin.cwd!r} now leads into zwarm's state dir "
                f"({os.path.realpath(pin.cwd)}): no agent runs there; refused"
            )
        resume = s.agent_session_id if t.context == "native" else None
        opts = msgspec.structs.replace(self.options(s), cwd=pin.cwd, dangerous=pin.bypass)
        env = self.agent_env()
        env[procs.MARKER] = s.id
        env.pop(procs.SUPERVISOR_MARKER, None)
        # what the agent spawns is a child of this session, in this state dir (engine.tree)
        env[tree.PARENT_VAR] = s.id
        env[tree.DIR_VAR] = os.path.realpath(self.store.root)
        env[tree.AGENT_PATH_VAR] = env.get("PATH") or os.defpath  # for its children's agents
        zwarm = launcher(self.env.python, env)  # "$ZWARM" survives a login shell; PATH not
        if zwarm is not None:
            env[tree.ZWARM_VAR] = str(zwarm)
            env["PATH"] = os.pathsep.join([str(zwarm.parent), env.get("PATH") or os.defpath])
        return AgentLaunch(self.build_argv(opts, resume), pin.cwd, env)

    def fail_start(self, s: Session, t: Turn, why: str) -> None:
        """Record that turn ``t``'s agent could not be started (lock held)."""
        transitions.end(s, t, Status.FAILED, self.env.now_iso(), Reason.START_FAILED, why)

    def prepare_turn(self, sid: str, n: int) -> bool | None:
        """Before turn ``n``'s agent starts (whatever runs it): prepare a new worktree (turn
        1: ``[workspace]`` copy, link, setup; its output starts the turn's stderr) and snapshot
        the session's tree. Returns whether the stderr file was started here, or None if the
        turn must not run (preparing failed: recorded, the worktree removed; or it ended)."""
        s = self.store.load(sid, history=False)
        t = s.turn(n)
        if t is None or t.status.finished:
            return None
        ws = self._pinned(s)
        if ws is None or t.before is not None:  # none; or prepared already (a deferred turn)
            return False
        wrote = n == 1 and ws.mode == "worktree" and self._needs_setup()
        if wrote and not self._setup(s, t, ws):
            return None
        before = self._snapshot(ws, sid, n, "before")
        if before is not None:
            with self.store.transaction(sid, history=False) as s:
                t = s.turn(n)
                if t is not None:
                    t.before = before
        return wrote

    def _pinned(self, s: Session) -> Workspace | None:
        """``s``'s workspace as its launch pin has it (None: none, or not trusted: said on
        stderr, the supervisor's log; the turn is then refused by ``agent_launch`` anyway)."""
        if s.workspace is None:
            return None
        try:
            return ws_mod.pinned(s, self.env.environ, self.store.root)
        except ZwarmError as e:
            print(f"zwarm: no snapshot of session {s.id}'s workspace: {e}", file=sys.stderr)
            return None

    def _needs_setup(self) -> bool:
        table = self.config.data["workspace"]
        return bool(table["setup"] or table["copy"] or table["link"])

    def _setup(self, s: Session, t: Turn, ws: Workspace) -> bool:
        """Run turn ``t``'s worktree preparation; on failure end the turn ``setup_failed``,
        drop its queue and remove the worktree and branch. Whether it succeeded."""
        path = self.store.turn_path(s.id, t.n, "stderr")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a new turn's file: anything planted there (a link) goes
        fd = open_append(path)
        try:
            env = self.agent_env()
            env[procs.MARKER] = s.id  # so kill stops the setup commands too
            try:
                why = ws_mod.prepare(ws, self.config.table("workspace"), env, fd, t.timeout)
            except ZwarmError as e:
                why = f"setup failed: {e}"
        finally:
            os.close(fd)
        if why is None:
            return True
        with contextlib.suppress(ZwarmError):
            ws_mod.remove(ws, self.env.environ)
        n = t.n
        with self.store.transaction(s.id, history=False) as s:
            t = s.turn(n) or t
            if s.workspace is not None:
                s.workspace.removed = True
            if t.status in (Status.RUNNING, Status.STALLED):
                s.queue.clear()
                transitions.end(s, t, Status.FAILED, self.env.now_iso(), Reason.SETUP_FAILED, why)
        return False

    def _snapshot(self, ws: Workspace, sid: str, n: int, which: str) -> str | None:
        """A snapshot of the session's tree, or None if it could not be taken (said on
        stderr: the supervisor's log). A snapshot never decides a turn's outcome."""
        try:
            return ws_mod.snapshot(ws, self.env.environ, sid, n, which, self.store.root)
        except ZwarmError as e:
            print(f"zwarm: no {which} snapshot of turn {n}: {e}", file=sys.stderr)
            return None

    def _after_turn(self, sid: str, n: int) -> tuple[str | None, Changes | None, Changes | None]:
        """Turn ``n``'s after snapshot, what it changed, and what the session changed so far."""
        s = self.store.load(sid, history=False)
        ws = self._pinned(s)
        if ws is None or ws.removed:
            return None, None, None
        after = self._snapshot(ws, sid, n, "after")
        if after is None:
            return None, None, None
        t = s.turn(n)
        before = t.before if t is not None else None
        start = ws_mod.start_of(s, ws)
        try:
            from zwarm.engine import diffs

            tree = ws_mod.git_dir_tree(ws, self.env.environ)
            turn = diffs.stats(tree, self.env.environ, before, after) if before else None
            whole = diffs.stats(tree, self.env.environ, start, after) if start else None
        except ZwarmError as e:
            print(f"zwarm: no change stats for turn {n}: {e}", file=sys.stderr)
            return after, None, None
        return after, turn, whole

    def finish_turn(
        self,
        sid: str,
        n: int,
        returncode: int,
        timed_out: bool,
        stop: tuple[Reason, str] | None = None,
        hand_off: bool = False,
    ) -> Turn | None:
        """Record turn ``n``'s end (with its after snapshot and change stats); begin the next
        queued turn and return it, or None. ``stop``: why its supervisor stopped the agent
        (a budget passed, a stall), if it did. A turn parked on a limit, or ended past the
        session's budget (then the queue is dropped), begins nothing. With ``hand_off`` (a
        supervisor that runs one turn: ``runtime.slurm``), the next turn is started by its
        launcher in the same transaction, and None returned."""
        outcome = self.read_outcome(sid, n)
        stderr_tail = _tail(self.store, sid, n)
        after, changes, whole = self._after_turn(sid, n)
        with self.store.transaction(sid, history=False) as s:
            t = s.turn(n)
            if t is None:
                return None
            t.after, t.changes = after, changes
            if whole is not None:
                s.changes = whole
            self._record(s, t, outcome, returncode, timed_out, stderr_tail, stop)
            if t.reason is Reason.BUDGET_EXCEEDED:
                s.queue.clear()
            if t.status in (Status.KILLED, Status.PARKED) or not s.queue:
                return None
            nxt = self._begin_next(s)
            if hand_off:
                self._start(s, nxt)
                return None
            return nxt

    def _record(
        self,
        s: Session,
        t: Turn,
        o: TurnOutcome,
        returncode: int,
        timed_out: bool,
        stderr_tail: str,
        stop: tuple[Reason, str] | None = None,
    ) -> None:
        t.exit_code = returncode if returncode >= 0 else None
        t.signal = -returncode if 0 < -returncode <= 128 else None
        self._apply_outcome(s, t, o)
        if t.status not in RUNS:
            return  # killed meanwhile: keep that, with the facts filled in
        now = self.env.now_iso()
        over = limits.over_budget(s) or tree.over_budget(self.store, s)
        if stop is not None:
            transitions.end(s, t, Status.FAILED, now, *stop)
        elif timed_out:
            why = f"timeout: killed after {t.timeout or 0:g} s"
            transitions.end(s, t, Status.FAILED, now, Reason.TIMEOUT, why)
        elif over is not None:
            why = over + ("; the turn had completed" if o.status is Status.COMPLETED else "")
            why += f"; the agent reported: {o.error}" if o.error else ""
            transitions.end(s, t, Status.FAILED, now, Reason.BUDGET_EXCEEDED, why)
        elif o.status is Status.COMPLETED:
            transitions.end(s, t, Status.COMPLETED, now)
        else:
            why = _exit_reason(returncode, stderr_tail)
            if o.status is Status.FAILED:
                why = o.error or why
            else:
                why = f"{why}; no turn result in its output" + (f" ({o.error})" if o.error else "")
            reason = (o.reason if o.status is Status.FAILED else None) or Reason.AGENT_ERROR
            if not self._park(s, t, o, reason, why):
                transitions.end(s, t, Status.FAILED, now, reason, why)

    def _park(self, s: Session, t: Turn, o: TurnOutcome, reason: Reason, why: str) -> bool:
        """Park turn ``t`` (ended on a usage or rate limit) until it may resume, if the
        config says to wait; its supervisor waits for that time (``runtime.supervisor``)."""
        from zwarm.env import iso

        now = self.env.clock()
        until = limits.park_until(self.config, s, reason, o, now)
        if until is None:
            return False
        transitions.park(s, t, iso(now), iso(until), reason, why)
        self.scheduler().mark(s.id)
        return True

    def _apply_outcome(self, s: Session, t: Turn, o: TurnOutcome) -> None:
        if o.agent_session_id:
            t.agent_session_id = o.agent_session_id
            s.agent_session_id = o.agent_session_id
        if o.model:
            s.model = o.model
        if o.final_message is not None:
            t.final_message = o.final_message[:MESSAGE_KEEP_CHARS]
        prev = s.resumed(t, t.agent_session_id) if t.context == "native" else None
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
        if t.cost_usd is None and not t.usage.total_tokens and _nothing_billed(o):
            t.cost_usd = 0.0
        if o.model:
            s.cost_source = self.cost_source(s.model)  # type: ignore[assignment]

    # ------------------------------------------------------------------ reconcile and kill
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
        reason, what = self.launcher(t).lost(s.id, t)  # e.g. slurm_timeout: its job's end
        if orphan:
            what += "; its orphaned agent was terminated"
        if o.status is not None:
            what += f"; the turn log shows the agent reported {o.status.value}"
        transitions.end(s, t, Status.FAILED, self.env.now_iso(), reason, what)
        return True

    def kill(self, sid: str) -> tuple[Session, int]:
        """Kill the running turn (agent's whole tree) and drop the queue. Returns (s, dropped)."""
        _, dropped, t = self.end_killed(sid)
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
        if t.reason is Reason.DEPENDENCY_FAILED and not t.started:
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
        if self.agent.native_resume and t.agent_session_id and t.started:
            if t.context == "summary" and len(t.message) < MESSAGE_KEEP_CHARS:
                prompt = t.message.encode("utf-8", "surrogateescape")
                context = "native"
            elif t.context != "summary":
                context = "native"
        self.store.write_turn_prompt(s.id, n, prompt)
        new = Turn(n, Status.RUNNING, t.message, context, self.env.now_iso(), timeout=t.timeout)
        new.retry_of = t.retry_of or t.n
        new.launcher = self._pinned_launcher(s)
        transitions.begin(s, new)
        return new


_classes: dict[str, type[BaseSessionManager]] = {}


def manager_class(name: str) -> type[BaseSessionManager]:
    """The session manager bound to agent ``name`` — the agent's own (``Agent.manager``, e.g.
    ``CodexSessionManager``) or one made for it; ``UnknownAgent`` if there is none."""
    if name not in _classes:
        from zwarm import agents, plugins

        agent = agents.get(name)
        if agent.manager:
            cls = plugins.load(agent.manager)
            if not (isinstance(cls, type) and issubclass(cls, BaseSessionManager)):
                raise TypeError(f"{agent.manager} is not a BaseSessionManager")
        else:
            attrs = {"agent": agent, "name": agent.name, "__module__": type(agent).__module__}
            cls = type(f"{agent.name.title()}SessionManager", (BaseSessionManager,), attrs)
        _classes[name] = cls
    return _classes[name]


class StartRefused(Exception):
    """A turn's agent must not be started (its session's records disagree); says why."""


class AgentLaunch(msgspec.Struct, frozen=True):
    """How to run one turn's agent: its argv, working directory and environment."""

    argv: list[str]
    cwd: str
    env: dict[str, str]


# ---------------------------------------------------------------------- helpers
def _with_comments(s: Session, message: str) -> str:
    """``message`` preceded by the session's open review comments, which are marked sent with
    the turn this message will become (lock held)."""
    pending = [c for c in s.comments if c.sent_turn is None]
    if not pending:
        return message
    from zwarm.engine.review import render_comments

    n = s.count + len(s.queue) + 1
    for c in pending:
        c.sent_turn = n
    return f"{render_comments(pending)}\n\n{message}"


_KILLED_WHILE = {
    Status.QUEUED: "killed by user while queued (never started)",
    Status.PARKED: "killed by user while parked (waiting for a usage or rate limit to reset)",
}


def _first_turn(task: str, now: str, timeout: float | None, launcher: str = "local") -> Turn:
    t = Turn(1, Status.RUNNING, task[:MESSAGE_KEEP_CHARS], "task", now, timeout=timeout)
    t.launcher = launcher
    return t


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


def _nothing_billed(o: TurnOutcome) -> bool:
    """Whether the turn's outcome shows nothing was billed (its usage is already zero): the
    agent reported zero tokens, or it reported the failure before the model answered at all
    (a 429 on the first request). A turn cut off without a report may have been billed."""
    return o.usage is not None or (o.status is Status.FAILED and o.unanswered)
