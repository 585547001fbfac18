"""The on-disk store: ``.zwarm/sessions/<id>/`` with ``meta.json`` and ``turns/``.

Owns every path, permission, lock and write under the state directory. Must stay true:
- ``meta.json`` is replaced atomically (temp file in the same dir, fsync, rename, fsync dir):
  a reader sees the old or the new file, never a mix; a failed write (disk full) leaves the
  old file intact;
- every read-modify-write of a session holds that session's lock (``flock`` on
  ``sessions/<id>/.lock``), so two zwarm processes never lose each other's changes;
- nothing given as a session id or name reaches outside ``sessions/`` (refs are validated
  against a strict pattern before any path is built);
- the state dir is ``0700`` and every file ``0600``: prompts and output hold secrets;
- a damaged ``meta.json`` is reported (``DamagedSession``), never rewritten or deleted here.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from zwarm.errors import (
    AmbiguousSession,
    DamagedSession,
    InvalidInput,
    InvalidRef,
    SessionNotFound,
    StoreError,
)
from zwarm.models import SCHEMA_VERSION, Session, Status

T = TypeVar("T")

# \Z, not $: "$" also matches before a trailing newline ("abcd\n" must not pass).
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
MIN_PREFIX = 4
_STATUSES = frozenset(s.value for s in Status)
_SUMMARY_STR_KEYS = ("id", "adapter", "task", "cwd", "created_at", "updated_at")


Key = tuple[int, int, int, int]


def file_key(st: os.stat_result) -> Key:
    """The identity of one version of a file: inode, size, mtime and ctime (ns). meta.json is
    replaced by rename (a new inode) and an edit in place changes the ctime (which nothing can
    set back), so a changed file has another key (``zwarm.index`` relies on it)."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class RawEntry:
    """One session as ``ls`` sees it: the parsed meta.json dict, or why it could not be read."""

    id: str
    meta: dict[str, Any] | None
    problem: str | None = None
    key: Key | None = None  # identity of the meta.json read (``file_key``)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.sessions = root / "sessions"
        self.names = root / "names"
        self.index = root / "index.json"

    # ----- layout
    def exists(self) -> bool:
        """Whether the state dir holds sessions; a state dir that is a file is an error."""
        if self.sessions.is_dir():
            return True
        for d in (self.root, self.sessions):
            if d.exists() and not d.is_dir():
                raise StoreError(f"{d} exists and is not a directory")
        return False

    def ensure(self) -> None:
        """Create the state dir (0700) if needed. Only commands that write call this."""
        for d in (self.root, self.sessions, self.names):
            try:
                d.mkdir(mode=0o700, exist_ok=True)
            except FileExistsError:
                raise StoreError(f"{d} exists and is not a directory") from None
            except OSError as e:
                raise StoreError(f"cannot create {d}: {e.strerror}") from None
        os.chmod(self.root, 0o700)

    def session_dir(self, sid: str) -> Path:
        if not _ID.match(sid):
            raise InvalidRef(sid, "not a session id")
        return self.sessions / sid

    def meta_path(self, sid: str) -> Path:
        return self.session_dir(sid) / "meta.json"

    def turn_path(self, sid: str, n: int, ext: str = "jsonl") -> Path:
        return self.session_dir(sid) / "turns" / f"turn_{n}.{ext}"

    # ----- ids and names
    @staticmethod
    def new_id() -> str:
        import uuid  # here, not at the top: only spawn needs it (start-up time)

        return str(uuid.uuid4())

    @staticmethod
    def check_name(name: str) -> str:
        if not _NAME.match(name):
            raise InvalidInput(
                f"invalid session name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        if _ID.match(name):
            raise InvalidInput(f"invalid session name {name!r}: it looks like a session id")
        return name

    def resolve(self, ref: str) -> str:
        """A full session id for ``ref``: an id, a name, or a unique prefix (>= 4 chars)."""
        if not isinstance(ref, str) or not ref:
            raise InvalidRef(str(ref), "empty")
        if not _REF.match(ref):
            raise InvalidRef(ref, "use an id, a unique id prefix, or a session name")
        if _ID.match(ref) and (self.sessions / ref).is_dir():
            return ref
        named = self._lookup_name(ref)
        if named is not None:
            return named
        if len(ref) < MIN_PREFIX:
            raise SessionNotFound(ref)
        found = sorted(i for i in self.list_ids() if i.startswith(ref))
        if not found:
            raise SessionNotFound(ref)
        if len(found) > 1:
            raise AmbiguousSession(ref, found)
        return found[0]

    def _lookup_name(self, name: str) -> str | None:
        try:
            sid = (self.names / name).read_text().strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError:
            return None
        return sid if _ID.match(sid) and (self.sessions / sid).is_dir() else None

    def claim_name(self, name: str, sid: str) -> None:
        """Reserve ``name`` for ``sid`` atomically (O_EXCL); a stale claim is taken over.

        A claim is stale when its session dir does not exist, so ``sid``'s dir must exist
        before claiming. The names lock makes check-unlink-create one step: two takeovers of
        one stale claim cannot both win.
        """
        path = self.names / self.check_name(name)
        with self._names_lock():
            self._claim(path, name, sid)

    @contextlib.contextmanager
    def _names_lock(self) -> Iterator[None]:
        fd = os.open(self.names / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _claim(self, path: Path, name: str, sid: str) -> None:
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                if self._lookup_name(name) is not None:
                    raise InvalidInput(f"a session named {name!r} already exists") from None
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # claim left by a removed or never-created session
                continue
            with os.fdopen(fd, "w") as f:
                f.write(sid)
            return
        raise InvalidInput(f"a session named {name!r} already exists")

    def release_name(self, name: str | None, sid: str) -> None:
        if not name or not _NAME.match(name):
            return
        path = self.names / name
        with contextlib.suppress(OSError):
            if path.read_text().strip() == sid:
                path.unlink()

    def list_ids(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.sessions) if _ID.match(n)]
        except FileNotFoundError:
            return []
        except OSError as e:  # not a directory, no permission
            raise StoreError(f"cannot read {self.sessions}: {e.strerror}") from None

    # ----- locking and meta.json
    @contextlib.contextmanager
    def lock(self, sid: str) -> Iterator[None]:
        path = self.session_dir(sid) / ".lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            raise SessionNotFound(sid) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def load(self, sid: str) -> Session:
        path = self.meta_path(sid)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if not self.session_dir(sid).is_dir():
                raise SessionNotFound(sid) from None
            raise DamagedSession(sid, "meta.json is missing") from None
        except OSError as e:
            raise StoreError(f"cannot read {path}: {e.strerror}") from None
        try:
            s = Session.from_dict(json.loads(data))
        except (ValueError, RecursionError) as e:
            raise DamagedSession(sid, _describe(e, data)) from None
        if s.id != sid:
            raise DamagedSession(sid, f"meta.json names another session ({s.id})")
        return s

    def save(self, session: Session, path: Path | None = None) -> None:
        session.refresh()
        text = json.dumps(session.to_dict(), ensure_ascii=False, separators=(",", ":"))
        atomic_write(path or self.meta_path(session.id), text.encode("utf-8"))

    def update(self, sid: str, fn: Callable[[Session], T]) -> T:
        """Load, apply ``fn``, save: all under the session lock. ``fn`` returns the result."""
        with self.lock(sid):
            s = self.load(sid)
            result = fn(s)
            self.save(s)
            return result

    def read_raw(self, sid: str) -> RawEntry:
        """meta.json as a dict with a light check, for listing (no full model build)."""
        try:
            with open(f"{self.sessions}/{sid}/meta.json", "rb") as f:  # no Path: 10,000 calls
                key = file_key(os.fstat(f.fileno()))
                data = f.read()
        except FileNotFoundError:
            return RawEntry(sid, None, "meta.json is missing")
        except OSError as e:
            return RawEntry(sid, None, f"cannot read meta.json: {e.strerror}")
        try:
            meta = json.loads(data)
        except ValueError as e:
            return RawEntry(sid, None, _describe(e, data), key)
        return RawEntry(sid, meta, _light_check(meta, sid), key)

    def meta_key(self, sid: str) -> Key | None:
        """The identity of ``sid``'s meta.json now, or None if it cannot be stat'ed."""
        try:
            return file_key(os.stat(f"{self.sessions}/{sid}/meta.json"))
        except OSError:
            return None

    # ----- creation and removal
    def create(self, session: Session, prompt: bytes) -> None:
        """Create the session dir with turn 1's prompt and meta.json; all or nothing.

        Built under a hidden name in ``sessions/`` and renamed into place, so no reader ever
        sees a session dir without its meta.json.
        """
        d = self.session_dir(session.id)
        if d.exists():
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(d))
        stage = self.sessions / f".new-{session.id}"
        stage.mkdir(mode=0o700)  # outside the try: never remove a dir this call did not create
        try:
            (stage / "turns").mkdir(mode=0o700)
            write_private(stage / "turns" / "turn_1.prompt", prompt)
            self.save(session, stage / "meta.json")
            try:
                os.rename(stage, d)
            except OSError as e:
                if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(d)) from None
                raise
        except BaseException:
            import shutil

            shutil.rmtree(stage, ignore_errors=True)
            raise
        _fsync_dir(self.sessions)

    def remove(self, sid: str, name: str | None) -> None:
        """Delete a session dir: renamed out of ``sessions/`` first, so it vanishes atomically."""
        trash = self.root / "trash"
        trash.mkdir(mode=0o700, exist_ok=True)
        target = trash / f"{sid}.{os.urandom(4).hex()}"
        try:
            os.rename(self.session_dir(sid), target)
        except FileNotFoundError:
            raise SessionNotFound(sid) from None
        self.release_name(name, sid)
        import shutil

        shutil.rmtree(target, ignore_errors=True)


def write_private(path: Path, data: bytes) -> None:
    """Write ``path`` (0600). A failed write (disk full) removes the partial file and raises
    ``StoreError``; ``FileNotFoundError`` (its directory is gone) propagates as it is."""
    opened = False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        opened = True
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as e:
        if opened:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if e.errno == errno.ENOENT:
            raise
        raise StoreError(f"cannot write {path}: {e.strerror}") from None


def atomic_write(path: Path, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (and, if ``durable``, fsynced with its
    directory: a cache may skip that); the old file survives failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, data)
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
        raise StoreError(f"cannot write {path}: {e.strerror}") from None
    if durable:
        _fsync_dir(path.parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _light_check(meta: Any, sid: str) -> str | None:
    if not isinstance(meta, dict):
        return "meta.json is not a JSON object"
    v = meta.get("schema_version")
    if not isinstance(v, int):
        return "meta.json has no schema_version"
    if v > SCHEMA_VERSION:
        return f"meta.json has schema_version {v}, newer than this zwarm understands"
    if meta.get("status") not in _STATUSES:
        return f"unknown status {meta.get('status')!r}"
    for k in _SUMMARY_STR_KEYS:
        if not isinstance(meta.get(k), str):
            return f"field {k!r} is missing or not a string"
    if meta["id"] != sid:
        return "meta.json names another session"
    if not isinstance(meta.get("turns"), list):
        return "field 'turns' is not a list"
    return None


def _describe(e: BaseException, data: bytes) -> str:
    if not data.strip():
        return "meta.json is empty"
    if isinstance(e, json.JSONDecodeError):
        return f"meta.json is not valid JSON (truncated?): {e.msg} at byte {e.pos}"
    if isinstance(e, UnicodeDecodeError):
        return f"meta.json is not valid UTF-8 (byte {e.start})"
    return str(e)
