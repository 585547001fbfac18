"""The sessions of one state directory: ``sessions/<id>/`` with ``meta.json`` and ``turns/``.

Owns every path, name, lock and session write under the state directory. Must stay true:
- ``meta.json`` is written only inside ``transaction`` (one locked read-modify-write: two zwarm
  processes never lose each other's changes) and by ``create``; it is replaced atomically,
  and a transaction removes the temp files of writes killed mid-way (``files.clean_temps``);
- a session's finished turns may live in its history file (``zwarm.store.history``): ``load``
  and ``transaction`` put them back unless asked not to (``history=False``: a listing, a
  supervisor), and a save never changes an archived turn;
- every reader decodes ``meta.json`` through ``zwarm.model.schema`` (one schema): a session is
  either valid or reported damaged (``DamagedSession``) with a one-line reason, never rewritten
  or deleted here;
- a zwarm 3.x record (``Session.imported``) is never written by a transaction (refused,
  ``SessionStateError``): only ``adopt`` migrates it, once, under the lock, keeping the 3.x
  file beside it (``meta.json.zwarm3``) before meta.json is replaced atomically;
- nothing given as a session id or name reaches outside ``sessions/`` (refs are validated
  against strict patterns before any path is built), and a session dir, its ``turns/`` or a
  state file that is a symbolic link, a FIFO or a device is refused, never followed or opened
  blocking (``system.files``);
- names and ids never shadow each other: a new name that could be an id prefix is refused, and
  a reference that could mean two sessions (a name from an older zwarm and another's id
  prefix) is an error listing both, never silently one of them;
- the state dir is ``0700`` and every file ``0600``: prompts and output hold secrets; a state
  dir zwarm creates holds a ``.gitignore`` of ``*``: git never shows or commits it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from zwarm.errors import (
    AmbiguousSession,
    DamagedSession,
    InvalidInput,
    InvalidRef,
    SessionNotFound,
    SessionStateError,
    StoreError,
)
from zwarm.model import Session
from zwarm.model.schema import MAX_META_BYTES, decode, encode
from zwarm.system.files import (
    CLOEXEC,
    NOFOLLOW,
    STALE_TEMP_S,
    DirFileKey,
    Key,
    NotRegularFile,
    TooLarge,
    atomic_write,
    clean_temps,
    dir_file_key,
    file_key,
    fsync_dir,
    lock_fd,
    locked,
    read_dir_file,
    read_file,
    real_dir,
    write_private,
)

T = TypeVar("T")

# \Z, not $: "$" also matches before a trailing newline ("abcd\n" must not pass).
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
MIN_PREFIX = 4
_ID_LAYOUT = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"  # what an id prefix can look like
_HEX = frozenset("0123456789abcdef")
_TURN_LOG = re.compile(r"^turn_([1-9][0-9]{0,6})\.jsonl\Z")
# what a spawn builds a session in, and what an rm with no room for trash/ renames it to
_STAGE = re.compile(r"^\.(new-[0-9a-f-]{36}|rm-[0-9a-f-]{36}\.[0-9a-f]{8})\Z")

__all__ = ["Key", "Store", "atomic_write", "file_key", "write_private"]


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.sessions = root / "sessions"
        self.names = root / "names"
        self.waiting = root / "scheduler" / "waiting"  # the scheduler's waiting files
        self._made: dict[str, list[Path]] = {}  # per open transaction: the files it made

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
        """Create the state dir (0700) if needed. Only commands that write call this. A state
        dir zwarm makes ignores itself for git (``IGNORE_ALL``, as a virtualenv does)."""
        for d in (self.root, self.sessions, self.names):
            try:
                d.mkdir(mode=0o700)
                if d == self.root:
                    _ignore_all(d)
            except FileExistsError:
                _check_existing(d, is_root=d == self.root)  # not made by us: check it again
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

    def pending(self) -> bool:
        """Whether any session waits for the scheduler (one directory read: what every
        command checks first, so it needs nothing of ``zwarm.engine``)."""
        try:
            return any(_ID.match(n) for n in os.listdir(self.waiting))
        except OSError:
            return False

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
        if re.match(r"^set-[0-9a-f]{4,8}\Z", name):  # ``store.sets.looks_like``
            raise InvalidInput(
                f"invalid session name {name!r}: it looks like a best-of set's id (set- and hex "
                "digits), which a name must never shadow"
            )
        if len(name) >= MIN_PREFIX and id_like(name.lower()):
            raise InvalidInput(
                f"invalid session name {name!r}: it looks like a session id or id prefix "
                "(hex digits), which a name must never shadow; add a letter beyond f"
            )
        return name

    def resolve(self, ref: str) -> str:
        """A full session id for ``ref``: an id, a unique prefix (>= 4 chars), or a name.

        Names that look like ids are refused (``check_name``), but a state dir may hold one
        from an older zwarm: a ref that names one session and is a prefix of another's id is
        ambiguous (an error listing both), never silently one of them.
        """
        if not isinstance(ref, str) or not ref:
            raise InvalidRef(str(ref), "empty")
        if not _REF.match(ref):
            raise InvalidRef(ref, "use an id, a unique id prefix, or a session name")
        if _ID.match(ref) and (self.sessions / ref).is_dir():
            return ref
        named = self._lookup_name(ref)
        prefix = id_like(ref)
        found = [i for i in self.list_ids() if i.startswith(ref)] if prefix else []
        if len(ref) < MIN_PREFIX:
            if named is not None:
                return named
            hint = f"an id prefix needs at least {MIN_PREFIX} characters" if found else None
            raise SessionNotFound(ref, hint)
        candidates = sorted({*found, *([named] if named else [])})
        if not candidates:
            raise SessionNotFound(ref)
        if len(candidates) > 1:
            raise AmbiguousSession(ref, candidates, named=named)
        return candidates[0]

    def _lookup_name(self, name: str) -> str | None:
        try:
            data, _ = read_file(self.names / name, 256)
        except OSError:
            return None
        sid = data.decode("ascii", "replace").strip()
        return sid if _ID.match(sid) and real_dir(self.sessions / sid) else None

    def claim_name(self, name: str, sid: str) -> None:
        """Reserve ``name`` for ``sid`` atomically (O_EXCL); a stale claim is taken over.

        A claim is stale when its session dir does not exist, so ``sid``'s dir must exist
        before claiming. The names lock makes check-unlink-create one step: two takeovers of
        one stale claim cannot both win.
        """
        path = self.names / self.check_name(name)
        with self._names_lock():
            self._claim(path, name, sid)

    def _names_lock(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.names / ".lock")

    def _claim(self, path: Path, name: str, sid: str) -> None:
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
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
        with contextlib.suppress(OSError):
            data, _ = read_file(self.names / name, 256)
            if data.decode("ascii", "replace").strip() == sid:
                os.unlink(self.names / name)

    def list_ids(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.sessions) if _ID.match(n)]
        except FileNotFoundError:
            return []
        except OSError as e:  # not a directory, no permission
            raise StoreError(f"cannot read {self.sessions}: {e.strerror}") from None

    @contextlib.contextmanager
    def sessions_fd(self) -> Iterator[int | None]:
        """An fd on ``sessions/`` (a real directory, never a link) for the block, or None if
        it cannot be opened."""
        try:
            fd = os.open(self.sessions, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC)
        except OSError:
            yield None
            return
        try:
            yield fd
        finally:
            os.close(fd)

    def write_turn_prompt(self, sid: str, n: int, prompt: bytes) -> None:
        """Write new turn ``n``'s prompt (in a ``transaction``, which removes it again if it
        saves nothing). A turn number never reuses a turn's files: a ``turns/turn_<n>.*``
        other than the prompt (its log: a turn that ran) means the record lost turns, and it
        is refused (``SessionStateError``, nothing written or overwritten). A prompt alone is
        a start killed before its meta.json was saved (its turn never ran): it is kept, set
        aside as ``turn_<n>.prompt.unsent-<hex>``, never overwritten. A symbolic link there
        holds no data (an agent planted it): it is removed, never followed."""
        d = self.checked_dir(sid) / "turns"
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            names = []
        except OSError as e:
            raise StoreError(f"cannot read {d}: {e.strerror}") from None
        prompt_name = f"turn_{n}.prompt"
        there = []
        for x in sorted(x for x in names if x.startswith(f"turn_{n}.")):
            if os.path.islink(d / x):  # a link planted there holds nothing: removed, not followed
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(d / x)
            elif x != prompt_name and not x.startswith(prompt_name + ".unsent-"):
                there.append(x)
        if there:
            raise SessionStateError(
                f"session {sid}: turns/{there[0]} exists but meta.json knows no turn {n}: "
                "not overwritten, nothing started (move it away if it is not needed)"
            )
        path = d / prompt_name
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, d / f"{prompt_name}.unsent-{os.urandom(4).hex()}")  # kept aside
        made = self._made.get(sid)
        try:
            write_private(path, prompt, replace=False)
        except FileExistsError:  # made meanwhile: the session lock is not held
            raise SessionStateError(
                f"session {sid}: turns/{prompt_name} was made meanwhile: nothing started"
            ) from None
        if made is not None:
            made.append(path)

    def turn_logs(self, sid: str) -> list[int]:
        """The numbers of the turns whose log (``turns/turn_N.jsonl``) exists, in order; read
        from the directory, not meta.json (for a session whose meta.json is damaged)."""
        try:
            names = os.listdir(self.checked_dir(sid) / "turns")
        except (OSError, SessionNotFound, DamagedSession):
            return []
        found = (_TURN_LOG.match(n) for n in names)
        return sorted(int(m.group(1)) for m in found if m)

    # ----- locking and meta.json
    @contextlib.contextmanager
    def lock(self, sid: str) -> Iterator[None]:
        """The session's lock: every read-modify-write of its meta.json holds it."""
        d = self.checked_dir(sid)
        try:
            fd = lock_fd(d / ".lock")
        except FileNotFoundError:
            raise SessionNotFound(sid) from None
        except OSError as e:
            raise DamagedSession(sid, f"cannot lock the session: {e.strerror}") from None
        try:
            yield
        finally:
            os.close(fd)

    def checked_dir(self, sid: str) -> Path:
        """The session's dir, which must be a real directory (not a link) with a real
        ``turns/``: an agent that swapped either for a link gets a damaged session."""
        d = self.session_dir(sid)
        if not real_dir(d):
            if not os.path.lexists(d):
                raise SessionNotFound(sid)
            raise DamagedSession(sid, "the session directory is not a directory (a link?)")
        turns = d / "turns"
        if os.path.lexists(turns) and not real_dir(turns):
            raise DamagedSession(sid, "turns/ is not a directory (a link?)")
        return d

    def load(self, sid: str, history: bool = True) -> Session:
        """The session, validated by the one schema, or ``DamagedSession``/``SessionNotFound``.
        Without ``history``, archived turns are left out (``Session.head_only``)."""
        s, _ = self._load(sid)
        if history and s.head_only:
            self._with_history(f"{self.sessions}/{sid}", s)
        return s

    def _load(self, sid: str) -> tuple[Session, DirFileKey]:
        """``load`` without the history, and the key of the files it was read from (its
        directory's and meta.json's, ``files.dir_file_key``)."""
        if not _ID.match(sid):
            raise InvalidRef(sid, "not a session id")
        d = f"{self.sessions}/{sid}"  # no Path: ls calls this 50,000 times
        try:
            data, dst, fst = read_dir_file(d, "meta.json", MAX_META_BYTES)
        except FileNotFoundError:
            if not os.path.lexists(d):
                raise SessionNotFound(sid) from None
            raise DamagedSession(sid, "meta.json is missing") from None
        except NotADirectoryError as e:
            what = "turns/" if "turns/" in (e.strerror or "") else "the session directory"
            raise DamagedSession(sid, f"{what} is not a directory (a link?)") from None
        except (NotRegularFile, TooLarge) as e:
            raise DamagedSession(sid, f"meta.json {e.strerror}") from None
        except OSError as e:
            raise StoreError(f"cannot read {d}/meta.json: {e.strerror}") from None
        try:
            s = decode(data)
        except ValueError as e:
            raise DamagedSession(sid, str(e)) from None
        if s.id != sid:
            raise DamagedSession(sid, f"meta.json names another session ({s.id})")
        return s, dir_file_key(dst, fst)

    @staticmethod
    def _with_history(d: str, s: Session) -> None:
        from zwarm.store import history as history_mod

        assert s.archive is not None
        try:
            s.turns[1:1] = history_mod.read(d, s.archive)
        except ValueError as e:
            raise DamagedSession(s.id, str(e)) from None
        except OSError as e:
            raise StoreError(f"cannot read {d}/{history_mod.NAME}: {e.strerror}") from None
        s.refresh()

    def read(self, sid: str) -> Session | DamagedSession:
        """``load`` for listings (archived turns left out): a damaged session is returned as
        its error, not raised."""
        return self.read_keyed(sid)[0]

    def read_keyed(self, sid: str) -> tuple[Session | DamagedSession, DirFileKey | None]:
        """``read``, and the key of the files a valid session was read from."""
        try:
            return self._load(sid)
        except (DamagedSession, SessionNotFound, StoreError) as e:
            if isinstance(e, DamagedSession):
                return e, None
            return DamagedSession(sid, str(e)), None

    def removed(self, sid: str) -> bool:
        """Whether ``sid``'s dir is gone (``remove`` renamed it away): a reader that listed it
        just before must skip it, not call it damaged."""
        return not os.path.lexists(self.sessions / sid)

    def _write(self, session: Session, path: Path | None = None) -> None:
        atomic_write(path or self.meta_path(session.id), encode(session))

    @contextlib.contextmanager
    def transaction(self, sid: str, history: bool = True) -> Iterator[Session]:
        """Load under the session lock, let the block change the session, save it: the only
        way meta.json changes. An exception in the block saves nothing. Without ``history``
        the block sees no archived turn (find turns with ``Session.turn``); with it, a block
        that changed an archived turn is refused (``StoreError``), nothing saved."""
        with self.lock(sid):
            s = self.load(sid, history)
            if s.imported is not None:
                raise SessionStateError(_imported(s))
            frozen = _archived(s)
            made: list[Path] = []  # new turn files: removed if nothing is saved
            self._made[sid] = made
            try:
                yield s
                if _archived(s) != frozen:
                    raise StoreError(f"session {sid}: an archived turn was changed (not saved)")
                self._save(s)
            except BaseException:
                for path in made:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                raise
            finally:
                self._made.pop(sid, None)
            # temp files of writes killed mid-way (meta.json's, the history's): the lock held,
            # no other zwarm process writes them now
            clean_temps(self.session_dir(sid), time.time())

    def _save(self, s: Session) -> None:
        """Move finished turns to the history if enough have gathered, then write meta.json."""
        from zwarm.store import history as history_mod

        d = str(self.session_dir(s.id))
        try:
            history_mod.archive(d, s)
        except ValueError as e:
            raise DamagedSession(s.id, str(e)) from None
        self._write(s)

    def adopt(self, sid: str, fn: Callable[[Session], Session]) -> Session:
        """Migrate a zwarm 3.x record (``Session.imported``) under the session lock: ``fn``
        gets it as read and returns the record to save (no longer ``imported``); the 3.x
        file is kept as ``meta.json.zwarm3`` first, then meta.json is replaced atomically.
        A record that is not (or no longer) 3.x's is returned unchanged, ``fn`` not called."""
        with self.lock(sid):
            s, _ = self._load(sid)
            if s.imported is None:
                return s
            try:
                old, _ = read_file(self.meta_path(sid), MAX_META_BYTES)
            except OSError as e:
                raise StoreError(f"cannot read {self.meta_path(sid)}: {e.strerror}") from None
            new = fn(s)
            if new.imported is not None or new.id != sid:
                raise StoreError(f"session {sid}: a zwarm 3.x record was not migrated")
            atomic_write(self.session_dir(sid) / ZWARM3_KEPT, old)
            self._write(new)
            clean_temps(self.session_dir(sid), time.time())
            return new

    def update(self, sid: str, fn: Callable[[Session], T]) -> T:
        """``fn`` applied in a ``transaction``; returns its result."""
        with self.transaction(sid) as s:
            return fn(s)

    # ----- creation and removal
    def create(self, session: Session, prompt: bytes) -> None:
        """Create the session dir with turn 1's prompt and meta.json; all or nothing.

        Built under a hidden name in ``sessions/`` and renamed into place, so no reader ever
        sees a session dir without its meta.json.
        """
        d = self.session_dir(session.id)
        if os.path.lexists(d):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(d))
        stage = self.sessions / f".new-{session.id}"
        stage.mkdir(mode=0o700)  # outside the try: never remove a dir this call did not create
        try:
            (stage / "turns").mkdir(mode=0o700)
            write_private(stage / "turns" / "turn_1.prompt", prompt)
            self._write(session, stage / "meta.json")
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
        fsync_dir(self.sessions)
        self._sweep_stages()

    def _sweep_stages(self) -> None:
        """Delete what a spawn (``.new-<id>``) or an rm (``.rm-<id>.<hex>``) killed half-way
        left in ``sessions/``, once it is ``STALE_TEMP_S`` old (a young one may be another
        process's, still at work); through an fd, never following a link."""
        with self.sessions_fd() as sfd:
            if sfd is None:
                return
            now = time.time()
            for name in os.listdir(sfd):
                if not _STAGE.match(name):
                    continue
                with contextlib.suppress(OSError):
                    st = os.stat(name, dir_fd=sfd, follow_symlinks=False)
                    if now - st.st_mtime >= STALE_TEMP_S:
                        _delete(sfd, name)

    def remove(self, sid: str, name: str | None) -> None:
        """Delete a session dir: renamed out of ``sessions/`` first, so it vanishes atomically.
        A session dir that is a link is unlinked (its target is never touched). What an
        ``rm`` killed half-way left in ``trash/`` goes too; ``trash/`` is used through an fd
        opened without following a link (one planted there is refused, never followed)."""
        trash, sweep = self.root / "trash", True
        try:
            trash.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError:  # no room even for a directory: renamed to a hidden name, in place
            trash, sweep = self.sessions, False
        try:
            tfd = os.open(trash, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC)
        except OSError as e:
            raise StoreError(f"cannot use {trash}: {e.strerror} (a link?)") from None
        try:
            target = f"{'' if sweep else '.rm-'}{sid}.{os.urandom(4).hex()}"
            try:
                os.rename(self.session_dir(sid), target, dst_dir_fd=tfd)
            except FileNotFoundError:
                raise SessionNotFound(sid) from None
            self.release_name(name, sid)
            # ours, and what an rm killed half-way left: everything in trash/ is being deleted
            for entry in os.listdir(tfd) if sweep else [target]:
                _delete(tfd, entry)
        finally:
            os.close(tfd)


ZWARM3_KEPT = "meta.json.zwarm3"  # a migrated zwarm 3.x record's original (``adopt``)


def _imported(s: Session) -> str:
    return (
        f"session {s.id} was made by zwarm 3.x and is {s.status.value}: nothing of it runs "
        "under zwarm (none of 3.x's processes is ever signalled); `zwarm inject` continues "
        "it once you confirm its folder and agent"
    )


def _delete(dfd: int, name: str) -> None:
    """Delete ``name`` in the directory ``dfd``: a directory's tree, or anything else itself
    (a link's target is never touched)."""
    try:
        is_dir = stat.S_ISDIR(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError:
        return
    if not is_dir:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dfd)
        return
    import shutil

    shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)


def _archived(s: Session) -> list[bytes]:
    """The archived turns ``s`` holds (a session loaded whole), encoded: what a transaction
    must not change."""
    a = s.archive
    if a is None or not a.turns or s.head_only:
        return []
    import msgspec

    enc = msgspec.json.encode
    return [enc(t) for t in s.turns[1 : 1 + a.turns]]


def id_like(ref: str) -> bool:
    """Whether ``ref`` could be (a prefix of) a session id: hex digits, with dashes only where
    an id has them."""
    if len(ref) > len(_ID_LAYOUT):
        return False
    return all((c == "-") if t == "-" else c in _HEX for c, t in zip(ref, _ID_LAYOUT, strict=False))


IGNORE_ALL = b"# made by zwarm: git ignores its state dir (prompts, output, secrets)\n*\n"


def _ignore_all(root: Path) -> None:
    """Write ``root/.gitignore`` saying ``*`` (new file, never through a link). Best effort:
    a snapshot leaves the state dir out anyway (``engine.workspace.snapshot``)."""
    with contextlib.suppress(OSError):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(root / ".gitignore", flags, 0o600)
        try:
            os.write(fd, IGNORE_ALL)
        finally:
            os.close(fd)


def _check_existing(d: Path, is_root: bool) -> None:
    """A dir that already existed when we meant to create it: the state dir must pass the
    trust rules (another user may have made it first, in a shared parent, since they were
    checked), and every dir in it must be a real directory, not a link."""
    if is_root:  # a link or another's dir is allowed only if the user trusted it so
        from zwarm import trust

        trust.check_state_dir(d)
        if not os.path.isdir(d):
            raise StoreError(f"{d} exists and is not a directory")
    elif not real_dir(d):
        raise StoreError(f"{d} exists and is not a directory (a link?)")
