"""The per-session supervisor: a small detached process that runs a session's turns.

Started by ``spawn``/``inject`` as ``python -m zwarm.supervisor STATE_DIR SESSION_ID``, in its
own session so it outlives the command that started it. For each turn it starts the agent in
its own process group with the prompt file as stdin and the turn log as stdout (the agent
writes its output straight to disk, byte for byte, as it streams: nothing is buffered here,
so nothing is lost if this process dies), waits for it (enforcing the turn's timeout), kills
whatever the agent left in its group, then records the outcome and starts the next queued
message. Must stay true: the agent's exit status is collected before its process group is
killed, without reaping the leader, so the group id can't be reused meanwhile.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from zwarm import procs
from zwarm.models import ProcRef, Status


def run(state_dir: Path, sid: str) -> int:
    from zwarm.api import Zwarm
    from zwarm.env import Env

    api = Zwarm(env=Env(state_dir=state_dir))
    store = api.store
    me = procs.identify(os.getpid()) or ProcRef(os.getpid(), 0.0)
    s = store.load(sid)
    manager = api.manager(s.adapter)
    n: int | None = _my_turn(s.turns[-1].n if s.turns else None, s.turns[-1].status)
    while n is not None:
        timeout = store.load(sid).turns[n - 1].timeout
        proc = manager.start_agent(sid, n, me)
        if proc is None:  # killed before it started, or the agent could not start (recorded)
            break
        timed_out = _wait(proc.pid, timeout)
        returncode = proc.wait()
        n = manager.finish_turn(sid, n, returncode, timed_out, me)
    return 0


def _my_turn(n: int | None, status: Status) -> int | None:
    return n if n is not None and status is Status.RUNNING else None


def _wait(pid: int, timeout: float | None) -> bool:
    """Wait for the agent to exit (not reaping it), then kill its group's leftovers.

    Returns True if the turn timed out.
    """
    timed_out = threading.Event()
    timer = None
    if timeout:
        # identified now, while it is our unreaped child: when the timer fires it may have
        # been reaped and its pid reused, and a fresh lookup would name another process
        agent = procs.identify(pid)
        timer = threading.Timer(timeout, _expire, (agent, timed_out))
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
    return timed_out.is_set()


def _expire(agent: ProcRef | None, flag: threading.Event) -> None:
    flag.set()
    if agent is not None:
        procs.kill_tree(agent, grace=2.0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m zwarm.supervisor STATE_DIR SESSION_ID", file=sys.stderr)
        return 2
    try:
        return run(Path(args[0]), args[1])
    except Exception as e:
        traceback.print_exc()
        _fail_current(Path(args[0]), args[1], f"supervisor error: {type(e).__name__}: {e}")
        return 1


def _fail_current(state_dir: Path, sid: str, why: str) -> None:
    """Best effort: never leave a turn claiming to run after the supervisor crashed."""
    from zwarm.models import Session
    from zwarm.store import Store

    store = Store(state_dir)

    def mark(s: Session) -> None:
        t = s.current
        if t is not None and t.status is Status.RUNNING:
            if t.agent is not None:
                procs.kill_tree(t.agent)
            t.status, t.error = Status.FAILED, why
            import time

            from zwarm.env import iso

            t.ended_at = s.updated_at = iso(time.time())

    try:
        store.update(sid, mark)
    except Exception:
        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
