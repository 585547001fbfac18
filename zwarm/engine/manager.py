"""``BaseSessionManager``: the session life cycle, the same for every agent CLI.

Owns starting, continuing, recording, reconciling and killing turns, built in layers of one
job each: ``engine.core`` (``ManagerCore``: the bound agent, beginning and starting a turn,
the follow-up prompt, reading a turn's log), ``engine.finishing`` (the supervisor's side: what
runs, preparing a turn, recording its end), ``engine.recovery`` (reconcile, kill, retry and
resume), and this module (making a session: ``spawn``; a follow-up: ``inject``; and
``manager_class``). Everything that differs between agents (argv, permissions, event parsing,
how usage/cost accumulate over a native resume, prices, what it sets up before a turn and
keeps after one: the hooks ``Agent.launch_env``, ``after_turn`` and ``reader``, which
``engine.finishing`` and ``engine.core`` call) is the bound ``Agent``'s
(``zwarm.agents.base``); a subclass only binds one (``manager_class``). How a turn runs is
the ``Launcher``'s (``zwarm.launchers``): the engine never starts, inspects or signals a
process itself. Must stay true (each layer's docstring says which of these it keeps):
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

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zwarm.engine import limits, transitions, tree
from zwarm.engine import workspace as ws_mod
from zwarm.engine.core import (
    MESSAGE_KEEP_CHARS,
    MODEL_CHARS,
    TASK_PREVIEW_CHARS,
    check_cwd,
    in_state_dir,
)
from zwarm.engine.finishing import AgentLaunch, StartRefused
from zwarm.engine.recovery import Recovery
from zwarm.errors import ZwarmError
from zwarm.model import ACTIVE, QueuedMessage, Session, Status, Turn
from zwarm.model.records import Attempt, Workspace
from zwarm.model.requests import SpawnRequest
from zwarm.store import pins

if TYPE_CHECKING:
    from zwarm.engine import scheduler as scheduler_mod

__all__ = [
    "AgentLaunch",
    "BaseSessionManager",
    "StartRefused",
    "check_cwd",
    "in_state_dir",
    "manager_class",
]


class BaseSessionManager(Recovery):
    """Subclasses are bound to one ``Agent`` (``agent``, ``name``): ``engine.manager_class``."""

    # ------------------------------------------------------------------ starting turns
    def spawn(
        self,
        req: SpawnRequest,
        *,
        cwd: Path,
        workspace: ws_mod.Plan | ws_mod.Found | ws_mod.Elsewhere | None = None,
        fleet: limits.Fleet | None = None,
        lineage: tree.Lineage | None = None,
        launcher_options: Mapping[str, Any] | None = None,
        attempt: Attempt | None = None,
    ) -> Session:
        """Create a session and start its first turn (the launcher runs it detached), as
        ``req`` asks once the caller has settled it (``Zwarm.spawn``: its model routed, its
        defaults from the config, its fleet options in ``fleet``); ``cwd``: the checked
        working directory. With a worktree ``workspace`` plan, its worktree is made first (and
        removed if this fails). ``lineage``: its parent and depth, verified by the caller
        (``engine.tree``). ``req.launcher``: what runs its turns (``zwarm.launchers``),
        pinned with the session, and ``launcher_options`` its ``req.launcher_option``s,
        parsed and checked by the caller, pinned too. ``attempt``: its place in a best-of set
        (``ops.bestof``)."""
        task, name, dangerous = req.task, req.name, bool(req.dangerous)
        opts = dict(launcher_options or {})
        now = self.env.now_iso()
        sid = self.store.new_id()
        ws, cwd = self._workspace(workspace, sid, name, cwd)
        try:
            s = self._new_session(sid, req, cwd, now, dangerous)
            s.workspace = ws
            s.notify = req.notify  # a desktop notification when it ends (runtime.hooks)
            s.attempt = attempt
            (lineage or tree.Lineage()).apply(s)
            transitions.begin(s, _first_turn(task, now, req.timeout, req.launcher or "local"))
            limits.settle(s, fleet or limits.Fleet(), self.config)
            if self._must_queue(s):  # created queued; the scheduler starts it (or not yet)
                create = lambda: self._create(s, task, name, dangerous, opts)  # noqa: E731
                return self.scheduler().admit_new(s, create)
            self._create(s, task, name, dangerous, opts)
        except BaseException:
            if ws is not None and ws.mode == "worktree":
                with contextlib.suppress(ZwarmError):
                    if ws.host is None:
                        ws_mod.remove(ws, self.env.environ)
                    elif workspace is not None and not isinstance(
                        workspace, ws_mod.Plan | ws_mod.Found
                    ):
                        workspace.discard(sid, ws)
            raise
        try:
            with self.store.transaction(sid) as s:
                self._start(s, s.turns[0])
        except BaseException:
            self.store.release_name(name, sid)
            raise
        return s

    def _workspace(
        self,
        plan: ws_mod.Plan | ws_mod.Found | ws_mod.Elsewhere | None,
        sid: str,
        name: str | None,
        cwd: Path,
    ) -> tuple[Workspace | None, Path]:
        """The session's workspace record, and where its agent runs (in a new worktree)."""
        if isinstance(plan, ws_mod.Plan):
            ws = ws_mod.create(plan, sid, name, self.env.environ)
            return ws, ws_mod.session_cwd(ws, plan.found.rel)
        if isinstance(plan, ws_mod.Found):
            return Workspace("shared", str(plan.repo), str(plan.tree)), cwd
        if plan is not None:  # made on another machine (an ssh host)
            ws, where = plan.create(sid, name)
            return ws, Path(where)
        return None, cwd

    def _create(
        self, s: Session, task: str, name: str | None, dangerous: bool, opts: dict[str, Any]
    ) -> None:
        """Pin the session's launch facts, then write it (and claim its name)."""
        self.store.ensure()
        root = os.path.realpath(self.store.root)
        pin = pins.Pin(s.id, root, self.name, s.cwd, dangerous, s.sandbox, workspace=s.workspace)
        pin.launcher, pin.launcher_options = s.turns[0].launcher, opts
        pin.account = s.account  # spawn --account; else the pass that routes its turn sets it
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
            sandbox=req.sandbox or "off",
        )
        s.cost_source = self.cost_source(s.model)  # type: ignore[assignment]
        # in zwarm's sandbox the agent's own stands down: zwarm's holds instead (agent_launch)
        boxed = s.sandbox != "off"
        s.permissions, unsafe = self.permissions(dangerous or boxed)
        s.dangerous = dangerous or (unsafe and not boxed)
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

    def scheduler(self) -> "scheduler_mod.Scheduler":
        """The state dir's scheduler (``engine.scheduler``), with this manager's config."""
        from zwarm.engine import scheduler as scheduler_mod

        return scheduler_mod.Scheduler(self.store, self.config, self.env, manager_class)


_classes: dict[str, type[BaseSessionManager]] = {}


def manager_class(name: str) -> type[BaseSessionManager]:
    """The session manager bound to agent ``name`` (made once per process); ``UnknownAgent``
    if there is none."""
    if name not in _classes:
        from zwarm import agents

        agent = agents.get(name)
        attrs = {"agent": agent, "name": agent.name, "__module__": type(agent).__module__}
        _classes[name] = type(f"{agent.name.title()}SessionManager", (BaseSessionManager,), attrs)
    return _classes[name]


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


def _first_turn(task: str, now: str, timeout: float | None, launcher: str = "local") -> Turn:
    t = Turn(1, Status.RUNNING, task[:MESSAGE_KEEP_CHARS], "task", now, timeout=timeout)
    t.launcher = launcher
    return t
