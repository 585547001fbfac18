"""The best-of sets' records: ``Sets``, one state dir's sets.

Owns where a set's files are and every read and write of them. The record that decides
(``model.sets.BestOf``: the checks zwarm runs, the paths it restores, the base, the attempts)
and each attempt's turn's evidence are kept where the agents cannot write, beside the launch
pins (``$XDG_STATE_HOME/zwarm/sets/<id>/``: ``set.json``, ``<session>-<turn>.json``, the
locks); the state dir holds an index copy (``.zwarm/sets/<id>.json``) that says which sets
belong to it and that nothing decides on. Must stay true:
- a check command is run, a path restored or an attempt ranked only on the word of the
  private record, written only by commands a user runs (spawn, pick), which names this state
  dir; a record of another state dir, or one that does not decode, is refused (``DamagedSet``);
- a record changes only in one locked read-modify-write (``update``), written atomically;
  evidence is written once, atomically, and never twice: the settling lock (``settling``) is
  held from the check that it is missing until it is written;
- every file is read as untrusted input: never through a link, bounded, decoded by the strict
  schema (``model.sets``); a bad one is an error with why, or no evidence (made again).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
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
    """A set's record that cannot be read, does not pass the schema, or is another's."""


def new_id() -> str:
    return "set-" + os.urandom(4).hex()


def looks_like(ref: str) -> bool:
    """``ref`` is a set id or a prefix of one (``set-`` and 4+ hex digits)."""
    return bool(_PREFIX.match(ref))


class Sets:
    """The best-of sets of the state dir ``root``, for the user whose ``environ`` it is."""

    def __init__(self, root: Path, environ: Mapping[str, str]) -> None:
        from zwarm.xdg import user_state_dir

        self.root = root
        self.index = root / "sets"
        self.home = user_state_dir(environ) / "sets"

    # ----- which sets
    def resolve(self, ref: str) -> str:
        """The set ``ref`` names: its id, or a unique prefix; ``InvalidInput`` if none."""
        if not looks_like(ref):
            raise InvalidInput(f"{ref!r} is not a set id (set- and 4 to 8 hex digits)")
        found = [i for i in self.list_ids() if i.startswith(ref)]
        if ref in found:
            return ref
        if not found:
            raise InvalidInput(f"no best-of set {ref}")
        if len(found) > 1:
            raise InvalidInput(f"{ref} names more than one set: {', '.join(found)}")
        return found[0]

    def list_ids(self) -> list[str]:
        try:
            names = os.listdir(self.index)
        except OSError:
            return []
        return sorted(n[:-5] for n in names if n.endswith(".json") and _SET.match(n[:-5]))

    # ----- the record
    def _dir(self, set_id: str) -> Path:
        if not _SET.match(set_id):
            raise InvalidInput(f"{set_id!r} is not a set id")
        return self.home / set_id

    def read(self, set_id: str) -> BestOf:
        """Set ``set_id``'s private record, validated, of this state dir; ``DamagedSet`` if
        not."""
        path = self._dir(set_id) / "set.json"
        try:
            data, _ = read_file(path, MAX_SET_BYTES)
        except FileNotFoundError:
            raise DamagedSet(f"best-of set {set_id} has no record ({path})") from None
        except OSError as e:
            raise DamagedSet(f"best-of set {set_id}: cannot read {path}: {e.strerror}") from None
        try:
            s = _set_dec.decode(data)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as e:
            raise DamagedSet(f"best-of set {set_id}: {path} is damaged: {e}") from None
        if s.id != set_id or s.state_dir != os.path.realpath(self.root):
            raise DamagedSet(f"best-of set {set_id}: {path} is another state dir's or set's")
        return s

    def _write(self, s: BestOf) -> None:
        data = msgspec.json.encode(s)
        atomic_write(self._dir(s.id) / "set.json", data)
        private_dir(self.index)
        atomic_write(self.index / f"{s.id}.json", data, durable=False)  # the index copy

    def _ensure(self, set_id: str) -> Path:
        d = self._dir(set_id)
        try:
            private_dir(d)
        except OSError as e:
            raise StoreError(f"cannot create {d}: {e.strerror}") from None
        if not real_dir(d):
            raise StoreError(f"{d} is not a directory (a link?)")
        return d

    def create(self, s: BestOf) -> None:
        """Write a new set's record (its id is new: ``new_id``)."""
        d = self._ensure(s.id)
        with locked(d / "set.lock"):
            if os.path.lexists(d / "set.json"):
                raise StoreError(f"best-of set {s.id} exists already")
            self._write(s)

    def update(self, set_id: str, fn: Callable[[BestOf], T]) -> T:
        """Change set ``set_id`` in one locked read-modify-write; ``fn``'s result."""
        d = self._ensure(set_id)
        with locked(d / "set.lock"):
            s = self.read(set_id)
            out = fn(s)
            self._write(s)
            return out

    # ----- evidence
    def read_evidence(self, set_id: str, sid: str, turn: int) -> Evidence | None:
        """Attempt ``sid``'s evidence for ``turn``, or None: not recorded yet, or a file that
        is not one (then it is made again: the evidence is zwarm's to make)."""
        try:
            data, _ = read_file(self._dir(set_id) / f"{sid}-{turn}.json", MAX_EVIDENCE_BYTES)
            ev = _ev_dec.decode(data)
        except (OSError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return None
        return ev if (ev.session, ev.turn) == (sid, turn) else None

    def write_evidence(self, set_id: str, ev: Evidence) -> None:
        d = self._ensure(set_id)
        atomic_write(d / f"{ev.session}-{ev.turn}.json", msgspec.json.encode(ev))

    @contextlib.contextmanager
    def settling(self, set_id: str, sid: str) -> Iterator[None]:
        """Held while zwarm restores an attempt's protected paths and runs its checks: one
        process at a time settles an attempt (a second waits, then finds the evidence)."""
        with locked(self._ensure(set_id) / f"{sid}.lock"):
            yield
