"""The listing index: ``.zwarm/index.json``, a cache of the ``ls`` rows of finished sessions.

Owns that file's format and its validity rules. ``meta.json`` stays the only source of truth;
the index only saves ``ls`` from opening and parsing every finished session's ``meta.json``.
Must stay true:
- a row is served from the index only if the session's ``meta.json`` has the exact identity
  recorded with it: inode, size, mtime and ctime in nanoseconds, taken by ``fstat`` of the very
  file the row was built from. ``meta.json`` is only ever replaced by rename (a new inode), and
  an edit in place changes its ctime (which nothing can set back), so a changed file is
  always a miss and its row is rebuilt. File times are coarse (a kernel tick), so a row is
  stored only if its file is older than ``SETTLED_NS``: any later version of that file has a
  later time, even if it reuses the inode and has the same size (git's "racy clean" rule);
- rows of sessions whose ``meta.json`` says ``running`` are never stored: they must be
  reconciled against live processes on every read;
- a missing, unreadable, corrupt or foreign index (another format or zwarm version) is ignored
  and rebuilt, never an error; a failure to write it (read-only dir, disk full) is ignored too;
- it is written atomically (``store.atomic_write``, not fsynced) with mode 0600: rows hold
  tasks and messages.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zwarm import __version__
from zwarm.errors import StoreError
from zwarm.store import Key, atomic_write

FORMAT = 1
SETTLED_NS = 2_000_000_000

class ListingIndex:
    """The rows of one state dir's index, loaded once, saved if anything changed."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._entries: dict[str, Any] = _read(path)
        self._seen: set[str] = set()
        self._dirty = False

    def get(self, sid: str, key: Key | None) -> dict[str, Any] | None:
        """The cached row of ``sid`` if it was built from the file whose identity is ``key``."""
        self._seen.add(sid)
        entry = self._entries.get(sid)
        if entry is None:
            return None
        if key is not None and type(entry) is list and len(entry) == 2:
            stored, row = entry
            if type(stored) is list and tuple(stored) == key and type(row) is dict:
                return row
        del self._entries[sid]  # stale or malformed: dropped at the next save
        self._dirty = True
        return None

    def put(self, sid: str, key: Key, row: dict[str, Any]) -> None:
        """Store ``row`` as built from the file whose identity is ``key``, if that file has
        settled (see the module docstring)."""
        if max(key[2], key[3]) < int(self._clock() * 1e9) - SETTLED_NS:
            self._entries[sid] = [list(key), row]
            self._dirty = True

    def save(self) -> None:
        """Write the index if a row was added or a session is gone; never raises."""
        gone = self._entries.keys() - self._seen
        if not self._dirty and not gone:
            return
        for sid in gone:
            del self._entries[sid]
        doc = {"format": FORMAT, "zwarm": __version__, "entries": self._entries}
        data = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        # not fsynced: after a crash the index may be empty or torn, which reads as no index
        with contextlib.suppress(StoreError, OSError):
            atomic_write(self.path, data, durable=False)


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return {}
    if type(doc) is not dict or doc.get("format") != FORMAT or doc.get("zwarm") != __version__:
        return {}
    entries = doc.get("entries")
    return entries if type(entries) is dict else {}
