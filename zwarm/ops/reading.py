"""Reading one session: ``show`` (its row with every turn), its ``trajectory`` (normalized
steps, streamed) and its ``logs`` (a turn's raw JSONL, or followed while it grows).

Owns ``Stream`` and ``Trajectory`` (what a session's files hold, and ``problems``: what could
not be read), ``turn_json`` (a turn's JSON in ``show``), and salvaging a damaged session's
turn logs. Must stay true:
- ``show`` reads the session shown and, for its tree view, its descendants (``listing.
  tree_facts``), never a listing of every session, except the queue's for a queued one;
- what cannot be read is said where it belongs (an error step) and in ``problems``; a
  damaged meta.json's turn logs are shown only if this user's zwarm started the session (its
  launch pin names the agent that reads them): a planted session's files are never read as
  its own;
- a log is opened with ``open_read`` (no link followed, never blocking on a FIFO), read in
  bounded pieces (``LOG_CHUNK``); following it sleeps until the session's files change.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from zwarm import agents
from zwarm.env import parse_iso
from zwarm.errors import (
    DamagedSession,
    InvalidInput,
    StoreError,
)
from zwarm.model import ACTIVE, Session
from zwarm.model.rows import row
from zwarm.model.steps import Step, ended_turn, switched_text
from zwarm.ops import listing
from zwarm.ops.waiting import finished, watch_sessions
from zwarm.text import plural

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.engine.manager import BaseSessionManager

T = TypeVar("T")


def show(api: Zwarm, ref: str) -> dict[str, Any]:
    """The session row plus every turn in full."""
    s = api.get(ref)
    d = row(s)
    d["context_mode"] = s.context_mode
    d["requested_model"] = s.requested_model
    d["permissions"] = s.permissions
    d["workspace"] = msgspec.to_builtins(s.workspace) if s.workspace else None
    d["comments"] = [msgspec.to_builtins(c) for c in s.comments]
    d["turns_detail"] = [turn_json(api, s, t.to_dict()) for t in s.turns]
    d.update(listing.tree_facts(api, s))
    return d


def trajectory(api: Zwarm, ref: str, turn: int | None = None) -> Trajectory:
    """Normalized steps, streamed, each with ``turn`` and ``index``. What cannot be read is
    said where it belongs, as an error step, and listed in ``problems``: a finished turn
    whose log is missing, or a damaged meta.json (the turn logs found are then shown,
    read by the agent named in the session's launch pin)."""
    try:
        s = api.get(ref)
    except DamagedSession as e:
        return _salvaged(api, e, turn)
    # a turn that runs may have no log yet; one that never started has none
    running = {t.n: t.status in ACTIVE or not t.started for t in s.turns}
    numbers = _pick_turn(s.id, list(running), turn)
    notices = {  # a turn re-run on another account says so (engine.accounts)
        t.n: switched_text(t.n, t.account, t.switched_from)
        for t in s.turns
        if t.switched_from is not None
    }
    turns = [(n, running[n]) for n in numbers]
    return Trajectory(api.reader(s.adapter), s.id, turns, notices=notices)


def _salvaged(api: Zwarm, e: DamagedSession, turn: int | None) -> Trajectory:
    """The turn logs of a session whose meta.json is damaged, or ``e`` if there are none
    or no launch pin says which agent wrote them."""
    sid, found = e.session_id, _salvageable(api, e)
    adapter = _pinned_adapter(api, sid)
    if adapter is None:
        raise e
    numbers = _pick_turn(sid, found, turn)
    note = f"{e}: showing the turn logs found ({plural(len(found), 'turn')})"
    return Trajectory(api.reader(adapter), sid, [(n, False) for n in numbers], note)


def _salvageable(api: Zwarm, e: DamagedSession) -> list[int]:
    """The turn logs of a damaged session that this user's zwarm started (it has a
    launch pin here), or ``e`` raised: a planted session's files are never read as its."""
    found = api.store.turn_logs(e.session_id)
    if not found or _pinned_adapter(api, e.session_id) is None:
        raise e
    return found


def _pinned_adapter(api: Zwarm, sid: str) -> str | None:
    from zwarm.store import pins

    pin = pins.read(api.env.environ, sid, Path(os.path.realpath(api.store.root)))
    return pin.adapter if pin is not None and pin.adapter in agents.names() else None


def logs(api: Zwarm, ref: str, turn: int | None = None, follow: bool = False) -> Stream[bytes]:
    """Raw JSONL of a turn (default the latest); with ``follow``, tail until it ends.
    A finished turn whose log is missing is an error; for a session whose meta.json is
    damaged, the log is shown as found, with the damage in ``problems``."""
    try:
        s = api.get(ref)
    except DamagedSession as e:
        sid, found = e.session_id, _salvageable(api, e)
        n = _pick_turn(sid, found, turn)[0] if turn is not None else found[-1]
        return Stream(_tail(api, sid, n, False), [f"{e}: showing turn {n}'s log as found"])
    n = turn if turn is not None else s.count
    if not 1 <= n <= s.count:
        raise InvalidInput(f"session {s.id} has no turn {n}")
    path = api.store.turn_path(s.id, n)
    t = s.turns[n - 1]
    if t.status not in ACTIVE and t.started and not os.path.lexists(path):
        raise StoreError(f"session {s.id}: turn {n}'s log is missing ({path})")
    return Stream(_tail(api, s.id, n, follow))


def _tail(api: Zwarm, sid: str, n: int, follow: bool) -> Iterator[bytes]:
    """Turn ``n``'s log; with ``follow``, until it ends, then each queued turn's that
    starts after it (a finished turn and the start of the next are one transaction).
    Between reads it sleeps until the session's files change (``system.notify``), and
    reads its meta.json again only when that changed or every ``WAKE_S``."""
    path = api.store.turn_path(sid, n)
    pos = 0
    watch = watch_sessions(api, [sid], turns=True) if follow else None
    look = True  # meta.json may have changed since the session was last read
    try:
        while True:
            chunk = _read_at(path, pos, LOG_CHUNK)
            if chunk:
                pos += len(chunk)
                yield chunk
                continue
            if watch is None:
                return
            if look:
                s = api.get(sid, history=False)
                if finished(s, n):
                    if _has_more(path, pos):
                        continue
                    if s.count > n:
                        n, pos = n + 1, 0  # the next queued turn has begun: follow it too
                        path = api.store.turn_path(sid, n)
                        continue
                    if s.status.finished:
                        return  # idle: no turn active, none to come
            look = bool(watch.pause())
    finally:
        if watch is not None:
            watch.close()


def _has_more(path: Path, pos: int) -> bool:
    try:
        return path.stat().st_size > pos
    except OSError:
        return False


LOG_CHUNK = 1 << 20  # logs streams a turn log in pieces this size: memory stays bounded


def _read_at(path: Path, pos: int, size: int) -> bytes:
    """Up to ``size`` bytes of the turn log ``path`` from ``pos`` (none if it is missing or not
    a regular file: a planted FIFO or link is never opened blocking or followed)."""
    from zwarm.system.files import open_read

    try:
        fd = open_read(path)
    except OSError:
        return b""
    try:
        return os.pread(fd, size, pos)
    finally:
        os.close(fd)


def _pick_turn(sid: str, numbers: list[int], turn: int | None) -> list[int]:
    if turn is None:
        return numbers
    if turn not in numbers:
        have = f"1..{max(numbers)}" if numbers else "none"
        raise InvalidInput(f"session {sid} has no turn {turn} (it has {have})")
    return [turn]


class Stream(Iterator[T]):
    """An iterator over what a session's files hold, and ``problems``: what could not be read
    or was damaged (complete once the iterator is exhausted). Callers show what they get,
    then say what is missing."""

    def __init__(self, items: Iterator[T], problems: list[str] | None = None) -> None:
        self.problems: list[str] = problems if problems is not None else []
        self._items = items

    def __next__(self) -> T:
        return next(self._items)


class Trajectory(Stream[Step]):
    """A session's steps (see ``Zwarm.trajectory``); each problem is also an error step
    where it belongs."""

    def __init__(
        self,
        mgr: BaseSessionManager,
        sid: str,
        turns: list[tuple[int, bool]],  # (turn number, running: its log may not exist yet)
        note: str | None = None,
        notices: dict[int, str] | None = None,  # said before a turn's steps (not problems)
    ) -> None:
        problems: list[str] = []  # shared with the generator, which holds no ``self``: a
        # dropped half-read trajectory is freed (its file closed) at once, not by the GC
        steps = _numbered(problems, mgr, sid, turns, note, notices or {})
        super().__init__(steps, problems)

    def __iter__(self) -> Iterator[Step]:
        """The steps' own generator (the same one ``next`` advances): a ``for`` loop over a
        200 MB trajectory then runs no Python ``__next__`` per step."""
        return self._items


def _numbered(
    problems: list[str],
    mgr: BaseSessionManager,
    sid: str,
    turns: list[tuple[int, bool]],
    note: str | None,
    notices: dict[int, str],
) -> Iterator[Step]:
    """``Trajectory``'s steps, numbered across turns; each problem noted in ``problems``;
    a turn's notice (a non-fatal error step) before its steps."""
    index = 0
    if note is not None:
        problems.append(note)
        yield _problem(note, turns[0][0] if turns else None, index)
        index += 1
    for n, running in turns:
        if n in notices:
            yield _problem(notices[n], n, index)
            index += 1
        path = mgr.store.turn_path(sid, n)
        if not running and not os.path.lexists(path):
            what = f"turn {n}'s log is missing ({path})"
            problems.append(what)
            yield _problem(what, n, index)
            index += 1
            continue
        for step in mgr.turn_steps(sid, n):
            if not running and step.get("status") == "in_progress":
                ended_turn(step)  # the turn ended: it never finished
            step["turn"] = n
            step["index"] = index
            index += 1
            yield step


def _problem(message: str, turn: int | None, index: int) -> Step:
    return {"kind": "error", "message": message, "fatal": False, "turn": turn, "index": index}


def turn_json(api: Zwarm, s: Session, t: dict[str, Any]) -> dict[str, Any]:
    """Turn ``t`` (``Turn.to_dict``) of ``s`` as ``show`` and the server give it: its prompt's
    and log's paths, and how long it ran."""
    store = api.store
    out = {k: v for k, v in t.items() if k not in ("supervisor", "agent")}
    out["prompt_path"] = str(store.turn_path(s.id, t["n"], "prompt"))
    out["log_path"] = str(store.turn_path(s.id, t["n"]))
    if t.get("ended_at") and t.get("started_at"):
        out["duration_s"] = round(parse_iso(t["ended_at"]) - parse_iso(t["started_at"]), 3)
    return out
