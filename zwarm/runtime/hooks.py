"""What runs when a session ends: the ``[hooks]`` commands and ``spawn --notify``'s desktop
notification.

Owns running them. The supervisor calls ``session_ended`` once the session it ran has ended
(its last turn recorded, nothing queued); if a hook is set or a notification was asked for,
that starts ``python -I -m zwarm.runtime.hooks STATE_DIR ID`` detached (its own session,
working directory ``/``) and returns at once: the supervisor exits as before, and ``kill`` never
waits on a hook. That process runs ``on_finish`` (every end), then ``on_fail`` (a failed end,
not a killed one), each with the session's JSON on stdin as ``zwarm show --json`` prints it
(asked of zwarm's own command line, run isolated: this entry point, like the supervisor, sits
above the engine and never builds the facade, ``zwarm.api``), in the directory that holds the
state dir, under ``[hooks] timeout_s`` (then its whole process group is killed), its output
and how it ended appended to ``sessions/<id>/hooks.log``. Must stay true:
- a hook never changes the session: it starts after the end is recorded, and nothing it does,
  prints or fails to do is written to ``meta.json``;
- hook commands come only from a ``config.toml`` the user trusted (``Config.get`` checks): an
  untrusted or invalid one runs nothing, and the log says why;
- a hook carries none of the session's process markers (``procs``), so the session's own
  clean-ups never mistake it for its agent, and it gets ``ZWARM_HOOK_SESSION``,
  ``ZWARM_HOOK_STATUS``, ``ZWARM_HOOK_EVENT`` and ``ZWARM_DIR`` instead;
- nothing here raises into the supervisor: a failure to start hooks is one line in its log.
A session that ends without its supervisor (it died, and a later read reconciled the session
as ``supervisor_lost``) runs no hook: nothing of zwarm is there to run it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from zwarm.system import procs

if TYPE_CHECKING:
    from zwarm.config import Config
    from zwarm.model import Session
    from zwarm.store import Store

EVENTS = ("on_finish", "on_fail")
NOTIFY_TIMEOUT_S = 10.0
SHOW_TIMEOUT_S = 120.0  # ``zwarm show --json`` of the session, for the hooks' stdin
LOG_NAME = "hooks.log"


def session_ended(store: Store, config: Config, sid: str) -> None:
    """Start the hook runner for ``sid`` if the session has ended and a hook is set (or a
    notification asked for). Never raises; returns at once."""
    try:
        s = store.load(sid)
        if not s.status.finished:
            return  # restarted meanwhile (a new turn): it has not ended
        if s.notify or any(config.data["hooks"][e] for e in EVENTS):
            launch(store.root, sid)
    except Exception as e:  # the session is recorded: hooks are extra, never its failure
        print(f"zwarm hooks: not started: {type(e).__name__}: {e}", file=sys.stderr)


def launch(root: Path, sid: str) -> None:
    """Start the runner detached, its stderr appended to the session's hooks.log."""
    from zwarm.env.python import NEUTRAL_CWD, python_argv
    from zwarm.system.files import open_append

    log = open_append(root / "sessions" / sid / LOG_NAME)
    try:
        subprocess.Popen(
            python_argv(sys.executable, "zwarm.runtime.hooks", str(root), sid),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=NEUTRAL_CWD,
            env=unmarked(os.environ),
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(log)


def unmarked(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the session markers ``procs`` identifies processes by (nor the
    orchestrator's own key, ``env.children.for_children``)."""
    from zwarm.env.children import for_children

    drop = (procs.MARKER, procs.SUPERVISOR_MARKER)
    return {k: v for k, v in for_children(environ).items() if k not in drop}


# ---------------------------------------------------------------------- the runner
def run(root: Path, sid: str, environ: Mapping[str, str]) -> int:
    """Run the session's hooks and notification (the detached runner's work)."""
    from zwarm import config as config_mod
    from zwarm.env import Env
    from zwarm.errors import ZwarmError
    from zwarm.store import Store

    store = Store(Env(state_dir=root, environ=dict(environ), cwd=root.parent).find_state_dir())
    log = Log(store.session_dir(sid) / LOG_NAME)
    try:
        s = store.load(sid)
        data = show_json(store.root, sid, environ)
    except ZwarmError as e:
        log.line(f"hooks not run: {e}")
        return 1
    events = ["on_finish"] + (["on_fail"] if s.status.value == "failed" else [])
    config: Config | None = None
    for event in events:
        try:  # a config.toml the user did not trust runs nothing (``Config.get`` checks)
            config = config or config_mod.load(store.root / "config.toml", environ)
            cmd = config.get("hooks", event)
            limit = float(config.get("hooks", "timeout_s"))
        except ZwarmError as e:
            log.line(f"{event}: not run: {e}")
            continue
        if cmd:
            env = {
                **unmarked(environ),
                "ZWARM_HOOK_SESSION": sid,
                "ZWARM_HOOK_STATUS": s.status.value,
                "ZWARM_HOOK_EVENT": event,
                "ZWARM_DIR": str(root),
            }
            run_one(event, cmd, data, env, root.parent, limit, log)
    if s.notify:
        notify(s, environ, log)
    return 0


def show_json(root: Path, sid: str, environ: Mapping[str, str]) -> bytes:
    """The session's JSON as ``zwarm show --json`` prints it: zwarm's own command line, run
    isolated (``env.python``) in ``/``, without the session's markers; ``ZwarmError`` with
    its one line if it fails."""
    from zwarm.env.python import NEUTRAL_CWD, python_argv
    from zwarm.errors import ZwarmError

    argv = python_argv(sys.executable, "zwarm", "--state-dir", str(root), "show", "--json", sid)
    try:
        res = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=NEUTRAL_CWD,
            env=unmarked(environ),
            timeout=SHOW_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ZwarmError(f"zwarm show did not answer: {e}") from None
    if res.returncode != 0:
        said = res.stderr.decode("utf-8", "replace").strip().splitlines()
        why = said[-1].removeprefix("Error: ") if said else f"exit {res.returncode}"
        raise ZwarmError(why)
    return res.stdout


def run_one(
    event: str,
    cmd: str | list[str],
    payload: bytes,
    env: dict[str, str],
    cwd: Path,
    limit: float,
    log: Log,
) -> None:
    """Run one hook with ``payload`` (the session's JSON) on stdin, its output into the log,
    for at most ``limit`` seconds (then its process group is killed)."""
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    shown = cmd if isinstance(cmd, str) else " ".join(cmd)
    log.line(f"{event}: running {shown!r}")
    started = time.monotonic()
    fd = log.open()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=fd,
            stderr=fd,
            cwd=str(cwd) if cwd.is_dir() else "/",
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        log.line(f"{event}: could not start: {e.strerror or e}")
        return
    finally:
        os.close(fd)
    try:
        proc.communicate(payload, timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        log.line(f"{event}: killed after {limit:g} s (the [hooks] timeout_s limit)")
        return
    took = time.monotonic() - started
    log.line(f"{event}: exit {proc.returncode} after {took:.1f} s")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # not reaped yet: the group id is still its own
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def notify(s: Session, environ: Mapping[str, str], log: Log) -> None:
    """A desktop notification that ``s`` ended (``notify-send``, where present)."""
    import shutil  # lazily: it loads zlib, bz2 and lzma, which a supervisor never needs

    exe = shutil.which("notify-send", path=environ.get("PATH", os.defpath))
    if exe is None:
        log.line("notify: notify-send is not installed: no notification")
        return
    from zwarm.text import oneline

    title = f"zwarm: {s.name or s.id[:8]} {s.status.value}"
    body = oneline(s.error or s.last_message or s.task, 200)
    try:
        res = subprocess.run(
            [exe, "--app-name=zwarm", title, body],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=unmarked(environ),
            timeout=NOTIFY_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.line(f"notify: failed: {e}")
        return
    err = res.stderr.decode("utf-8", "replace").strip()
    if err:
        err = oneline(err, 200)  # one line of the command's stderr, no controls
    log.line(f"notify: exit {res.returncode}" + (f": {err}" if err else ""))


class Log:
    """The session's hooks.log: lines appended, each with the time (never following links)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self) -> int:
        from zwarm.system.files import open_append

        return open_append(self.path)

    def line(self, text: str) -> None:
        from zwarm.env import iso

        try:
            fd = self.open()
        except OSError:
            return
        from zwarm.text import oneline

        try:
            os.write(fd, f"{iso(time.time())} {oneline(text, 2000)}\n".encode("utf-8", "replace"))
        finally:
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -I -m zwarm.runtime.hooks STATE_DIR SESSION_ID", file=sys.stderr)
        return 2
    try:
        return run(Path(args[0]), args[1], os.environ)
    except Exception as e:  # one line in hooks.log (this process's stderr), never a traceback
        print(f"{time.strftime('%FT%T')} hooks not run: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
