"""How zwarm reads and writes one file: atomically, privately, without following links.

Owns every low-level file operation on the files zwarm keeps: the state directory's, and
those outside it (the trust file, the agents' ``zwarm`` launcher, serve's token, gemini's
session homes). Must stay true:
- nothing here follows a symbolic link in the last path component (``O_NOFOLLOW``): an agent
  that replaced a state file by a link to another file gets an error, never a write through;
- reads open with ``O_NONBLOCK`` and accept only regular files (a FIFO or a device in place of
  a state file is an error, never a hang) of at most the size the caller allows;
- replacing a file is atomic (temp file in the same dir, optional fsync, rename, fsync dir):
  a reader sees the old or the new file, never a mix; a failed write (disk full) removes the
  partial file and leaves the old one intact; a temp file left by a writer killed mid-write
  is removed later by ``clean_temps`` (its naming pattern only, its writer gone or old);
- every file zwarm creates is ``0600`` and every directory ``0700`` (``private_dir``: its
  parents too, whatever the umask); a failure is a ``StoreError`` with one line, except
  ``FileNotFoundError`` (the directory is gone), which callers handle;
- every ``flock`` zwarm takes is taken here (``open_lock``/``take_lock``/``lock_fd``/``locked``):
  the lock file is opened like every other state file, never through a link.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from zwarm.errors import WriteFailed

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)

Key = tuple[int, int, int, int]


def file_key(st: os.stat_result) -> Key:
    """The identity of one version of a file: inode, size, mtime and ctime (ns)."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# a directory (dev, ino, mtime_ns, ctime_ns) and a file in it (ino, size, mtime_ns, ctime_ns)
DirFileKey = tuple[int, int, int, int, int, int, int, int]


def dir_file_key(d: os.stat_result, f: os.stat_result) -> DirFileKey:
    """The identity of one version of a directory and of one file in it (``rowcache``)."""
    return (
        d.st_dev,
        d.st_ino,
        d.st_mtime_ns,
        d.st_ctime_ns,
        f.st_ino,
        f.st_size,
        f.st_mtime_ns,
        f.st_ctime_ns,
    )


class NotRegularFile(OSError):
    """A state file that is a FIFO, a device, a directory or a link."""


class TooLarge(OSError):
    """A state file larger than its reader allows."""


def read_file(path: str | Path, limit: int, follow: bool = False) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` (at most ``limit``) and its stat, read without
    blocking, and without following a link unless ``follow``. Raises ``OSError`` subclasses;
    ``NotRegularFile`` and ``TooLarge`` say what was wrong."""
    try:
        flags = os.O_RDONLY | os.O_NONBLOCK | CLOEXEC | (0 if follow else NOFOLLOW)
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotRegularFile(errno.ELOOP, "is a symbolic link", str(path)) from None
        raise
    try:
        return _read_fd(fd, str(path), limit)
    finally:
        os.close(fd)


def _read_fd(fd: int, path: str, limit: int) -> tuple[bytes, os.stat_result]:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(errno.EINVAL, "is not a regular file", path)
    if st.st_size > limit:
        raise TooLarge(errno.EFBIG, f"is too large ({st.st_size} bytes)", path)
    # one read of the whole file: a short read of a regular file is its end (no second read)
    first = os.read(fd, st.st_size + 1)
    if len(first) <= st.st_size:
        return first, st
    chunks = [first]
    left = limit + 1 - len(first)
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > limit:
        raise TooLarge(errno.EFBIG, "grew too large while read", path)
    return data, st


def read_dir_file(
    directory: str, name: str, limit: int
) -> tuple[bytes, os.stat_result, os.stat_result]:
    """``name`` (a regular file, at most ``limit`` bytes) in ``directory``, which must be a real
    directory whose ``turns`` entry, if any, is a real directory too: neither path component
    may be a link. ``NotADirectoryError`` if ``directory`` (or its ``turns``) is not one.
    Returns the bytes and the stats of the directory and the file, from the fds read."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotADirectoryError(
                errno.ENOTDIR, "is not a directory (a link?)", directory
            ) from None
        raise
    try:
        dst = os.fstat(dfd)
        try:
            st = os.stat("turns", dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "turns/ is not a directory (a link?)")
        except FileNotFoundError:
            pass
        flags = os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotRegularFile(errno.ELOOP, "is a symbolic link", name) from None
            raise
    finally:
        os.close(dfd)
    try:
        data, st = _read_fd(fd, name, limit)
    finally:
        os.close(fd)
    return data, dst, st


def open_read(path: str | Path) -> int:
    """A read-only fd on the regular file ``path`` (no link followed, never blocking)."""
    return open_regular(path, os.O_RDONLY)


def open_append(path: str | Path) -> int:
    """An fd appending to ``path`` (created 0600), refusing a link or a non-regular file."""
    return open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def open_regular(path: str | Path, flags: int, dir_fd: int | None = None) -> int:
    """An fd on the regular file ``path`` (relative to ``dir_fd`` if given) opened with
    ``flags`` (created 0600): a link is never followed, a FIFO or device never blocks the open
    and is refused (``NotRegularFile``); the fd blocks as usual once checked."""
    fd = os.open(path, flags | os.O_NONBLOCK | NOFOLLOW | CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "is not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes, replace: bool = True) -> None:
    """Write ``path`` (0600) anew with ``data``: whatever was there (a file, or a link, which is
    never followed) is replaced, or, without ``replace``, kept (``FileExistsError``). A failed
    write removes the partial file and raises ``StoreError``; ``FileNotFoundError`` (its
    directory is gone) propagates."""
    opened = False
    try:
        if replace:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a file or a link planted there: removed, never written through
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o600)
        opened = True
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as e:
        if opened:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if e.errno in (errno.ENOENT, errno.EEXIST):
            raise
        raise WriteFailed(f"cannot write {path}: {e.strerror}") from None


def atomic_write(path: Path, data: bytes, durable: bool = True, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically (and, if ``durable``, fsynced with its
    directory: a cache may skip that), made with ``mode`` (0600; 0700: a program of ours);
    the old file survives failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, mode)
        try:
            write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if e.errno == errno.ENOENT:
            raise
        raise WriteFailed(f"cannot write {path}: {e.strerror}") from None
    if durable:
        fsync_dir(path.parent)


# what ``atomic_write`` names its temp file: ".<name>.<writer's pid>.<8 hex>.tmp"
_TEMP = re.compile(r"^\.[A-Za-z0-9._-]{1,200}\.([1-9][0-9]{0,9})\.[0-9a-f]{8}\.tmp\Z")
STALE_TEMP_S = 3600.0  # a temp file this old is stale even if a process has its writer's pid


def clean_temps(directory: Path, now: float) -> int:
    """Remove the temp files ``atomic_write`` left in ``directory`` when its writer was killed
    (a 60 MB meta.json's stays forever otherwise): only regular files named as it names them
    (never a link, a directory, another name), whose writer is gone or which are older than
    ``STALE_TEMP_S`` (its pid may have been reused); never one of this process's, so a
    write still under way elsewhere is left alone, lock or not. How many were removed;
    every error is ignored (the next call tries again)."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        m = _TEMP.match(name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        path = directory / name
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                continue
            if now - st.st_mtime < STALE_TEMP_S and _alive(int(m.group(1))):
                continue
            os.unlink(path)
            removed += 1
        except OSError:
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, another user's
    return True


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def private_dir(path: Path) -> None:
    """Make ``path`` and every missing directory above it, each ``0700`` whatever the umask
    (``mkdir(parents=True)`` makes the parents ``0777`` less the umask: open to everyone
    under umask 000); one that exists is left as it is. ``OSError`` as ``mkdir`` raises it."""
    missing = []
    p = Path(path)
    while not os.path.lexists(p) and p.parent != p:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            os.mkdir(d, 0o700)


def real_dir(path: Path) -> bool:
    """``path`` is a directory itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


# ---------------------------------------------------------------------------- locks
# The one flock helper family of zwarm: every lock file is opened by ``open_lock`` and taken
# by ``take_lock`` (blocking, one try, or within a timeout), so none follows a link.
def open_lock(path: Path) -> int:
    """An fd of lock file ``path`` (created 0600, never a link, opened without blocking on a
    FIFO, close-on-exec), not locked yet; ``OSError`` if it cannot be opened."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | NOFOLLOW | CLOEXEC, 0o600)


def take_lock(
    fd: int,
    timeout: float | None = None,
    waiting: Callable[[], None] | None = None,
    notice_after: float = 1.0,
) -> bool:
    """Take the exclusive ``flock`` on ``fd``: waiting as long as it takes (``timeout``
    None), one try (0), or within ``timeout`` seconds; whether it was taken. ``waiting`` is
    called once when a timed wait lasts ``notice_after`` seconds."""
    if timeout is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    start = time.monotonic()
    deadline, told = start + timeout, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            now = time.monotonic()
            if now >= deadline:
                return False
            if waiting is not None and not told and now - start >= notice_after:
                told = True
                waiting()
            time.sleep(0.01 if now - start < notice_after else 0.05)


def lock_fd(path: Path) -> int:
    """An fd holding an exclusive ``flock`` on ``path`` (``open_lock``, waiting as long as it
    takes); closing it releases the lock."""
    fd = open_lock(path)
    try:
        take_lock(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the block."""
    fd = lock_fd(path)
    try:
        yield
    finally:
        os.close(fd)
