"""The local relay of an ssh turn: what the local supervisor runs as the turn's agent.

``python -I -m zwarm.launchers.ssh.relay STATE_DIR SESSION TURN CWD -- AGENT_ARGV...``, started
by the supervisor (``runtime.supervisor``) exactly as it starts an agent, with the agent's
environment, the prompt file as stdin and the turn files as stdout and stderr
(``SshLauncher.agent_prefix`` puts it before the argv ``agent_launch`` built). Owns carrying the
turn to the host and its output back: it sends the request (argv, working directory on the
host, the environment's values, the prompt) on the ssh connection's stdin to the host's
``zwarm _launcher ssh start`` (``remote``), then reads the host's ``stream`` of framed output,
appending each chunk to the turn files here as it comes; a dropped connection is retried
(``RETRY_S``, for as long as the turn may run: the supervisor's timeout and ``kill`` bound it)
and the stream resumed from the bytes already here, so no byte is lost or doubled. It exits
with the agent's exit status on the host (a signal as the same signal), so the supervisor
records the turn as a local one.
Must stay true:
- the host to reach comes from the launch pin's handle record of the turn (written by
  ``SshLauncher.start`` where the agent cannot write), never from ``meta.json`` or argv;
- the environment's values and the prompt reach the host on stdin only, and only the
  variables that mean the same there (``sendable``: not this machine's ``PATH``, ``HOME``, ...);
- on SIGTERM (``kill``, the turn's timeout) it has the host stop the agent's whole tree
  (``remote kill``) before it exits;
- a turn the host lost (its keeper gone without an end: a reboot) is said in the turn's
  ``ssh.json`` sidecar (``LOST_FILE``) for ``SshLauncher.ended``, which records ``ssh_lost``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from zwarm.launchers.ssh import LIVE_FILE, LOST_FILE, remote

RETRY_S = (0.2, 0.5, 1.0, 2.0)  # waits between reconnects (the last repeated)
START_WAIT_S = 30.0  # how long a first start waits for an unreachable host
LOST_EXIT = 255
# variables that describe this machine, not the host: the host's own are kept there
LOCAL_ONLY = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "TERM", "MAIL"}
    | {"HOSTNAME", "DISPLAY", "XAUTHORITY", "ZWARM", "ZWARM_DIR", "ZWARM_AGENT_PATH"}
    | {"SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY"}
)
LOCAL_PREFIXES = ("XDG_", "LD_", "PYTHON", "VIRTUAL_ENV", "DBUS_")


class Stopped(Exception):
    """SIGTERM arrived (kill, the turn's timeout)."""


def sendable(name: str) -> bool:
    return name not in LOCAL_ONLY and not name.startswith(LOCAL_PREFIXES)


def main(argv: list[str]) -> int:
    if len(argv) < 6 or argv[4] != "--":
        print("usage: relay STATE_DIR ID N CWD -- ARGV...", file=sys.stderr)
        return 2
    state_dir, sid, n, cwd, agent = Path(argv[0]), argv[1], argv[2], argv[3], argv[5:]
    from zwarm.launchers import ssh

    host = ssh.pinned_host(os.environ, state_dir, sid, int(n))
    if host is None:
        print(f"zwarm: no pinned host for turn {n} of session {sid}: refused", file=sys.stderr)
        return LOST_EXIT
    conn = ssh.connection(host)
    prompt = sys.stdin.buffer.read()
    env = {k: v for k, v in os.environ.items() if sendable(k)}
    # ssh and its shared connection (a daemon that outlives the turn) are not the agent's:
    # unmarked, so a sweep of the session's leftovers here leaves the connection up
    os.environ.pop("ZWARM_SESSION_ID", None)
    request = json.dumps({"version": remote.VERSION, "argv": agent, "cwd": cwd, "env": env,
                          "prompt": prompt.hex()})  # fmt: skip
    signal.signal(signal.SIGTERM, _stopped)
    side = state_dir / "sessions" / sid / "turns" / f"turn_{n}.{LOST_FILE}"
    base = ssh.remote_argv(host, "start", sid, n)[:3]  # zwarm _launcher ssh
    offsets = [0, 0]  # bytes of stdout and stderr here: where a resumed stream starts
    try:
        _start(conn, [*base, "start", sid, n], request.encode())
        code = _relay(conn, base, sid, n, side, offsets)
    except Stopped:
        code = _kill(conn, base, sid, n, side, offsets)
    except _Failed as e:
        print(f"zwarm: {e}", file=sys.stderr)
        return LOST_EXIT
    try:  # the output is here now: nothing of the turn stays on the host
        conn.run([*base, "clean", sid, n], timeout=10)
    except Exception:
        pass  # the host is away: the turn's directory stays there
    if code is None:
        return LOST_EXIT
    if code < 0:  # the agent ended on a signal: end on the same one
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


class _Failed(Exception):
    pass


def _stopped(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once
    raise Stopped


def _start(conn: object, remote_argv: list[str], request: bytes) -> None:
    from zwarm.launchers.ssh.hosts import Connection, HostUnreachable

    assert isinstance(conn, Connection)
    deadline = time.monotonic() + START_WAIT_S
    tries = 0
    while True:
        try:
            r = conn.run(remote_argv, input=request, timeout=START_WAIT_S)
        except HostUnreachable as e:
            if time.monotonic() > deadline:
                raise _Failed(str(e)) from None
            time.sleep(RETRY_S[min(tries, len(RETRY_S) - 1)])
            tries += 1
            continue
        if r.returncode != 0:
            said = r.stderr.decode("utf-8", "replace").strip().splitlines()
            why = said[-1] if said else f"exit {r.returncode}"
            raise _Failed(f"the host {conn.host.name} did not start the turn: {why}")
        return


def _relay(
    conn: object, base: list[str], sid: str, n: str, side: Path, offsets: list[int]
) -> int | None:
    """Stream the turn's output into fds 1 and 2 until its exit frame (reconnecting as
    needed): the agent's exit status (negative: a signal), or None if the host lost it."""
    from zwarm.launchers.ssh.hosts import Connection

    assert isinstance(conn, Connection)
    tries = 0
    live = _Live(side.with_name(side.name.replace(LOST_FILE, LIVE_FILE)))
    while True:
        argv = conn.argv([*base, "stream", sid, n, str(offsets[0]), str(offsets[1])])
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdout is not None
        try:
            got = _frames(proc.stdout, offsets, live)
        finally:
            proc.stdout.close()
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
        if got is not None:
            kind, data = got
            if kind == remote.LOST:
                why = json.loads(data or b"{}").get("why", "lost")
                _say_lost(side, str(why))
                return None
            ended = json.loads(data or b"{}")
            return int(ended.get("code", LOST_EXIT))
        if tries == 0 or tries % 10 == 0:
            print(f"zwarm: connection to host {conn.host.name} lost; retrying", file=sys.stderr)
        time.sleep(RETRY_S[min(tries, len(RETRY_S) - 1)])
        tries += 1


class _Live:
    """The turn's ``ssh.live`` file, its time touched at most every ``remote.ALIVE_S`` while
    the host's stream speaks: how ``SshLauncher.survey`` knows, from a stat, that the host
    answers (a link planted there is replaced, never followed)."""

    def __init__(self, path: Path) -> None:
        from zwarm.system.files import open_regular, write_private

        self.fd: int | None = None
        self.when = 0.0
        try:
            write_private(path, b"")
            self.fd = open_regular(path, os.O_WRONLY)
        except OSError:
            pass

    def touch(self) -> None:
        now = time.monotonic()
        if self.fd is not None and now - self.when >= remote.ALIVE_S:
            self.when = now
            try:
                os.utime(self.fd)
            except OSError:
                pass


def _frames(f: IO[bytes], offsets: list[int], live: _Live) -> tuple[bytes, bytes] | None:
    """Read frames, appending output to fds 1 and 2; the final frame, or None on EOF."""
    from zwarm.system.files import write_all

    while True:
        head = _exactly(f, 5)
        if head is None:
            return None
        kind, size = head[:1], int.from_bytes(head[1:], "big")
        data = _exactly(f, size)
        if data is None:
            return None
        live.touch()
        if kind == remote.ALIVE:
            continue
        if kind == remote.OUT:
            write_all(1, data)
            offsets[0] += size
        elif kind == remote.ERR:
            write_all(2, data)
            offsets[1] += size
        else:
            return kind, data


def _exactly(f: IO[bytes], size: int) -> bytes | None:
    buf = b""
    while len(buf) < size:
        got = f.read(size - len(buf))
        if not got:
            return None
        buf += got
    return buf


def _kill(
    conn: object, base: list[str], sid: str, n: str, side: Path, offsets: list[int]
) -> int | None:
    """Have the host stop the turn's tree; then the rest of its output and its end."""
    from zwarm.launchers.ssh.hosts import Connection, HostUnreachable

    assert isinstance(conn, Connection)
    try:
        conn.run([*base, "kill", sid, n], timeout=15)
    except HostUnreachable:
        return -signal.SIGTERM  # the host is away: its keeper ends the turn when it can
    try:
        return _relay(conn, base, sid, n, side, offsets)
    except Stopped:
        return -signal.SIGTERM


def _say_lost(side: Path, why: str) -> None:
    from zwarm.system.files import write_private

    try:
        write_private(side, json.dumps({"lost": why[:400]}).encode())
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
