"""The fork server: a per-state-dir process that forks each turn's supervisor, ready-made.

A supervisor started as a new interpreter pays for the interpreter and its imports on every
turn (CPU, and ~16 MB of memory of its own). The fork server pays that once: it imports what
a supervisor needs, then waits on a Unix socket; asked to, it forks a child that becomes the
supervisor of one session (``runtime.supervisor.main``, exactly what ``python -I -m
zwarm.runtime.supervisor STATE ID`` runs), sharing the server's pages until it writes them.
``LocalLauncher`` asks it (``launchers.forking``, the requester's side) when it is there and
falls back to a new interpreter when it is not (starting one for the turns after), when it
refuses, or when its answer does not check out.

Must stay true:
- a server is addressed by what its children share with it (``forking.address``: user, state
  dir, interpreter, zwarm's version, what a child inherits besides its environment, and the
  variables an interpreter reads only at start-up), so a forked supervisor behaves as one
  the requester would have started; the server's own copy of zwarm is checked on each request
  (the files it imported, by inode, size and mtime) and a server whose code changed on disk
  refuses and exits;
- a request carries a session id (checked against the id schema), one open regular file (the
  session's ``supervisor.log``, opened by the requester with no link followed) and the
  supervisor's environment (bounded, well-formed), nothing else: no path or argv; the child
  takes that environment as its own and runs only what the store says is that supervisor's
  to run (``supervisor.run`` checks the turn names it);
- both ends check the other's uid (``SO_PEERCRED``): the socket is in Linux's abstract
  namespace, which any local user can reach; the server answers only a requester confined
  exactly as itself (``confinement``: namespaces, cgroup, seccomp, no_new_privs,
  capabilities, LSM label), so a sandboxed agent never gets a supervisor forked outside its
  sandbox (it gets what it would get anyway: a new interpreter inside it); a requester
  accepts only a pid that is a live child of the server it spoke to and carries the
  session's supervisor marker (``ZWARM_SUPERVISOR_OF=<id>`` in its initial environment: the
  child writes its id over a placeholder of the same length there, so ``procs`` verifies it
  as any supervisor);
- every child is its own session leader and its own process: the server's death, or another
  child's, never touches it; the server never waits for a child (it reaps them lazily) and
  has no thread when it forks; it is no child of the command that started it (``--detach``);
  it exits after ``IDLE_S`` without a request, or once its state dir is gone or replaced;
- one server starts at a time per state dir: it holds the start lock its starter took
  (``--lock``, ``forking.start_lock``) until it listens.
"""

from __future__ import annotations

import gc

if __name__ == "__main__":  # imports allocate much and free little: no collections here
    gc.disable()

import contextlib
import os
import socket
import sys
import time

from zwarm.launchers.forking import CRED, ENV_MAX, HEADER, NAME_LEN, PLACEHOLDER, abstract

TYPE_CHECKING = False  # not ``typing``'s: a server binds its address before any import it can spare
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

IDLE_S = 120.0  # a server with no request for this long exits
TICK_S = 1.0  # how often an idle server reaps its children and looks at its state dir
ZOMBIE_S = 1.0  # an exited child stays a zombie at least this long (``_Children``)
REQUEST_S = 2.0  # how long the server waits for a connected requester's message


def serve(state: str | Path, name: str, idle: float = IDLE_S, lock: int | None = None) -> int:
    """Listen at ``name`` (exit at once if another server has it), import what supervisors
    need, then fork one per request until idle for ``idle`` seconds or the state dir goes.
    ``lock`` (the start lock its starter took: ``forking.start_lock``) is held until then."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(abstract(name))
    except OSError:  # another server listens there (or just did): it serves
        return 0
    # bound before any heavy import (a storm of first turns starts few servers that last),
    # listening only once ready: until then a requester is refused at once and falls back
    from zwarm.system import procs

    if os.environ.get(procs.SUPERVISOR_MARKER) != PLACEHOLDER:
        print(
            f"zwarm forkserver: {procs.SUPERVISOR_MARKER} is not the placeholder", file=sys.stderr
        )
        return 2
    home = _dir_key(state)
    code = _preload()
    gc.freeze()  # what the imports made: children share it, collections never touch it
    gc.enable()  # for what serving makes (a child starts without: ``_child``)
    me = confinement(os.getpid())  # what a requester must match: read once
    sock.listen(128)
    if lock is not None:  # listening: later turns are forked, another server may start
        with contextlib.suppress(OSError):
            os.close(lock)
    sock.settimeout(TICK_S)
    last, kids = time.monotonic(), _Children()
    while home is not None and _dir_key(state) == home:
        kids.reap(time.monotonic())
        try:
            conn, _ = sock.accept()
        except TimeoutError:
            if time.monotonic() - last > idle:
                break
            continue
        last = time.monotonic()
        with conn:
            pid = _answer(sock, conn, state, code, me)
            if pid is None:
                break
            if pid:
                kids.add(pid)
    return 0


def _dir_key(state: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(state)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _preload() -> dict[str, tuple[int, int, int]]:
    """Import what a supervisor's turn needs (of every built-in agent); the key of every
    zwarm file now imported. Modules only: no registry is filled here (a plugin installed
    later is found by the child, as by a new interpreter)."""
    import ctypes  # noqa: F401  (the child subreaper's prctl)

    import zwarm.agents.claude
    import zwarm.agents.codex
    import zwarm.agents.gemini.home
    import zwarm.agents.gemini.tools
    import zwarm.config
    import zwarm.engine.manager
    import zwarm.engine.scheduler
    import zwarm.engine.transitions
    import zwarm.launchers.local
    import zwarm.plugins
    import zwarm.runtime.hooks
    import zwarm.runtime.supervisor
    import zwarm.runtime.watch
    import zwarm.system.files  # noqa: F401

    return _code_key()


def _code_key() -> dict[str, tuple[int, int, int]]:
    key = {}
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None) if mod.__name__.startswith("zwarm") else None
        if path:
            try:
                st = os.stat(path)
            except OSError:
                st = None
            key[path] = (st.st_ino, st.st_size, st.st_mtime_ns) if st else (0, 0, 0)
    return key


class _Children:
    """The server's children, each reaped on the first look at least ``ZOMBIE_S`` after it
    was first seen to have exited: until then its exit status and final CPU times stay
    readable in /proc (what a benchmark or a debugger reads), and it costs only a pid."""

    def __init__(self) -> None:
        self.live: set[int] = set()
        self.dead: dict[int, float] = {}  # pid -> when first seen exited

    def add(self, pid: int) -> None:
        self.live.add(pid)

    def reap(self, now: float) -> None:
        for pid in list(self.live):
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info, self.live = None, self.live - {pid}
            if info is not None:
                self.live.discard(pid)
                self.dead[pid] = now
        for pid, seen in list(self.dead.items()):
            if now - seen >= ZOMBIE_S:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                del self.dead[pid]


def _answer(
    sock: socket.socket,
    conn: socket.socket,
    state: str | Path,
    code: dict[str, tuple[int, int, int]],
    me: tuple[str, ...] | None,
) -> int | None:
    """Serve one request (from a process of this user confined as ``me``, the server): fork
    its supervisor (its pid), or refuse, saying why (0); None: the server must exit (its code
    changed on disk)."""
    import re

    from zwarm.model.records import SESSION_ID

    conn.settimeout(REQUEST_S)
    fds: list[int] = []
    try:
        peer, uid, _ = CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.geteuid() or me is None or confinement(peer) != me:
            return 0  # another user's, or a sandboxed process's: closed unanswered
        msg, fds, _, _ = socket.recv_fds(conn, HEADER, 2)
        request = _request(conn, msg) if len(fds) == 1 and _regular(fds[0]) else None
        if request is None or not re.match(SESSION_ID, request[0]):
            conn.sendall(b"refused: not a request")
            return 0
        if _code_key() != code:
            conn.sendall(b"refused: zwarm changed on disk")
            return None
        pid = os.fork()
        if pid == 0:
            _child(sock, conn, fds[0], state, *request)
        return pid
    except OSError:
        return 0
    finally:
        for fd in fds:
            os.close(fd)


_NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts")
_STATUS_KEYS = (b"NoNewPrivs:", b"Seccomp:", b"Seccomp_filters:", b"CapEff:", b"CapBnd:")


def confinement(pid: int) -> tuple[str, ...] | None:
    """What confines process ``pid``: its namespaces, cgroup, seccomp mode and filters,
    no_new_privs, capabilities and LSM label. A sandboxed agent (codex's seccomp and no_new_privs, a
    bubblewrap's namespaces) differs from the commands of the user who started it, and must
    not have a supervisor forked outside its sandbox. None if unreadable (never equal)."""
    out: list[str] = []
    try:
        for ns in _NAMESPACES:
            out.append(os.readlink(f"/proc/{pid}/ns/{ns}"))
        with open(f"/proc/{pid}/status", "rb") as f:
            out.extend(ln.decode().strip() for ln in f if ln.startswith(_STATUS_KEYS))
        with open(f"/proc/{pid}/cgroup", "rb") as f:
            out.append(f.read().decode("utf-8", "replace"))
    except OSError:
        return None
    try:
        with open(f"/proc/{pid}/attr/current", "rb") as f:
            out.append(f.read().decode("utf-8", "replace").strip())
    except OSError:
        out.append("")
    return tuple(out)


def _request(conn: socket.socket, head: bytes) -> tuple[str, dict[str, str]] | None:
    """The rest of a request whose first bytes are ``head``: (session id, environment), or
    None if it is not one (a short or malformed header, an environment over ``ENV_MAX``, an
    entry without ``=`` or a name twice), all read within ``REQUEST_S``."""
    deadline = time.monotonic() + REQUEST_S
    head += _exactly(conn, HEADER - len(head), deadline)
    size = head[36:]
    if len(head) != HEADER or not all(c in b"0123456789abcdef" for c in size):
        return None
    n = int(size, 16)
    data = _exactly(conn, n, deadline) if n <= ENV_MAX else b""
    if len(data) != n or (data and not data.endswith(b"\0")):
        return None
    env: dict[str, str] = {}
    for entry in data.split(b"\0")[:-1]:
        key, eq, value = entry.partition(b"=")
        name = os.fsdecode(key)
        if not key or not eq or name in env:
            return None
        env[name] = os.fsdecode(value)
    return head[:36].decode("ascii", "replace"), env


def _exactly(conn: socket.socket, n: int, deadline: float) -> bytes:
    """Up to ``n`` bytes from ``conn``: fewer if it closes or ``deadline`` passes."""
    data = b""
    while len(data) < n:
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            chunk = conn.recv(min(n - len(data), 1 << 16))
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return data


def _regular(fd: int) -> bool:
    import stat

    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False


def _child(
    sock: socket.socket,
    conn: socket.socket,
    log_fd: int,
    state: str | Path,
    sid: str,
    environ: dict[str, str],
) -> None:
    """The forked supervisor: detach, take the session's marker and stderr, answer with its
    pid, then run exactly what ``python -I -m zwarm.runtime.supervisor STATE ID`` runs."""
    from zwarm.runtime import supervisor

    gc.disable()  # as a new supervisor starts: no collections until it waits for its agent
    try:
        sock.close()
        os.setsid()
        _stdio(log_fd)
        os.environ.clear()  # the requester's: what its own supervisor would have had
        os.environ.update(environ)
        _mark(sid)
        with contextlib.suppress(OSError):  # cosmetic: a turn never depends on it
            _retitle(state, sid)
        conn.sendall(str(os.getpid()).encode())
        conn.close()
    except BaseException:
        os._exit(70)
    supervisor._exit(supervisor.main([str(state), sid]))


def _retitle(state: str | Path, sid: str) -> None:
    """Show this child as what it is, ``PYTHON -I -m zwarm.runtime.supervisor STATE ID``, in
    /proc/PID/cmdline (``ps``, ``top``): written over the server's own command line, which
    it always fits when the server was started ``--detach`` (as ``LocalLauncher`` does)."""

    from zwarm.env.python import isolated

    def title(region: bytes) -> bytes | None:
        argv0 = region.split(b"\0", 1)[0]
        flags = [os.fsencode(f) for f in isolated(sys.executable)]  # as the server was started
        args = [argv0, *flags, b"-m", b"zwarm.runtime.supervisor", os.fsencode(state), sid.encode()]
        new = b"\0".join(args) + b"\0"
        return new.ljust(len(region), b"\0") if len(new) <= len(region) else None

    _rewrite_own(45, title)  # arg_start, arg_end: /proc/PID/stat fields 48 and 49


def _rewrite_own(first: int, edit: Callable[[bytes], bytes | None]) -> None:
    """Replace this process's argument (``first`` 45) or environment (47) block, as
    /proc/PID/cmdline or /proc/PID/environ show it, with ``edit(block)`` (same length; None:
    leave it). The block's bounds are fields ``first`` and ``first + 1`` of /proc/self/stat
    (counted after the command name)."""
    from zwarm.system import procs

    fields = procs._stat_fields(os.getpid())
    if fields is None or len(fields) < first + 2:
        raise OSError("no argument or environment bounds in /proc/self/stat")
    start, end = int(fields[first]), int(fields[first + 1])
    fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
    try:
        new = edit(os.pread(fd, end - start, start))
        if new is not None and len(new) != end - start:
            raise OSError("a rewritten block must keep its length")
        if new is not None:
            os.pwrite(fd, new, start)
    finally:
        os.close(fd)


def _stdio(log_fd: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(log_fd, 2)
    os.close(null)
    if log_fd > 2:
        os.close(log_fd)


def _mark(sid: str) -> None:
    """Write ``sid`` over the placeholder of ``ZWARM_SUPERVISOR_OF`` in this process's initial
    environment (what /proc/PID/environ shows), and in ``os.environ``; verified."""
    from zwarm.system import procs

    want = f"{procs.SUPERVISOR_MARKER}={PLACEHOLDER}".encode()
    if len(sid) != len(PLACEHOLDER):
        raise OSError("a session id the length of no placeholder")

    def marked(region: bytes) -> bytes:
        entries = region.split(b"\0")
        if want not in entries:
            raise OSError("no supervisor marker placeholder in the environment")
        entries[entries.index(want)] = f"{procs.SUPERVISOR_MARKER}={sid}".encode()
        return b"\0".join(entries)

    _rewrite_own(47, marked)  # env_start, env_end: /proc/PID/stat fields 50 and 51
    os.environ[procs.SUPERVISOR_MARKER] = sid
    if not procs.has_marker(os.getpid(), sid, procs.SUPERVISOR_MARKER):
        raise OSError("the supervisor marker did not take")


USAGE = (
    "usage: python -I -m zwarm.runtime.forkserver [--detach] [--idle S] [--lock FD] STATE_DIR NAME"
)


def main(argv: list[str] | None = None) -> int:
    """``[--detach] [--idle S] [--lock FD] STATE_DIR NAME``. With ``--detach`` the server
    runs in a child of this process, which exits at once: its starter (a long-lived API user,
    say) keeps no child and no thread for it. ``--lock``: the start lock's fd, held until the
    server listens (``forking.start_lock``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    idle, detach, lock = IDLE_S, False, None
    while len(args) > 2 and args[0] in ("--idle", "--detach", "--lock"):
        opt = args.pop(0)
        try:
            if opt == "--idle":
                idle = float(args.pop(0))
            elif opt == "--lock":
                lock = int(args.pop(0))
            else:
                detach = True
        except ValueError:
            args = []
    if lock is not None and lock < 3:  # never stdin, stdout or stderr
        args = []
    name = args[1] if len(args) == 2 else ""
    if len(name) != NAME_LEN or not all(c in "0123456789abcdef" for c in name):
        print(USAGE, file=sys.stderr)
        return 2
    if detach and os.fork() != 0:
        return 0
    return serve(args[0], name, idle, lock)


if __name__ == "__main__":
    rc = main()
    sys.stderr.flush()
    os._exit(rc)
