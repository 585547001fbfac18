"""The best-of sets' records on disk: ``.zwarm/sets/<id>.json`` (the set, ``model.sets.BestOf``)
and ``.zwarm/sets/<id>/`` (each attempt's turn's evidence, ``<session>-<turn>.json``, and the
lock held while zwarm settles an attempt, ``<session>.lock``).

Owns where these files are, how a set id is made and resolved (an id or a unique prefix of
4+ characters after ``set-``), and every read and write of them. Must stay true:
- a set record changes only in one locked read-modify-write (``update``, under
  ``sets/<id>.lock``), written atomically; evidence is written once, atomically, so a reader
  sees none or all of it, and never twice (the settling lock, ``settling``, is held from the
  check that it is missing until it is written);
- every file is read as untrusted input: never through a link, bounded, decoded by the strict
  schema (``model.sets``); a bad one is a ``DamagedSet``/``None`` with why, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import msgspec

from zwarm.errors import InvalidInput, StoreError
from zwarm.model.records import SET_ID
from zwarm.model.sets import BestOf, Evidence
from zwarm.system.files import atomic_write, locked, private_dir, read_file, real_dir

T = TypeVar("T")
_SET = re.compile(SET_ID)
_PREFIX = re.compile(r"^set-[0-9a-f]{4,8}\Z")
MAX_SET_BYTES = 8 << 20
MAX_EVIDENCE_BYTES = 1 << 20
_set_dec = msgspec.json.Decoder(BestOf)
_ev_dec = msgspec.json.Decoder(Evidence)


class DamagedSet(StoreError):
    """A set's record that cannot be read or does not pass the schema."""


def sets_dir(root: Path) -> Path:
    return root / "sets"


def new_id() -> str:
    return "set-" + os.urandom(4).hex()


def looks_like(ref: str) -> bool:
    """``ref`` is a set id or a prefix of one (``set-`` and 4+ hex digits)."""
    return bool(_PREFIX.match(ref))


def resolve(root: Path, ref: str) -> str:
    """The set ``ref`` names: its id, or a unique prefix of it; ``InvalidInput`` if none."""
    if not looks_like(ref):
        raise InvalidInput(f"{ref!r} is not a set id (set- and 4 to 8 hex digits)")
    if _SET.match(ref) and os.path.lexists(sets_dir(root) / f"{ref}.json"):
        return ref
    found = sorted(sid for sid in list_ids(root) if sid.startswith(ref))
    if not found:
        raise InvalidInput(f"no best-of set {ref}")
    if len(found) > 1:
        raise InvalidInput(f"{ref} names more than one set: {', '.join(found)}")
    return found[0]


def list_ids(root: Path) -> list[str]:
    try:
        names = os.listdir(sets_dir(root))
    except OSError:
        return []
    return sorted(n[:-5] for n in names if n.endswith(".json") and _SET.match(n[:-5]))


def read(root: Path, set_id: str) -> BestOf:
    """The set ``set_id`` as its file says, validated; ``DamagedSet`` if it is not one."""
    path = sets_dir(root) / f"{set_id}.json"
    try:
        data, _ = read_file(path, MAX_SET_BYTES)
    except FileNotFoundError:
        raise InvalidInput(f"no best-of set {set_id}") from None
    except OSError as e:
        raise DamagedSet(f"best-of set {set_id}: cannot read {path}: {e.strerror}") from None
    try:
        s = _set_dec.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as e:
        raise DamagedSet(f"best-of set {set_id}: {path} is damaged: {e}") from None
    if s.id != set_id:
        raise DamagedSet(f"best-of set {set_id}: {path} names another set ({s.id})")
    return s


def _write(root: Path, s: BestOf) -> None:
    atomic_write(sets_dir(root) / f"{s.id}.json", msgspec.json.encode(s))


def _ensure(root: Path, set_id: str) -> Path:
    d = sets_dir(root) / set_id
    private_dir(d)
    if not real_dir(sets_dir(root)) or not real_dir(d):
        raise StoreError(f"{d} is not a directory (a link?)")
    return d


def create(root: Path, s: BestOf) -> None:
    """Write a new set's record (its id is new: ``new_id``)."""
    _ensure(root, s.id)
    with locked(sets_dir(root) / f"{s.id}.lock"):
        if os.path.lexists(sets_dir(root) / f"{s.id}.json"):
            raise StoreError(f"best-of set {s.id} exists already")
        _write(root, s)


def update(root: Path, set_id: str, fn: Callable[[BestOf], T]) -> T:
    """Change set ``set_id`` in one locked read-modify-write; ``fn``'s result."""
    _ensure(root, set_id)
    with locked(sets_dir(root) / f"{set_id}.lock"):
        s = read(root, set_id)
        out = fn(s)
        _write(root, s)
        return out


def _evidence_path(root: Path, set_id: str, sid: str, turn: int) -> Path:
    return sets_dir(root) / set_id / f"{sid}-{turn}.json"


def read_evidence(root: Path, set_id: str, sid: str, turn: int) -> Evidence | None:
    """Attempt ``sid``'s evidence for ``turn``, or None: not recorded yet, or a file that is
    not one (then it is settled again: the evidence is zwarm's to make, and remade)."""
    try:
        data, _ = read_file(_evidence_path(root, set_id, sid, turn), MAX_EVIDENCE_BYTES)
        ev = _ev_dec.decode(data)
    except (OSError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    return ev if (ev.session, ev.turn) == (sid, turn) else None


def write_evidence(root: Path, set_id: str, ev: Evidence) -> None:
    _ensure(root, set_id)
    atomic_write(_evidence_path(root, set_id, ev.session, ev.turn), msgspec.json.encode(ev))


@contextlib.contextmanager
def settling(root: Path, set_id: str, sid: str) -> Iterator[None]:
    """Held while zwarm restores an attempt's protected paths and runs its checks: one
    process at a time settles an attempt (a second waits, then finds the evidence)."""
    d = _ensure(root, set_id)
    with locked(d / f"{sid}.lock"):
        yield
