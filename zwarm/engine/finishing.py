"""``Finishing``: a turn's supervisor side, from its agent's launch to its recorded end.

Owns what runs for a turn (``agent_launch``: ``AgentLaunch``, with the environment the agent's
``launch_env`` hook makes, or ``StartRefused``), preparing it (a new worktree's setup, the
before snapshot: ``prepare_turn``), and recording its end (``finish_turn``: the agent's
``after_turn`` hook, the after snapshot and change stats, the outcome read from its log, usage
and cost, the status and reason, a park on a usage or rate limit, the next queued turn begun).
Must stay true:
- what decides what runs (agent, working directory, sandbox bypass, zwarm's own sandbox, the
  account whose env the agent gets: ``engine.accounts``) comes from the session's launch pin and
  the trusted config, never from meta.json (``agent_launch``),
  and the pinned directory is checked again for a link into the state dir (``in_state_dir``);
- a turn pinned to zwarm's sandbox runs inside it (``_sandboxed``: ``zwarm.sandbox``) or not
  at all (``StartRefused``), never unsandboxed; the supervisor stays outside it;
- every agent runs with its session's id as ``ZWARM_PARENT_SESSION``, the state dir as
  ``ZWARM_DIR`` and ``ZWARM`` naming a launcher of this zwarm (``env.launcher``; its directory
  first on ``PATH``), so what it spawns becomes its child (``engine.tree``); in zwarm's
  sandbox, where zwarm cannot run (its state dir is hidden), ``ZWARM`` and ``PATH`` name the
  stub that says so instead (``sandbox.bwrap.STUB``);
- per-turn usage and cost are deltas; a turn that used no tokens costs 0 whatever the model's
  price, and any other turn without a known cost stays unknown (``_apply_outcome``);
- a turn that ends past the session's budget (or an ancestor's) ends ``budget_exceeded`` and
  its queue is dropped; a turn parked on a limit begins nothing (``finish_turn``);
- a snapshot never decides a turn's outcome.
"""

import contextlib
import os
import sys
from pathlib import Path

import msgspec

from zwarm.agents.base import AgentSetupError
from zwarm.engine import accounts, limits, transitions, tree
from zwarm.engine import workspace as ws_mod
from zwarm.engine.core import MESSAGE_KEEP_CHARS, ManagerCore, in_state_dir, why
from zwarm.env.launcher import launcher
from zwarm.env.python import NEUTRAL_CWD
from zwarm.errors import ZwarmError
from zwarm.model import RUNS, Reason, Session, Status, Turn, TurnOutcome
from zwarm.model.records import Changes, Workspace
from zwarm.store import Store, pins
from zwarm.system import procs
from zwarm.system.files import open_append, open_read


class Finishing(ManagerCore):
    """The supervisor's side of a turn (``runtime.supervisor`` calls these)."""

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
        if pin.account != s.account:
            raise StartRefused(
                "meta.json disagrees with the session's launch record about its account: refused"
            )
        resume = s.agent_session_id if t.context == "native" else None
        # in zwarm's sandbox the agent's own stands down (nested ones fail): zwarm's holds
        boxed = pin.sandbox != "off"
        opts = msgspec.structs.replace(self.options(s), cwd=pin.cwd, dangerous=pin.bypass or boxed)
        env = self.agent_env()
        login: dict[str, str] = {}
        if pin.account is not None:  # its login: the pinned account's trusted env, over [agent]
            try:
                login = accounts.env_of(self.config, self.name, pin.account, self.env.environ)
            except accounts.AccountError as e:
                raise StartRefused(str(e)) from None
        env = accounts.with_account(env, login)  # (another account's, from its command: gone)
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
        argv = self.build_argv(opts, resume)
        table = self.config.table(self.name)
        try:  # the agent's own set-up (gemini: the session's home), with the pinned cwd
            env = self.agent.launch_env(
                table, env, pin.cwd, self.turn_files(s.id, t.n), self.env.environ
            )
        except AgentSetupError as e:
            raise StartRefused(str(e)) from None
        runner = self.launcher(t)
        prefix = runner.agent_prefix(s.id, t, self._launcher_settings(s, runner))
        if prefix:  # the agent runs elsewhere (a host): through the launcher's program
            if boxed:
                raise StartRefused(
                    f"zwarm's sandbox does not run through the {runner.name} launcher yet: "
                    "refusing to run the turn unsandboxed"
                )
            return AgentLaunch([*prefix, pin.cwd, "--", *argv], NEUTRAL_CWD, env)
        if boxed:
            env = self.agent.sandboxed_env(env)
            return self._sandboxed(argv, pin, env, t)
        limited = any(self.config.data["sandbox"][k] for k in ("memory", "cpus", "pids"))
        t.limits = "none applied: the sandbox is off (they hold in it only)" if limited else None
        return AgentLaunch(argv, pin.cwd, env)

    def _sandboxed(
        self, argv: list[str], pin: pins.Pin, env: dict[str, str], t: Turn
    ) -> "AgentLaunch":
        """``argv`` inside zwarm's sandbox (``zwarm.sandbox``), its policy made from the pin,
        the trusted config and the environment made here, under the turn's limits (made here,
        said on ``t``: ``sandbox.limits``); ``StartRefused`` if it cannot run."""
        from zwarm import sandbox
        from zwarm.sandbox import bwrap
        from zwarm.sandbox import limits as limits_mod

        missing = [k for k, v in bwrap.tools().items() if v is None and k != "setpriv"]
        if missing:
            raise StartRefused(
                f"sandbox {pin.sandbox}: {' and '.join(missing)} not installed "
                "(apt-get install bubblewrap socat); refusing to run the turn unsandboxed"
            )
        cwd = os.path.realpath(pin.cwd)
        ws = pin.workspace
        top = os.path.realpath(ws.tree) if ws is not None and not ws.removed else cwd
        table = self.config.table("sandbox")
        read_only = sandbox.program_dirs(argv[0], env.get("PATH") or os.defpath)
        gd = sandbox.git_dir(ws.repo) if ws is not None else None
        read_only += [os.path.realpath(gd)] if gd is not None else []
        read_only += [str(p) for p in table["read_only"]]
        # files the agent's argv names (gemini's --policy files, in zwarm's package): argv is
        # zwarm's own (the pin and the trusted config; never the prompt), read-only inside
        read_only += [a for a in argv[1:] if os.path.isabs(a) and os.path.isfile(a)]
        home = os.path.realpath(self.env.environ.get("HOME") or "/")
        hidden = [os.path.realpath(self.store.root), *sandbox.private_dirs(self.env.environ)]
        ports = [*table["ports"]]
        ports += [p for p in sandbox.endpoint_ports(env) if p not in ports]
        # by name through the filtering proxy: the agent's own API hosts, its configured
        # endpoints, [sandbox] hosts, and the bridged loopback ports (a client sending those
        # to its proxy too)
        hosts = [*self.agent.api_hosts(self.config.table(self.name), env)]
        hosts += [*sandbox.endpoint_hosts(env), *(str(h) for h in table["hosts"])]
        hosts += [f"{h}:{p}" for p in ports for h in ("127.0.0.1", "localhost")]
        policy = sandbox.Policy(
            cwd=cwd,
            tree=top,
            login=(*_made(self.agent.login_paths(env)), *self.agent.login_files(env)),
            read_only=tuple(read_only),
            hidden=tuple(hidden),
            ports=tuple(ports),
            home=home,
            hosts=tuple(dict.fromkeys(hosts)),
            pins=tuple(f"{k}={v}" for k, v in dict(table["resolve"]).items()),
        )
        try:
            applied = limits_mod.make(sandbox.limits_for(self.name, self.config))
        except OSError as e:
            raise StartRefused(
                f"could not make the turn's cgroup for its limits: {e.strerror or e}; "
                "refusing to run the turn without them"
            ) from None
        t.limits = applied.line or None
        env.pop(limits_mod.FORCE_VAR, None)  # zwarm's own: not passed on to what it starts
        bwrap.sweep_bridges()  # those a SIGKILLed supervisor left
        # every turn gets a bridge directory: its ports, its proxy, and the zwarm stub (zwarm
        # itself cannot run inside: the state dir is hidden), first on PATH and as $ZWARM
        sock_dir = bwrap.bridge_dir()
        env[tree.ZWARM_VAR] = bwrap.STUB
        path = [p for p in (env.get("PATH") or os.defpath).split(os.pathsep) if p]
        env["PATH"] = os.pathsep.join([os.path.dirname(bwrap.STUB), *path])
        shell = limits_mod.shell(applied)
        wrapped = bwrap.command(argv, policy, sock_dir, shell, self.env.python)
        g = applied.group
        made = (g.dirs, g.oom_file) if g is not None else ((), "")
        return AgentLaunch(wrapped, pin.cwd, env, *made, sock_dir)

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
        if ws.host is not None:  # on a host: no snapshots (a diff compares with its base)
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
        if ws is None or ws.removed or ws.host is not None:
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
        stop: tuple[str, str] | None = None,
        hand_off: bool = False,
    ) -> Turn | None:
        """Record turn ``n``'s end (with its after snapshot and change stats); begin the next
        queued turn and return it, or None. ``stop``: why its supervisor stopped the agent
        (a budget passed, a stall), if it did. A turn parked on a limit, or ended past the
        session's budget (then the queue is dropped), begins nothing. With ``hand_off`` (a
        supervisor that runs one turn: ``launchers.slurm``), the next turn is started by its
        launcher in the same transaction, and None returned."""
        self._agent_after_turn(sid, n)
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
            if t.reason == Reason.BUDGET_EXCEEDED:
                s.queue.clear()
            if t.status in (Status.KILLED, Status.PARKED) or not s.queue:
                return None
            nxt = self._begin_next(s)
            if hand_off:
                self._start(s, nxt)
                return None
            return nxt

    def _agent_after_turn(self, sid: str, n: int) -> None:
        """The bound agent's ``after_turn`` (gemini keeps the tool facts its stream leaves
        out): best effort, a failure is one line on the supervisor's log."""
        try:
            self.agent.after_turn(self.turn_files(sid, n))
        except Exception as e:  # a plugin's hook: the turn is recorded as its log tells it
            print(f"zwarm: the {self.name} agent's after_turn failed: {why(e)}", file=sys.stderr)

    def _record(
        self,
        s: Session,
        t: Turn,
        o: TurnOutcome,
        returncode: int,
        timed_out: bool,
        stderr_tail: str,
        stop: tuple[str, str] | None = None,
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
        if reason == Reason.USAGE_LIMIT and t.account is not None:
            got = self._account_limited(s, t, o, why, now)
            if got is None:
                return False
            until, why = got
        else:
            when = limits.park_until(self.config, s, reason, o, now)
            if when is None:
                return False
            until = when
        transitions.park(s, t, iso(now), iso(until), reason, why)
        self.scheduler().mark(s.id)
        return True

    def _account_limited(
        self, s: Session, t: Turn, o: TurnOutcome, why: str, now: float
    ) -> tuple[float, str] | None:
        """Turn ``t`` hit its account's usage limit: the account cools down until the reset
        the agent reported (else ``[limits] usage_limit_fallback`` from now); then, as
        ``[limits] on_usage_limit`` says, (when to resume it, why) or None (it fails).
        "switch": a turn not re-run on another account already, of a session not pinned to
        its account, is resumed at once on another account, ready now (its account cleared:
        the pass routes it; ``_begin_rerun`` makes it a new native session with the
        summarized context), else parked until the earliest reset of its agent's accounts (at
        once when one is ready again);
        "wait": parked until its own account's reset. Lock held."""
        lim = self.config.table("limits")
        reset = o.reset_at if o.reset_at is not None and o.reset_at > now else None
        if reset is None:
            reset = now + float(lim["usage_limit_fallback"])
        assert t.account is not None
        try:
            c = accounts.cool(self.store, self.name, t.account, reset, "usage_limit", why, now)
            reset = c.until
        except ZwarmError as e:  # the cooldown is a hint: the turn is recorded all the same
            print(f"zwarm: account {t.account}'s cooldown not recorded: {e}", file=sys.stderr)
        mode = lim["on_usage_limit"]
        if mode == "fail" or s.auto_resumes >= lim["max_auto_resumes"]:
            return None
        if mode == "wait" or s.account_pinned:
            return max(reset, now + limits.MIN_PARK_S), why
        other = None
        if t.switched_from is None:
            other = accounts.ready_other(self.config, self.store, self.name, t.account, now)
        if other is not None:
            s.account = None  # the pass that resumes it routes it
            return now + limits.MIN_PARK_S, f"{why}; re-run on another account ({other})"
        earliest = accounts.earliest_reset(self.config, self.store, self.name, now)
        if earliest is None:  # another account is ready again already (its reset passed)
            earliest = now
        if earliest < reset:
            s.account = None  # another account resets first: the pass routes it then
        until = max(min(earliest, reset), now + limits.MIN_PARK_S)
        if earliest <= now:
            return until, f"{why}; resumed on an account ready again"
        return until, f"{why}; every {self.name} account is cooling down"

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


class StartRefused(Exception):
    """A turn's agent must not be started (its session's records disagree); says why."""


class AgentLaunch(msgspec.Struct, frozen=True):
    """How to run one turn's agent: its argv, working directory and environment; in zwarm's
    sandbox, the cgroup of its limits and its port bridge's directory, which its supervisor
    removes when the turn ends (``end_launch``)."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    cgroup: tuple[str, ...] = ()  # its limits' cgroup (``limits.Group``): its directories
    oom_file: str = ""  # ... and the file counting its out-of-memory kills
    bridge: str | None = None


def end_launch(launch: "AgentLaunch") -> int:
    """After a turn's agent and all it left are gone: remove its cgroup (killing what is
    still in it) and its bridge directory. The processes the kernel killed in it for want of
    memory."""
    if not launch.cgroup and launch.bridge is None:
        return 0  # imports nothing: an unsandboxed turn's supervisor stays lean
    from zwarm.sandbox import bwrap
    from zwarm.sandbox import limits as limits_mod

    group = limits_mod.Group(launch.cgroup, launch.oom_file) if launch.cgroup else None
    ooms = limits_mod.release(group)
    if launch.bridge is not None:
        bwrap.remove_bridge(launch.bridge)
    return ooms


def _made(dirs: tuple[str, ...]) -> list[str]:
    """``dirs`` (an agent's login directories: ``Agent.login_paths``), each made (0700) if
    missing, so that what its CLI writes there outlives a sandboxed turn."""
    for d in dirs:
        with contextlib.suppress(OSError):
            os.makedirs(d, mode=0o700, exist_ok=True)
    return list(dirs)


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


def _nothing_billed(o: TurnOutcome) -> bool:
    """Whether the turn's outcome shows nothing was billed (its usage is already zero): the
    agent reported zero tokens, or it reported the failure before the model answered at all
    (a 429 on the first request). A turn cut off without a report may have been billed."""
    return o.usage is not None or (o.status is Status.FAILED and o.unanswered)
