"""The ``zwarm trust`` operations: what trusting a state dir means now, recording it, listing.

Owns ``plan`` (the state dir's problems and its config.toml's non-default security-relevant
settings, read once), ``apply`` (record exactly what was shown) and ``listing``. The trust file
itself and every check are ``zwarm.trust``'s. Must stay true: ``apply`` records the hash and
the values of the very bytes ``plan`` read and showed, never a later version of the file; a
config.toml that no longer exists is planned (the defaults) when a record for it exists.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from zwarm.errors import InvalidInput
from zwarm.trust import (
    CHANGED,
    EDITED,
    TRUSTED,
    UNTRUSTED,
    ConfigEntry,
    DirEntry,
    DirFacts,
    TrustData,
    _now,
    inspect_state_dir,
    nested,
    owner_name,
    read_trust,
    sha256,
    trust_file,
    update,
)


class ConfigPlan(NamedTuple):
    path: str
    sha256: str  # of the bytes read (and shown): what ``apply`` records
    settings: dict[str, Any]  # the values it sets that are not free, nor the default
    status: str  # TRUSTED, CHANGED or UNTRUSTED, before this plan is applied
    was: dict[str, Any] | None = None  # the values trusted so far ("table.key"), if recorded
    exists: bool = True  # False: no file (the defaults), where one was trusted before
    needs: tuple[str, ...] = ()  # what in it needs new trust ("table.key"), before it is applied


class Plan(NamedTuple):
    """What ``zwarm trust`` would record for a state dir: the dir itself when it has problems
    (``dir``), and its config.toml as read now (``config``; None if there is none)."""

    state_dir: str
    dir: DirFacts | None
    dir_allowed: bool
    config: ConfigPlan | None

    @property
    def empty(self) -> bool:
        return self.dir is None and self.config is None


def plan(state_dir: Path, dir_only: bool = False, environ: Mapping[str, str] | None = None) -> Plan:
    """What trusting ``state_dir`` means now. The config is validated and read once: the bytes
    shown are the bytes whose hash ``apply`` records."""
    facts = inspect_state_dir(state_dir)
    if facts is None:
        raise InvalidInput(f"no state dir at {state_dir}")
    t = read_trust(trust_file(environ))
    needs_dir = facts if facts.problems else None
    allowed = needs_dir is not None and facts.allowed_by(t.state_dirs.get(facts.path))
    config = None if dir_only else _config_plan(Path(facts.path) / "config.toml", t, environ)
    return Plan(facts.path, needs_dir, allowed, config)


def _config_plan(path: Path, t: TrustData, environ: Mapping[str, str] | None) -> ConfigPlan | None:
    from zwarm import config as config_mod

    cfg = config_mod.load(path, environ)
    source = cfg.source
    assert source is not None
    entry = t.configs.get(source.path)
    if cfg.path is None and entry is None:
        return None  # no file, and none was trusted: nothing to trust
    digest = source.sha256
    status = UNTRUSTED if entry is None else TRUSTED if entry.sha256 == digest else CHANGED
    was = None if entry is None or entry.values is None else _flat(entry.values)
    needs = tuple(c.key for c in source.pending())
    return ConfigPlan(
        source.path, digest, source.settings, status, was, cfg.path is not None, needs
    )


def _flat(values: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{t}.{k}": v for t, keys in values.items() for k, v in keys.items()}


def apply(p: Plan, environ: Mapping[str, str] | None = None) -> None:
    """Record ``p``: the dir's owner and real path as they were inspected, the config's hash
    and values."""

    stamp = _now()

    def put(t: TrustData) -> None:
        if p.dir is not None and p.dir.uid is not None:
            t.state_dirs[p.dir.path] = DirEntry(p.dir.uid, p.dir.realpath, stamp)
        if p.config is not None:
            values = nested(p.config.settings)
            t.configs[p.config.path] = ConfigEntry(p.config.sha256, stamp, values)

    if p.dir is not None and p.dir.uid is None:
        raise InvalidInput(f"{p.dir.path} is a symlink to {p.dir.realpath}, which does not exist")
    update(put, environ)


def listing(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every trust entry with its current status (hashes the trusted files: slow on purpose)."""
    where = trust_file(environ)
    t = read_trust(where)
    configs = [
        {
            "path": p,
            "sha256": e.sha256,
            "trusted_at": e.trusted_at,
            "status": _file_status(p, e, environ),
        }
        for p, e in sorted(t.configs.items())
    ]
    dirs = [
        {
            "path": p,
            "uid": e.uid,
            "owner": owner_name(e.uid),
            "realpath": e.realpath,
            "trusted_at": e.trusted_at,
            "status": _dir_status(p, e),
        }
        for p, e in sorted(t.state_dirs.items())
    ]
    return {"trust_file": str(where), "configs": configs, "state_dirs": dirs}


def _file_status(path: str, e: ConfigEntry, environ: Mapping[str, str] | None) -> str:
    """TRUSTED (these bytes), EDITED (edited since, but nothing in it needs new trust),
    CHANGED (something does), or "missing"."""
    from zwarm import config as config_mod
    from zwarm.errors import ZwarmError

    try:
        from zwarm.system.files import read_file

        data, _ = read_file(path, 1 << 20, follow=True)
    except OSError:
        return "missing"
    if sha256(data) == e.sha256:
        return TRUSTED
    try:
        source = config_mod.load(Path(path), environ).source
        pending = source.pending() if source is not None else []
    except ZwarmError:
        return CHANGED
    return CHANGED if pending else EDITED


def _dir_status(path: str, e: DirEntry) -> str:
    facts = inspect_state_dir(Path(path))
    if facts is None:
        return "missing"
    if not facts.problems:
        return "safe"
    return "allowed" if facts.allowed_by(e) else CHANGED


def trust_config(
    path: Path,
    data: bytes | None = None,
    environ: Mapping[str, str] | None = None,
    tables: dict[str, dict[str, Any]] | None = None,
) -> str:
    """Record ``data`` (default: the file's current bytes) as trusted for ``path``: its sha256
    and its values that are not free; returns the hash. A later edit needs no new trust unless
    it changes an executing value or loosens a limit. (What ``zwarm trust`` does, without the
    review: for tests and programs that wrote the file themselves.) ``tables``: the schema
    (default ``zwarm.config.schema()``)."""
    from zwarm import config as config_mod
    from zwarm.errors import ConfigError

    if data is None:
        from zwarm.system.files import read_file

        try:
            data, _ = read_file(path, 1 << 20, follow=True)
        except OSError as e:
            raise InvalidInput(f"cannot read {path}: {e.strerror}") from None
    tables = config_mod.schema() if tables is None else tables
    try:
        values: dict[str, Any] | None = nested(
            config_mod.Judge(tables).settings(config_mod.parse(data, str(path), tables))
        )
    except ConfigError:
        values = None  # invalid: its hash alone (it cannot be loaded, let alone used)
    entry = ConfigEntry(sha256(data), _now(), values)

    def put(t: TrustData) -> None:
        t.configs[os.path.abspath(path)] = entry

    update(put, environ)
    return entry.sha256
