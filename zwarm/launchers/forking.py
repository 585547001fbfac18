"""Asking the state dir's fork server (``runtime.forkserver``) for a turn's supervisor.

The requester's side, the local launcher's (``LocalLauncher``; the server is a process entry
point, above the engine: it imports this module, never the reverse): whether forking may be
used here (``usable``), which server to ask (``address``), the request and the checks on its
answer (``fork``), and how to start a server (``start_argv``, one at a time:
``start_lock``). Must stay true:
- a server is addressed by what its children share with it: the user, the state dir, the
  interpreter, zwarm's version, what a child inherits besides its environment (umask, groups,
  resource limits, priority) and the variables an interpreter reads only when it starts
  (``shaping``), so a forked supervisor behaves as one started by this command would;
- a request sends a session id, the session's ``supervisor.log`` (an fd the caller opened
  with no link followed) and the supervisor's environment, nothing else (a server answers
  only its user confined as itself: it can do nothing a requester could not do itself);
- an answer is believed only if it names a live child of the server spoken to (its pid from
  ``SO_PEERCRED``, of this user) that carries the session's supervisor marker; anything else,
  or no answer within ``REPLY_S``, returns None and the caller starts a new interpreter;
- importing this module costs no more than ``socket`` (spawn's start-up).
"""

from __future__ import annotations

import os
import socket
import struct
import sys

TYPE_CHECKING = False  # not ``typing``'s: ``spawn`` imports this
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

PLACEHOLDER = "-" * 36  # a session id's length: a child writes its id over it, in place
REPLY_S = 3.0  # how long a requester waits for the child's pid (else: a new interpreter)
LOG = "forkserver.log"  # the server's own stderr, in the state dir
START_LOCK = "forkserver.lock"  # held by a starting server until it listens (``start_lock``)
NAME_LEN = 32  # hex digits of the address hash
CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
HEADER = 36 + 8  # a request starts with a session id and its environment's length (8 hex)
ENV_MAX = 1 << 20  # the largest environment a request carries


def header(sid: str, env_len: int) -> bytes:
    """A request's first bytes, sent with the log's fd: the session id, the environment's
    length."""
    return sid.encode("ascii") + b"%08x" % env_len


def usable(python: str, environ: Mapping[str, str]) -> bool:
    """Whether turns may be forked: Linux, zwarm's own interpreter (a custom ``Env.python``
    is honoured as given: a new process per turn), and not switched off
    (``ZWARM_FORKSERVER=0``)."""
    return (
        sys.platform.startswith("linux")
        and python == sys.executable
        and environ.get("ZWARM_FORKSERVER", "1") != "0"
    )


def address(root: Path, python: str, environ: Mapping[str, str]) -> str:
    """The name of the server for this state dir and interpreter, and for what a process
    started now from this one would be given besides its environment (``inherited``) and
    what of its environment shapes an interpreter at start-up (``shaping``): a request carries
    the rest of the environment, which the forked supervisor takes as its own."""
    from _blake2 import blake2b

    from zwarm import __version__

    h = blake2b(digest_size=NAME_LEN // 2)
    for part in (str(root), python, __version__, *inherited(), *shaping(environ)):
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()


SHAPING = ("LD_", "GLIBC_TUNABLES", "MALLOC_", "LANG", "LC_", "TZ", "TMPDIR", "PYTHON")


def shaping(environ: Mapping[str, str]) -> list[str]:
    """The variables a process reads when it starts, not when zwarm asks (the dynamic
    loader's, the C library's, the locale, the time zone, the temporary directory): a
    supervisor forked by a server started with others would run with those."""
    return sorted(f"{k}={v}" for k, v in environ.items() if k.startswith(SHAPING))


def encode_env(environ: Mapping[str, str]) -> bytes:
    """``environ`` as a request carries it: ``KEY=VALUE`` entries, each ended by NUL."""
    return b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in environ.items())


def inherited() -> list[str]:
    """What a process started now would inherit from this one besides its environment: the
    umask, group ids, resource limits and scheduling priority (a server started by a command
    with other ones forks supervisors with those: it must be another server)."""
    mask = os.umask(0o077)
    os.umask(mask)
    groups = ",".join(map(str, sorted(os.getgroups())))
    try:
        with open("/proc/self/limits", "rb") as f:
            limits = f.read().decode("ascii", "replace")
    except OSError:
        limits = "?"
    return [oct(mask), f"{os.getgid()}:{os.getegid()}:{groups}", limits, str(os.nice(0))]


def abstract(name: str) -> bytes:
    """The socket address of server ``name`` (Linux's abstract namespace, per user)."""
    return f"\0zwarm-forkserver-{os.geteuid()}-{name}".encode()


class Absent(Exception):
    """No server listens at the address (start one: ``start_argv``)."""


def fork(
    name: str, sid: str, log_fd: int, environ: Mapping[str, str], timeout: float | None = None
) -> int | None:
    """Ask server ``name`` for a supervisor of ``sid`` with environment ``environ`` (its
    stderr ``log_fd``): the child's pid once it checks out (a live child of that server, of
    this user, carrying the session's marker); None if the server refused, failed or is not
    to be trusted; ``Absent`` if none listens."""
    env = encode_env(environ)
    if len(env) > ENV_MAX:
        return None
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    except OSError:  # a sandbox that allows no socket: a new interpreter, here, as before
        return None
    with s:
        s.settimeout(REPLY_S if timeout is None else timeout)
        try:
            s.connect(abstract(name))
        except (ConnectionRefusedError, FileNotFoundError) as e:
            raise Absent(name) from e
        except OSError:
            return None
        try:
            server, uid, _ = CRED.unpack(s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid != os.geteuid():
                return None
            socket.send_fds(s, [header(sid, len(env))], [log_fd])
            s.sendall(env)
            reply = _read_reply(s)
        except OSError:  # the server or its child died, or a timeout: a new interpreter runs it
            return None
    pid = int(reply) if reply.isdigit() and len(reply) < 11 else 0
    return pid if pid and _checks_out(pid, server, sid) else None


def _read_reply(s: socket.socket) -> bytes:
    """The child's answer: all it sends before it closes (at most 64 bytes)."""
    data = b""
    while len(data) < 64:
        chunk = s.recv(64 - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _checks_out(pid: int, server: int, sid: str) -> bool:
    """``pid`` is a live child of ``server`` of this user, marked as ``sid``'s supervisor."""
    from zwarm.system import procs

    try:
        if os.stat(f"/proc/{pid}").st_uid != os.geteuid():
            return False
    except OSError:
        return False
    fields = procs._stat_fields(pid)
    return (
        fields is not None
        and int(fields[1]) == server
        and not procs._dead(fields)
        and procs.has_marker(pid, sid, procs.SUPERVISOR_MARKER)
    )


def start_argv(python: str, root: Path, name: str, lock: int | None = None) -> list[str]:
    """How to start the server ``name`` for ``root`` (with the environment it was named
    for), handing it ``lock`` (``start_lock``) to hold until it listens."""
    from zwarm.env.python import python_argv

    lock_args = () if lock is None else ("--lock", str(lock))
    return python_argv(python, "zwarm.runtime.forkserver", "--detach", *lock_args, str(root), name)


class Busy(Exception):
    """Another server of this state dir is starting (it holds the start lock)."""


def start_lock(root: Path) -> int | None:
    """An fd holding the state dir's start lock (``START_LOCK``), for a server to hold from
    its start until it listens: in a storm of first turns one server starts, not one per
    turn. ``Busy`` if another holds it; None if there is no lock to take (a link, a FIFO or
    an unwritable state dir: a server is started anyway, as one that loses the race to bind
    its address exits at once)."""
    from zwarm.system.files import open_lock, take_lock

    try:
        fd = open_lock(root / START_LOCK)
    except OSError:
        return None
    try:
        taken = take_lock(fd, 0)
    except OSError:
        taken = None
    if not taken:
        os.close(fd)
        if taken is False:
            raise Busy
        return None
    return fd
