"""zwarm's Python API: ``Zwarm``, the one object the CLI, the server, the tools and users call.

A facade: it holds the state dir (``store``), the config and the session managers, and hands
each operation to its module in ``zwarm.ops``: starting (what ``spawn`` settles before the
engine makes the session), checks (what a new turn is refused for), listing, reading,
following, waiting, removal, review, bestof (best-of sets); each is given this ``Zwarm``.
The session row contract is ``zwarm.model.rows``'s (``row``, re-exported here).
Must stay true:
- it raises only ``ZwarmError`` subclasses for bad input or state (callers map them once);
- read operations never create the state dir, and ``sessions()`` reads one meta.json per
  session (never a turn log, but a zwarm 3.x record's: ``legacy.filled``, in
  memory), each decoded by the one schema (``zwarm.model.schema``);
  running ones are checked with their launcher, and only a lost one is reconciled;
- a damaged session is listed as damaged, never hidden, rewritten or deleted; what can still
  be read of it (its turn logs, if this user's zwarm started it) is shown, with the damage
  said (``Stream.problems``); a session removed while listed is not damage (``rm`` renames
  it away whole): it is left out;
- an operation on several sessions does every one it can and then reports each failure
  (``PartlyFailed``); references naming one session count once;
- a session spawned from inside a running session's agent is its child (``engine.tree``:
  parent verified, depth limited); kill and rm of a parent take its linked descendants and
  say so in their results; listings roll each subtree's usage and cost up;
- what a caller should know but is not an error goes through ``warn`` (never printed here);
- only this facade, ``zwarm.ops`` and the engine use ``store``: the front ends (cli, serve,
  the orchestrator) call methods (a test guards it, ``tests/project/test_layering.py``);
- it knows no agent's argv or event format: that is the adapters' (``zwarm.agents``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from zwarm import legacy
from zwarm.env import Env
from zwarm.errors import (
    InvalidInput,
    SessionNotFound,
    ZwarmError,
    naming,
)
from zwarm.model import RUNS, Session
from zwarm.model.records import Attempt, Workspace
from zwarm.model.rows import row
from zwarm.ops import checks, listing, starting
from zwarm.store import Store

if TYPE_CHECKING:  # imported where used: `ls` and the supervisor start faster without them
    from zwarm import config as config_mod
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.launchers.base import Launcher
    from zwarm.model.requests import MessageRequest, SpawnRequest
    from zwarm.model.steps import Step
    from zwarm.ops.following import TurnEnd, TurnWatch
    from zwarm.ops.reading import Stream, Trajectory
    from zwarm.system import notify

TICK_EVERY_S = 1.0  # a long-lived Zwarm (wait, the MCP server) runs a scheduler pass this often


class Zwarm:
    def __init__(self, state_dir: str | Path | None = None, env: Env | None = None) -> None:
        self.env = env or Env()
        if state_dir is not None:
            self.env.state_dir = Path(state_dir)
        self.store = Store(self.env.find_state_dir())
        self._config: config_mod.Config | None = None
        self._managers: dict[str, BaseSessionManager] = {}
        self._launchers: dict[str, Launcher] = {}
        self._ticked = -TICK_EVERY_S  # when the last scheduler pass ran (see ``tick``)
        self.warnings: list[str] = []  # see ``warn``
        self.on_warning: Callable[[str], None] | None = None
        # what a long command is doing, step by step (not a warning; the CLI: stderr)
        self.on_progress: Callable[[str], None] | None = None
        if self.env.notice is None:  # a long wait for a lock (the scheduler's) is said
            self.env.notice = self.warn

    # ------------------------------------------------------------------ config
    @property
    def config_path(self) -> Path:
        return self.store.root / "config.toml"

    @property
    def config(self) -> config_mod.Config:
        if self._config is None:
            from zwarm import config as config_mod

            self._config = config_mod.load(self.config_path, self.env.environ)
            if self._config.legacy:  # once per Zwarm: it loads its config once
                from zwarm import legacy_config

                self.warn(legacy_config.warning(self.config_path, list(self._config.legacy)))
        return self._config

    def manager(self, adapter: str) -> BaseSessionManager:
        if adapter not in self._managers:
            cls = self._manager_cls(adapter)
            self._managers[adapter] = cls(self.store, self.config, self.env)
        return self._managers[adapter]

    @staticmethod
    def _manager_cls(adapter: str) -> type[BaseSessionManager]:
        try:
            from zwarm.engine import manager_class

            return manager_class(adapter)
        except ValueError as e:
            raise InvalidInput(str(e)) from None

    def reader(self, adapter: str) -> BaseSessionManager:
        """A manager for reading, reconciling and killing ``adapter``'s sessions: those never
        need the agent's command, so an invalid or untrusted config.toml does not stop them
        (the built-in defaults are used instead, e.g. for price estimates)."""
        try:
            _ = self.config
        except ZwarmError:
            from zwarm import config as config_mod

            key = f"{adapter}\0defaults"
            if key not in self._managers:
                cls = self._manager_cls(adapter)
                self._managers[key] = cls(self.store, config_mod.defaults(), self.env)
            return self._managers[key]
        return self.manager(adapter)

    def init(self, force: bool = False) -> Path:
        """Write ``config.toml``: every key, each under a comment saying what it does, at its
        default (with ``force``, an existing file's values are kept); refuses to overwrite
        unless ``force``."""
        path = self.config_path
        if path.exists() and not force:
            raise InvalidInput(f"{path} already exists (use --force to overwrite)")
        if path.exists() and self.config.legacy:  # --force would drop them: never lost
            raise InvalidInput(
                f"{path} has zwarm 3.x settings: `zwarm init --upgrade` converts it, keeping it"
            )
        from zwarm import config as config_mod
        from zwarm.config_text import commented

        text = commented(self.config if path.exists() else config_mod.defaults())
        self.store.ensure()
        from zwarm.system.files import atomic_write

        atomic_write(path, text.encode("utf-8"))
        return path

    # ------------------------------------------------------------------ starting
    def spawn(self, request: SpawnRequest | str, /, **options: Any) -> Session:
        """Start a session (``request``: a ``SpawnRequest``, or its task with its other
        fields as keywords); returns once its supervisor is running (the turn runs on). With
        ``worktree`` (default: ``[defaults] workspace``) it runs in a new git worktree of the
        repository ``cwd`` is in, on a new ``branch`` made from ``base`` (default HEAD).
        Fleet control (``engine.scheduler``, ``engine.limits``): with caps configured, or
        ``after`` (session refs: start once they finished; only if all completed unless
        ``after_any``), it is created ``queued`` and started when it may, by ``priority``
        then first come; ``max_cost``/``max_tokens`` are its budget, ``stall`` its stall
        time (defaults from ``[groups.<group>]`` and ``[limits]``). Delegation
        (``engine.tree``): started from inside a session's agent (``ZWARM_PARENT_SESSION``),
        it is that session's child, killed and removed with it unless ``detached``; ``run``
        is the orchestrator run starting it (a root of its own). ``launcher``: what runs
        its turns (``local``, ``slurm``: each turn a Slurm job), default ``[launcher]
        default``; ``launcher_option``: ``KEY=VALUE`` settings of its table for this session
        (the keys the launcher takes per session: ``Launcher.spawn_options``). ``host``
        (default ``[defaults] host``): its agent runs on that host (``[hosts.NAME]``, over
        ssh), in ``cwd`` there (default: the host's ``cwd``)."""
        from zwarm.model.requests import SpawnRequest

        req = _request(SpawnRequest, request, "task", options)
        if req.best_of is not None:
            raise InvalidInput("a best-of set is started with Zwarm.best_of (spawn --best-of)")
        return self._spawn(req)

    def _spawn(self, req: SpawnRequest, attempt: Attempt | None = None) -> Session:
        """``spawn`` of a settled request type; ``attempt``: its place in a best-of set."""
        from msgspec import structs

        from zwarm.ops.bestof import SET_FIELDS

        checks.request(req)
        given = [f for f in SET_FIELDS if getattr(req, f) not in ((), None)]
        if given:
            field = given[0]
            raise naming(InvalidInput, lambda n: (
                f"{n(field)} belongs to a best-of set: give {n('best_of')} N with it"
            ))  # fmt: skip
        adapter, model = starting.route(self, req.adapter, req.model)
        mgr = self.manager(adapter)
        from zwarm.engine.manager import check_cwd

        site = starting.site_for(self, req)  # a host's (ssh): its cwd resolved there
        if site is None:
            here = Path(req.cwd) if req.cwd is not None else self.env.cwd
            workdir = check_cwd(here, self.state_dir)
        else:
            workdir = Path(site.cwd)
            opts = (*req.launcher_option, site.option)
            req = structs.replace(req, launcher=site.launcher, launcher_option=opts)
        if req.name is not None:
            self.store.check_name(req.name)
        starting.check_agent(self, mgr, here=site is None)
        cfg = self.config
        fleet = starting.fleet(self, req)
        if req.account is not None:
            from zwarm.engine import accounts

            fleet = structs.replace(fleet, account=accounts.check_pin(cfg, adapter, req.account))
        lineage = starting.lineage(self, req.run, req.detached)
        runner = starting.launcher_for(self, req.launcher)
        runner_opts = starting.launcher_options(self, runner, req.launcher_option)
        ws = None
        if site is None:
            ws = starting.workspace_for(self, workdir, req.worktree, req.branch, req.base)
        elif req.worktree:  # made on the host by its zwarm
            ws = starting.host_worktree(self, site, req)
        settled = structs.replace(
            req,
            model=model,
            timeout=checks.timeout(req.timeout) or (cfg.get("defaults", "timeout") or None),
            context=req.context or cfg.get("defaults", "context"),
            dangerous=cfg.get(adapter, "dangerous") if req.dangerous is None else req.dangerous,
            launcher=runner,
            sandbox=starting.sandbox_for(self, req.sandbox, adapter),
        )
        if site is not None and settled.sandbox not in (None, "off"):
            raise InvalidInput("zwarm's sandbox does not run on a host yet ([sandbox] mode)")
        return mgr.spawn(
            settled,
            cwd=workdir,
            workspace=ws,
            fleet=fleet,
            lineage=lineage,
            launcher_options=runner_opts,
            attempt=attempt,
        )

    # ------------------------------------------------------------------ best-of sets
    def best_of(self, request: SpawnRequest | str, /, **options: Any) -> dict[str, Any]:
        """Start ``best_of`` attempts of one task as a set (``ops.bestof``): each an ordinary
        worktree session from the same base, agents/models round-robin; when each turn
        ends zwarm restores the ``protect`` paths and runs the ``check`` commands in its
        worktree (sandboxed, or where the user opted in). Returns the set's view."""
        from zwarm.model.requests import SpawnRequest
        from zwarm.ops import bestof

        req = _request(SpawnRequest, request, "task", options)
        if req.best_of is None:
            raise InvalidInput("best_of needs the number of attempts (--best-of N)")
        return bestof.start(self, req)

    def compare(self, ref: str, rank: str | None = None) -> dict[str, Any]:
        """A set's attempts with zwarm's evidence, ranked (``--rank``: the keys first);
        an ended attempt's missing evidence is made first (``ops.bestof.view``)."""
        from zwarm.ops import bestof

        return bestof.view(self, ref, rank)

    def compare_diff(self, ref: str, a: int, b: int) -> bytes:
        """How attempt ``b`` of set ``ref`` differs from attempt ``a`` (a unified diff)."""
        from zwarm.ops import bestof

        return bestof.diff(self, ref, a, b)

    def pick(
        self,
        ref: str,
        attempt: int | None = None,
        *,
        into: str | None = None,
        squash: bool = False,
        message: str | None = None,
        judge: dict[str, Any] | None = None,
        queue: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Merge a set's top-ranked attempt (or ``attempt``) as ``merge`` does, or with
        ``queue`` (``enqueue_merge``'s keywords) through the merge queue; the other
        attempts' worktrees are removed, their branches and snapshots kept until ``rm``.
        ``judge`` (``model``, ``attempt``, ``reason``): an LLM's tie-break, taken only among
        the attempts tied on the evidence, and recorded (``orchestrator.judge``)."""
        from zwarm.ops import bestof

        return bestof.pick(
            self, ref, attempt, into=into, squash=squash, message=message, judge=judge,
            queue=queue,
        )  # fmt: skip

    def inject_set(
        self, ref: str, request: MessageRequest | str, /, **options: Any
    ) -> list[dict[str, Any]]:
        """A follow-up to every attempt of set ``ref`` still in the running."""
        from zwarm.model.requests import MessageRequest
        from zwarm.ops import bestof

        return bestof.inject(self, ref, _request(MessageRequest, request, "message", options))

    def is_set(self, ref: str) -> bool:
        """Whether ``ref`` looks like a best-of set's id (``set-`` and hex digits)."""
        from zwarm.store import sets as set_store

        return set_store.looks_like(ref)

    def route(self, adapter: str | None, model: str | None) -> tuple[str, str | None]:
        """Pick (adapter, model): explicit > implied by the model > configured defaults."""
        return starting.route(self, adapter, model)

    def _check_agent(self, mgr: BaseSessionManager) -> None:
        """``mgr``'s agent can run: trusted, its limits not loosened, its command found."""
        starting.check_agent(self, mgr)

    def _launcher_for(self, name: str | None) -> str:
        """The launcher a new session's turns run on (``ops.starting.launcher_for``)."""
        return starting.launcher_for(self, name)

    def inject(
        self, ref: str, request: MessageRequest | str, /, **options: Any
    ) -> tuple[Session, str]:
        """Continue a session (``request``: a ``MessageRequest``, or its message with its
        other fields as keywords): starts the next turn, or queues it behind the running one."""
        from zwarm.model.requests import MessageRequest

        req = _request(MessageRequest, request, "message", options)
        checks.request(req)
        s = self.get(ref, history=False)
        mgr = self.manager(s.adapter)
        self._check_agent(mgr)
        checks.worktree(s)
        checks.workdir(s)
        checks.budget(self, s)
        s, state = mgr.inject(s.id, req.message, context=req.context, timeout=req.timeout)
        if (req.context or s.context_mode) == "native":
            self._warn_no_resume(s, state)
        return s, state

    def retry(self, ref: str) -> Session:
        """Run a session's failed or killed last turn again as a new turn: the same prompt,
        natively resumed where the agent reported its session (e.g. after its machine or
        supervisor died). Queued like any start while caps are configured."""
        return self._rerun(ref, "retry")

    def resume(self, ref: str) -> Session:
        """Resume a parked session now (without waiting for its usage or rate limit's reset
        time): its parked turn runs again as a new turn."""
        return self._rerun(ref, "resume")

    def _rerun(self, ref: str, kind: str) -> Session:
        s = self.get(ref)
        mgr = self.manager(s.adapter)
        self._check_agent(mgr)
        checks.worktree(s)
        checks.workdir(s)
        s, _ = mgr.rerun(s.id, kind)
        return s

    def _warn_no_resume(self, s: Session, state: str) -> None:
        """A native follow-up needs the agent's own session id; without one it gets a
        summary instead, which the caller is told, never left to guess."""
        t = s.current
        if state == "started" and t is not None and t.context != "native":
            self.warn(
                f"session {s.id}: its agent reported no session id to resume, so turn {t.n} "
                "continues with a summary of the earlier turns instead (--context native)"
            )
        elif state == "queued" and not s.agent_session_id:
            self.warn(
                f"session {s.id}: its agent has reported no session id to resume yet; unless "
                "the running turn reports one, the queued turn gets a summary instead"
            )

    def warn(self, message: str) -> None:
        """Tell the caller something it should know that is not an error: kept in
        ``warnings`` and passed to ``on_warning`` (the CLI prints it on stderr)."""
        self.warnings.append(message)
        del self.warnings[:-100]  # a long-lived caller keeps the latest only
        if self.on_warning is not None:
            self.on_warning(message)

    # ------------------------------------------------------------------ reading
    def resolve(self, ref: str) -> str:
        return self.store.resolve(ref)

    def get(self, ref: str, history: bool = True) -> Session:
        """The session (reconciled), or ``DamagedSession``/``SessionNotFound``; without
        ``history``, archived turns left out (``Store.load``)."""
        sid = self.store.resolve(ref)
        self.tick()
        s = self.store.load(sid, history)
        if s.imported:  # zwarm 3.x's: what its turn logs say, in memory (zwarm.legacy)
            return legacy.filled(self.reader(s.adapter), s)
        if s.status not in RUNS or self._alive(s):
            return s
        return self.reader(s.adapter).reconcile(s)

    def tick(self, force: bool = False) -> None:
        """The scheduler's pass, if a session waits (``engine.scheduler``): what every command
        does first, so no queued session is stranded by a process that died. At most once a
        second per ``Zwarm`` unless ``force``; never fails a reading command (an invalid
        config skips it)."""
        now = time.monotonic()
        if not force and now - self._ticked < TICK_EVERY_S:
            return
        self._ticked = now
        if not self.store.pending():  # one directory read: nothing else when idle
            return
        from zwarm.engine import scheduler

        try:
            sched = scheduler.Scheduler(self.store, self.config, self.env, self._manager_cls)
            sched.run(scheduler.TICK_WAIT_S)
        except ZwarmError:
            pass

    def _launcher(self, name: str) -> Launcher:
        if name not in self._launchers:
            from zwarm.launchers import get_launcher

            self._launchers[name] = get_launcher(name, self.store, self.env)
        return self._launchers[name]

    def _alive(self, s: Session) -> bool:
        t = s.current
        if t is None or (t.supervisor is None and t.handle is None):
            return False
        return self._launcher(t.launcher).alive(s.id, t)

    def sessions(self, status: str | None = None, encoded: bool = False) -> list[dict[str, Any]]:
        """Every session as a compact row (``zwarm.model.rows``), oldest first; damaged ones
        included. With ``encoded`` (``zwarm ls --json``), each finished session outside any
        delegation tree is an ``EncodedRow``: its JSON, and only the keys a listing filters
        and sorts on (``ops.listing``)."""
        return listing.sessions(self, status, encoded)

    def launcher_says(self, sessions: list[Session]) -> dict[str, dict[str, Any]]:
        """What the launchers of ``sessions``' running turns say of them, as a listing's rows
        carry it (``launcher_state``, ``shown_status``; ``ops.listing``)."""
        return listing.launcher_says(self, sessions)

    def queue_place(self, sid: str) -> dict[str, Any]:
        """A queued session's ``queue_position`` and ``waiting_for`` (reads every session)."""
        return listing.queue_place(self, sid)

    def show(self, ref: str) -> dict[str, Any]:
        """The session row plus every turn in full, its children and its subtree's totals
        (``ops.reading``: it reads the session shown and its subtree, not every session)."""
        from zwarm.ops import reading

        return reading.show(self, ref)

    def trajectory(self, ref: str, turn: int | None = None) -> Trajectory:
        """Normalized steps, streamed, each with ``turn`` and ``index``; what cannot be read is
        an error step and listed in ``problems`` (``ops.reading``)."""
        from zwarm.ops import reading

        return reading.trajectory(self, ref, turn)

    def logs(self, ref: str, turn: int | None = None, follow: bool = False) -> Stream[bytes]:
        """Raw JSONL of a turn (default the latest); with ``follow``, tail until it ends
        (``ops.reading``)."""
        from zwarm.ops import reading

        return reading.logs(self, ref, turn, follow)

    # ------------------------------------------------------------------ following (live views)
    def follow(
        self, sid: str, only_turn: int | None = None, poll_s: float = 0.1
    ) -> Iterator[Step | TurnEnd]:
        """The session's steps live, across its turns (queued ones included) until it is idle,
        a ``TurnEnd`` after each turn (``ops.following``)."""
        from zwarm.ops import following  # the live views only: ``ls`` never loads it

        return following.follow(self, sid, only_turn, poll_s)

    def turn_watch(self, s: Session, n: int | None = None) -> TurnWatch:
        """A non-blocking incremental reader of turn ``n`` of ``s`` (default: its latest):
        its latest step and the tokens reported so far (``ops.following``)."""
        from zwarm.ops import following

        return following.turn_watch(self, s, n)

    def turn_log(self, sid: str, n: int) -> Path:
        """Where turn ``n``'s log is: for a ``LiveLog`` (``ops.following``), or to say it is
        missing; opened only with ``open_read`` (never a link followed)."""
        return self.store.turn_path(sid, n)

    def session_dir(self, sid: str) -> Path:
        """A session's directory (its meta.json is replaced there, its turn logs grow in
        ``turns/``): what a live view watches (``system.notify``)."""
        return self.store.session_dir(sid)

    @property
    def sessions_dir(self) -> Path:
        """The directory sessions are added to and removed from (watched by ``top``)."""
        return self.store.sessions

    def watch_sessions(
        self, sids: list[str], turns: bool = False, wake: bool = True
    ) -> notify.Sessions:
        """What a waiter sleeps on: ``sids``' directories (and with ``turns`` their turn
        logs); with ``wake``, it also wakes every ``WAKE_S`` (``ops.waiting``)."""
        from zwarm.ops import waiting

        return waiting.watch_sessions(self, sids, turns, wake)

    def read(self, sid: str, history: bool = False) -> Session:
        """The session as its files hold it now, not reconciled (for a view that has just
        listed it); ``DamagedSession``/``SessionNotFound``."""
        return self.store.load(sid, history)

    # ------------------------------------------------------------------ waiting and stopping
    def wait(
        self,
        refs: list[str] | None,
        timeout: float | None = None,
        any_: bool = False,
        all_running: bool = False,
    ) -> dict[str, Any]:
        """Block until all (or any) of ``refs`` finish, or ``timeout``; with ``all_running``,
        every session running when the call starts (``ops.waiting``)."""
        timeout = checks.timeout(timeout) if timeout != 0 else 0.0
        from zwarm.ops import waiting

        return waiting.wait(self, refs, timeout, any_, all_running)

    def wait_turn(self, ref: str, n: int, timeout: float | None = None) -> tuple[Session, bool]:
        """Block until turn ``n`` of ``ref`` has finished, or ``timeout``. Returns (the session,
        whether it timed out) (``ops.waiting``)."""
        timeout = checks.timeout(timeout) if timeout != 0 else 0.0
        from zwarm.ops import waiting

        return waiting.wait_turn(self, ref, n, timeout)

    def kill(self, refs: list[str] | None = None, all_: bool = False) -> list[dict[str, Any]]:
        """Kill running sessions (whole process trees), and queued or parked ones; with
        ``all_``, every one of them, together; each with its linked descendants
        (``ops.removal``)."""
        from zwarm.ops import removal

        return removal.kill(self, refs, all_)

    def rm(
        self,
        refs: list[str] | None = None,
        finished: bool = False,
        force: bool = False,
        detail: bool = False,
    ) -> list[Any]:
        """Delete sessions, each with its linked descendants; running or damaged ones only with
        ``force`` (``ops.removal``)."""
        from zwarm.ops import removal

        return removal.rm(self, refs, finished, force, detail)

    # ------------------------------------------------------------------ hosts
    def hosts(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every configured host (``[hosts.NAME]``): whether it answers, its zwarm version, one
        command's latency (``zwarm.ops.hosts``)."""
        from zwarm.ops import hosts

        return hosts.listing(self, timeout)

    def host_check(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        """Host ``name`` checked step by step: connect, zwarm, git, its cwd, agent CLIs."""
        from zwarm.ops import hosts

        return hosts.check(self, name, timeout)

    # ------------------------------------------------------------------ for layers built on top
    # (the orchestrator tools and loop use these, never ``store`` or ``config`` directly)
    @property
    def state_dir(self) -> Path:
        """The state directory (``.zwarm/``); it may not exist yet."""
        return self.store.root

    def has_sessions(self) -> bool:
        """Whether the state dir holds a sessions directory (read operations check this)."""
        return self.store.exists()

    def ensure_state_dir(self) -> Path:
        """Create the state dir (0700) if needed, for writers; returns it."""
        self.store.ensure()
        return self.store.root

    def session_ids(self) -> list[str]:
        """The ids of every session on disk (damaged ones included); reads no meta.json."""
        return self.store.list_ids()

    def accounts(self) -> list[dict[str, Any]]:
        """Every configured account (``[accounts.<agent>.<name>]``) with its state now:
        ready, cooling (until when, why), over_budget or full; today's spend, its running
        sessions, the last limit it hit (``engine.accounts.states``)."""
        from zwarm.engine import accounts

        return accounts.states(self.config, self.store, self.env.clock())

    def usage(self, by: str = "account", since: str | None = None) -> dict[str, Any]:
        """Tokens and cost of the recorded turns, totalled ``by`` account, agent, model, day
        or group, from local day ``since`` (``ops.ledger``)."""
        from zwarm.ops import ledger

        return ledger.usage(self, by, since)

    def check_limits(self) -> None:
        """``LoosenedLimit`` if config.toml loosens a limit past its trusted value: what a
        command that starts agents checks first (no read ever gets the looser value)."""
        self.config.require_limits()

    def setting(self, table: str, key: str) -> Any:
        """A validated ``config.toml`` value (its default when unset); ``ConfigError`` if the
        file is invalid. A table value is a copy: changing it changes nothing here."""
        import copy

        return copy.deepcopy(self.config.get(table, key))

    # ------------------------------------------------------------------ workspaces and review
    def workspace(self, s: Session) -> Workspace:
        """``s``'s git workspace as its launch pin confirms it; ``WorkspaceError`` if none."""
        from zwarm.ops import review

        return review.workspace_of(self, s)

    def diff(
        self, ref: str, turn: int | None = None, *, hunks: bool = True, text: bool = False
    ) -> dict[str, Any]:
        """What turn ``turn`` (default: the whole session) changed (``ops.review``)."""
        from zwarm.ops import review

        return review.diff(self, ref, turn, hunks=hunks, text=text)

    def diff_text(
        self, ref: str, turn: int | None = None, *, color: bool = False, stat: bool = False
    ) -> tuple[bytes, str | None]:
        """The unified diff (or its ``--stat``) as git prints it, and the overlap note."""
        from zwarm.ops import review

        return review.diff_text(self, ref, turn, color=color, stat=stat)

    def comment(
        self,
        ref: str,
        items: list[tuple[str, int, str]],
        *,
        send: bool = False,
        message: str | None = None,
    ) -> dict[str, Any]:
        """Attach review comments ``(path, line, text)`` to the session's current diff; with
        ``send``, send every open one to the agent now (``ops.review``)."""
        from zwarm.ops import review

        return review.comment(self, ref, items, send=send, message=message)

    def merge(
        self,
        ref: str,
        *,
        into: str | None = None,
        squash: bool = False,
        message: str | None = None,
    ) -> dict[str, Any]:
        """Commit what the agent left in its worktree and merge its branch (``ops.review``)."""
        from zwarm.ops import review

        return review.merge(self, ref, into=into, squash=squash, message=message)

    def apply(
        self, ref: str, turn: int | None = None, cwd: str | Path | None = None
    ) -> dict[str, Any]:
        """Apply the session's (or turn ``turn``'s) diff to a checkout (``ops.review``)."""
        from zwarm.ops import review

        return review.apply(self, ref, turn, cwd)

    # ------------------------------------------------------------------ the merge queue
    def enqueue_merge(
        self,
        refs: list[str],
        *,
        target: str | None = None,
        priority: int = 0,
        checks: list[str] | None = None,
        no_check: bool = False,
        send: bool = False,
        run: bool = True,
        depth: int = 1,
    ) -> dict[str, Any]:
        """Queue finished worktree sessions for merging into ``target`` (default: the main
        worktree's branch), in order, each rebased onto the latest target, checked and
        merged mechanically; then (``run``) process the queue now unless a run already does.
        The checks: ``checks``, else ``[merge] check``; none is refused unless
        ``no_check``. ``send``: an ejected session gets its comment as its next turn; ``depth``:
        entries tested at once, each stacked on the one before (speculative). What
        best-of's ``pick`` calls to queue its winner (``ops.mergeq``)."""
        from zwarm.ops import mergeq

        return mergeq.enqueue(self, refs, target=target, priority=priority, checks=checks or (),
                              no_check=no_check, send=send, run=run, depth=depth)  # fmt: skip

    def run_merge_queues(
        self,
        target: str | None = None,
        *,
        checks: list[str] | None = None,
        no_check: bool = False,
        depth: int = 1,
    ) -> list[dict[str, Any]]:
        """Process the merge queues (of ``target`` only, if given) to completion; one runner
        per queue: another run of it is waited for (``ops.mergeq``)."""
        from zwarm.ops import mergeq

        return mergeq.run(self, target, checks=checks or (), no_check=no_check, depth=depth)

    def merge_queues(self, target: str | None = None) -> list[dict[str, Any]]:
        """The merge queues of this state dir with their entries (``ops.mergeq``)."""
        from zwarm.ops import mergeq

        return mergeq.listing(self, target)

    def unqueue_merge(self, ref: str, target: str | None = None) -> dict[str, Any]:
        """Take a session out of its merge queue; nothing is merged or deleted."""
        from zwarm.ops import mergeq

        return mergeq.remove(self, ref, target)

    def pause_merge_queue(self, paused: bool, target: str | None = None) -> dict[str, Any]:
        """Pause or resume a merge queue (a run stops before its next entry)."""
        from zwarm.ops import mergeq

        return mergeq.pause(self, paused, target)


R = TypeVar("R", "SpawnRequest", "MessageRequest")


def _request(cls: type[R], request: R | str, prompt: str, options: dict[str, Any]) -> R:
    """``request``, or the ``cls`` its prompt and ``options`` make (``InvalidInput`` naming
    an option ``cls`` has not)."""
    if isinstance(request, cls):
        if options:
            raise InvalidInput(f"a {cls.__name__} takes no other options: {', '.join(options)}")
        return request
    fields: dict[str, Any] = {prompt: request, **options}
    try:
        return cls(**fields)
    except TypeError as e:  # an unknown keyword: msgspec says which
        raise InvalidInput(f"{cls.__name__}: {e}") from None


__all__ = ["SessionNotFound", "Zwarm", "ZwarmError", "row"]
