"""zwarm's Python API: ``Zwarm``, the one object the CLI, the tools and users call.

Owns the operations on sessions (spawn, inject, list, show, trajectory, logs, wait, kill, rm)
and their stable JSON shapes. Must stay true:
- it raises only ``ZwarmError`` subclasses for bad input or state (callers map them once);
- read operations never create the state dir, and ``sessions()`` reads one meta.json per
  session (never a turn log, but a zwarm 3.x record's: ``legacy_sessions.filled``, in
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
- it knows no agent's argv or event format: that is the adapters' (``zwarm.agents``).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from zwarm import agents, legacy_sessions
from zwarm.agents import agent_for_model
from zwarm.env import Env, parse_iso
from zwarm.errors import (
    AgentNotFound,
    DamagedSession,
    InvalidInput,
    PartlyFailed,
    SessionNotFound,
    SessionStateError,
    StoreError,
    WorkspaceError,
    ZwarmError,
)
from zwarm.model import ACTIVE, FINISHED, RUNS, Session
from zwarm.model.records import RUN_ID, Workspace, order_key
from zwarm.model.status import ROW_STATUSES
from zwarm.model.steps import Step, ended_turn
from zwarm.store import Store

if TYPE_CHECKING:  # imported where used: `ls` and the supervisor start faster without them
    from zwarm import config as config_mod
    from zwarm.engine import limits, tree
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.launchers.base import Launcher, Probe
    from zwarm.model import Turn
    from zwarm.model.requests import MessageRequest, SpawnRequest
    from zwarm.store.rowcache import RowCache
    from zwarm.system import notify
    from zwarm.system.files import DirFileKey

T = TypeVar("T")
WAIT_EXIT = {"completed": 0, "failed": 1, "timeout": 124}
LOG_CHUNK = 1 << 20  # logs streams a turn log in pieces this size: memory stays bounded
TICK_EVERY_S = 1.0  # a long-lived Zwarm (wait, the MCP server) runs a scheduler pass this often
WAKE_S = 3.0  # a waiter reads its sessions again this often even when no file changed
_RUN_ID = re.compile(RUN_ID)


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
                from zwarm import legacy

                self.warn(legacy.warning(self.config_path, list(self._config.legacy)))
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
        (the keys the launcher takes per session: ``Launcher.spawn_options``)."""
        from zwarm.model.requests import SpawnRequest

        req = _request(SpawnRequest, request, "task", options)
        check_request(req)
        adapter, model = self.route(req.adapter, req.model)
        mgr = self.manager(adapter)
        from zwarm.engine.manager import check_cwd

        workdir = check_cwd(Path(req.cwd) if req.cwd is not None else self.env.cwd, self.state_dir)
        if req.name is not None:
            self.store.check_name(req.name)
        self._check_agent(mgr)
        cfg = self.config
        fleet = self._fleet(req)
        lineage = self._lineage(req.run, req.detached)
        runner = self._launcher_for(req.launcher)
        runner_opts = self._launcher_options(runner, req.launcher_option)
        ws = self._workspace_for(workdir, req.worktree, req.branch, req.base)
        settled = msgspec.structs.replace(
            req,
            model=model,
            timeout=check_timeout(req.timeout) or (cfg.get("defaults", "timeout") or None),
            context=req.context or cfg.get("defaults", "context"),
            dangerous=cfg.get(adapter, "dangerous") if req.dangerous is None else req.dangerous,
            launcher=runner,
        )
        return mgr.spawn(
            settled,
            cwd=workdir,
            workspace=ws,
            fleet=fleet,
            lineage=lineage,
            launcher_options=runner_opts,
        )

    def _launcher_options(self, name: str, pairs: Sequence[str]) -> dict[str, Any]:
        """``spawn --launcher-option KEY=VALUE`` for launcher ``name``, typed and checked as
        its config table's values are (``InvalidInput``)."""
        if not pairs:
            return {}
        from zwarm import config as config_mod
        from zwarm.errors import ConfigError
        from zwarm.launchers import parse_options

        opts = parse_options(name, pairs)
        try:
            config_mod.validate({name: opts}, "--launcher-option")
        except ConfigError as e:
            raise InvalidInput(str(e)) from None
        return opts

    def _launcher_for(self, name: str | None) -> str:
        """The launcher a new session's turns run on: ``name`` (spawn --launcher), else
        ``[launcher] default``; ``InvalidInput`` naming the installed ones if it is none of
        them, ``UntrustedConfig`` now if its table (``[slurm]``) is not trusted yet."""
        cfg = self.config
        name = name or cfg.get("launcher", "default")
        self._launcher(name)
        if name in cfg.data:
            cfg.require(name)  # used by whoever starts its turns: refuse now, not there
        return name

    def _lineage(self, run: str | None, detached: bool) -> tree.Lineage:
        """The new session's parent (verified) and depth, or ``InvalidInput`` (too deep, a
        parent that is not a running session here, a parent's subtree past its budget)."""
        from zwarm.engine import tree

        if run is not None and not _RUN_ID.match(run):
            raise InvalidInput(f"invalid orchestrator run id {run!r}")
        most = self.config.get("limits", "max_spawn_depth")
        lineage = tree.lineage(self.store, self.env.environ, most, run, detached)
        if lineage.parent_session_id is not None:
            parent = self.store.load(lineage.parent_session_id)
            over = tree.over_budget(self.store, parent)
            if over is not None:
                raise InvalidInput(f"spawn refused: parent session {parent.id}: {over}")
        return lineage

    def _fleet(self, req: SpawnRequest) -> limits.Fleet:
        """Spawn's fleet options, checked; ``after`` resolved to session ids."""
        from zwarm.engine import limits

        after: Sequence[str] | str = req.after
        refs = [after] if isinstance(after, str) else list(after or [])
        refs = [r.strip() for ref in refs for r in ref.split(",")]
        if "" in refs:  # --after '' or ',': a mistake, never "no dependency"
            raise InvalidInput(
                "--after names an empty session (an empty value or a stray comma): "
                "name the sessions to wait for, or leave --after out"
            )
        if len(refs) > 100:
            raise InvalidInput("--after names more than 100 sessions")
        ids = tuple(self.store.resolve(r) for r in refs)
        f = limits.Fleet(
            ids, req.after_any, req.group, req.priority, req.max_cost, req.max_tokens, req.stall
        )
        return limits.check(f)

    def _workspace_for(
        self, workdir: Path, worktree: bool | None, branch: str | None, base: str | None
    ) -> Any:
        """The workspace a spawn in ``workdir`` gets (``engine.workspace.choose``)."""
        from zwarm.engine import workspace

        cfg = self.config
        mode = cfg.get("defaults", "workspace") if worktree is None else "shared"
        mode = "worktree" if worktree else mode
        if mode == "worktree":
            cfg.require("workspace")  # its setup runs in the supervisor: refuse now, not there
        root = workspace.root_of(cfg.get("workspace", "root"), self.env.environ)

        def others() -> list[str]:
            rows = self.sessions() if self.store.exists() else []
            return [r["cwd"] for r in rows if r.get("cwd")]

        return workspace.choose(workdir, self.env.environ, mode=mode, branch=branch, base=base,
                                root=root, state_dir=self.store.root, others=others)  # fmt: skip

    def route(self, adapter: str | None, model: str | None) -> tuple[str, str | None]:
        """Pick (adapter, model): explicit > implied by the model > configured defaults."""
        cfg = self.config
        model = model or None
        default_model = cfg.get("defaults", "model") or None
        if adapter is None:
            implied = agent_for_model(model) if model else agent_for_model(default_model)
            adapter = implied or cfg.get("defaults", "adapter")
        agents.get(adapter)  # UnknownAgent (InvalidInput) names the installed ones
        other = agent_for_model(model) if model else None
        if other not in (None, adapter):
            self.warn(
                f"model {model!r} names a {other} model, but the session runs the {adapter} "
                "agent, which may not know it"
            )
        if model is None:
            model = cfg.get(adapter, "model") or None
        if model is None and default_model and agent_for_model(default_model) in (None, adapter):
            model = default_model
        return adapter, model

    def _check_agent(self, mgr: BaseSessionManager) -> None:
        self.config.require(mgr.name)  # its supervisor will use every key: refuse now, not there
        self.config.require_limits()  # a loosened limit is never used: say so, and refuse
        cmd = self.config.command(mgr.name)[0]
        path_var = mgr.agent_env().get("PATH", os.defpath)
        import shutil

        found = shutil.which(cmd, path=path_var)
        if found is None:
            if os.path.exists(cmd) or (os.sep in cmd and Path(cmd).exists()):
                raise AgentNotFound(mgr.name, cmd, "is not executable")
            if os.sep in cmd:  # a path is not looked up on PATH: say what is wrong with it
                raise AgentNotFound(mgr.name, cmd, "does not exist")
            raise AgentNotFound(mgr.name, cmd)

    def inject(
        self, ref: str, request: MessageRequest | str, /, **options: Any
    ) -> tuple[Session, str]:
        """Continue a session (``request``: a ``MessageRequest``, or its message with its
        other fields as keywords): starts the next turn, or queues it behind the running one."""
        from zwarm.model.requests import MessageRequest

        req = _request(MessageRequest, request, "message", options)
        check_request(req)
        s = self.get(ref, history=False)
        mgr = self.manager(s.adapter)
        self._check_agent(mgr)
        _check_tree(s)
        _check_workdir(s)
        _check_budget(s, self.store)
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
        _check_tree(s)
        _check_workdir(s)
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
        if s.imported:  # zwarm 3.x's: what its turn logs say, in memory (zwarm.legacy_sessions)
            return legacy_sessions.filled(self.reader(s.adapter), s)
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

    def sessions(self, status: str | None = None, encoded: bool = False) -> list[dict[str, Any]]:
        """Every session as a compact row (see ``row``), oldest first; damaged ones included.
        With ``encoded`` (``zwarm ls --json``), each finished session outside any delegation
        tree is an ``EncodedRow``: its JSON, and only the keys a listing filters and sorts on."""
        if status is not None and status not in ROW_STATUSES:
            raise InvalidInput(f"unknown status {status!r}")
        self.tick()
        with _gc_paused():  # the rows make no cycles; collections cost 10-20% over 1,000
            every, running = self._rows_of_finished(encoded)
            probes = self._survey(running)
            listed = (self._listed(s.id, s, probes.get(s.id)) for s in running)
            every += [r for r in listed if r is not None]
            _queue_places(every)  # queued rows: never encoded
            if any(r.get("parent_session_id") for r in every):
                from zwarm.engine import tree

                every = _parents_whole(every) if encoded else every
                tree.roll_up(every)  # only rows in a delegation tree change
        rows = [r for r in every if status is None or r["status"] == status]
        rows.sort(key=order_key)
        return rows

    def _rows_of_finished(
        self, encoded: bool = False
    ) -> tuple[list[dict[str, Any]], list[Session]]:
        """The rows of every session that is not running (each session dropped as soon as
        its row is made: a listing's memory is its rows; ``encoded``: a finished one's row
        dropped too, kept as its JSON), and the running sessions, whose rows wait for one
        survey of their launchers. A finished session whose files are as they were when its
        row was cached is not read (``store.rowcache``)."""
        from zwarm.store import rowcache

        rows: list[dict[str, Any]] = []
        running: list[Session] = []
        read = self.store.read_keyed
        with self.store.sessions_fd() as sfd:
            cache = rowcache.opened(self.env.environ, sfd, _row_sources())
            for sid in self.store.list_ids():
                cached = cache.get(sid) if cache is not None else None
                if cached is not None:
                    rows.append(_kept(cached, encoded))
                    continue
                got, key = read(sid)
                if isinstance(got, DamagedSession):
                    if self.store.removed(sid):
                        continue  # removed since listed (rm renames it away whole): not damage
                    rows.append(damaged_row(sid, got.problem))
                elif got.imported:  # zwarm 3.x's, never running: its logs read
                    filled = legacy_sessions.filled(self.reader(got.adapter), got)
                    rows.append(_kept(row(filled), encoded))
                elif got.status in RUNS and got.current is not None:
                    running.append(got)
                else:
                    rows.append(_kept(row(got), encoded, cache, key))
        if cache is not None:
            cache.save()
        return rows, running

    def _listed(
        self, sid: str, got: Session | DamagedSession, probe: Probe | None
    ) -> dict[str, Any] | None:
        """``sid``'s row, decoded by the one schema; a running session is reconciled (its
        launcher verifies what runs it, ``probe`` its answer when the listing asked it
        already; only a lost one needs its agent's parser), and says what its launcher
        says of it (``launcher_state``: a Slurm job's state; ``shown_status``: the status
        shown instead of ``running``, ``queued (slurm: Resources)``)."""
        if isinstance(got, DamagedSession):
            return damaged_row(sid, got.problem)
        if got.status in RUNS and not (probe.alive if probe is not None else self._alive(got)):
            try:
                got = self.reader(got.adapter).reconcile(got)
            except SessionNotFound:
                return None
            except ZwarmError as e:
                return None if self.store.removed(sid) else damaged_row(sid, str(e))
        r = row(got)
        if probe is not None and got.status in RUNS:
            r["launcher_state"] = _launcher_state(probe, got)
            r["shown_status"] = probe.label()
        return r

    def launcher_says(self, sessions: list[Session]) -> dict[str, dict[str, Any]]:
        """What the launchers of ``sessions``' running turns say of them, as a listing's rows
        carry it (``launcher_state``, ``shown_status``; see ``_listed``): one query per
        launcher (a cluster's queue is asked once for all). The dashboard's live rows
        (``serve.streams``) show a pending Slurm job as ``zwarm ls`` does. Only launchers that
        answer many at once are asked (a local turn says nothing but ``running``)."""
        from zwarm.launchers import survey

        running = [s for s in sessions if s.status in RUNS and s.current is not None]
        items = [(s.id, s.current) for s in running if s.current is not None]
        probes = survey(items, self._launcher, batched=True) if items else {}
        return {
            s.id: {"launcher_state": _launcher_state(p, s), "shown_status": p.label()}
            for s in running
            if (p := probes.get(s.id)) is not None
        }

    def _survey(self, sessions: list[Session]) -> dict[str, Probe]:
        """Probes of the running sessions' turns: one query per launcher (``runtime.survey``:
        one ``squeue`` for every Slurm job), none for a finished session."""
        items = [(s.id, s.current) for s in sessions if s.status in RUNS and s.current]
        if not items:
            return {}
        from zwarm.launchers import survey

        return survey(items, self._launcher)

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

    def show(self, ref: str) -> dict[str, Any]:
        """The session row plus every turn in full."""
        s = self.get(ref)
        d = row(s)
        d["context_mode"] = s.context_mode
        d["requested_model"] = s.requested_model
        d["permissions"] = s.permissions
        d["workspace"] = msgspec.to_builtins(s.workspace) if s.workspace else None
        d["comments"] = [msgspec.to_builtins(c) for c in s.comments]
        d["turns_detail"] = [turn_json(self.store, s, t.to_dict()) for t in s.turns]
        d.update(self._listing_facts(s))
        return d

    def _listing_facts(self, s: Session) -> dict[str, Any]:
        """What only a listing knows of ``s``: its children and its subtree's totals
        (``engine.tree``; ``child_sessions``: a short row per child), and if it is queued
        its place in the queue."""
        rows = self.sessions()
        by_id = {r["id"]: r for r in rows}
        mine = by_id.get(s.id)
        if mine is None:
            return {}
        keys = ["children", *_TREE_TOTALS, "launcher_state", "shown_status"]
        if mine["status"] == "queued":
            keys += ["queue_position", "waiting_for"]
        out = {k: mine[k] for k in keys}
        out["child_sessions"] = [_child_view(by_id[c]) for c in mine["children"]]
        return out

    def queue_place(self, sid: str) -> dict[str, Any]:
        """A queued session's ``queue_position`` and ``waiting_for`` (reads every session)."""
        for r in self.sessions():
            if r["id"] == sid:
                return {k: r[k] for k in ("queue_position", "waiting_for")}
        return {}

    def trajectory(self, ref: str, turn: int | None = None) -> Trajectory:
        """Normalized steps, streamed, each with ``turn`` and ``index``. What cannot be read is
        said where it belongs, as an error step, and listed in ``problems``: a finished turn
        whose log is missing, or a damaged meta.json (the turn logs found are then shown,
        read by the agent named in the session's launch pin)."""
        try:
            s = self.get(ref)
        except DamagedSession as e:
            return self._salvaged(e, turn)
        # a turn that runs may have no log yet; one that never started has none
        running = {t.n: t.status in ACTIVE or not t.started for t in s.turns}
        numbers = _pick_turn(s.id, list(running), turn)
        return Trajectory(self.reader(s.adapter), s.id, [(n, running[n]) for n in numbers])

    def _salvaged(self, e: DamagedSession, turn: int | None) -> Trajectory:
        """The turn logs of a session whose meta.json is damaged, or ``e`` if there are none
        or no launch pin says which agent wrote them."""
        sid, found = e.session_id, self._salvageable(e)
        adapter = self._pinned_adapter(sid)
        if adapter is None:
            raise e
        numbers = _pick_turn(sid, found, turn)
        note = f"{e}: showing the turn logs found ({_count(len(found), 'turn')})"
        return Trajectory(self.reader(adapter), sid, [(n, False) for n in numbers], note)

    def _salvageable(self, e: DamagedSession) -> list[int]:
        """The turn logs of a damaged session that this user's zwarm started (it has a
        launch pin here), or ``e`` raised: a planted session's files are never read as its."""
        found = self.store.turn_logs(e.session_id)
        if not found or self._pinned_adapter(e.session_id) is None:
            raise e
        return found

    def _pinned_adapter(self, sid: str) -> str | None:
        from zwarm.store import pins

        pin = pins.read(self.env.environ, sid, Path(os.path.realpath(self.store.root)))
        return pin.adapter if pin is not None and pin.adapter in agents.names() else None

    def logs(self, ref: str, turn: int | None = None, follow: bool = False) -> Stream[bytes]:
        """Raw JSONL of a turn (default the latest); with ``follow``, tail until it ends.
        A finished turn whose log is missing is an error; for a session whose meta.json is
        damaged, the log is shown as found, with the damage in ``problems``."""
        try:
            s = self.get(ref)
        except DamagedSession as e:
            sid, found = e.session_id, self._salvageable(e)
            n = _pick_turn(sid, found, turn)[0] if turn is not None else found[-1]
            return Stream(self._tail(sid, n, False), [f"{e}: showing turn {n}'s log as found"])
        n = turn if turn is not None else s.count
        if not 1 <= n <= s.count:
            raise InvalidInput(f"session {s.id} has no turn {n}")
        path = self.store.turn_path(s.id, n)
        t = s.turns[n - 1]
        if t.status not in ACTIVE and t.started and not os.path.lexists(path):
            raise StoreError(f"session {s.id}: turn {n}'s log is missing ({path})")
        return Stream(self._tail(s.id, n, follow))

    def _tail(self, sid: str, n: int, follow: bool) -> Iterator[bytes]:
        """Turn ``n``'s log; with ``follow``, until it ends, then each queued turn's that
        starts after it (a finished turn and the start of the next are one transaction).
        Between reads it sleeps until the session's files change (``runtime.notify``), and
        reads its meta.json again only when that changed or every ``WAKE_S``."""
        path = self.store.turn_path(sid, n)
        pos = 0
        watch = self._watch([sid], turns=True) if follow else None
        look = True  # meta.json may have changed since the session was last read
        try:
            while True:
                chunk = _read_at(path, pos, LOG_CHUNK)
                if chunk:
                    pos += len(chunk)
                    yield chunk
                    continue
                if watch is None:
                    return
                if look:
                    s = self.get(sid, history=False)
                    if _finished(s, n):
                        if self._has_more(path, pos):
                            continue
                        if s.count > n:
                            n, pos = n + 1, 0  # the next queued turn has begun: follow it too
                            path = self.store.turn_path(sid, n)
                            continue
                        if s.status.finished:
                            return  # idle: no turn active, none to come
                look = bool(watch.pause())
        finally:
            if watch is not None:
                watch.close()

    def _lost(self, s: Session) -> bool:
        """Whether ``s`` (as last read) may have lost what runs it: read it again then."""
        return s.status.value in ACTIVE and not self._alive(s)

    def _watch(self, sids: list[str], turns: bool = False) -> notify.Sessions:
        """What a waiter sleeps on: ``sids``' directories (and their turn logs)."""
        from zwarm.system import notify

        dirs = {sid: self.store.session_dir(sid) for sid in sids}
        return notify.Sessions(dirs, turns=turns, every=WAKE_S)

    @staticmethod
    def _has_more(path: Path, pos: int) -> bool:
        try:
            return path.stat().st_size > pos
        except OSError:
            return False

    # ------------------------------------------------------------------ waiting and stopping
    def wait(
        self,
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
        timeout = check_timeout(timeout) if timeout != 0 else 0.0
        ids = [self.store.resolve(r) for r in refs or []]
        if all_running:
            rows = self.sessions() if self.store.exists() else []
            ids += [r["id"] for r in rows if r["status"] in ACTIVE]
        ids = list(dict.fromkeys(ids))
        deadline = None if timeout is None else time.monotonic() + timeout
        found: dict[str, Session] = {}
        with self._watch(ids) as watch:  # watching first: no change between a read and a sleep
            look = set(ids)
            while True:
                found.update((sid, self.get(sid, history=False)) for sid in ids if sid in look)
                states = {sid: found[sid].status.value for sid in ids}
                done = [sid for sid, st in states.items() if st not in ACTIVE]
                if (any_ and done) or len(done) == len(ids):
                    return {"timed_out": False, "statuses": states, "finished": done}
                if deadline is not None and time.monotonic() >= deadline:
                    return {"timed_out": True, "statuses": states, "finished": done}
                look = watch.pause(_left(deadline))
                if watch.due:  # no file changed: only a process that died can have
                    self.tick()
                    look = watch.changed | {sid for sid in ids if self._lost(found[sid])}

    def wait_turn(self, ref: str, n: int, timeout: float | None = None) -> tuple[Session, bool]:
        """Block until turn ``n`` of ``ref`` has finished (a queued message becomes turn ``n``
        when it starts), or ``timeout``. Returns (the session, whether it timed out). Unlike
        ``wait``, a later turn's outcome never answers for turn ``n``, but for a turn that is
        run again (``retry``, a parked turn resumed) the run that ends last does: see
        ``resumed_as``."""
        timeout = check_timeout(timeout) if timeout != 0 else 0.0
        sid = self.store.resolve(ref)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._watch([sid]) as watch:
            while True:
                s = self.get(sid, history=False)  # archived turns: read once it is over
                if n < 1 or n > s.count + len(s.queue):
                    raise InvalidInput(f"session {sid} has no turn {n}")
                if n <= s.count and _finished(s, n):
                    s = self.get(sid)
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

    def kill(self, refs: list[str] | None = None, all_: bool = False) -> list[dict[str, Any]]:
        """Kill running sessions (whole process trees), and queued or parked ones (they never
        start). With ``all_``, every one of them, together (``_kill_many``): the waiting are
        recorded killed first, so none starts in a slot a kill frees. A kill that frees a slot
        lets the next queued session start. A session killed takes its linked descendants
        with it (``engine.tree``), said in its row."""
        if not all_:
            try:
                return self._each(refs or [], self._kill_one)
            finally:
                self.tick(force=True)
        rows = [r for r in self.sessions() if r["status"] in ACTIVE]
        self._readers(rows)
        waiting = [r["id"] for r in rows if r["status"] not in RUNS]
        return self._kill_many(waiting, [r["id"] for r in rows if r["status"] in RUNS])

    def _readers(self, rows: list[dict[str, Any]]) -> None:
        """The readers of these sessions' adapters, made once here, before ``_kill_many``'s
        threads share them."""
        for adapter in sorted({r["adapter"] for r in rows}):
            with contextlib.suppress(ZwarmError):  # said by that session's own kill
                self.reader(adapter)

    def _kill_many(self, *batches: list[str]) -> list[dict[str, Any]]:
        """Kill the sessions of ``batches`` together (no cascade: all go anyway). Each is
        recorded killed in its own transaction (a batch after the one before), then the
        processes of all of them are stopped at once by their launchers (``stop_many``:
        for local turns one scan of /proc, every signal sent before any wait), so 200 take
        about as long as one. A session that finished meanwhile is left out; every kill is
        done before the errors are raised (``PartlyFailed``, in order)."""
        ended: dict[str, tuple[BaseSessionManager, int, Turn | None]] = {}
        failed: dict[str, ZwarmError] = {}
        for sids in batches:
            self._end_killed(sids, ended, failed)
        stops: dict[str, tuple[Launcher, list[tuple[str, Turn]]]] = {}
        for sid, (manager, _, t) in ended.items():
            if t is not None:
                stops.setdefault(t.launcher, (manager.launcher(t), []))[1].append((sid, t))
        for launcher, items in stops.values():
            failed.update(launcher.stop_many(items))
        done = [self._killed_row(sid, ended[sid][1]) for sid in ended if sid not in failed]
        order = [sid for sids in batches for sid in sids if sid in failed]
        if order:
            raise PartlyFailed(done, [(sid, failed[sid]) for sid in order])
        return done

    def _end_killed(
        self,
        sids: list[str],
        ended: dict[str, tuple[BaseSessionManager, int, Turn | None]],
        failed: dict[str, ZwarmError],
    ) -> None:
        """Record each of ``sids`` killed (``end_killed``), into ``ended`` or ``failed``; a few
        transactions at a time (each mostly waits for its disk writes)."""
        if not sids:
            return
        from concurrent.futures import ThreadPoolExecutor

        def one(sid: str) -> tuple[BaseSessionManager, int, Turn | None] | ZwarmError | None:
            try:
                manager = self.reader(self.store.load(sid, history=False).adapter)
                _, dropped, t = manager.end_killed(sid)
            except SessionStateError:  # finished meanwhile
                return None
            except ZwarmError as e:
                return e
            return manager, dropped, t

        with ThreadPoolExecutor(max_workers=min(_KILL_THREADS, len(sids))) as pool:
            for sid, got in zip(sids, pool.map(one, sids), strict=True):
                if isinstance(got, ZwarmError):
                    failed[sid] = got
                elif got is not None:
                    ended[sid] = got

    def _killed_row(self, sid: str, dropped: int) -> dict[str, Any]:
        out = {**row(self.store.load(sid)), "dropped_queued": dropped}
        return {**out, "children_killed": [], "children_left": []}

    def _kill_one(self, sid: str, cascade: bool = True) -> dict[str, Any]:
        """Kill ``sid``, then its linked descendants that are active (``engine.tree``),
        whatever its own state: a parent that already finished keeps its status (``stopped``
        False) and its running tree is stopped. The row says which descendants were killed
        (``children_killed``) and which detached children it left running (``children_left``).
        A finished session with nothing active under it is not running: an error."""
        s = self.store.load(sid)
        try:
            s, dropped = self.reader(s.adapter).kill(sid)
        except SessionStateError:
            killed, left = self._kill_linked(sid) if cascade else ([], [])
            if not killed:
                raise
            s, dropped, stopped = self.store.load(sid), 0, False
        else:
            killed, left = self._kill_linked(sid) if cascade else ([], [])
            stopped = True
        out = {**row(s), "dropped_queued": dropped, "stopped": stopped}
        return {**out, "children_killed": killed, "children_left": left}

    def _kill_linked(self, sid: str) -> tuple[list[str], list[str]]:
        """Kill the active linked descendants of ``sid`` (parent already killed, so it starts
        no more; a child spawned meanwhile is found by the next scan, up to 3), together
        (``_kill_many``). Returns (the ids killed, the active detached children left
        running)."""
        from zwarm.engine import tree

        killed: list[str] = []
        left: list[str] = []
        for _ in range(3):
            rows = self.sessions()
            status = {r["id"]: r["status"] for r in rows}
            c = tree.cascade(rows, sid)
            left = [d for d in c.detached if status.get(d) in ACTIVE]
            todo = [d for d in c.linked if status.get(d) in ACTIVE and d not in killed]
            if not todo:
                break
            self._readers([r for r in rows if r["id"] in todo])
            try:
                done = self._kill_many(todo)
            except PartlyFailed as e:  # finished meanwhile, or damaged: not killed here
                done = e.done
            killed += [r["id"] for r in done]
        return killed, left

    def _each(
        self,
        refs: list[str],
        act: Callable[[str], T | None],
        resolve: Callable[[str], str] | None = None,
    ) -> list[T]:
        """``act`` on each session ``refs`` name (once each, in order), every one tried: what
        it returned (None: nothing done), or ``PartlyFailed`` naming every reference that
        failed after the others were done. A single reference's error is raised as it is."""
        done: list[T] = []
        failed: list[tuple[str, ZwarmError]] = []
        seen: set[str] = set()
        for ref in refs:
            try:
                sid = (resolve or self.store.resolve)(ref)
                if sid in seen:
                    continue
                seen.add(sid)
                got = act(sid)
            except ZwarmError as e:
                if len(refs) == 1:
                    raise
                failed.append((ref, e))
                continue
            if got is not None:
                done.append(got)
        if failed:
            raise PartlyFailed(list(done), failed)
        return done

    def rm(
        self,
        refs: list[str] | None = None,
        finished: bool = False,
        force: bool = False,
        detail: bool = False,
    ) -> list[Any]:
        """Delete sessions: the ids removed, each followed by its linked descendants, removed
        with it (``engine.tree``; an active one only with ``force``, else nothing is
        removed). Running ones only with ``force`` (killed first); damaged likewise. Every
        reference is tried (see ``_each``). With ``detail``, one dict per session asked for:
        ``id``, ``children_removed``, ``children_kept`` (detached: left as they are) and
        ``children_failed`` (``[id, why]``)."""
        gone: set[str] = set()
        try:
            done = self._rm(refs or [], finished, force, gone)
        except PartlyFailed as e:
            raise PartlyFailed(e.done if detail else _flat(e.done), e.failed) from None
        return done if detail else _flat(done)

    def _rm(
        self, refs: list[str], finished: bool, force: bool, gone: set[str]
    ) -> list[dict[str, Any]]:
        if not finished:
            known = {}
            for ref in refs:  # resolved first: a later ref may be a child that went already
                with contextlib.suppress(ZwarmError):
                    known[ref] = self.store.resolve(ref)
            return self._each(
                refs,
                lambda sid: self._rm_tree(sid, force, False, gone),
                resolve=lambda ref: known.get(ref) or self.store.resolve(ref),
            )
        rows = self.sessions()
        targets = [r["id"] for r in rows if r["status"] in FINISHED]
        done: list[dict[str, Any]] = []
        kept: list[tuple[str, ZwarmError]] = []
        for sid in targets:
            try:
                got = self._rm_tree(sid, force, True, gone, rows)
                if got is not None:
                    done.append(got)
            except WorkspaceError as e:  # its worktree holds work: kept, and said
                kept.append((sid, e))
        if kept:
            raise PartlyFailed(list(done), kept)
        return done

    def _rm_tree(
        self,
        sid: str,
        force: bool,
        skip_busy: bool,
        gone: set[str],
        rows: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any] | None:
        """Remove ``sid`` and then its linked descendants (deepest first); None if it went
        already (with a parent) or ``skip_busy`` skipped it. With a linked descendant still
        active and no ``force``, nothing is removed."""
        from zwarm.engine import tree

        if sid in gone:
            return None
        rows = self.sessions() if rows is None else rows
        status = {r["id"]: r["status"] for r in rows}
        c = tree.cascade(rows, sid)
        busy = [d for d in c.linked if status.get(d) in ACTIVE]
        if busy and not force:
            if skip_busy:
                return None
            raise SessionStateError(
                f"session {sid} has {_count(len(busy), 'linked child session')} still active "
                f"({', '.join(busy)}): kill it first (they go with it), or use --force"
            )
        if self._rm_one(sid, force, skip_busy) is None:
            return None
        gone.add(sid)
        out: dict[str, Any] = {"id": sid, "children_removed": [], "children_failed": []}
        out["children_kept"] = [d for d in c.detached if d not in gone]
        for child in reversed(c.linked):
            try:
                if self._rm_one(child, force, skip_busy=False) is not None:
                    out["children_removed"].append(child)
            except SessionNotFound:
                pass  # removed meanwhile
            except ZwarmError as e:
                out["children_failed"].append([child, str(e)])
                continue
            gone.add(child)
        out["children_removed"].reverse()  # shallowest first, as listed
        return out

    def _rm_one(self, sid: str, force: bool, skip_busy: bool) -> str | None:
        """Remove one session (its id; None if ``skip_busy`` skipped it). Whether it runs is
        decided again under its lock, where the removal happens: an ``inject`` that restarted
        it meanwhile is never removed from under (without ``force``), and with ``force`` it is
        killed again first. A lost session (its supervisor gone) is ended in memory only, its
        orphaned agent stopped, never written: removing frees space, so a full disk must not
        stop it."""
        for _ in range(3):
            try:
                self.tick()
                s = self.store.load(sid)  # never reconciled on disk: removal needs no room
            except DamagedSession as e:
                if not force:
                    raise DamagedSession(
                        sid, f"{e.problem} (use --force to delete it anyway)"
                    ) from None
                self._remove(sid, None)
                return sid
            if s.status in ACTIVE and not self.reader(s.adapter).is_lost(s):
                if skip_busy:
                    return None
                if not force:
                    raise SessionStateError(
                        f"session {sid} is {s.status.value} (kill it first, or use --force)"
                    )
                with contextlib.suppress(SessionStateError):
                    self.reader(s.adapter).kill(sid)
            with self.store.lock(sid):
                now = self.store.load(sid)
                self.reader(now.adapter).end_lost(now)  # in memory: it is deleted next
                if now.status not in ACTIVE:
                    self._release_workspace(sid, force)
                    self._remove(sid, s.name)
                    return sid
            if skip_busy:
                return None  # rm --finished: it is not finished any more
            if not force:
                raise SessionStateError(f"session {sid} is running (kill it first, or use --force)")
        raise SessionStateError(f"session {sid} keeps being restarted; not removed")

    def _release_workspace(self, sid: str, force: bool) -> None:
        """Remove the session's worktree, branch and snapshot refs (lock held), unless that
        would lose work and not ``force`` (``WouldLoseWork``)."""
        s = self.store.load(sid)
        from zwarm.engine import workspace

        ws = workspace.for_removal(s, self.env.environ, self.store.root)
        if ws is not None:
            workspace.release(ws, self.env.environ, sid, force)

    def _remove(self, sid: str, name: str | None) -> None:
        from zwarm.store import pins

        self.store.remove(sid, name)
        pins.remove(self.env.environ, sid)

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
        from zwarm.engine import workspace

        ws = workspace.pinned(s, self.env.environ, self.store.root)
        if ws is None:
            raise WorkspaceError(
                f"session {s.id} has no git workspace (it was not started in a git repository)"
            )
        return ws

    def diff(
        self, ref: str, turn: int | None = None, *, hunks: bool = True, text: bool = False
    ) -> dict[str, Any]:
        """What turn ``turn`` (default: the whole session) changed: files with status,
        added/removed lines and hunks, totals, and the other sessions that wrote the same
        tree meanwhile (``overlaps``, with a ``note``); with ``text``, the unified diff too."""
        from zwarm.engine import diffs, review, workspace

        s = self.get(ref)
        ws = self.workspace(s)
        sp = review.span(s, ws, turn, self.env.environ, self.store.root)
        tree = workspace.git_dir_tree(ws, self.env.environ)
        d = review.diff_json(tree, self.env.environ, sp, hunks)
        if text:
            d["text"] = diffs.text(tree, self.env.environ, sp.a, sp.b).decode("utf-8", "replace")
        found = review.overlaps(s, self._same_tree(ws), turn)
        out = {"session_id": s.id, "branch": ws.branch, **d, "overlaps": found}
        note = review.overlap_note(found)
        if note:
            out["note"] = note
        return out

    def diff_text(
        self, ref: str, turn: int | None = None, *, color: bool = False, stat: bool = False
    ) -> tuple[bytes, str | None]:
        """The unified diff (or its ``--stat``) as git prints it, and the overlap note."""
        from zwarm.engine import diffs, review, workspace

        s = self.get(ref)
        ws = self.workspace(s)
        sp = review.span(s, ws, turn, self.env.environ, self.store.root)
        tree = workspace.git_dir_tree(ws, self.env.environ)
        text = diffs.text(tree, self.env.environ, sp.a, sp.b, color=color, stat=stat)
        return text, review.overlap_note(review.overlaps(s, self._same_tree(ws), turn))

    def _same_tree(self, ws: Workspace) -> list[Session]:
        """The sessions that work in ``ws``'s tree (shared mode only: a worktree is its own)."""
        if ws.mode != "shared":
            return []
        found = []
        for sid in self.store.list_ids():
            got = self.store.read(sid)
            if isinstance(got, Session) and got.workspace and got.workspace.tree == ws.tree:
                found.append(got)
        return found

    def comment(
        self,
        ref: str,
        items: list[tuple[str, int, str]],
        *,
        send: bool = False,
        message: str | None = None,
    ) -> dict[str, Any]:
        """Attach review comments ``(path, line, text)`` to the session's current diff; with
        ``send``, send every open one to the agent now (``inject``), else with the next."""
        from zwarm.engine import review

        if not items and not send:
            raise InvalidInput("give at least one comment (PATH:LINE TEXT)")
        s = self.get(ref)
        ws = self.workspace(s)
        with self.store.transaction(s.id) as fresh:
            new = review.make_comments(
                fresh, ws, items, self.env.environ, self.env.now_iso(), self.store.root
            )
            if len(fresh.comments) + len(new) > 10_000:
                raise InvalidInput(f"session {s.id} has too many comments already")
            fresh.comments.extend(new)
        made = [msgspec.to_builtins(c) for c in new]
        out: dict[str, Any] = {"session_id": s.id, "comments": made}
        if send:
            after, state = self.inject(s.id, message or review.COMMENT_PROMPT)
            turn = after.count + (len(after.queue) if state == "queued" else 0)
            out["sent"] = {"state": state, "turn": turn}
        return out

    def merge(
        self,
        ref: str,
        *,
        into: str | None = None,
        squash: bool = False,
        message: str | None = None,
    ) -> dict[str, Any]:
        """Commit what the agent left uncommitted in its worktree and merge its branch into
        ``into`` (default: the main worktree's branch); never while the session runs."""
        from zwarm.engine import review, workspace

        s = self.get(ref)
        ws = self.workspace(s)
        with self.store.transaction(s.id) as fresh:  # no turn starts while we merge
            if fresh.workspace is None or not workspace.same(fresh.workspace, ws):
                raise WorkspaceError(f"session {s.id}'s workspace changed meanwhile: refused")
            return review.merge(fresh, fresh.workspace, self.env.environ, into=into,
                                squash=squash, message=message)  # fmt: skip

    def apply(
        self, ref: str, turn: int | None = None, cwd: str | Path | None = None
    ) -> dict[str, Any]:
        """Apply the session's (or turn ``turn``'s) diff to the checkout ``cwd`` (default:
        where zwarm runs) is in, without committing; all or nothing."""
        from zwarm.engine import review

        s = self.get(ref)
        ws = self.workspace(s)
        sp = review.span(s, ws, turn, self.env.environ, self.store.root)
        where = Path(cwd) if cwd is not None else self.env.cwd
        return {"session_id": s.id, "turn": turn, **review.apply(ws, sp, self.env.environ, where)}


_KILL_THREADS = 32  # kill --all: transactions at once (each mostly waits for its fsyncs)


def _flat(done: list[Any]) -> list[str]:
    """``rm``'s ids: each session asked for, then the linked children that went with it."""
    out: list[str] = []
    for d in done:
        out += [d["id"], *d["children_removed"]] if isinstance(d, dict) else [d]
    return out


_TREE_TOTALS = ("tree_sessions", "tree_usage", "tree_cost_usd", "tree_unpriced")


def _child_view(r: dict[str, Any]) -> dict[str, Any]:
    """A child in ``show``: who it is, how it stands, what its subtree used."""
    keys = ("id", "name", "status", "lifecycle", "spawn_depth", "task", *_TREE_TOTALS)
    return {k: r.get(k) for k in keys}


def resumed_as(s: Session, n: int) -> int:
    """The turn that last ran turn ``n`` again (a retry, a parked turn resumed), else ``n``."""
    later = [t.n for t in s.turns if t.retry_of == n and t.n > n]
    return later[-1] if later else n


def _check_budget(s: Session, store: Store) -> None:
    """A session past its budget, or in a subtree past one (``engine.tree``), takes no new
    turn (spawn a new one)."""
    from zwarm.engine import limits, tree

    over = limits.over_budget(s) or tree.over_budget(store, s)
    if over is not None:
        raise SessionStateError(f"session {s.id}: {over}; it takes no new turn")


def _check_tree(s: Session) -> None:
    """A session whose own worktree is gone cannot run another turn."""
    ws = s.workspace
    if ws is not None and ws.mode == "worktree" and (ws.removed or not os.path.isdir(ws.tree)):
        from zwarm.errors import WorkspaceError

        raise WorkspaceError(
            f"session {s.id}'s worktree {ws.tree} was removed: it cannot run again "
            "(start a new session)"
        )


def _finished(s: Session, n: int) -> bool:
    """Whether turn ``n`` of ``s`` has finished (an archived turn has: only finished turns
    are archived)."""
    t = s.turn(n)
    return t.status.finished if t is not None else 1 <= n <= s.count


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (None: no deadline; never negative)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _read_at(path: Path, pos: int, size: int) -> bytes:
    """Up to ``size`` bytes of the turn log ``path`` from ``pos`` (none if it is missing or not
    a regular file: a planted FIFO or link is never opened blocking or followed)."""
    from zwarm.system.files import open_read

    try:
        fd = open_read(path)
    except OSError:
        return b""
    try:
        return os.pread(fd, size, pos)
    finally:
        os.close(fd)


def _pick_turn(sid: str, numbers: list[int], turn: int | None) -> list[int]:
    if turn is None:
        return numbers
    if turn not in numbers:
        have = f"1..{max(numbers)}" if numbers else "none"
        raise InvalidInput(f"session {sid} has no turn {turn} (it has {have})")
    return [turn]


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Stream(Iterator[T]):
    """An iterator over what a session's files hold, and ``problems``: what could not be read
    or was damaged (complete once the iterator is exhausted). Callers show what they get,
    then say what is missing."""

    def __init__(self, items: Iterator[T], problems: list[str] | None = None) -> None:
        self.problems: list[str] = problems if problems is not None else []
        self._items = items

    def __next__(self) -> T:
        return next(self._items)


class Trajectory(Stream[Step]):
    """A session's steps (see ``Zwarm.trajectory``); each problem is also an error step
    where it belongs."""

    def __init__(
        self,
        mgr: BaseSessionManager,
        sid: str,
        turns: list[tuple[int, bool]],  # (turn number, running: its log may not exist yet)
        note: str | None = None,
    ) -> None:
        problems: list[str] = []  # shared with the generator, which holds no ``self``: a
        # dropped half-read trajectory is freed (its file closed) at once, not by the GC
        super().__init__(_numbered(problems, mgr, sid, turns, note), problems)

    def __iter__(self) -> Iterator[Step]:
        """The steps' own generator (the same one ``next`` advances): a ``for`` loop over a
        200 MB trajectory then runs no Python ``__next__`` per step."""
        return self._items


def _numbered(
    problems: list[str],
    mgr: BaseSessionManager,
    sid: str,
    turns: list[tuple[int, bool]],
    note: str | None,
) -> Iterator[Step]:
    """``Trajectory``'s steps, numbered across turns; each problem noted in ``problems``."""
    index = 0
    if note is not None:
        problems.append(note)
        yield _problem(note, turns[0][0] if turns else None, index)
        index += 1
    for n, running in turns:
        path = mgr.store.turn_path(sid, n)
        if not running and not os.path.lexists(path):
            what = f"turn {n}'s log is missing ({path})"
            problems.append(what)
            yield _problem(what, n, index)
            index += 1
            continue
        for step in mgr.turn_steps(sid, n):
            if not running and step.get("status") == "in_progress":
                ended_turn(step)  # the turn ended: it never finished
            step["turn"] = n
            step["index"] = index
            index += 1
            yield step


def _problem(message: str, turn: int | None, index: int) -> Step:
    return {"kind": "error", "message": message, "fatal": False, "turn": turn, "index": index}


def _row_sources() -> list[str]:
    """The files whose code decides what a listing row says (``row``, the record's derived
    fields, the schemas): the listing cache is kept per version of them."""
    from zwarm.model import records, rows, schema, status

    return [__file__, records.__file__, rows.__file__, schema.__file__, status.__file__]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block (a listing allocates thousands of
    containers and frees them by reference counting), back on after it as it was before."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class EncodedRow(dict[str, Any]):
    """A finished session's row as a listing for output keeps it (``sessions(encoded=True)``):
    ``raw``, the whole row's JSON, exactly ``msgspec.json.encode(row)``, and of the row only
    the keys a listing filters and sorts on (``KEYS``). Over 10,000 to 50,000 rows, holding
    the rows' dicts until output cost a cold ``ls --json`` 7-10% (their pages, and encoding
    them again once they are out of every CPU cache). Only a row no later step of a listing
    changes is kept so: a finished one (never queued) in no delegation tree
    (``_parents_whole`` restores a parent's row before the roll-up)."""

    __slots__ = ("raw",)
    KEYS = ("id", "status", "name", "adapter", "source", "created_at", "parent_session_id")
    raw: msgspec.Raw

    @classmethod
    def of(cls, r: dict[str, Any], raw: bytes) -> dict[str, Any]:
        """``r`` (finished) kept as ``raw``, or ``r`` itself if it is in a delegation tree."""
        if r["parent_session_id"] is not None or r["status"] not in FINISHED:
            return r
        e = cls((k, r[k]) for k in cls.KEYS)
        e.raw = msgspec.Raw(raw)
        return e


def _kept(
    r: dict[str, Any],
    encoded: bool,
    cache: RowCache | None = None,
    key: DirFileKey | None = None,
) -> dict[str, Any]:
    """Row ``r`` of a session that is not running, as a listing keeps it: given to ``cache``
    if it takes it (``r`` just made from the files of ``key``), and with ``encoded`` an
    ``EncodedRow`` if it can be one: encoded once, while the row is fresh in memory, and
    the cache's line made of the same bytes."""
    raw = _encoded(r) if encoded and r["status"] in FINISHED else None  # else never used
    if cache is not None and key is not None:
        cache.put(r["id"], key, r, raw)
    return r if raw is None else EncodedRow.of(r, raw)


def _encoded(r: dict[str, Any]) -> bytes | None:
    """Row ``r``'s JSON (``msgspec``), or None if msgspec cannot encode it (a lone surrogate
    in a string: output then takes its own way)."""
    try:
        return _encode_row(r)
    except (TypeError, ValueError):
        return None


def _parents_whole(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with each parent's ``EncodedRow`` decoded back to the whole row (the same
    dict, in the same key order), as a delegation tree's roll-up needs it."""
    parents = {r["parent_session_id"] for r in rows if r.get("parent_session_id")}

    def whole(r: dict[str, Any]) -> dict[str, Any]:
        if type(r) is EncodedRow and r["id"] in parents:
            d: dict[str, Any] = msgspec.json.decode(r.raw)
            return d
        return r

    return [whole(r) for r in rows]


_encode_row = msgspec.json.Encoder().encode


def row(m: dict[str, Any] | Session) -> dict[str, Any]:
    """The stable session JSON (ls rows, show header, tool results) from a session (or its
    JSON view, a meta dict)."""
    if isinstance(m, Session):
        return _session_row(m)
    turns = m.get("turns") or []
    return {
        "id": m["id"],
        "name": m.get("name"),
        "adapter": m.get("adapter"),
        "model": m.get("model"),
        "status": m.get("status"),
        "task": m.get("task"),
        "cwd": m.get("cwd"),
        "created_at": m.get("created_at"),
        "updated_at": m.get("updated_at"),
        "turns": len(turns),
        "usage": m.get("usage"),
        "cost_usd": m.get("cost_usd"),
        "cost_complete": m.get("cost_complete") is not False,
        "cost_source": m.get("cost_source"),
        "agent_session_id": m.get("agent_session_id"),
        "last_message": m.get("last_message"),
        "error": m.get("error"),
        "reason": m.get("reason"),
        "queued": [q.get("message") for q in m.get("queue") or []],
        "source": m.get("source"),
        "dangerous": bool(m.get("dangerous")),
        "branch": (m.get("workspace") or {}).get("branch"),
        "worktree": _worktree(m.get("workspace")),
        "changes": m.get("changes"),
        "turn_changes": [_turn_changes(t) for t in turns],
        **_fleet_row(m, turns),
        **_tree_row(m),
        **_launcher_row(turns),
        "damaged": False,
    }


def _session_row(s: Session) -> dict[str, Any]:
    """``row`` of a ``Session``, read straight from its fields (``ls`` makes one per session:
    no intermediate dict, no turn converted); the same keys in the same order."""
    ws = s.workspace
    cur = s.current
    usage = s.usage
    u = {
        "input_tokens": usage.input_tokens,
        "cached_input_tokens": usage.cached_input_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "total_tokens": usage.total_tokens,
    }
    cost = s.cost_usd
    status = s.status.value
    return {
        "id": s.id,
        "name": s.name,
        "adapter": s.adapter,
        "model": s.model,
        "status": status,
        "task": s.task,
        "cwd": s.cwd,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "turns": s.count,
        "usage": u,
        "cost_usd": cost,
        "cost_complete": s.cost_complete,
        "cost_source": s.cost_source,
        "agent_session_id": s.agent_session_id,
        "last_message": s.last_message,
        "error": s.error,
        "reason": s.reason,
        "queued": [q.message for q in s.queue],
        "source": s.source,
        "dangerous": s.dangerous,
        "branch": ws.branch if ws else None,
        "worktree": ws.tree if ws and ws.mode == "worktree" and not ws.removed else None,
        "changes": _changes(s.changes),
        "turn_changes": _all_turn_changes(s),
        "group": s.group,
        "priority": s.priority,
        "after": list(s.after),
        "max_cost_usd": s.max_cost_usd,
        "max_tokens": s.max_tokens,
        "auto_resumes": s.auto_resumes,
        "queued_at": (cur.queued_at or cur.started_at) if cur and status == "queued" else None,
        "queue_position": None,
        "waiting_for": [],
        "wait": cur.wait if cur else None,
        "parked_until": cur.parked_until if cur else None,
        "quiet_since": cur.quiet_since if cur else None,
        "parent_session_id": s.parent_session_id,
        "parent_run_id": s.parent_run_id,
        "spawn_depth": s.spawn_depth,
        "lifecycle": s.lifecycle,
        "children": [],
        "tree_sessions": 1,
        "tree_usage": u,
        "tree_cost_usd": cost,
        "tree_unpriced": 0 if s.cost_complete and cost is not None else 1,
        "launcher": cur.launcher if cur else None,
        "launcher_state": None,
        "shown_status": None,
        "damaged": False,
    }


def _changes(ch: Any) -> dict[str, int] | None:
    return None if ch is None else {"files": ch.files, "added": ch.added, "removed": ch.removed}


def _all_turn_changes(s: Session) -> list[dict[str, int] | None]:
    """Every turn's change stats in order; archived turns' from the archive's summary."""
    turns = s.turns
    if not s.head_only:
        return [_changes(t.changes) for t in turns]
    assert s.archive is not None
    archived = [_changes(c) for c in s.archive.changes]
    return [_changes(turns[0].changes), *archived, *(_changes(t.changes) for t in turns[1:])]


def _launcher_row(turns: list[Any]) -> dict[str, Any]:
    """What runs the latest turn (``local``, ``slurm``) and, filled in by a listing while it
    runs, what that launcher says of it (``launcher_state``, see ``_launcher_state``) and the
    status shown for it when that is not just ``running`` (``shown_status``: ``queued (slurm:
    Resources)`` while its job waits in the cluster's queue, ``Probe.label``)."""
    cur = turns[-1] if turns else None
    name = cur.get("launcher") if isinstance(cur, dict) else getattr(cur, "launcher", None)
    return {"launcher": name, "launcher_state": None, "shown_status": None}


def _launcher_state(probe: Probe, s: Session) -> dict[str, Any]:
    """A running row's ``launcher_state``: the launcher's own state word (``PENDING``), the
    word shown instead of ``running`` (``queued``, ``unknown``) and why, and the turn's
    handle (``{"job": "123"}``)."""
    t = s.current
    handle = dict(t.handle) if t is not None and t.handle else {}
    return {"state": probe.state, "shown": probe.shown, "detail": probe.detail, "handle": handle}


def _tree_row(m: dict[str, Any]) -> dict[str, Any]:
    """A row's place in its delegation tree (``engine.tree``). ``children`` and the subtree's
    totals are filled in by a listing (``ls``, ``show``, ``kill``); alone, a row counts itself."""
    cost = m.get("cost_usd")
    return {
        "parent_session_id": m.get("parent_session_id"),
        "parent_run_id": m.get("parent_run_id"),
        "spawn_depth": m.get("spawn_depth") or 1,
        "lifecycle": m.get("lifecycle") or "linked",
        "children": [],
        "tree_sessions": 1,
        "tree_usage": m.get("usage"),
        "tree_cost_usd": cost,
        "tree_unpriced": 0
        if isinstance(cost, (int, float)) and m.get("cost_complete") is not False
        else 1,
    }


def _fleet_row(m: dict[str, Any], turns: list[Any]) -> dict[str, Any]:
    """A row's fleet fields (``engine.scheduler``): its group, priority, budget, what it runs
    after; of its latest turn why it waits (queued), until when it is parked, since when it
    is silent (stalled). ``queue_position`` and ``waiting_for`` are filled in by a listing."""
    cur = turns[-1] if turns else None

    def of(key: str) -> Any:
        return cur.get(key) if isinstance(cur, dict) else getattr(cur, key, None)

    return {
        "group": m.get("group"),
        "priority": m.get("priority") or 0,
        "after": list(m.get("after") or []),
        "max_cost_usd": m.get("max_cost_usd"),
        "max_tokens": m.get("max_tokens"),
        "auto_resumes": m.get("auto_resumes") or 0,
        "queued_at": of("queued_at") or of("started_at") if m.get("status") == "queued" else None,
        "queue_position": None,
        "waiting_for": [],
        "wait": of("wait"),
        "parked_until": of("parked_until"),
        "quiet_since": of("quiet_since"),
    }


_NO_FLEET = _fleet_row({}, [])


def _queue_places(rows: list[dict[str, Any]]) -> None:
    """Fill in each queued row's place in the queue (1 starts first: priority, then first
    queued) and the sessions it still waits for (``--after``), from every row."""
    status = {r["id"]: r["status"] for r in rows}
    queued = [r for r in rows if r["status"] == "queued"]
    queued.sort(key=lambda r: (-(r.get("priority") or 0), r.get("queued_at") or "", r["id"]))
    for place, r in enumerate(queued, 1):
        r["queue_position"] = place
        if r["turns"] == 1:
            r["waiting_for"] = [a for a in r["after"] if status.get(a) not in FINISHED]


def _turn_changes(t: Any) -> dict[str, int] | None:
    """What one turn changed (files, added, removed), from a ``Turn`` or its JSON view."""
    ch = t.get("changes") if isinstance(t, dict) else t.changes
    if ch is None or isinstance(ch, dict):
        return ch
    return {"files": ch.files, "added": ch.added, "removed": ch.removed}


def _worktree(ws: dict[str, Any] | None) -> str | None:
    """The session's own worktree (worktree mode; None once removed or in shared mode)."""
    if not ws or ws.get("mode") != "worktree" or ws.get("removed"):
        return None
    tree: str | None = ws.get("tree")
    return tree


def select_rows(
    rows: list[dict[str, Any]],
    name: str | None = None,
    adapter: str | None = None,
    source: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The rows matching every filter given, as ``zwarm ls`` and ``GET /sessions`` filter
    them (names and sources by glob), the newest ``limit`` of them, still oldest first."""
    from fnmatch import fnmatchcase

    if name is not None:
        rows = [r for r in rows if r.get("name") and fnmatchcase(r["name"], name)]
    if adapter is not None:
        rows = [r for r in rows if r.get("adapter") == adapter]
    if source is not None:
        rows = [r for r in rows if r.get("source") and fnmatchcase(r["source"], source)]
    return rows[-limit:] if limit else rows


def damaged_row(sid: str, problem: str) -> dict[str, Any]:
    return {
        "id": sid,
        "name": None,
        "adapter": None,
        "model": None,
        "status": "damaged",
        "task": None,
        "cwd": None,
        "created_at": None,
        "updated_at": None,
        "turns": 0,
        "usage": None,
        "cost_usd": None,
        "cost_complete": False,
        "cost_source": "unknown",
        "agent_session_id": None,
        "last_message": None,
        "error": problem,
        "reason": None,
        "queued": [],
        "source": None,
        "dangerous": False,
        "branch": None,
        "worktree": None,
        "changes": None,
        "turn_changes": [],
        **_NO_FLEET,
        **_launcher_row([]),
        **_tree_row({}),
        "damaged": True,
    }


def turn_json(store: Store, s: Session, t: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in t.items() if k not in ("supervisor", "agent")}
    out["prompt_path"] = str(store.turn_path(s.id, t["n"], "prompt"))
    out["log_path"] = str(store.turn_path(s.id, t["n"]))
    if t.get("ended_at") and t.get("started_at"):
        out["duration_s"] = round(parse_iso(t["ended_at"]) - parse_iso(t["started_at"]), 3)
    return out


def check_prompt(text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the prompt is empty")
    if "\x00" in text:
        raise InvalidInput("the prompt contains NUL bytes, which no agent accepts")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: a byte like 0xff in argv, or JSON's
        raise InvalidInput(f"the prompt is not valid UTF-8 (character {e.start})") from None
    return text


def _check_workdir(s: Session) -> None:
    """A follow-up's working directory is still there (its removal is named now, not as an
    agent that could not start); one removed after this is named by its supervisor. A zwarm
    3.x record is continued only once confirmed (``legacy_sessions.continuable``)."""
    legacy_sessions.continuable(s)
    if not os.path.isdir(s.cwd):
        raise InvalidInput(
            f"session {s.id}: its working directory {s.cwd!r} no longer exists: nothing started"
        )


def check_timeout(timeout: float | None) -> float | None:
    """``timeout`` in seconds, within the bounds ``meta.json``'s schema keeps (``Seconds``)."""
    if timeout is None:
        return None
    from zwarm.engine import limits
    from zwarm.model.records import Seconds

    return float(limits.need("timeout", timeout, Seconds))


def check_request(req: SpawnRequest | MessageRequest) -> None:
    """``req``'s prompt, time limit and context mode, or ``InvalidInput`` saying what is
    wrong: a request built in Python was checked by nothing (a Struct's constructor checks
    no bound), and one a front end decoded is checked again here."""
    from zwarm.model.requests import CONTEXT_MODES, SpawnRequest

    check_prompt(req.task if isinstance(req, SpawnRequest) else req.message)
    check_timeout(req.timeout)
    if req.context is not None and req.context not in CONTEXT_MODES:
        modes = " or ".join(CONTEXT_MODES)
        raise InvalidInput(f"unknown context mode {req.context!r} (use {modes})")


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
