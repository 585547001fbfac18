"""Trust: which state dirs zwarm may use, and which config files' security-relevant values.

Owns the per-user trust file (``$XDG_CONFIG_HOME/zwarm/trust.json``, default
``~/.config/zwarm/trust.json``: outside any project, so an agent sandboxed to its working
directory cannot write it) and the two rules (which config keys are security-relevant is
``zwarm.config``'s: ``SECURITY_KEYS``, ``AGENT_HARMLESS_KEYS``):

- **state dirs** (as git's ``safe.directory``): a state dir that is a symlink, is not owned by
  the effective uid, or is writable by its group or others is refused (``UnsafeStateDir``),
  root included, unless the user allowed that path while it had that owner and real path;
- **config files** (as direnv's ``allow``): a security-relevant key (``SECURITY_KEYS``; in an
  agent's table every key but ``AGENT_HARMLESS_KEYS``) whose value differs from the built-in
  default is used only if the sha256 of the exact bytes zwarm parsed is recorded for that
  file's absolute path (``UntrustedConfig`` otherwise; "changed" when a different hash is
  recorded). The check happens when a value is read (``Config.get``/``command`` and the
  ``CheckedTable`` that ``Config.table`` returns), so commands that never read one (``ls``,
  ``show``, ``wait``, ...) work on any config.

Must stay true: the trust file is read as untrusted input (it must be a regular file owned by
the effective uid and not group/world-writable; strict schema; any problem is one
``TrustFileError`` line naming it) and written atomically, 0600, under a lock; nothing is read,
hashed or imported here unless a state dir has a problem or a non-default security-relevant
value is used (``zwarm ls`` in a normal project costs one ``lstat``).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from zwarm.errors import InvalidInput, TrustFileError, UnsafeStateDir, UntrustedConfig

VERSION = 1
MAX_BYTES = 4 << 20
TRUSTED, CHANGED, UNTRUSTED = "trusted", "changed", "untrusted"
_HEX = frozenset("0123456789abcdef")
T = TypeVar("T")


def sha256(data: bytes) -> str:
    """Hex SHA-256, by Python's own builtin implementation where there is one: ``hashlib``
    loads OpenSSL (~3 MB of RSS), and every supervisor checks its config's digest."""
    try:  # Python 3.11
        from _sha256 import sha256 as impl  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        try:  # 3.12 and later
            from _sha2 import sha256 as impl  # type: ignore[import-not-found, no-redef, unused-ignore]
        except ImportError:  # a build without them
            from hashlib import sha256 as impl  # type: ignore[assignment, no-redef, unused-ignore]
    digest: str = impl(data).hexdigest()
    return digest


# ---------------------------------------------------------------------------- the trust file
def trust_file(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/zwarm/trust.json``, else ``$HOME/.config/...`` (relative values are
    ignored, as the XDG spec says: they would name a project directory)."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "zwarm" / "trust.json"
    home = env.get("HOME", "")
    if not os.path.isabs(home):
        home = _passwd_home()
    return Path(home) / ".config" / "zwarm" / "trust.json"


def _passwd_home() -> str:
    import pwd

    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        home = ""
    if not os.path.isabs(home):
        raise InvalidInput("cannot locate zwarm's trust file: set HOME or XDG_CONFIG_HOME")
    return home


# NamedTuples and plain classes, not dataclasses: this module is imported by commands that
# must start fast, and each dataclass costs ~1 ms to create.
class ConfigEntry(NamedTuple):
    sha256: str
    trusted_at: str


class DirEntry(NamedTuple):
    uid: int
    realpath: str
    trusted_at: str


class TrustData:
    """The trust file's contents: absolute path -> entry."""

    def __init__(
        self,
        configs: dict[str, ConfigEntry] | None = None,
        state_dirs: dict[str, DirEntry] | None = None,
    ) -> None:
        self.configs = configs or {}
        self.state_dirs = state_dirs or {}

    def to_json(self) -> bytes:
        doc = {
            "version": VERSION,
            "configs": {p: e._asdict() for p, e in sorted(self.configs.items())},
            "state_dirs": {p: e._asdict() for p, e in sorted(self.state_dirs.items())},
        }
        return (json.dumps(doc, indent=2) + "\n").encode("utf-8")


def read_trust(path: Path) -> TrustData:
    """The trust file at ``path`` (empty if missing); ``TrustFileError`` if it is unsafe or
    malformed."""
    try:
        with open(path, "rb") as f:
            _check_owner(os.fstat(f.fileno()), str(path))
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return TrustData()
    except OSError as e:
        raise TrustFileError(str(path), f"cannot read: {e.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise TrustFileError(str(path), f"larger than {MAX_BYTES} bytes")
    return parse_trust(raw, str(path))


def _check_owner(st: os.stat_result, where: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise TrustFileError(where, "not a regular file")
    if st.st_uid != os.geteuid():
        raise TrustFileError(where, f"owned by {owner_name(st.st_uid)}, not by you")
    if st.st_mode & 0o022:
        raise TrustFileError(where, f"writable by {_who(st.st_mode)} (chmod 600 it)")


def parse_trust(raw: bytes, where: str) -> TrustData:
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        raise TrustFileError(where, f"invalid JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise TrustFileError(where, "not a JSON object")
    _exact_keys(doc, {"version", "configs", "state_dirs"}, "the file", where)
    version = doc["version"]
    if type(version) is not int or version < 1:
        raise TrustFileError(where, "version must be a positive integer")
    if version > VERSION:
        raise TrustFileError(where, f"version {version} was written by a newer zwarm")
    configs = {p: _config_entry(e, p, where) for p, e in _paths(doc["configs"], "configs", where)}
    dirs = {p: _dir_entry(e, p, where) for p, e in _paths(doc["state_dirs"], "state_dirs", where)}
    return TrustData(configs, dirs)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _exact_keys(obj: dict[str, Any], want: set[str], what: str, where: str) -> None:
    if set(obj) != want:
        extra, missing = sorted(set(obj) - want), sorted(want - set(obj))
        why = f"unknown key {extra[0]!r}" if extra else f"missing key {missing[0]!r}"
        raise TrustFileError(where, f"{what}: {why}")


def _paths(obj: Any, name: str, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(obj, dict):
        raise TrustFileError(where, f"{name} must be an object")
    for path, entry in obj.items():
        if not _abs_path(path):
            raise TrustFileError(where, f"{name}: {path!r} is not an absolute path")
        if not isinstance(entry, dict):
            raise TrustFileError(where, f"{name}[{path!r}] must be an object")
        yield path, entry


def _abs_path(p: Any) -> bool:
    return isinstance(p, str) and os.path.isabs(p) and "\x00" not in p and len(p) < 4096


def _config_entry(e: dict[str, Any], path: str, where: str) -> ConfigEntry:
    _exact_keys(e, {"sha256", "trusted_at"}, f"configs[{path!r}]", where)
    digest = e["sha256"]
    if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
        raise TrustFileError(where, f"configs[{path!r}].sha256 must be 64 hex digits")
    return ConfigEntry(e["sha256"], _stamp(e["trusted_at"], f"configs[{path!r}]", where))


def _dir_entry(e: dict[str, Any], path: str, where: str) -> DirEntry:
    _exact_keys(e, {"uid", "realpath", "trusted_at"}, f"state_dirs[{path!r}]", where)
    if type(e["uid"]) is not int or not 0 <= e["uid"] < 2**32:
        raise TrustFileError(where, f"state_dirs[{path!r}].uid must be a uid")
    if not _abs_path(e["realpath"]):
        raise TrustFileError(where, f"state_dirs[{path!r}].realpath must be an absolute path")
    return DirEntry(
        e["uid"], e["realpath"], _stamp(e["trusted_at"], f"state_dirs[{path!r}]", where)
    )


def _stamp(v: Any, what: str, where: str) -> str:
    if not isinstance(v, str) or len(v) > 64:
        raise TrustFileError(where, f"{what}.trusted_at must be a timestamp string")
    return v


def update(fn: Callable[[TrustData], T], environ: Mapping[str, str] | None = None) -> T:
    """Read-modify-write the trust file under its lock; written atomically, 0600."""
    from zwarm.store.files import atomic_write, private_dir

    path = trust_file(environ)
    try:
        private_dir(path.parent)
    except OSError as e:
        raise TrustFileError(str(path), f"cannot create its directory: {e.strerror}") from None
    with _locked(path):
        data = read_trust(path)
        out = fn(data)
        atomic_write(path, data.to_json())
    return out


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    try:
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise TrustFileError(str(path), f"cannot lock: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="milliseconds")


# ---------------------------------------------------------------------------- config files
class ConfigSource:
    """Where a loaded config came from: the exact bytes parsed, and its non-default
    security-relevant settings, which it hands out only if the user trusted those bytes."""

    __slots__ = ("locate", "path", "raw", "settings")

    def __init__(
        self, path: str, raw: bytes, settings: Mapping[str, Any], locate: Mapping[str, str]
    ) -> None:
        self.path = path  # absolute, as zwarm read it (not resolved: a link is not its target)
        self.raw = raw
        self.settings = settings  # "table.key" -> value
        self.locate = locate  # the variables that locate the trust file, as at load time

    def __repr__(self) -> str:
        return f"ConfigSource({self.path!r}, settings={sorted(self.settings)!r})"

    @classmethod
    def of(
        cls,
        path: Path,
        raw: bytes,
        settings: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
    ) -> ConfigSource:
        """``settings``: the file's non-default security-relevant values (``zwarm.config``
        knows which keys those are)."""
        env = os.environ if environ is None else environ
        locate = {k: env[k] for k in ("XDG_CONFIG_HOME", "HOME") if k in env}
        return cls(os.path.abspath(path), raw, settings, locate)

    def require(self, table: str, keys: Iterable[str]) -> None:
        """Raise ``UntrustedConfig`` if any of ``table``'s ``keys`` is a non-default
        security-relevant setting and the file is not trusted as it was read."""
        if self.settings and any(f"{table}.{k}" in self.settings for k in keys):
            self.verify()

    def view(self, table: str, values: dict[str, Any]) -> Mapping[str, Any]:
        """``values`` (a table), each value checked as it is read (``values`` itself when
        nothing in it needs trust)."""
        if any(k.startswith(f"{table}.") for k in self.settings):
            return CheckedTable(self, table, values)
        return values

    def verify(self) -> None:
        status = config_status(self.path, self.raw, trust_file(self.locate))
        if status != TRUSTED:
            raise UntrustedConfig(self.path, sorted(self.settings), changed=status == CHANGED)


class CheckedTable(Mapping[str, Any]):
    """A read-only view of a config table: reading a value that needs trust checks it, so
    code that reads only harmless keys (prices, model) works on an untrusted file."""

    def __init__(self, source: ConfigSource, table: str, values: dict[str, Any]) -> None:
        self._source, self._table, self._values = source, table, values

    def __getitem__(self, key: str) -> Any:
        self._source.require(self._table, (key,))
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"CheckedTable({self._table!r}, keys={list(self._values)!r})"


def config_status(path: str, raw: bytes, where: Path) -> str:
    entry = read_trust(where).configs.get(os.path.abspath(path))
    if entry is None:
        return UNTRUSTED
    return TRUSTED if entry.sha256 == sha256(raw) else CHANGED


def trust_config(
    path: Path, data: bytes | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """Record the sha256 of ``data`` (default: the file's current bytes) as trusted for
    ``path``; returns it. Only the bytes hashed are trusted: any later edit is not."""
    if data is None:
        from zwarm.store.files import read_file

        try:
            data, _ = read_file(path, 1 << 20, follow=True)
        except OSError as e:
            raise InvalidInput(f"cannot read {path}: {e.strerror}") from None
    digest = sha256(data)
    entry = ConfigEntry(digest, _now())

    def put(t: TrustData) -> None:
        t.configs[os.path.abspath(path)] = entry

    update(put, environ)
    return digest


# ---------------------------------------------------------------------------- state dirs
class DirFacts(NamedTuple):
    """What makes an existing state dir unsafe (``problems`` empty: it is safe)."""

    path: str  # absolute, as found (not resolved)
    realpath: str
    uid: int | None  # owner of the directory it names; None for a dangling symlink
    problems: tuple[str, ...]
    fixable_by_chmod: bool = False

    def allowed_by(self, entry: DirEntry | None) -> bool:
        return entry is not None and (entry.uid, entry.realpath) == (self.uid, self.realpath)


def inspect_state_dir(path: Path) -> DirFacts | None:
    """The facts of the state dir at ``path``; None when there is no directory or symlink
    there (it will be created by this user, or the store reports what is in the way)."""
    try:
        lst = os.lstat(path)
    except OSError:
        return None
    link = stat.S_ISLNK(lst.st_mode)
    if not link and not stat.S_ISDIR(lst.st_mode):
        return None
    try:
        st: os.stat_result | None = os.stat(path) if link else lst
    except OSError:
        st = None
    real = os.path.realpath(path)
    problems = []
    if link:
        missing = ", which does not exist" if st is None else ""
        problems.append(f"it is a symlink to {real}{missing}")
    me = os.geteuid()
    if st is not None and st.st_uid != me:
        problems.append(f"it is owned by {owner_name(st.st_uid)}, not by you (uid {me})")
    if st is not None and st.st_mode & 0o022:
        mode = stat.S_IMODE(st.st_mode)
        problems.append(f"it is writable by {_who(st.st_mode)} (mode {mode:04o})")
    chmod_only = len(problems) == 1 and not link and st is not None and st.st_uid == me
    uid = None if st is None else st.st_uid
    return DirFacts(os.path.abspath(path), real, uid, tuple(problems), chmod_only)


def check_state_dir(path: Path, environ: Mapping[str, str] | None = None) -> None:
    """Refuse (``UnsafeStateDir``) an existing state dir at ``path`` that another user could
    have written, unless the user allowed it (``plan``/``apply``: ``zwarm trust``)."""
    facts = inspect_state_dir(path)
    if facts is None or not facts.problems:
        return
    if facts.allowed_by(read_trust(trust_file(environ)).state_dirs.get(facts.path)):
        return
    raise UnsafeStateDir(facts.path, facts.uid, list(facts.problems), _dir_fix(facts))


def _dir_fix(facts: DirFacts) -> str:
    import shlex

    if facts.uid is None:
        return "remove the symlink or point it at a directory"
    allow = f"zwarm --state-dir {shlex.quote(facts.path)} trust --state-dir-only"
    if facts.fixable_by_chmod:
        return f"fix it with: chmod go-w {shlex.quote(facts.path)}, or to use it anyway: {allow}"
    return f"if you trust it, allow it with: {allow}"


def revoke(
    state_dir: Path, config: bool = True, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Forget the state dir at ``state_dir`` and (if ``config``) its config.toml; returns the
    paths that were trusted."""
    root = os.path.abspath(state_dir)
    paths = [root] + ([os.path.join(root, "config.toml")] if config else [])

    def drop(t: TrustData) -> list[str]:
        gone = []
        for p in paths:
            if t.state_dirs.pop(p, None) is not None or t.configs.pop(p, None) is not None:
                gone.append(p)
        return gone

    return update(drop, environ)


def owner_name(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _who(mode: int) -> str:
    group, other = bool(mode & stat.S_IWGRP), bool(mode & stat.S_IWOTH)
    return "its group and others" if group and other else "its group" if group else "others"
