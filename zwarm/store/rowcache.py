"""The listing's cache of finished sessions' rows, kept where agents cannot write.

Owns ``$XDG_CACHE_HOME/zwarm/rows/<dev>-<ino>-<code>.jsonl`` (default ``~/.cache/zwarm/rows``),
one file per state dir (named by its ``sessions/`` directory's device and inode) and per code
that makes rows (``code_tag``: another zwarm never reads rows this one made). A listing
(``Zwarm.sessions``) takes from it the row of each finished session whose files are
unchanged, and gives it the rows it had to make. It lies outside the state dir, so an agent
that may write its own ``meta.json`` (it lies in its working directory) cannot plant a row, as
it cannot plant a launch pin (``zwarm.store.pins``). Must stay true:
- a cached row is used only while the session's directory and its ``meta.json`` are exactly as
  when the row was made from them: the same device, inode, mtime and ctime of the directory
  and inode, size, mtime and ctime of the file (``system.files.DirFileKey``, from the very fds
  the row was read through), and only if all four times were at least ``RACY_S`` old then (a
  rewrite within the same clock tick keeps the times: git's racily-clean rule). A ctime cannot
  be set back, so no rewrite of a session's files matches an earlier key. Only rows of
  finished sessions are kept; a running, waiting or damaged session is read from its
  ``meta.json`` every time;
- it is used only on a local filesystem (``local_fs``: not over NFS, Lustre, ...);
- the file is still read as untrusted input: opened without following a link, in a real
  directory of this user, a regular file of this user of at most ``MAX_BYTES``. A line is
  ``["<id>",[<key>],<row>]``; it is believed only if it starts with exactly the session's id
  and its current key, and its row is exactly one JSON object that the one row schema
  (``zwarm.model.rows``) accepts, naming that session, finished. Any other line is ignored:
  that session is read from its ``meta.json`` as if nothing were cached. The cache makes a
  listing faster, never different;
- it only grows by whole lines (appended a batch of whole lines per write: a reader, or
  another listing's append, sees only whole lines, or a line a torn write cut, which no key
  matches), or is replaced atomically when compacted (only live lines kept); writing it
  never fails a command (a full disk, a read-only home: nothing more is written).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from zwarm.errors import StoreError
from zwarm.model.rows import decode_row
from zwarm.model.status import FINISHED
from zwarm.system.files import (
    CLOEXEC,
    NOFOLLOW,
    DirFileKey,
    NotRegularFile,
    TooLarge,
    atomic_write,
    dir_file_key,
    private_dir,
    read_file,
)
from zwarm.system.files import write_all as _write_all

_encode = msgspec.json.Encoder().encode
MAX_BYTES = 256 << 20  # a larger cache is ignored (and replaced by the next listing)
RACY_S = 2.0
_RACY_NS = int(RACY_S * 1e9)
SLACK = 1000  # dead lines tolerated before a compaction, beyond one per live line
_BATCH = 256  # lines made and appended at once: ~350 KB, the same memory reused (a
# cold listing of 10,000 rows would otherwise touch 14 MB of fresh pages for one write)
_HEAD_MAX = 256  # a line's id and key fit in this many bytes (``_head``: 8 numbers, an id)
LOCAL_FS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "bcachefs", "f2fs", "zfs", "jfs", "reiserfs"}
    | {"tmpfs", "ramfs", "overlay", "vfat", "exfat", "ntfs3", "hfsplus", "apfs"}
)


def location(
    environ: Mapping[str, str], sessions: os.stat_result, sources: Sequence[str] = ()
) -> Path:
    """The cache file of the state dir whose ``sessions/`` directory is ``sessions``, for rows
    made by the code in ``sources`` (``code_tag``)."""
    from zwarm.xdg import xdg_dir

    name = f"{sessions.st_dev:x}-{sessions.st_ino:x}-{code_tag(sources)}.jsonl"
    return xdg_dir(environ, "XDG_CACHE_HOME") / "rows" / name


def siblings(path: Path) -> list[Path]:
    """The cache files of the state dir of cache file ``path``, whatever code made them
    (``path`` among them if it exists)."""
    prefix = path.name.rsplit("-", 1)[0] + "-"
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    return [path.parent / n for n in sorted(names) if n.startswith(prefix) and n.endswith(".jsonl")]


def code_tag(sources: Sequence[str]) -> str:
    """Which code made the rows: the files that decide what a row says (``model.rows.row``, the
    record's derived fields, the schemas), by inode, size and mtime. Another zwarm, or one
    edited in place, has a cache of its own, so a fix to a derived field shows at once."""
    import zlib

    parts = []
    for path in sources:
        try:
            st = os.stat(path)
        except OSError:
            return "none"
        parts.append(f"{path}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
    return f"{zlib.crc32('|'.join(parts).encode()):08x}"


def opened(
    environ: Mapping[str, str], sessions_fd: int | None, sources: Sequence[str] = ()
) -> RowCache | None:
    """The cache of the state dir whose ``sessions/`` is open as ``sessions_fd``, for rows
    made by ``sources`` (``location``), read; None if that is on a filesystem not known to be
    local (``local_fs``)."""
    if sessions_fd is None:
        return None
    st = os.fstat(sessions_fd)
    if not local_fs(st.st_dev):
        return None
    cache = RowCache(location(environ, st, sources), sessions_fd)
    cache.load()
    return cache


def local_fs(dev: int, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether device ``dev`` holds a local filesystem (``LOCAL_FS``), whose ``stat`` always
    shows a change. A network filesystem's client may answer ``stat`` from its attribute cache
    for a minute after another machine (a Slurm node) rewrote a file, while ``open`` checks
    (close-to-open): there a listing reads every ``meta.json``, as without a cache."""
    want = f"{os.major(dev)}:{os.minor(dev)}".encode()
    try:
        with open(mountinfo, "rb") as f:
            data = f.read(1 << 22)
    except OSError:
        return False
    for line in data.splitlines():
        head, sep, tail = line.partition(b" - ")
        fields = head.split(b" ", 3)
        if sep and len(fields) > 2 and fields[2] == want:
            return tail.split(b" ", 1)[0].decode("ascii", "replace") in LOCAL_FS
    return False


class RowCache:
    """One listing's view of the cache: ``load`` once, ``get``/``put`` per session, ``save``.
    ``get`` looks at the sessions through ``sessions_fd`` (open for the listing)."""

    def __init__(self, path: Path, sessions_fd: int) -> None:
        self.dir = path.parent
        self.path = path
        self._fd = sessions_fd
        self._lines: dict[bytes, bytes] = {}  # session id -> its latest line
        self._count = 0  # lines in the file, live or not
        self._new: list[tuple[bytes, bytes | dict[str, Any]]] = []  # to add: (``_head``, row)
        self._kept: dict[str, bytes] = {}  # the lines a listing used, by session
        self._now = time.time_ns()

    def load(self) -> None:
        """Read the file: nothing if it is missing, is not a regular file of this user in a
        real directory of this user, or is too large (then the next ``save`` replaces it)."""
        try:
            if not _own_dir(os.lstat(self.dir)):
                return
            data, st = read_file(self.path, MAX_BYTES)
        except TooLarge:
            self._count = MAX_BYTES  # replaced by the rows of this listing
            return
        except (OSError, NotRegularFile):
            return
        if st.st_uid != os.geteuid():
            return
        lines = self._lines
        for raw in data.split(b"\n"):
            if raw:
                self._count += 1
                lines[raw[2:38]] = raw  # a line not of our shape never matches (``get``)

    def get(self, sid: str) -> dict[str, Any] | None:
        """The cached row of ``sid`` if its files are as they were when it was made."""
        raw = self._lines.get(sid.encode())
        if raw is None:
            return None
        try:
            f = os.stat(f"{sid}/meta.json", dir_fd=self._fd, follow_symlinks=False)
            # meta.json changed (a session that just ended): no need to look at its directory
            if raw.find(_file_part(f), 0, _HEAD_MAX) < 0:
                return None
            d = os.stat(sid, dir_fd=self._fd, follow_symlinks=False)
        except OSError:
            return None
        head = _head(sid, dir_file_key(d, f))
        if not (raw.startswith(head) and raw.endswith(b"]")) or not stat.S_ISREG(f.st_mode):
            return None
        try:
            row = decode_row(memoryview(raw)[len(head) : -1])
        except ValueError:
            return None
        if row["id"] != sid or row["status"] not in FINISHED:
            return None
        self._kept[sid] = raw
        return row

    def put(self, sid: str, key: DirFileKey, row: dict[str, Any], raw: bytes | None) -> None:
        """Keep ``row`` (just made from the files of ``key``) if it may be cached. ``raw``:
        its JSON (exactly ``msgspec.json.encode(row)``) if the listing holds it already, to
        make the line of; else the row is encoded by ``save``, a batch at a time."""
        if row["status"] not in FINISHED or row.get("damaged"):
            return
        newest = max(key[2], key[3], key[6], key[7])
        if newest > self._now - _RACY_NS:  # racy (or a file from the future: a stepped clock)
            return
        self._new.append((_head(sid, key), row if raw is None else raw))

    def save(self) -> None:
        """Append the new rows, or rewrite the file with only the live ones once mostly dead.
        Called before the listing changes any row (its place in a tree, in the queue): the
        rows ``put`` without their JSON are encoded here. Every failure is ignored."""
        dead = self._count - len(self._kept)
        try:
            if dead > len(self._kept) + SLACK:
                self._compact()
            elif self._new:
                self._append()
        except OSError:
            pass

    def _append(self) -> None:
        self._ensure_dir()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | NOFOLLOW | CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return
            if st.st_size == 0:
                self._drop_others()
            size = st.st_size
            for i in range(0, len(self._new), _BATCH):  # whole lines, a batch at a time
                data = _lines(self._new[i : i + _BATCH])
                size += len(data)
                if size > MAX_BYTES:
                    return  # replaced by the next compaction
                _write_all(fd, data)
        finally:
            os.close(fd)

    def _compact(self) -> None:
        self._ensure_dir()
        kept = b"".join(x + b"\n" for x in self._kept.values())
        data = kept + _lines(self._new) if self._new else kept
        if len(data) > MAX_BYTES:
            data = b""
        with contextlib.suppress(StoreError):  # a full disk: not worth failing a listing
            atomic_write(self.path, data, durable=False)

    def _drop_others(self) -> None:
        """Remove this state dir's caches made by other code (``code_tag``): a new one was
        just started."""
        for other in siblings(self.path):
            if other != self.path:
                with contextlib.suppress(OSError):
                    os.unlink(other)

    def _ensure_dir(self) -> None:
        """The cache dir, made (0700) if missing; ``OSError`` if it is not this user's own."""
        try:
            private_dir(self.dir.parent)
            self.dir.mkdir(mode=0o700)
        except FileExistsError:
            if not _own_dir(os.lstat(self.dir)):
                raise NotADirectoryError(str(self.dir)) from None


def _lines(new: list[tuple[bytes, bytes | dict[str, Any]]]) -> bytes:
    """``["<id>",[<key>],<row>]`` for each of ``new`` (its head, its row or the row's JSON),
    a line each; none for a row msgspec cannot encode (a lone surrogate in a string)."""
    parts: list[bytes] = []
    for head, row in new:
        try:
            raw = row if isinstance(row, bytes) else _encode(row)
        except (TypeError, ValueError):
            continue
        parts += (head, raw, b"]\n")
    return b"".join(parts)


def _head(sid: str, key: DirFileKey) -> bytes:
    """What a line of ``sid`` made from the files of ``key`` starts with (its row follows,
    then ``]``): ``["<sid>",[<key>],``."""
    return f'["{sid}",[{",".join(map(str, key))}],'.encode()


def _file_part(f: os.stat_result) -> bytes:
    """How the file's half of a key (``DirFileKey``) ends a line's key: ``,ino,size,m,c],``."""
    return b",%d,%d,%d,%d]," % (f.st_ino, f.st_size, f.st_mtime_ns, f.st_ctime_ns)


def _own_dir(st: os.stat_result) -> bool:
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
