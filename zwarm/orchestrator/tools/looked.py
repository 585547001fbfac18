"""What one caller of the tools has been told: the "last looked" state, on disk per caller.

Owns ``.zwarm/orchestrator/seen/`` (one JSON file per caller, and the lock they are updated
under) and the rule of what is news to a caller. Must stay true:
- a finished session is news to a caller if it finished after the caller first used the tools
  and the caller has not been told of it in its current state (a continued session that
  finishes again is news again);
- the state is advisory: a file that cannot be read is an empty state and one that cannot be
  written is skipped, so a broken state dir never makes a tool fail;
- what a call marks as told is recorded only once its result reached the caller: a call
  cancelled or abandoned (an MCP client that gave up, or went away) marks nothing, so a
  finish stays news until a call that returned it (at least once, never lost);
- the file is read without following a link, within ``STATE_BYTES``; the state of callers
  gone for ``FORGET_S`` is removed when a new caller starts; ``orchestrator/`` or ``seen/``
  made a link (an agent can write the state dir) is never read, written or swept through:
  the sweep lists and unlinks through descriptors opened without following one, so nothing
  outside the state dir is ever deleted;
- every update is a load-modify-write under the one flock helper (``system.files.locked``)
  and an atomic replace, so two callers marking at once lose neither's marks.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from zwarm.api import Zwarm
from zwarm.env import parse_iso
from zwarm.errors import ZwarmError
from zwarm.model import FINISHED
from zwarm.system.files import (
    CLOEXEC,
    NOFOLLOW,
    atomic_write,
    locked,
    private_dir,
    read_file,
    real_dir,
)

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
STATE_BYTES = 4 << 20  # one caller's state file: marks of live sessions only
FORGET_S = 30 * 86_400  # a caller's state untouched this long is removed (connections end)


class Looked:
    """Which finished sessions one caller has been told about, kept on disk per source.

    ``.zwarm/orchestrator/seen/<source>.json`` maps session id -> "<turns>:<status>" at the
    time the caller saw it finished, plus ``since``: when the caller first used the tools.
    A finished session is *new* to the caller if it finished after ``since`` and the caller
    has not seen it finished in its current state (a continued session can be new again).

    With ``told`` (a dict the caller's call owns), ``mark`` only collects the marks there:
    the call's owner ``record``s them once the result has reached the model (``Toolbox.call``).
    """

    def __init__(self, api: Zwarm, source: str, told: dict[str, str] | None = None) -> None:
        slug = _SLUG.sub("_", source)[:60]
        digest = hashlib.sha1(source.encode("utf-8", "replace")).hexdigest()[:8]
        self.dir = api.state_dir / "orchestrator" / "seen"
        self.path = self.dir / f"{slug}-{digest}.json"
        self.api = api
        self.told = told

    def _real(self) -> bool:
        """``orchestrator/`` and ``seen/`` are directories themselves, not links."""
        return real_dir(self.dir.parent) and real_dir(self.dir)

    def load(self) -> dict[str, Any]:
        if not self._real():
            return {}
        try:
            data = json.loads(read_file(self.path, STATE_BYTES)[0])
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def start(self, now: str) -> None:
        """Record when this caller started (once); later finishes count as new to it. A new
        caller's start also removes the state of callers gone for ``FORGET_S``."""
        if "since" not in self.load():
            self._update(lambda d: d.setdefault("since", now))
            self._forget_old()

    def is_new(self, state: Mapping[str, Any], r: Mapping[str, Any]) -> bool:
        if r.get("status") not in FINISHED:
            return False
        since = state.get("since")
        updated = r.get("updated_at")
        if not isinstance(since, str) or not isinstance(updated, str):
            return False
        seen = state.get("seen") or {}
        if not isinstance(seen, dict) or seen.get(r["id"]) == seen_key(r):
            return False
        try:
            return parse_iso(updated) > parse_iso(since)
        except ValueError:
            return False

    def mark(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """These rows' finished states told to the caller: recorded (or, with ``told``,
        collected for the call's owner to record)."""
        marks = {r["id"]: seen_key(r) for r in rows if r.get("status") in FINISHED}
        if self.told is not None:
            self.told.update(marks)
        else:
            self.record(marks)

    def record(self, marks: Mapping[str, str]) -> None:
        """Remember ``marks`` (session id -> "<turns>:<status>") as seen; forget the marks of
        sessions that no longer exist."""
        if not marks:
            return

        def apply(d: dict[str, Any]) -> None:
            seen = d.get("seen")
            seen = seen if isinstance(seen, dict) else {}
            d["seen"] = seen
            seen.update(marks)
            try:
                live = set(self.api.session_ids())
            except ZwarmError:
                return  # keep the marks, prune nothing
            for sid in [s for s in seen if s not in live]:
                del seen[sid]

        self._update(apply)

    def _update(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        """Load-modify-write under a lock. Best effort: the flags are advisory, so a state dir
        that cannot be written must not make the tools themselves fail."""
        try:
            private_dir(self.dir)
            if not self._real():
                return  # a link planted in the state dir: never written through
            with locked(self.dir / ".lock"):
                data = self.load()
                fn(data)
                atomic_write(self.path, json.dumps(data, separators=(",", ":")).encode("utf-8"))
        except (OSError, ZwarmError):
            pass

    def _forget_old(self) -> None:
        """Remove the state files untouched for ``FORGET_S`` (every MCP connection is a caller
        of its own, so they would pile up); never follows a link, never fails a tool."""
        old = self.api.env.clock() - FORGET_S
        try:
            fd = _open_dir(self.dir)
        except OSError:
            return
        try:
            with locked(self.dir / ".lock"), os.scandir(fd) as entries:
                for e in entries:
                    if e.name.endswith(".json") and e.stat(follow_symlinks=False).st_mtime < old:
                        os.unlink(e.name, dir_fd=fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def _open_dir(seen: Path) -> int:
    """An fd on ``seen`` (``orchestrator/seen``), each of its two levels opened without
    following a link (``OSError`` if one is a link or missing)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC
    top = os.open(seen.parent.parent, os.O_RDONLY | os.O_DIRECTORY | CLOEXEC)
    try:
        mid = os.open(seen.parent.name, flags, dir_fd=top)
    finally:
        os.close(top)
    try:
        return os.open(seen.name, flags, dir_fd=mid)
    finally:
        os.close(mid)


def seen_key(r: Mapping[str, Any]) -> str:
    return f"{r.get('turns')}:{r.get('status')}"
