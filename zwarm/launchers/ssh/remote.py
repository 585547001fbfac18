"""The host's side of an ssh turn: ``zwarm _launcher ssh OP SESSION TURN ...`` on the host.

Owns what runs on the host for one turn, in a directory of zwarm's per-user state there
(``~/.local/state/zwarm/remote/<session>/<turn>/``, 0700; ``run_dir``): ``start`` (the turn's
request on stdin: the agent's argv, working directory, environment and prompt; it starts a
detached *keeper*, ``python -I -m zwarm.launchers.ssh.remote keep``, in its own session, which
starts the agent in a session of its own with the prompt file as stdin and ``out``/``err`` as
stdout/stderr, waits for it, stops what it left behind, and writes ``exit``), ``stream`` (the
turn's output from byte offsets, as framed chunks, until its exit frame: what the local relay
reads, and reads again from where it stopped after a dropped connection), ``kill`` (the whole
tree of the turn's agent, then waits for ``exit``), ``status`` and ``clean`` (the directory
removed once the local side has the whole output).
Must stay true:
- the environment's values and the prompt come on stdin only, never on a command line (``ps``
  on the host shows command lines); the keeper gets them through a pipe and writes only the
  prompt to disk (0600);
- the session id and turn number are checked (``SESSION_ID``, digits) before any path is made
  of them; files are opened without following links (``system.files``);
- ``kill`` signals only processes below the turn's keeper (verified alive and carrying the
  keeper's marker, a child subreaper: what the agent left stays below it) that carry the
  session's marker (``ZWARM_SESSION_ID``); never a pid on the word of a file alone, never a
  process outside the turn's tree (on a loopback host, the local relay carries the marker too);
- a turn's ``exit`` is written by its keeper once the agent and what it left are gone, and is
  written at most once (``exit`` present: the turn ended); a keeper that died without writing
  it (the host rebooted) makes the turn ``lost`` to ``stream`` and ``status``;
- a request from another zwarm version is refused in one line (``VERSION``: they must match);
- a turn starts once: a second ``start`` of the same turn (the connection dropped while the
  first answered) starts nothing and says it runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

import zwarm

OUT, ERR, EXIT, LOST, ALIVE = b"o", b"e", b"x", b"l", b"k"  # the frames ``stream`` writes
ALIVE_S = 0.5  # a quiet stream says it lives this often (the relay keeps it for ``ls``)
POLL_S = 0.05  # how often ``stream`` looks for new output
KEEPER_CHECK_S = 1.0  # how often ``stream`` checks that the keeper still lives
CHUNK = 1 << 16
KILL_WAIT_S = 10.0
_SID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_N = re.compile(r"^[1-9][0-9]{0,8}\Z")
_OFFSET = re.compile(r"^[0-9]{1,18}\Z")
KEEPER_MARKER = "ZWARM_SUPERVISOR_OF"  # the keeper's own marker (procs.SUPERVISOR_MARKER)
# the versions that may talk to each other: exactly the same (the request and the frames
# are this module's, which may change with any version)
VERSION = zwarm.__version__


def _version_of(data: bytes) -> str:
    """The caller's zwarm version in a start request ("unknown" if it says none)."""
    try:
        v = json.loads(data).get("version")
    except (ValueError, AttributeError):
        return "unknown"
    return v[:40] if isinstance(v, str) else "unknown"


def frame(kind: bytes, data: bytes) -> bytes:
    return kind + len(data).to_bytes(4, "big") + data


def run_dir(environ: dict[str, str] | os._Environ[str], sid: str, n: str) -> Path:
    from zwarm.xdg import user_state_dir

    if not _SID.match(sid) or not _N.match(n):
        raise ValueError(f"not a session id and turn number: {sid!r} {n!r}")
    return user_state_dir(environ) / "remote" / sid / n


def main(argv: list[str]) -> int:
    """``OP SESSION TURN [ARGS]``: the exit status (2: a bad request, said on stderr)."""
    if len(argv) < 3 or argv[0] not in _OPS:
        print("usage: zwarm _launcher ssh start|stream|kill|status|clean ID N", file=sys.stderr)
        return 2
    op, sid, n, rest = argv[0], argv[1], argv[2], argv[3:]
    try:
        d = run_dir(os.environ, sid, n)
    except ValueError as e:
        print(f"zwarm: {e}", file=sys.stderr)
        return 2
    return _OPS[op](d, sid, rest)


# ---------------------------------------------------------------------- start
def _start(d: Path, sid: str, rest: list[str]) -> int:
    """Read the turn's request on stdin and start its keeper (once)."""
    import subprocess

    from zwarm.system.files import private_dir

    data = sys.stdin.buffer.read(64 << 20)
    theirs = _version_of(data)
    if theirs != VERSION:
        print(f"zwarm: this host runs zwarm {VERSION} and the caller zwarm {theirs}: install "
              "the same version on both (a host's zwarm must match)", file=sys.stderr)  # fmt: skip
        return 1
    try:
        private_dir(d.parent.parent)
        private_dir(d.parent)
        os.mkdir(d, 0o700)
    except FileExistsError:
        print(json.dumps({"started": False, "running": True}))
        return 0
    except OSError as e:
        print(f"zwarm: cannot make {d}: {e.strerror}", file=sys.stderr)
        return 1
    env = {k: v for k, v in os.environ.items() if k not in ("ZWARM_SESSION_ID", KEEPER_MARKER)}
    env[KEEPER_MARKER] = sid
    from zwarm.env.python import NEUTRAL_CWD

    # this interpreter, finding zwarm as this process did (however the host installed it:
    # its environment is passed on), from /, with nothing of a working directory on sys.path
    flags = ["-I"] if sys.flags.isolated else ["-P", *(["-s"] if sys.flags.no_user_site else [])]
    keeper = subprocess.Popen(
        [sys.executable, *flags, "-m", "zwarm.launchers.ssh.remote", "keep", sid, d.name],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=os.open(d / "keeper.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
        cwd=NEUTRAL_CWD,
        env=env,
        start_new_session=True,
        close_fds=True,
    )
    assert keeper.stdin is not None
    try:
        keeper.stdin.write(data)
        keeper.stdin.close()
    except BrokenPipeError:
        pass
    # the keeper says when the agent runs (or could not start): ``run.json`` or ``exit``
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (d / "run.json").exists() or (d / "exit").exists():
            break
        if keeper.poll() is not None and not (d / "exit").exists():
            print("zwarm: the turn's keeper exited before starting the agent", file=sys.stderr)
            return 1
        time.sleep(0.01)
    print(json.dumps({"started": True, "running": not (d / "exit").exists()}))
    return 0


def _keep(d: Path, sid: str, n: str) -> int:
    """The keeper: start the agent as asked (stdin), wait, stop its leftovers, write ``exit``."""
    import subprocess

    from zwarm.system import procs
    from zwarm.system.files import atomic_write, open_append, write_private

    procs.become_subreaper()  # what the agent leaves (setsid, a double fork) stays below
    req = json.loads(sys.stdin.buffer.read(64 << 20))
    env = dict(os.environ)
    env.pop(KEEPER_MARKER, None)
    env.update(req["env"])
    env[procs.MARKER] = sid  # the marker kill verifies
    cwd = os.path.expanduser(req["cwd"])  # "~/src": the home of this host's user
    write_private(d / "prompt", bytes.fromhex(req["prompt"]))
    fds = [os.open(d / "prompt", os.O_RDONLY | os.O_NOFOLLOW)]
    fds += [open_append(d / "out"), open_append(d / "err")]
    try:
        proc = subprocess.Popen(
            req["argv"],
            stdin=fds[0],
            stdout=fds[1],
            stderr=fds[2],
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        what = f"could not start agent {req['argv'][0]!r} on this host: {e.strerror or e}"
        if e.filename == cwd:
            what = f"could not enter {cwd!r} on this host: {e.strerror}"
        os.write(fds[2], (what + "\n").encode())
        atomic_write(d / "exit", json.dumps({"code": 127, "error": what}).encode())
        return 0
    finally:
        for fd in fds:
            os.close(fd)
    me, agent = procs.identify(os.getpid()), procs.identify(proc.pid)
    import msgspec

    atomic_write(d / "run.json", msgspec.json.encode({"keeper": me, "agent": agent}))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a kill stops the agent; we record it
    while True:
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            break
        except InterruptedError:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the leader is a zombie: the group is still its
    except (ProcessLookupError, PermissionError):
        pass
    if me is not None:  # what left the group: below us (a subreaper), with the marker
        procs.stop_marked(procs.descendants(me), sid, grace=1.0)
    code = proc.wait()
    _reap()
    atomic_write(d / "exit", json.dumps({"code": code}).encode())
    return 0


def _reap() -> None:
    """Reap the zombies of orphans re-parented to the keeper."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ---------------------------------------------------------------------- stream
def _stream(d: Path, sid: str, rest: list[str]) -> int:
    """Frames of ``out`` and ``err`` from the offsets given, until the turn's exit frame."""
    if len(rest) != 2 or not all(_OFFSET.match(x) for x in rest):
        print("zwarm: stream needs two byte offsets", file=sys.stderr)
        return 2
    w = sys.stdout.buffer
    if not d.is_dir():
        _send(w, LOST, json.dumps({"why": "the host has no record of the turn"}).encode())
        return 0
    offsets = [int(rest[0]), int(rest[1])]
    files: list[IO[bytes] | None] = [None, None]
    checked = said = 0.0
    try:
        while True:
            ended = (d / "exit").exists()  # looked at before the last read: nothing after it
            moved = False
            for i, (name, kind) in enumerate((("out", OUT), ("err", ERR))):
                f = files[i]
                if f is None:
                    try:
                        fd = os.open(d / name, os.O_RDONLY | os.O_NOFOLLOW)
                    except FileNotFoundError:
                        continue
                    f = files[i] = os.fdopen(fd, "rb")
                    f.seek(offsets[i])
                while data := f.read(CHUNK):
                    _send(w, kind, data)
                    offsets[i] += len(data)
                    moved = True
            if ended and not moved:
                _send(w, EXIT, (d / "exit").read_bytes()[:4096])
                return 0
            now = time.monotonic()
            if not ended and now - checked > KEEPER_CHECK_S:
                checked = now
                if not _keeper_alive(d, sid) and not (d / "exit").exists():
                    why = "its keeper on the host is gone without recording the end (a reboot?)"
                    _send(w, LOST, json.dumps({"why": why}).encode())
                    return 0
            if moved:
                said = now
            elif now - said >= ALIVE_S:
                _send(w, ALIVE, b"")
                said = now
            if not moved:
                time.sleep(POLL_S)
    except BrokenPipeError:
        return 0
    finally:
        for f in files:
            if f is not None:
                f.close()


def _send(w: Any, kind: bytes, data: bytes) -> None:
    w.write(frame(kind, data))
    w.flush()


def _keeper_alive(d: Path, sid: str) -> bool:
    """Whether the turn's keeper verifiably lives (or has not yet recorded itself)."""
    from zwarm.system import procs

    run = _run_record(d)
    if run is None:
        return (time.time() - d.stat().st_mtime) < 60  # starting
    keeper = run.get("keeper")
    return keeper is not None and procs.verified(keeper, sid, KEEPER_MARKER)


def _run_record(d: Path) -> dict[str, Any] | None:
    import msgspec

    from zwarm.system.boot import ProcRef
    from zwarm.system.files import read_file

    try:
        data, _ = read_file(d / "run.json", 1 << 16)
        got: dict[str, ProcRef | None] = msgspec.json.decode(data, type=dict[str, ProcRef | None])
    except (OSError, msgspec.DecodeError):
        return None
    return got


# ---------------------------------------------------------------------- kill, status, clean
def _kill(d: Path, sid: str, rest: list[str]) -> int:
    """Stop the turn's agent and all it started (verified by the session's marker), then wait
    for the keeper to record the end."""
    from zwarm.system import procs

    run = _run_record(d) or {}
    keeper = run.get("keeper")
    if keeper is not None and procs.verified(keeper, sid, KEEPER_MARKER):
        # the turn's processes: below its keeper (a subreaper), carrying the marker
        procs.stop_marked(procs.descendants(keeper), sid, grace=2.0)
    deadline = time.monotonic() + KILL_WAIT_S
    while d.is_dir() and not (d / "exit").exists() and time.monotonic() < deadline:
        if run and not _keeper_alive(d, sid):
            break
        time.sleep(0.02)
    print(json.dumps({"ended": (d / "exit").exists()}))
    return 0


def _status(d: Path, sid: str, rest: list[str]) -> int:
    if not d.is_dir():
        state: dict[str, Any] = {"state": "none"}
    elif (d / "exit").exists():
        state = {"state": "ended", **json.loads((d / "exit").read_bytes()[:4096] or b"{}")}
    elif _keeper_alive(d, sid):
        state = {"state": "running"}
    else:
        state = {"state": "lost"}
    print(json.dumps(state))
    return 0


def _clean(d: Path, sid: str, rest: list[str]) -> int:
    """Remove the turn's directory on the host (once its end is recorded here): one whose
    turn ended, or was lost (its keeper gone without an end)."""
    import shutil

    if d.is_dir() and ((d / "exit").exists() or not _keeper_alive(d, sid)):
        shutil.rmtree(d, ignore_errors=True)
        try:
            d.parent.rmdir()
        except OSError:
            pass
    return 0


_OPS = {"start": _start, "stream": _stream, "kill": _kill, "status": _status, "clean": _clean}


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "keep":
        sys.exit(_keep(run_dir(os.environ, args[1], args[2]), args[1], args[2]))
    sys.exit(main(args))
