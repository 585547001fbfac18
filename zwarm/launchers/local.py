"""``LocalLauncher``: each turn runs under a detached supervisor process on this machine.

Owns starting the supervisor (``runtime.supervisor``), telling whether it lives, and stopping
a turn's processes (many turns' at once for ``kill --all``). A supervisor is forked by the
state dir's fork server (``runtime.forkserver``) when one serves this environment, else it is
a new interpreter (and a server is started for the turns after). Must stay true:
- the supervisor is started isolated (``env.python.python_argv``: ``python -I``, no
  ``PYTHON*`` variables, no user site, no script dir on ``sys.path``; a forked one inherits
  this from its server, started the same way) with ``/`` as its working directory
  (``env.python.NEUTRAL_CWD``), so nothing an agent planted in the state dir or its working
  directory is ever imported;
- a forked supervisor runs exactly what a new interpreter would, with the environment this
  command would have given it (sent with the request); anything the server's answer does not
  prove (``forking.fork``) costs a new interpreter, never a turn;
- it runs in its own session with ``ZWARM_SUPERVISOR_OF=<id>`` and without any inherited
  ``ZWARM_SESSION_ID``; its agent gets ``ZWARM_SESSION_ID=<id>``: these markers are how a kill
  verifies a process belongs to the session (``system.procs``);
- it is recorded on the turn (pid, start ticks, boot id) in the same transaction that made the
  turn running, before this call returns;
- a stop returns once the supervisor is gone (it records how its agent ended), or has been
  terminated after ``SUPERVISOR_GRACE_S``: only a supervisor verified by its marker is waited
  for or signalled.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from zwarm.env.children import for_children
from zwarm.env.python import NEUTRAL_CWD, python_argv
from zwarm.launchers.base import NO_SETTINGS, Launcher
from zwarm.model import Turn
from zwarm.system import procs
from zwarm.system.files import open_append

if TYPE_CHECKING:
    import subprocess

    from zwarm.errors import ZwarmError

# subprocess and threading (with signal, select) are imported where a supervisor is started:
# a listing of running sessions loads this module only to ask whether they live
SUPERVISOR = "zwarm.runtime.supervisor"
SUPERVISOR_GRACE_S = 10.0


class LocalLauncher(Launcher):
    name: ClassVar[str] = "local"

    def start(
        self,
        sid: str,
        turn: Turn,
        after: Sequence[Turn] = (),
        after_any: bool = False,
        settings: Mapping[str, Any] = NO_SETTINGS,
    ) -> None:
        prefix = self.wrapper(settings)
        log = open_append(self.store.session_dir(sid) / "supervisor.log")
        try:
            pid = None if prefix else self._forked(sid, log)
            if pid is None:
                pid = self._spawned(sid, log, prefix)
        finally:
            os.close(log)
        turn.launcher = self.name
        turn.supervisor = procs.identify(pid)

    def wrapper(self, settings: Mapping[str, Any]) -> list[str]:
        """The argv the supervisor is started under (none here): a launcher built on this
        one that runs it otherwise on this machine (``nice``, examples/toy-launcher) returns
        the program and its arguments, which must ``exec`` the rest unchanged (its pid is the
        supervisor's); such a supervisor is always a new interpreter, never forked."""
        return []

    def _forked(self, sid: str, log: int) -> int | None:
        """The supervisor forked by the state dir's fork server (``runtime.forkserver``), or
        None: not usable here, refused, or no server yet (one is started for later turns)."""
        from zwarm.launchers import forking

        if not forking.usable(self.env.python, self.env.environ):
            return None
        environ = supervisor_env(self.env.environ, forking.PLACEHOLDER)
        name = forking.address(self.store.root, self.env.python, environ)
        try:
            return forking.fork(name, sid, log, supervisor_env(self.env.environ, sid))
        except forking.Absent:
            self._start_server(name, environ)
            return None

    def _start_server(self, name: str, environ: dict[str, str]) -> None:
        """Start the server ``name`` (detached) unless another is starting for this state dir
        (``forking.start_lock``): it holds the lock until it listens."""
        from zwarm.launchers import forking

        try:
            lock = forking.start_lock(self.store.root)
        except forking.Busy:
            return
        try:
            log = open_append(self.store.root / forking.LOG)
        except OSError:
            _close(lock)
            return
        argv = forking.start_argv(self.env.python, self.store.root, name, lock)
        import subprocess

        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=NEUTRAL_CWD,
                env=environ,
                start_new_session=True,
                close_fds=True,
                pass_fds=() if lock is None else (lock,),
            )
        except OSError:
            return  # turns run as new interpreters meanwhile
        finally:
            os.close(log)
            _close(lock)
        _reap_later(proc)

    def _spawned(self, sid: str, log: int, prefix: Sequence[str] = ()) -> int:
        """A new interpreter as the supervisor (``python -I -m zwarm.runtime.supervisor``),
        under ``prefix`` (``wrapper``)."""
        import subprocess

        proc = subprocess.Popen(
            [*prefix, *python_argv(self.env.python, SUPERVISOR, str(self.store.root), sid)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=NEUTRAL_CWD,
            env=supervisor_env(self.env.environ, sid),
            start_new_session=True,
            close_fds=True,
        )
        _reap_later(proc)
        return proc.pid

    def alive(self, sid: str, turn: Turn) -> bool:
        ref = turn.supervisor
        return ref is not None and procs.verified(ref, sid, procs.SUPERVISOR_MARKER)

    def stop(self, sid: str, turn: Turn) -> None:
        self.stop_many([(sid, turn)])

    def stop_many(self, items: Sequence[tuple[str, Turn]]) -> dict[str, ZwarmError]:
        """Stop the turns together: every agent's tree at once (``procs.kill_sessions``: one
        scan of /proc for all, every SIGTERM sent before any wait), then wait for all their
        (verified) supervisors, which record their turns' ends, and terminate any that
        outlive ``SUPERVISOR_GRACE_S``."""
        procs.kill_sessions([(t.agent, sid) for sid, t in items])
        sups = [(t.supervisor, sid) for sid, t in items if t.supervisor is not None]
        mine = [(r, sid) for r, sid in sups if procs.verified(r, sid, procs.SUPERVISOR_MARKER)]
        late = {r.pid for r in procs.wait_all_gone([r for r, _ in mine], SUPERVISOR_GRACE_S)}
        left = [(r, sid) for r, sid in mine if r.pid in late]
        procs.terminate_all(left, procs.SUPERVISOR_MARKER)
        return {}


def supervisor_env(environ: Mapping[str, str], sid: str) -> dict[str, str]:
    env = {k: v for k, v in for_children(environ).items() if k != procs.MARKER}
    env[procs.SUPERVISOR_MARKER] = sid
    return env


_reaping: set[subprocess.Popen[bytes]] = set()


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    """Reap a detached supervisor when it exits, so a long-lived caller keeps no zombies."""
    import threading

    _reaping.add(proc)

    def wait() -> None:
        proc.wait()
        _reaping.discard(proc)

    threading.Thread(target=wait, name=f"zwarm-reap-{proc.pid}", daemon=True).start()
