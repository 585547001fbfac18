"""The per-session supervisor: a small detached process that runs a session's turns.

Started by ``LocalLauncher`` as ``python -I -m zwarm.runtime.supervisor STATE_DIR ID`` in its
own session with ``/`` as its working directory, so it outlives the command that started it and
imports nothing from the state dir; or forked, ready-made, by the state dir's fork server
(``runtime.forkserver``), which then calls ``main`` exactly so. A Slurm job (``launchers.slurm``)
runs it with ``--turn N`` on a compute node: that one turn only (``run_turn``; the next is a
job of its own, submitted as this one ends). For each turn it starts the agent in its own
process group with the prompt file as stdin and the turn log as stdout (the agent writes its
output straight to disk, byte for byte, as it streams: nothing is buffered here, so nothing is
lost if this process dies), waits for it (enforcing the turn's timeout), kills whatever the
agent left behind, then records the outcome and starts the next queued message. Around each
agent run the engine prepares the session's workspace (``manager.prepare_turn``: a new
worktree's setup, the snapshot before) and records the snapshot after
(``manager.finish_turn``). A best-of attempt's turn, once recorded, is settled before the next
queued turn's agent starts (``engine.bestof.after_turn``: its protected paths restored, zwarm's
checks run in its worktree, the evidence written once). When the session has ended, its hooks
are started detached (``runtime.hooks``), never waited for. While an agent runs, a watch
(``runtime.watch``) marks the turn stalled and enforces the session's budget. A turn parked on
a usage or rate limit keeps its supervisor, which waits for the turn's time; at the end a
scheduler pass (``engine.scheduler``) starts what may start.
Must stay true:
- it reads its turn under the session lock (its starter holds the lock until that turn is
  saved) and runs it only if the turn names it as supervisor and is running (a turn still
  queued, left by a scheduler pass that died before recording its start, is never run);
- the agent is started and recorded inside one transaction (under the session lock), so
  ``kill`` either sees it recorded or prevents it from starting;
- the agent's exit status is collected before its process group is killed, without reaping
  the leader, so the group id can't be reused meanwhile;
- it builds only what it needs (store, config, the session's manager), not the API facade,
  and imports no more than a turn needs (no click, rich, psutil, hashlib/OpenSSL, shutil,
  dataclasses: ``tests/runtime/test_supervisor_lean.py`` holds the list);
- it is the child subreaper of its agents (Linux): what leaves the agent's group (setsid, a
  double fork) is re-parented to it, so at a turn's end it finds the marked leftovers among
  its own descendants, at the cost of what the agent left, never of every process on the
  machine (a scan of /proc where children cannot be listed); it reaps them once the agent is;
- start-up runs without the cyclic GC (it allocates much and frees little) and the process
  ends with ``os._exit`` once all is recorded (no teardown); the GC is on, start-up objects
  frozen, from the moment it waits for its agent, however long the turn or a parked wait.
"""

from __future__ import annotations

import gc

if __name__ == "__main__":  # a supervisor's start allocates much and frees little: no
    gc.disable()  # collections until it waits for its agent (``_gc_on``)

import contextlib  # every import below runs with the GC switched off
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from zwarm.model import RUNS
from zwarm.system import procs

if TYPE_CHECKING:
    from zwarm.engine.manager import AgentLaunch, BaseSessionManager
    from zwarm.model import Reason, Turn
    from zwarm.runtime.watch import Watch
    from zwarm.store import Store
    from zwarm.system.boot import ProcRef

PARKED_POLL_S = 1.0  # a parked session's supervisor looks whether it was killed or resumed
PASS_WAIT_S = 120.0  # longest a supervisor waits for the scheduler lock before it exits
_SUBREAPER = False  # set by main: this process is the child subreaper of its agents


def run(state_dir: Path, sid: str) -> int:
    from zwarm.store import Store

    store = Store(state_dir)
    with store.lock(sid):  # whoever started us holds it until our turn is saved
        s = store.load(sid, history=False)
    manager = _manager(store, s.adapter)
    turn, me = s.current, procs.identify(os.getpid())
    mine = turn is not None and turn.supervisor in (None, me)
    n = turn.n if turn is not None and mine and turn.status in RUNS else None
    while n is not None:
        nxt = _one_turn(manager, sid, n)
        if s.attempt is not None:  # a best-of attempt: zwarm's checks, before the next turn
            from zwarm.engine import bestof

            bestof.after_turn(store, manager.config, manager.env.environ, sid, n)
        n = nxt.n if nxt is not None else None
    if mine:  # a parked turn: wait for its time; then let the scheduler start what may start
        _afterwards(manager, sid, me)
    if mine:  # the session it ran has ended: its hooks run detached (runtime.hooks)
        from zwarm.runtime import hooks

        hooks.session_ended(store, manager.config, sid)
    return 0


def run_turn(state_dir: Path, sid: str, n: int) -> int:
    """Run turn ``n`` of ``sid`` alone (``--turn N``): what a cluster job runs
    (``launchers.slurm``). Only if that turn is running, not yet run by anyone, and this
    process is what its launcher started for it (``Launcher.runs_here``); a first turn that
    runs ``--after`` others is checked against them first (``Scheduler.held``). The next
    queued turn is handed to its launcher (a job of its own); a parked turn is left to the
    scheduler. SIGTERM (scancel, a time limit, preemption) stops the agent and exits without
    recording: the launcher's reconcile says why. The session's hooks, if it ended, run here
    (waited for: a job's leftovers die with it). Exit status: 0 unless the session ended
    failed or killed (what a Slurm ``afterok`` dependency waits on), 2 if not ours to run."""
    from zwarm.env import Env
    from zwarm.launchers import get_launcher
    from zwarm.store import Store

    store = Store(state_dir)
    with store.lock(sid):  # whoever submitted us may still hold it: our turn is saved then
        s = store.load(sid, history=False)
    t = s.turn(n)
    ours = t is not None and t.status in RUNS and t.supervisor is None and t.agent is None
    launcher = get_launcher(t.launcher, store, Env(state_dir=store.root)) if t else None
    if not ours or t is None or launcher is None or not launcher.runs_here(sid, t):
        why = f"turn {n} of session {sid} is not this job's to run"
        print(f"zwarm supervisor: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda signum, _: _terminated(sid, signum))
    manager = _manager(store, s.adapter)
    if not manager.scheduler().held(sid):
        _one_turn(manager, sid, n, hand_off=True)
        _afterwards(manager, sid, procs.identify(os.getpid()), wait_parked=False)
    from zwarm.model import Status
    from zwarm.runtime import hooks

    s = store.load(sid, history=False)
    hooked = s.notify or any(manager.config.data["hooks"][e] for e in hooks.EVENTS)
    if s.status.finished and hooked:  # run here: what a job leaves running dies with it
        hooks.run(store.root, sid, hooks.unmarked(os.environ))
    return 1 if s.status in (Status.FAILED, Status.KILLED) else 0


def _terminated(sid: str, signum: int) -> None:
    """SIGTERM from outside (the job cancelled, its time up): stop the agent, go unrecorded."""
    procs.kill_session(None, sid, grace=2.0)
    os._exit(128 + signum)


def _one_turn(manager: BaseSessionManager, sid: str, n: int, hand_off: bool = False) -> Turn | None:
    """Run turn ``n``: prepare the workspace, start the agent, wait, record. The next turn
    begun, or None (with ``hand_off``, it was handed to its launcher)."""
    kept = manager.prepare_turn(sid, n)  # the workspace: worktree setup, snapshot
    if kept is None:  # it ended while being prepared (killed, or its setup failed)
        return None
    started = _start_agent(manager, sid, n, kept)
    if started is None:  # killed before it started, or it could not start (recorded)
        return None
    proc, timeout, launch = started
    watch = _watch(manager, sid, n, proc.pid)
    timed_out = _wait(proc.pid, sid, timeout)
    if watch is not None:
        watch.finish()
    returncode = proc.wait()
    _reap_orphans()
    stop: tuple[str, str] | None = watch.stopped if watch is not None else None
    stop = _out_of_memory(launch, returncode) or stop
    if stop is None and not timed_out:  # what only its launcher knows (a host lost it)
        stop = _launcher_says(manager, sid, n)
    return manager.finish_turn(sid, n, returncode, timed_out, stop, hand_off=hand_off)


def _launcher_says(manager: BaseSessionManager, sid: str, n: int) -> tuple[str, str] | None:
    """Why turn ``n`` ended, if its launcher knows better than its agent's exit
    (``Launcher.ended``): a reason it may record, and a message."""
    t = manager.store.load(sid, history=False).turn(n)
    if t is None:
        return None
    runner = manager.launcher(t)
    said = runner.ended(sid, t)
    return None if said is None else (runner.recordable(said[0]), said[1])


def _out_of_memory(launch: AgentLaunch, returncode: int) -> tuple[Reason, str] | None:
    """End the turn's sandbox (``end_launch``: its cgroup, its bridge); why the turn failed
    if the kernel killed its processes at its memory limit and the agent did not succeed."""
    from zwarm.engine.finishing import end_launch

    ooms = end_launch(launch)
    if not ooms or returncode == 0:
        return None
    from zwarm.model import Reason

    why = f"out of memory: the kernel killed {ooms} process(es) of the turn at its limit"
    return Reason.OUT_OF_MEMORY, f"{why} ([sandbox] memory)"


def _manager(store: Store, adapter: str) -> BaseSessionManager:
    from zwarm import config as config_mod
    from zwarm.engine import manager_class
    from zwarm.env import Env

    config = config_mod.load(store.root / "config.toml")
    return manager_class(adapter)(store, config, Env(state_dir=store.root))


def _start_agent(
    manager: BaseSessionManager, sid: str, n: int, keep_stderr: bool = False
) -> tuple[subprocess.Popen[bytes], float | None, AgentLaunch] | None:
    """Start turn ``n``'s agent and record it, in one transaction; None if it must not run."""
    from zwarm.engine.manager import StartRefused
    from zwarm.errors import ZwarmError

    me = procs.identify(os.getpid())
    with manager.store.transaction(sid, history=False) as s:
        t = s.turn(n)
        if t is None or t.status not in RUNS:  # ended, or still queued (its starter died)
            return None
        t.supervisor = me
        try:
            launch = manager.agent_launch(s, t)
            proc = _popen(manager, sid, n, launch, keep_stderr)
        except (StartRefused, ZwarmError, ValueError) as e:
            manager.fail_start(s, t, str(e))
            _end_unstarted(locals().get("launch"))
            return None
        except OSError as e:
            _end_unstarted(locals().get("launch"))
            argv0 = launch.argv[0] if "launch" in locals() else "?"
            why = f"could not start agent {argv0!r}: {e.strerror or e}"
            if "launch" in locals() and e.filename == launch.cwd:  # Popen could not enter it
                why = f"could not enter the working directory {launch.cwd!r}: {e.strerror}"
            manager.fail_start(s, t, why)
            return None
        t.agent = procs.identify(proc.pid)
        return proc, t.timeout, launch


def _end_unstarted(launch: AgentLaunch | None) -> None:
    """A launch whose agent never started: its cgroup and bridge go (``end_launch``)."""
    if launch is not None:
        from zwarm.engine.finishing import end_launch

        end_launch(launch)


def _watch(manager: BaseSessionManager, sid: str, n: int, pid: int) -> Watch | None:
    """A watch over turn ``n`` (stall, budget: ``runtime.watch``) if its session needs one."""
    from zwarm.runtime import watch

    s = manager.store.load(sid, history=False)
    t = s.turn(n)
    if not watch.needed(s) or t is None:
        return None
    w = watch.Watch(manager, sid, n, t.agent or procs.identify(pid))
    w.start()
    return w


def _afterwards(
    manager: BaseSessionManager, sid: str, me: ProcRef | None, wait_parked: bool = True
) -> None:
    """After the session's last turn here: if it was parked, wait (checking every second)
    until its time, then run a scheduler pass, which resumes it; in any case run a pass if a
    session waits or caps are set, since a slot may have freed (``engine.scheduler``)."""
    import time

    from zwarm.engine import manager_class, scheduler
    from zwarm.env import parse_iso
    from zwarm.model import Status

    sched = scheduler.Scheduler(manager.store, manager.config, manager.env, manager_class)
    _gc_on()  # a parked wait may last hours
    while True:
        s = manager.store.load(sid, history=False)
        t = s.current
        if t is None or t.status is not Status.PARKED or t.supervisor != me or not wait_parked:
            break
        left = parse_iso(t.parked_until or s.updated_at) - manager.env.clock()
        if left <= 0:
            break
        time.sleep(min(left, PARKED_POLL_S))
    try:
        if sched.pending() or scheduler.capped(manager.config):
            sched.run(PASS_WAIT_S)  # held longer (by what?): the next command's pass runs it
        # a session of this agent queued while every account cools down (this turn's limit,
        # or another's): waited for as a parked turn is, so a pass at the first reset starts
        # it with no zwarm command run; the wait ends when none is queued any more
        waited = False
        while wait_parked:
            queued, reset = sched.account_reset(manager.name)
            if not queued or (reset is None and not waited):
                break
            if reset is None:  # an account is ready again
                if sched.run(PASS_WAIT_S) is None:
                    break  # the lock held that long: the next command's pass starts it
                waited = False
                continue
            waited = True
            time.sleep(max(0.0, min(reset - manager.env.clock(), PARKED_POLL_S)))
    except Exception as e:  # the turn is recorded; the next command's pass starts the rest
        print(f"zwarm supervisor: scheduler pass failed: {type(e).__name__}: {e}", file=sys.stderr)


def _popen(
    manager: BaseSessionManager, sid: str, n: int, launch: AgentLaunch, keep_stderr: bool
) -> subprocess.Popen[bytes]:
    from zwarm.system.files import open_append, open_read

    store = manager.store
    fds = [open_read(store.turn_path(sid, n, "prompt"))]
    try:
        for ext in ("jsonl", "stderr"):
            path = store.turn_path(sid, n, ext)
            if not (ext == "stderr" and keep_stderr):  # kept: it holds the setup's output
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # a new turn's files: anything planted there (a link) goes
            fds.append(open_append(path))
        return subprocess.Popen(
            launch.argv,
            stdin=fds[0],
            stdout=fds[1],
            stderr=fds[2],
            cwd=launch.cwd,
            env=launch.env,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        for fd in fds:
            os.close(fd)


def _wait(pid: int, sid: str, timeout: float | None) -> bool:
    """Wait for the agent to exit (not reaping it), then kill what it left behind: its
    group, and what left the group but carries the session's marker (``_stop_leftovers``).
    Returns True if it timed out."""
    _gc_on()
    timed_out = threading.Event()
    timer = None
    if timeout:
        # identified now, while it is our unreaped child: when the timer fires it may have
        # been reaped and its pid reused, and a fresh lookup would name another process
        agent = procs.identify(pid)
        timer = threading.Timer(timeout, _expire, (agent, sid, timed_out))
        timer.daemon = True
        timer.start()
    while True:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    if timer:
        timer.cancel()
    try:
        os.killpg(pid, signal.SIGKILL)  # leader is a zombie here: the group id is still ours
    except (ProcessLookupError, PermissionError):
        pass
    _stop_leftovers(sid)
    return timed_out.is_set()


def _stop_leftovers(sid: str) -> None:
    """Stop what left the agent's group (setsid, a double fork) but kept the marker. As a
    child subreaper, all of it is still below this process: walking our own descendants
    costs what the agent left, where a scan of /proc costs every process of the machine."""
    below = _descendants() if _SUBREAPER else None
    if below is None:
        procs.kill_session(None, sid, grace=1.0)
    else:
        procs.stop_marked(below, sid, grace=1.0)


def _descendants() -> list[ProcRef] | None:
    """Every process below this one (from each thread's ``children`` list in /proc), None
    if the kernel does not list children."""
    me = os.getpid()
    if not os.path.exists(f"/proc/{me}/task/{me}/children"):
        return None
    out: list[ProcRef] = []
    todo, seen = [me], {me}
    while todo:
        for pid in _children(todo.pop()):
            ref = procs.identify(pid) if pid not in seen else None
            if ref is not None:
                seen.add(pid)
                out.append(ref)
                todo.append(pid)
    return out


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:  # gone meanwhile
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids.extend(int(k) for k in f.read().split())
        except (OSError, ValueError):
            continue
    return kids


def _reap_orphans() -> None:
    """Reap the zombies of orphans re-parented to us (once the agent itself is reaped)."""
    if not _SUBREAPER:
        return
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _expire(agent: ProcRef | None, sid: str, flag: threading.Event) -> None:
    flag.set()
    procs.kill_session(agent, sid, grace=2.0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    n = None
    if len(args) == 4 and args[0] == "--turn" and args[1].isdigit():
        n, args = int(args[1]), args[2:]
    if len(args) != 2:
        usage = "usage: python -I -m zwarm.runtime.supervisor [--turn N] STATE_DIR SESSION_ID"
        print(usage, file=sys.stderr)
        return 2
    global _SUBREAPER
    _SUBREAPER = procs.become_subreaper()
    try:
        return run(Path(args[0]), args[1]) if n is None else run_turn(Path(args[0]), args[1], n)
    except Exception as e:
        import traceback

        traceback.print_exc()
        _fail_current(Path(args[0]), args[1], f"supervisor error: {type(e).__name__}: {e}")
        return 1


def _fail_current(state_dir: Path, sid: str, why: str) -> None:
    """Best effort: never leave a turn claiming to run after the supervisor crashed."""
    import time

    from zwarm.engine import transitions
    from zwarm.env import iso
    from zwarm.model import Reason, Status
    from zwarm.store import Store

    try:
        with Store(state_dir).transaction(sid, history=False) as s:
            t = s.current
            if t is not None and t.status in RUNS:
                procs.kill_session(t.agent, sid)
                now = iso(time.time())
                transitions.end(s, t, Status.FAILED, now, Reason.SUPERVISOR_LOST, why)
    except Exception:
        import traceback

        traceback.print_exc()


def _gc_on() -> None:
    """Collect garbage from now on (once the agent runs: a turn, or a parked wait, can be
    long), everything the start-up made frozen first, so that collections skip it."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _exit(rc: int) -> NoReturn:
    """Exit without the interpreter's teardown, which would free every module and object
    one by one (~10 ms of CPU per turn): everything is written and closed by now, but stdio."""
    for f in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            f.flush()
    os._exit(rc)


if __name__ == "__main__":
    _exit(main())
