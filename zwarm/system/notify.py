"""Sleeping until a watched directory changes: inotify on Linux, else cheap stat-keyed polls.

Owns how the commands that wait (``wait``, ``logs -f``, ``trajectory -f``, ``top``, the
progress shown while waiting) block between looks at the state dir. Must stay true:
- a wake-up is only a hint: the caller re-reads what it needs through the store (which
  validates it); nothing here reads a watched file, and no event's name is acted on;
- no link is followed: a watched path must be a real directory (``IN_ONLYDIR`` with
  ``IN_DONT_FOLLOW``; a link fails ``add`` and falls back to ``lstat`` polling, which never
  follows one either);
- reading the event queue is bounded (``EVENT_BYTES`` per read, ``MAX_READS`` per wake-up,
  the rest left queued in the kernel); events are reduced to the watched paths they name
  and dropped (an overflow reports every watched path);
- without inotify (not Linux, no symbol in libc, no instance left, or one ``add`` failing:
  the watch limit, a missing directory, a link) those paths are polled every ``POLL_S`` with
  ``lstat`` and a listing, and reported only when a key changed (the directory's inode,
  mtime and ctime, and each entry's inode, size and mtime);
- ``wait`` never sleeps past its timeout: callers pass a safety interval, so a change that
  writes no file (a supervisor killed -9) is still noticed at low frequency;
- ctypes is imported only when a ``Watcher`` is made (commands that do not wait never pay).
"""

from __future__ import annotations

import os
import select
import stat
import struct
import sys
import time
from pathlib import Path
from typing import Any

POLL_S = 0.5  # how often a path without inotify is looked at
EVENT_BYTES = 64 << 10  # one read of the event queue
MAX_READS = 16  # reads per wake-up: a flood of events is dropped, not followed forever
NO_INOTIFY = "ZWARM_NO_INOTIFY"  # set (non-empty): always poll (tests, odd file systems)
MAX_SLEEP_S = 86_400.0  # "no limit": a day at a time (what poll() and sleep() accept)

# <sys/inotify.h>
IN_MODIFY = 0x2
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
ENTRIES = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF
CONTENT = IN_MODIFY | IN_CLOSE_WRITE  # a file in the directory written (a turn log grows)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)

Key = tuple[int, ...] | None


class Watcher:
    """Directories watched for changes. ``add`` a directory (with ``content``: also a write
    to a file in it, not only entries created, removed or renamed); ``wait(timeout)`` returns
    the watched paths that changed (empty on timeout). ``wakeups`` counts returns of ``wait``
    that found a change (tests: an idle waiter must not spin)."""

    def __init__(self, poll: bool | None = None) -> None:
        self.fd: int | None = None
        self._wds: dict[int, Path] = {}
        self._by_path: dict[Path, int] = {}
        self._polled: dict[Path, Key] = {}
        self.wakeups = 0
        if poll is None:
            poll = bool(os.environ.get(NO_INOTIFY))
        if not poll:
            self.fd = _init()

    @property
    def mode(self) -> str:
        """``inotify`` when every path is watched by the kernel, else ``poll`` (or ``mixed``)."""
        if self.fd is None or (self._polled and not self._wds):
            return "poll"
        return "mixed" if self._polled else "inotify"

    def add(self, path: str | Path, content: bool = False) -> None:
        """Watch directory ``path`` (again: no-op). Never fails: a path inotify refuses is
        polled instead."""
        p = Path(path)
        if p in self._by_path or p in self._polled:
            return
        if self.fd is not None:
            mask = ENTRIES | (CONTENT if content else 0) | IN_ONLYDIR | IN_DONT_FOLLOW
            wd = _add_watch(self.fd, p, mask)
            if wd >= 0:
                self._wds[wd] = p
                self._by_path[p] = wd
                return
        self._polled[p] = _key(p)

    def discard(self, path: str | Path) -> None:
        """Stop watching ``path`` (not watched: no-op)."""
        p = Path(path)
        self._polled.pop(p, None)
        wd = self._by_path.pop(p, None)
        if wd is not None:
            self._wds.pop(wd, None)
            if self.fd is not None:
                _rm_watch(self.fd, wd)

    @property
    def paths(self) -> set[Path]:
        return set(self._by_path) | set(self._polled)

    def wait(self, timeout: float | None) -> set[Path]:
        """Block until a watched path changes or ``timeout`` seconds pass (None: no limit);
        the paths that changed (empty: timed out)."""
        deadline = time.monotonic() + (MAX_SLEEP_S if timeout is None else max(0.0, timeout))
        while True:
            left = max(0.0, deadline - time.monotonic())
            step = min(left, POLL_S) if self._polled else left
            changed = self._events(step) | self._poll_changes()
            if changed:
                self.wakeups += 1
                return changed
            if time.monotonic() >= deadline:
                return set()

    def _events(self, timeout: float) -> set[Path]:
        if self.fd is None:
            time.sleep(timeout)
            return set()
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        if not p.poll(int(timeout * 1000 + 0.999)):
            return set()
        changed: set[Path] = set()
        for _ in range(MAX_READS):
            try:
                data = os.read(self.fd, EVENT_BYTES)
            except OSError:  # EAGAIN: drained
                break
            changed |= self._parse(data)
            if len(data) < EVENT_BYTES // 2:
                break
        return changed

    def _parse(self, data: bytes) -> set[Path]:
        changed: set[Path] = set()
        off = 0
        while off + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, off)
            off += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                return self.paths
            path = self._wds.get(wd)
            if path is None:
                continue
            changed.add(path)
            if mask & (IN_IGNORED | IN_MOVE_SELF):  # the directory went: poll its path now
                self.discard(path)
                self._polled[path] = _key(path)
        return changed

    def _poll_changes(self) -> set[Path]:
        changed = set()
        for p, key in self._polled.items():
            now = _key(p)
            if now != key:
                self._polled[p] = now
                changed.add(p)
        return changed

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self._wds.clear()
        self._by_path.clear()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Sessions:
    """The directories of the sessions a waiter waits on (their meta.json is replaced by a
    rename there), and with ``turns`` their ``turns/`` directories (a log that grows, a new
    turn's log). ``pause`` says which sessions to read again; every ``every`` seconds that is
    all of them, whatever changed (a process that died writes no file; None: never)."""

    def __init__(
        self,
        dirs: dict[str, Path],
        turns: bool = False,
        every: float | None = 3.0,
        poll: bool | None = None,
    ) -> None:
        self.watcher = Watcher(poll)
        self.every = every
        self._ids = {d: sid for sid, d in dirs.items()}
        for d in dirs.values():
            self.watcher.add(d)
            if turns:
                self.watcher.add(d / "turns", content=True)
        self._looked = time.monotonic()
        self.woke = False  # whether the last pause saw a change (or only timed out)
        self.changed: set[str] = set()  # the sessions whose directory it saw change
        self.due = False  # whether it ended because a look at everything was due

    def pause(self, timeout: float | None = None) -> set[str]:
        """Sleep until a watched file changes, a look at everything is due, or ``timeout``;
        the sessions whose meta.json may have changed since (empty: only a turn log grew, or
        ``timeout`` came first)."""
        if self.every is None:
            wait = timeout
        else:
            due = self._looked + self.every - time.monotonic()
            wait = due if timeout is None else min(due, timeout)
        changed = self.watcher.wait(wait)
        self.woke = bool(changed)
        self.changed = {self._ids[p] for p in changed if p in self._ids}
        self.due = self.every is not None and time.monotonic() >= self._looked + self.every
        if self.due:
            self._looked = time.monotonic()
            return set(self._ids.values())
        return self.changed

    def close(self) -> None:
        self.watcher.close()

    def __enter__(self) -> Sessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _key(path: Path) -> Key:
    """What changes when ``path`` (a directory, not followed if a link) or one of its entries
    changes (each entry's inode, size and mtime: an atomic rename gives a new inode even
    within one mtime tick); None if it is not there."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    key: tuple[int, ...] = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        return key
    try:
        with os.scandir(path) as it:
            for e in sorted(it, key=lambda e: e.name):
                s = e.stat(follow_symlinks=False)
                key += (s.st_ino, s.st_size, s.st_mtime_ns)
    except OSError:
        pass
    return key


# ---------------------------------------------------------------------- libc, through ctypes
_libc: Any = None


def _load() -> Any:
    """libc's inotify functions, or None where there are none."""
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            import ctypes

            try:  # the interpreter's own libc: no library search (that would run ldconfig)
                lib = ctypes.CDLL(None, use_errno=True)
                lib.inotify_init1.argtypes = [ctypes.c_int]
                lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
                lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
                _libc = lib
            except (OSError, AttributeError):
                pass
    return _libc or None


def _init() -> int | None:
    lib = _load()
    if lib is None:
        return None
    fd = int(lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
    return fd if fd >= 0 else None  # EMFILE: no instance left for this user


def _add_watch(fd: int, path: Path, mask: int) -> int:
    return int(_load().inotify_add_watch(fd, os.fsencode(path), mask))


def _rm_watch(fd: int, wd: int) -> None:
    _load().inotify_rm_watch(fd, wd)
