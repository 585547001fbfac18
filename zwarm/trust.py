"""Trust: which state dirs zwarm may use, and which config values.

Owns the per-user trust file (``$XDG_CONFIG_HOME/zwarm/trust.json``, default
``~/.config/zwarm/trust.json``: outside any project, so an agent sandboxed to its working
directory cannot write it), the two rules, and how a trusted value is shown (``shown``:
secrets masked). Which keys execute, limit or are free is ``zwarm.config``'s (``Rule``):

- **state dirs** (as git's ``safe.directory``): a state dir that is a symlink, is not owned by
  the effective uid, or is writable by its group or others is refused (``UnsafeStateDir``),
  root included, unless the user allowed that path while it had that owner and real path;
- **config files** (as direnv's ``allow``): ``zwarm trust`` records, for the file's absolute
  path, the sha256 of the bytes it showed and their values that are not free (version 1
  records have the hash only). A file whose hash is recorded is trusted with all its values;
  otherwise the trusted values are the recorded ones over the defaults, and an executing
  value is used only if it is the default or the trusted one (``UntrustedConfig``, "changed"
  when a record exists), a limit only if it is not looser (else the trusted value:
  ``ConfigSource.value``; commands that start agents refuse it first, ``LoosenedLimit``), a
  free value always. The check happens when a value is read (``Config.get``/``command``/
  ``groups`` and the ``CheckedTable`` that ``Config.table`` returns), so commands that never
  read one (``ls``, ``show``, ``wait``, ...) work on any config.

Must stay true: the trust file is read as untrusted input (it must be a regular file owned by
the effective uid and not group/world-writable; strict schema, recorded values validated as
config values; any problem is one ``TrustFileError`` line naming it) and written atomically,
0600, under a lock; nothing is read, hashed or imported here unless a state dir has a problem
or a value that is not free is used (``zwarm ls`` in a normal project costs one ``lstat``);
the only write outside ``zwarm trust`` is a version 1 record of the very bytes read gaining
their values (``_migrate``).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from zwarm.errors import (
    InvalidInput,
    LoosenedLimit,
    TrustFileError,
    UnsafeStateDir,
    UntrustedConfig,
)
from zwarm.secret_names import looks_secret
from zwarm.xdg import xdg_dir

VERSION = 2  # 2: a config's trusted values (1: its hash only, still read)
MAX_BYTES = 4 << 20
TRUSTED, CHANGED, UNTRUSTED = "trusted", "changed", "untrusted"
EDITED = "edited"  # changed since trusted, but nothing in it needs new trust
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
    """``$XDG_CONFIG_HOME/zwarm/trust.json``, else ``$HOME/.config/...`` (``xdg.xdg_dir``)."""
    return xdg_dir(os.environ if environ is None else environ, "XDG_CONFIG_HOME") / "trust.json"


# NamedTuples and plain classes, not dataclasses: this module is imported by commands that
# must start fast, and each dataclass costs ~1 ms to create.
class ConfigEntry(NamedTuple):
    sha256: str
    trusted_at: str
    # the trusted values that are not free and not the default, {table: {key: value}}; None
    # in a record of version 1 (its hash only: the file trusted as it was, nothing once edited)
    values: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        out = self._asdict()
        if self.values is None:
            del out["values"]
        return out


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
        import json

        doc = {
            "version": VERSION,
            "configs": {p: e.as_json() for p, e in sorted(self.configs.items())},
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
    import json  # here: loading a config never needs it

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
    what = f"configs[{path!r}]"
    keys = {"sha256", "trusted_at"} | ({"values"} if "values" in e else set())
    _exact_keys(e, keys, what, where)
    digest = e["sha256"]
    if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
        raise TrustFileError(where, f"{what}.sha256 must be 64 hex digits")
    values = e.get("values")
    if values is not None and not (
        isinstance(values, dict) and all(isinstance(t, dict) for t in values.values())
    ):
        raise TrustFileError(where, f"{what}.values must be an object of tables")
    return ConfigEntry(e["sha256"], _stamp(e["trusted_at"], what, where), values)


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
    from zwarm.system.files import atomic_write, private_dir

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
    from zwarm.system.files import lock_fd

    try:
        fd = lock_fd(path.with_name(path.name + ".lock"))
    except OSError as e:
        raise TrustFileError(str(path), f"cannot lock: {e.strerror}") from None
    try:
        yield
    finally:
        os.close(fd)


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="milliseconds")


# ---------------------------------------------------------------------------- config files
Data = dict[str, dict[str, Any]]


class Judge(Protocol):
    """What trust asks of the config's rules (``zwarm.config.Judge``, for one schema)."""

    def rule(self, table: str, key: str) -> Any: ...
    def at_default(self, table: str, key: str, value: Any) -> bool: ...
    def changes(self, table: str, key: str, new: Data, old: Data) -> list[Any]: ...
    def all_changes(self, new: Data, old: Data) -> list[Any]: ...
    def clamped_groups(self, new: Data, old: Data) -> dict[str, dict[str, Any]]: ...
    def clamped_accounts(self, new: Data, old: Data) -> dict[str, dict[str, dict[str, Any]]]: ...
    def settings(self, data: Data) -> dict[str, Any]: ...
    def defaults(self) -> Data: ...
    def trusted(self, values: Mapping[str, Any], where: str) -> Data: ...


class ConfigSource:
    """Where a loaded config came from (the exact bytes parsed, and what they mean), and how
    trust lets its values be used: ``value`` hands out a free key as it is, an executing one
    only at its default or trusted value, a limit never looser than trusted."""

    __slots__ = ("_accepted", "_digest", "_seen", "data", "judge", "locate", "path", "raw")

    def __init__(
        self,
        path: str,
        raw: bytes,
        data: dict[str, dict[str, Any]],
        judge: Judge,
        locate: Mapping[str, str],
    ) -> None:
        self.path = path  # absolute, as zwarm read it (not resolved: a link is not its target)
        self.raw = raw  # b"" for a file that does not exist
        self.data = data  # validated, over the defaults (``zwarm.config``)
        self.judge = judge  # the rules of the schema it was validated against
        self.locate = locate  # the variables that locate the trust file, as at load time
        self._accepted: set[str] = set()  # "table.key" whose file value was found usable
        self._digest: str | None = None
        self._seen: tuple[Any, ...] | None = None  # (trust file signature, trusted data)

    def __repr__(self) -> str:
        return f"ConfigSource({self.path!r}, settings={sorted(self.settings)!r})"

    @classmethod
    def of(
        cls,
        path: Path,
        raw: bytes,
        data: dict[str, dict[str, Any]],
        judge: Judge,
        environ: Mapping[str, str] | None = None,
    ) -> ConfigSource:
        env = os.environ if environ is None else environ
        locate = {k: env[k] for k in ("XDG_CONFIG_HOME", "HOME") if k in env}
        return cls(os.path.abspath(path), raw, data, judge, locate)

    @property
    def settings(self) -> dict[str, Any]:
        """The values that are not free and differ from the default ("table.key" -> value):
        what ``zwarm trust`` shows and records."""
        return self.judge.settings(self.data)

    @property
    def sha256(self) -> str:
        if self._digest is None:
            self._digest = sha256(self.raw)
        return self._digest

    # ------------------------------------------------------------------ reads
    def value(self, table: str, key: str) -> Any:
        """``table.key`` as it may be used: a free key as it is; an executing one if it is the
        default or the trusted value (``UntrustedConfig`` otherwise); a limit the file loosens,
        the trusted value instead (``require_limits`` refuses it where a command starts
        agents)."""
        from zwarm import rules

        value = self.data[table][key]
        name = f"{table}.{key}"
        rule = self.judge.rule(table, key)
        if name in self._accepted or rule.kind == rules.FREE.kind:
            return value
        if rule.kind == rules.EXECUTES.kind and self.judge.at_default(table, key, value):
            return value  # the default needs no trust (and no trust file read)
        trusted = self.trusted()
        if trusted is None or not self.judge.changes(table, key, self.data, trusted):
            self._accepted.add(name)
            return value
        if rule.kind == rules.EXECUTES.kind:
            raise self._untrusted(trusted)
        return trusted[table][key]

    def require(self, table: str, keys: Iterable[str]) -> None:
        """``UntrustedConfig`` if any of ``table``'s ``keys`` executes and is not trusted."""
        for key in keys:
            self.value(table, key)

    def view(self, table: str, values: dict[str, Any]) -> Mapping[str, Any]:
        """``values`` (a table), each value checked as it is read (``values`` itself when
        every key in it is free)."""
        from zwarm import rules

        free = all(self.judge.rule(table, k).kind == rules.FREE.kind for k in values)
        return values if free else CheckedTable(self, table, values)

    def groups(self) -> Mapping[str, Mapping[str, Any]]:
        if "groups" in self._accepted:
            return self.data["groups"]
        trusted = self.trusted()
        if trusted is None or not self.judge.changes("groups", "", self.data, trusted):
            self._accepted.add("groups")
            return self.data["groups"]
        return self.judge.clamped_groups(self.data, trusted)

    def accounts(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``[accounts]`` as it may be used: limits never looser than trusted, an ``env``
        that needs trust ``None`` (``account_env`` raises for it)."""
        if "accounts" in self._accepted:
            return self.data["accounts"]
        trusted = self.trusted()
        if trusted is None or not self.judge.changes("accounts", "", self.data, trusted):
            self._accepted.add("accounts")
            return self.data["accounts"]
        return self.judge.clamped_accounts(self.data, trusted)

    def account_env(self, agent: str, name: str) -> dict[str, str]:
        """Account ``name`` of ``agent``'s ``env`` if it is trusted (or empty), else
        ``UntrustedConfig``."""
        env = self.accounts().get(agent, {}).get(name, {}).get("env", {})
        if env is None:
            trusted = self.trusted()
            assert trusted is not None
            raise self._untrusted(trusted)
        return dict(env)

    def require_limits(self) -> None:
        """``LoosenedLimit`` naming the first limit the file loosens (and the others)."""
        trusted = self.trusted()
        if trusted is None:
            return
        loose = [c for c in self.judge.all_changes(self.data, trusted) if c.limit]
        if loose:
            c = loose[0]
            default = self.judge.defaults()
            new = _limit_text(c, c.new) + _default_note(c, default, self.data)
            more = [x.key for x in loose[1:]]
            raise LoosenedLimit(self.path, c.key, _limit_text(c, c.trusted), new, more)

    def pending(self) -> list[Any]:
        """Every ``zwarm.config.Change`` that needs new trust ([] when none does)."""
        trusted = self.trusted()
        return [] if trusted is None else self.judge.all_changes(self.data, trusted)

    # ------------------------------------------------------------------ what is trusted
    def trusted(self) -> dict[str, dict[str, Any]] | None:
        """What the user trusted for this file: None when it is trusted as read (the hash of
        these very bytes is recorded: every value in it), else the defaults with the recorded
        values over them (none recorded: the defaults)."""
        where = trust_file(self.locate)
        sign = _signature(where)
        if self._seen is not None and self._seen[0] == sign:
            out: dict[str, dict[str, Any]] | None = self._seen[1]
            return out
        entry = read_trust(where).configs.get(self.path)
        out = self._trusted(entry, str(where))
        self._seen = (sign, out)
        return out

    def _trusted(self, entry: ConfigEntry | None, where: str) -> dict[str, dict[str, Any]] | None:
        from zwarm.errors import ConfigError

        if entry is not None and entry.sha256 == self.sha256:
            if entry.values is None:
                self._migrate(entry)
            return None
        try:
            return self.judge.trusted(entry.values or {} if entry else {}, where)
        except ConfigError as e:
            raise TrustFileError(where, f"configs[{self.path!r}].values: {e.problem}") from None

    def _migrate(self, entry: ConfigEntry) -> None:
        """A version 1 record (a hash) of these very bytes gains their values, so that an
        edit of a free key no longer needs new trust. Best effort: the hash still says it."""
        values = nested(self.settings)

        def put(t: TrustData) -> None:
            now = t.configs.get(self.path)
            if now is not None and now.sha256 == entry.sha256 and now.values is None:
                t.configs[self.path] = ConfigEntry(now.sha256, now.trusted_at, values)

        with contextlib.suppress(TrustFileError, InvalidInput, OSError):
            update(put, self.locate)

    def _untrusted(self, trusted: dict[str, dict[str, Any]]) -> UntrustedConfig:
        found = self.judge.all_changes(self.data, trusted)
        keys = sorted(c.key for c in found if not c.limit)
        recorded = read_trust(trust_file(self.locate)).configs.get(self.path) is not None
        return UntrustedConfig(self.path, keys, changed=recorded)


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _limit_text(c: Any, value: Any) -> str:
    if value is None:
        return "no price (its cost unknown: counted as nothing)"
    if value == 0 and c.rule.none == 0:
        return "0 (no limit)"
    return shown(c.key, value)


def _default_note(c: Any, default: Mapping[str, Mapping[str, Any]], data: Any) -> str:
    table, _, key = c.key.partition(".")
    if key in default.get(table, {}) and data[table][key] == default[table][key]:
        return " (the default)"
    return ""


class CheckedTable(Mapping[str, Any]):
    """A read-only view of a config table: each value read as trust allows it (``value``), so
    code that reads only free keys (model) works on an untrusted file."""

    def __init__(self, source: ConfigSource, table: str, values: dict[str, Any]) -> None:
        self._source, self._table, self._values = source, table, values

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            raise KeyError(key)
        return self._source.value(self._table, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"CheckedTable({self._table!r}, keys={list(self._values)!r})"


def nested(settings: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"table.key": value}`` as ``{table: {key: value}}`` (how the trust file keeps it)."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in settings.items():
        table, key = name.split(".", 1)
        out.setdefault(table, {})[key] = value
    return out


# ---------------------------------------------------------------------------- showing values
_VAR_REF = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)\Z")


def shown(name: str, value: Any) -> str:
    """``value`` of setting ``name`` as JSON for a person to review, its secrets masked
    (``masked``): what every trust message and ``zwarm trust`` print."""
    import json

    return json.dumps(masked(name, value), ensure_ascii=False)


def masked(name: str, value: Any) -> Any:
    """``value`` with every value of an ``env`` table, and every string under a key that names
    a secret (key, token, secret, password...), masked: a ``$VAR`` reference as is, else its
    first 4 characters and "…" (9 characters or more), or "…" alone (5 to 8)."""
    return _masked(value, name.endswith(".env"))


def _masked(v: Any, secret: bool) -> Any:
    if isinstance(v, dict):
        # an ``env`` table inside another ([accounts.<agent>.<name>] env): every value a secret
        return {k: _masked(x, secret or looks_secret(k) or k == "env") for k, x in v.items()}
    if isinstance(v, list):
        return [_masked(x, secret) for x in v]
    if secret and isinstance(v, str) and not _VAR_REF.match(v) and len(v) > 4:
        return v[:4] + "…" if len(v) > 8 else "…"
    return v


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
