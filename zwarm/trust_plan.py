"""The ``zwarm trust`` operations: what trusting a state dir means now, recording it, listing.

Owns ``plan`` (the state dir's problems and its config.toml's non-default security-relevant
settings, read once), ``apply`` (record exactly what was shown) and ``listing``. The trust file
itself and every check are ``zwarm.trust``'s. Must stay true: ``apply`` records the hash of the
very bytes ``plan`` read and showed, never a later version of the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from zwarm.errors import InvalidInput
from zwarm.trust import (
    CHANGED,
    TRUSTED,
    UNTRUSTED,
    ConfigEntry,
    DirEntry,
    DirFacts,
    TrustData,
    _now,
    inspect_state_dir,
    owner_name,
    read_trust,
    sha256,
    trust_file,
    update,
)


class ConfigPlan(NamedTuple):
    path: str
    sha256: str  # of the bytes read (and shown): what ``apply`` records
    settings: dict[str, Any]  # the non-default security-relevant values it sets
    status: str  # TRUSTED, CHANGED or UNTRUSTED, before this plan is applied


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

    source = config_mod.load(path, environ).source
    if source is None:
        return None
    entry = t.configs.get(source.path)
    digest = sha256(source.raw)
    status = UNTRUSTED if entry is None else TRUSTED if entry.sha256 == digest else CHANGED
    return ConfigPlan(source.path, digest, dict(source.settings), status)


def apply(p: Plan, environ: Mapping[str, str] | None = None) -> None:
    """Record ``p``: the dir's owner and real path as they were inspected, the config's hash."""
    stamp = _now()

    def put(t: TrustData) -> None:
        if p.dir is not None and p.dir.uid is not None:
            t.state_dirs[p.dir.path] = DirEntry(p.dir.uid, p.dir.realpath, stamp)
        if p.config is not None:
            t.configs[p.config.path] = ConfigEntry(p.config.sha256, stamp)

    if p.dir is not None and p.dir.uid is None:
        raise InvalidInput(f"{p.dir.path} is a symlink to {p.dir.realpath}, which does not exist")
    update(put, environ)


def listing(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every trust entry with its current status (hashes the trusted files: slow on purpose)."""
    where = trust_file(environ)
    t = read_trust(where)
    configs = [
        {"path": p, "sha256": e.sha256, "trusted_at": e.trusted_at, "status": _file_status(p, e)}
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


def _file_status(path: str, e: ConfigEntry) -> str:
    try:
        from zwarm.store.files import read_file

        data, _ = read_file(path, 1 << 20, follow=True)
    except OSError:
        return "missing"
    return TRUSTED if sha256(data) == e.sha256 else CHANGED


def _dir_status(path: str, e: DirEntry) -> str:
    facts = inspect_state_dir(Path(path))
    if facts is None:
        return "missing"
    if not facts.problems:
        return "safe"
    return "allowed" if facts.allowed_by(e) else CHANGED
