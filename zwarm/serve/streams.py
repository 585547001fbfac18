"""Live event streams of ``zwarm serve`` (server-sent events): one session's steps, turns and
status (``Streams.session``), and every session's changes (``Streams.fleet``).

Owns reading turn logs and session state for HTTP clients and fanning it out. Must stay true:
- one reader per session however many clients watch it: a ``Hub`` follows the session's turn
  logs by byte offset with the agent's own parser in one thread (as ``trajectory -f`` does,
  through ``zwarm.ops.following.LiveLog``) and keeps the encoded events; each client reads them
  from its own position, so a log is parsed once, not once per client, and a refresh reads
  only what was appended;
- a step's event id is its cursor ``TURN.OFFSET.RANK``: the turn, the byte offset of the log
  its parser had consumed when it gave the step, and its rank among the steps given at that
  offset (a turn's start is ``TURN.0.1``). Parsing is deterministic, so a client that
  reconnects with ``Last-Event-ID`` (or ``?after=``) gets exactly the steps after that id,
  from the hub's buffer, or, when the buffer no longer holds them (a slow client, a restarted
  server), from a reader of its own that reads that turn's log again from its start and
  skips what the client has. A status event (``session``, ``idle``) is numbered after the
  step before it (``TURN.OFFSET.RANK.N``): it never changes a step's id, and a client that
  reconnects is sent the session as it is now first;
- memory is bounded: a hub keeps at most ``HUB_BYTES``/``HUB_EVENTS`` of events, the fleet
  feed ``FLEET_EVENTS``; a client that falls behind them is resumed as above (sessions) or
  sent a new snapshot (fleet), never buffered for without bound; a client's own reader
  keeps only what its client has not taken yet, and waits while that is ``PRIVATE_AHEAD``;
- idle costs a heartbeat per client and nothing more per client: a session with nothing to
  read has no reader thread (the fleet watcher's look at the session directories, shared by
  all clients, wakes it when its meta.json changes), and the watcher runs only while a
  client streams, or for a grace period after;
- a fleet row is the row ``zwarm ls --json`` lists: a running one carries what its launcher
  says of it (``shown_status``: ``queued (slurm: Resources)``, ``unknown (host a
  unreachable)``), asked once for all running rows per look (``Zwarm.launcher_says``: one
  ``squeue``, whose answers are cached; every host probed at once);
- everything that blocks runs in a thread; the event loop only moves encoded frames, and
  only the loop's thread touches a ``Feed``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import os
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from zwarm.model.records import order_key
from zwarm.model.status import RUNS
from zwarm.model.steps import ended_turn
from zwarm.text import clip, oneline

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.model import Session
    from zwarm.ops.following import LiveLog, TurnWatch

Cursor = tuple[int, int, int, int]  # (turn, log offset consumed, rank there, status event)
HEARTBEAT = b": keep-alive\n\n"
HEARTBEAT_S = 15.0  # a stream with nothing to say sends a comment this often
HUB_BYTES = 32 << 20  # encoded events a hub keeps at most
HUB_EVENTS = 200_000
PRIVATE_AHEAD = 2_000  # a client's own reader waits when it is this many events ahead
FLEET_EVENTS = 10_000
GRACE_S = 30.0  # a hub (or the fleet watcher) nobody uses is kept this long for reconnects
SCAN_S = 1.0  # the fleet watcher looks at the session directories this often (at least)
POLL_S = 0.1  # a hub's reader looks for more of a running turn's log this often
TAKE = 512  # frames a client is sent in one write at most
MAX_CLIENTS = 500  # streams open at once; more are refused (503)
_CURSOR = re.compile(r"([1-9][0-9]{0,6})\.([0-9]{1,15})\.([0-9]{1,9})(?:\.([1-9][0-9]{0,8}))?")
_FLEET_ID = re.compile(r"([0-9a-f]{8})\.([0-9]{1,15})")
_SID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ENC = msgspec.json.Encoder()


class Behind(Exception):
    """The events a client needs next were dropped from a feed (it was too slow)."""


def cursor_id(c: Cursor) -> str:
    return f"{c[0]}.{c[1]}.{c[2]}" + (f".{c[3]}" if c[3] else "")


def parse_cursor(text: str) -> Cursor | None:
    """A session stream's event id as a cursor, or None if ``text`` is not one."""
    m = _CURSOR.fullmatch(text.strip())
    return (int(m[1]), int(m[2]), int(m[3]), int(m[4] or 0)) if m else None


def frame(event: str, data: Any, event_id: str | None = None) -> bytes:
    """One server-sent event. JSON never holds a raw line break, so ``data`` is one line."""
    try:
        body = _ENC.encode(data)
    except (TypeError, ValueError, OverflowError):
        body = json.dumps(data, default=str).encode()
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: ".encode() + body + b"\n\n"


class Feed:
    """Encoded events in order, each with a sortable key (non-decreasing). The oldest are
    dropped past the limits; ``floor`` is the key of the last one dropped (or the key before
    the first event ever), so every event with a key above it is still here."""

    def __init__(self, floor: Any, max_bytes: int, max_events: int) -> None:
        self.floor = floor
        self.keys: list[Any] = []
        self.frames: list[bytes] = []
        self.base = 0  # absolute index of keys[0]
        self.head = 0  # absolute index of the first event kept
        self.size = 0
        self.closed = False
        self._limits = (max_bytes, max_events)
        self._changed = asyncio.Event()

    @property
    def end(self) -> int:
        return self.base + len(self.keys)

    def append(self, key: Any, data: bytes) -> None:
        self.keys.append(key)
        self.frames.append(data)
        self.size += len(data)
        most_bytes, most_events = self._limits
        while self.head < self.end - 1 and (
            self.size > most_bytes or self.end - self.head > most_events
        ):
            i = self.head - self.base
            self.size -= len(self.frames[i])
            self.frames[i] = b""
            self.floor = self.keys[i]
            self.head += 1
        self._compact()
        self._wake()

    def _compact(self) -> None:
        if self.head - self.base > max(1024, len(self.keys) // 2):
            cut = self.head - self.base
            del self.keys[:cut], self.frames[:cut]
            self.base = self.head

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def after(self, key: Any) -> int:
        """The absolute index of the first event whose key is above ``key``."""
        if key < self.floor:
            raise Behind
        lo = self.head - self.base
        return self.base + bisect.bisect_right(self.keys, key, lo=lo)

    def key_at(self, index: int) -> Any:
        return self.keys[index - self.base]

    def forget(self, index: int) -> None:
        """Drop the events before ``index`` (its only reader has them)."""
        while self.head < min(index, self.end):
            i = self.head - self.base
            self.size -= len(self.frames[i])
            self.frames[i] = b""
            self.floor = self.keys[i]
            self.head += 1
        self._compact()

    def take(self, index: int) -> list[bytes]:
        if index < self.head:
            raise Behind
        lo = index - self.base
        return self.frames[lo : lo + TAKE]

    async def wait(self, index: int, timeout: float) -> bool:
        """Until an event at ``index`` exists or the feed is closed (True), or ``timeout``."""
        if index < self.end or self.closed:
            return True
        changed = self._changed
        try:
            await asyncio.wait_for(changed.wait(), timeout)
        except TimeoutError:
            return False
        return True


class Hub:
    """Reads one session's turns from ``start`` on into a feed, shared by its clients. Its
    thread runs while the session has something to read; ``poke`` starts it again."""

    def __init__(self, streams: Streams, sid: str, start: int, shared: bool) -> None:
        self.streams = streams
        self.sid = sid
        self.shared = shared
        most = (HUB_BYTES, HUB_EVENTS) if shared else (1 << 62, 1 << 62)  # see ``taken``
        self.feed = Feed((start, 0, 0, 0), *most)
        self._room = None if shared else threading.Semaphore(PRIVATE_AHEAD)
        self.next_turn = start
        self.cursor: Cursor = (start, 0, 0, 0)  # the reader's (its thread's)
        self.users = 0
        self.idle = False  # the loop's view: nothing to read until the session changes
        self.last_used = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._running = False
        self._poked = False
        self._stop = threading.Event()
        self._seen: tuple[Any, ...] | None = None
        self._idle = False  # the thread's view of ``idle``

    # ---------------------------------------------------------------- on the loop
    def covers(self, want: Cursor) -> bool:
        """Whether every event after ``want`` is, or will be, in this hub's feed."""
        return not self.feed.closed and want >= self.feed.floor

    def poke(self) -> None:
        """The session may have changed: read on (a thread starts if none runs)."""
        with self._lock:
            if self._running:
                self._poked = True
                return
            if self._stop.is_set() or self.feed.closed:
                return
            self._running = True
        threading.Thread(target=self._run, name=f"zwarm-serve-{self.sid[:8]}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def taken(self, index: int, count: int) -> None:
        """A private hub's client took ``count`` events, up to ``index``: they are dropped,
        and the reader may go on."""
        if self._room is not None:
            self.feed.forget(index)
            for _ in range(count):
                self._room.release()

    # ---------------------------------------------------------------- in its thread
    def _run(self) -> None:
        while True:
            try:
                self._follow()
            except Exception as e:  # a bug: said to the clients, never a dead server
                self._close("problem", {"message": f"the stream failed: {type(e).__name__}: {e}"})
            with self._lock:
                if self._poked and not self._stop.is_set():
                    self._poked = False
                    continue
                self._running = False
                return

    def _follow(self) -> None:
        """Read every turn there is to read now; return when there is nothing more until the
        session changes (idle, queued, parked), it is gone, or the hub stops."""
        api = self.streams.new_api()
        s = self._load(api)
        while s is not None and not self._stop.is_set():
            n = self.next_turn
            t = s.turns[n - 1] if n <= s.count else None
            if t is None or (not t.started and not t.status.finished):
                self._set_idle(True)  # finished, or a turn waits to start: a change pokes us
                return
            self._set_idle(False)
            mgr = api.reader(s.adapter)
            s = self._turn(api, mgr, s, n)
            if s is not None and not self._stop.is_set():
                self.next_turn = n + 1

    def _load(self, api: Zwarm) -> Session | None:
        """The session now (its status change posted), or None if it is gone or damaged
        (said to the clients, and the feed closed)."""
        from zwarm.api import row
        from zwarm.errors import SessionNotFound, ZwarmError

        try:
            s = api.get(self.sid)
        except SessionNotFound:
            self._close("removed", {"id": self.sid})
            return None
        except ZwarmError as e:
            self._close("problem", {"message": str(e)})
            return None
        seen = (s.status, s.count, len(s.queue), s.updated_at)
        if seen != self._seen:
            self._seen = seen
            self._post(self._status_key(), "session", row(s))
        return s

    def _turn(self, api: Zwarm, mgr: BaseSessionManager, s: Session, n: int) -> Session | None:
        """Post turn ``n``: its start, each step as the log gives it, its end."""
        from zwarm.ops.following import LiveLog

        self._post((n, 0, 1, 0), "turn", _turn_event(api, s, n, "started"))
        path = api.turn_log(self.sid, n)
        latest: list[Session | None] = [s]

        def ended() -> bool:
            if self._stop.is_set():
                return True
            latest[0] = now = self._load(api)
            return now is None or n > now.count or not _runs(now, n)

        log = LiveLog(path, ended, POLL_S)
        try:
            self._steps(mgr, log, n)
        finally:
            log.close()
        if self._stop.is_set() or latest[0] is None:
            return None
        now = self._load(api)
        if now is None:
            return None
        if now.turns[n - 1].started and not os.path.lexists(path):
            self._step(n, log.consumed, _missing(n, path))
        self._post(self._next(n, log.consumed), "turn", _turn_event(api, now, n, "ended"))
        return now

    def _steps(self, mgr: BaseSessionManager, log: LiveLog, n: int) -> None:
        for seq, step in enumerate(mgr.iter_steps(log)):
            if self._stop.is_set():
                return
            step["seq"] = seq
            self._step(n, log.consumed, ended_turn(step) if log.done else step)

    def _step(self, n: int, offset: int, step: dict[str, Any]) -> None:
        step["turn"] = n
        c = self._next(n, offset)
        step["id"] = cursor_id(c)
        self._post(c, "step", step)

    def _next(self, n: int, offset: int) -> Cursor:
        """The cursor of the next step (or turn end) given at ``offset`` of turn ``n``."""
        t, o, k, _ = self.cursor
        return (n, offset, k + 1 if (t, o) == (n, offset) else 1, 0)

    def _status_key(self) -> Cursor:
        t, o, k, s = self.cursor
        return (t, o, k, s + 1)

    def _set_idle(self, idle: bool) -> None:
        if idle == self._idle:
            return
        self._idle = idle
        if idle:
            self._post(self._status_key(), "idle", {"id": self.sid, "turns": self.next_turn - 1})
        self._call(self._mark_idle, idle)

    def _post(self, key: Cursor, event: str, data: Any) -> None:
        while self._room is not None and not self._room.acquire(timeout=0.5):
            if self._stop.is_set():
                return  # its client is gone
        self.cursor = max(self.cursor, key)
        self._call(self.feed.append, key, frame(event, data, cursor_id(key)))

    def _close(self, event: str, data: Any) -> None:
        self._stop.set()
        key = self._status_key()
        self.cursor = key
        self._call(self.feed.append, key, frame(event, data, cursor_id(key)))
        self._call(self.feed.close)
        self._call(self.streams.drop, self)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the server is shutting down
            self._stop.set()

    def _mark_idle(self, idle: bool) -> None:
        self.idle = idle
        self.feed._wake()


def _runs(s: Session, n: int) -> bool:
    from zwarm.model import RUNS

    return s.turns[n - 1].status in RUNS


def _turn_event(api: Zwarm, s: Session, n: int, phase: str) -> dict[str, Any]:
    from zwarm.ops.reading import turn_json

    t = turn_json(api, s, s.turns[n - 1].to_dict())
    for key in ("message", "final_message", "error"):
        if isinstance(t.get(key), str):
            t[key] = clip(t[key], 4000)
    return {"session_id": s.id, "n": n, "phase": phase, "status": s.status.value, "turn": t}


def _missing(n: int, path: Any) -> dict[str, Any]:
    return {"kind": "error", "message": f"turn {n}'s log is missing ({path})", "fatal": False}


class Fleet:
    """Every session's row, kept current by looking at the session directories (a meta.json
    rewrite changes its directory) and at running turns' logs; each change is an event."""

    def __init__(self, streams: Streams) -> None:
        self.streams = streams
        self.epoch = secrets.token_hex(4)
        self.feed = Feed(0, 64 << 20, FLEET_EVENTS)
        self.rows: dict[str, dict[str, Any]] = {}  # published: replaced, never changed
        self.seq = 0
        self.ready = asyncio.Event()
        self.users = 0
        self.interval = SCAN_S
        self._stamps: dict[str, int] = {}
        self._watches: dict[tuple[str, int], TurnWatch] = {}
        self._api: Zwarm | None = None
        self._first = True
        self._wake = asyncio.Event()  # set: look now, not after the interval
        self._looks = (0, 0)  # (looks started, looks published)
        self._looked = asyncio.Condition()

    async def fresh(self, timeout: float) -> None:
        """Until a look that started after this call is published (or ``timeout``): a new
        client's snapshot then holds every session on disk when it connected, never the rows of
        a look older than sessions made meanwhile (which read as "No sessions yet")."""
        want = self._looks[0] + 1
        self._wake.set()
        async with self._looked:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._looked.wait_for(lambda: self._looks[1] >= want), timeout
                )

    def event_id(self, seq: int) -> str:
        return f"{self.epoch}.{seq}"

    def resume_index(self, last: str | None) -> int | None:
        """Where a client that last saw ``last`` goes on in the feed (None: a snapshot)."""
        m = _FLEET_ID.fullmatch(last.strip()) if last else None
        if m is None or m[1] != self.epoch:
            return None
        try:
            return self.feed.after(int(m[2]))
        except Behind:
            return None

    def snapshot(self) -> tuple[list[dict[str, Any]], int]:
        rows = sorted(self.rows.values(), key=order_key)
        return rows, self.seq

    async def run(self, needed: Callable[[], bool]) -> None:
        """Look every ``interval`` while ``needed()`` (or for ``GRACE_S`` after)."""
        unneeded_since: float | None = None
        while True:
            started = time.monotonic()
            self._wake.clear()
            n = self._looks[0] + 1
            self._looks = (n, self._looks[1])
            events, rows, touched = await asyncio.to_thread(self._scan)
            self._publish(events, rows)
            async with self._looked:
                self._looks = (n, n)
                self._looked.notify_all()
            for sid in touched:
                self.streams.poke(sid)
            took = time.monotonic() - started
            self.interval = min(10.0, max(SCAN_S, 10 * took))  # a huge fleet: look less often
            with contextlib.suppress(TimeoutError):  # a new client may ask for a look sooner
                await asyncio.wait_for(self._wake.wait(), self.interval)
            if needed():
                unneeded_since = None
            elif unneeded_since is None:
                unneeded_since = time.monotonic()
            elif time.monotonic() - unneeded_since > GRACE_S:
                return

    def _publish(self, events: list[tuple[int, bytes]], rows: dict[str, dict[str, Any]]) -> None:
        if events or rows is not self.rows:
            self.rows = rows
        for seq, data in events:
            self.seq = seq
            self.feed.append(seq, data)
        self.ready.set()

    # ---------------------------------------------------------------- in a thread
    def _scan(self) -> tuple[list[tuple[int, bytes]], dict[str, dict[str, Any]], set[str]]:
        """(the events, the rows now, the sessions whose directory changed)."""
        if self._api is None:
            self._api = self.streams.new_api()
        api = self._api
        stamps = _stamps(api.state_dir / "sessions")
        old = self.rows
        first, self._first = self._first, False
        touched = {sid for sid, st in stamps.items() if self._stamps.get(sid) != st}
        touched |= self._stamps.keys() - stamps.keys()  # removed: their hubs say so
        busy = {sid for sid, r in old.items() if r["status"] in RUNS}
        self._stamps = stamps
        gone = [sid for sid in old if sid not in stamps]
        found = {sid: self._row(api, sid) for sid in sorted(touched | busy) if sid in stamps}
        fresh = {sid: got[0] if got else None for sid, got in found.items()}
        running = [got[1] for got in found.values() if got and got[1] is not None]
        for sid, says in api.launcher_says(running).items():  # one squeue for every job
            fresh[sid] = {**(fresh[sid] or {}), **says}
        if not fresh and not gone:
            return [], old, touched
        rows = {sid: r for sid, r in old.items() if sid not in gone}
        rows.update({sid: r for sid, r in fresh.items() if r is not None})
        for sid, r in fresh.items():
            if r is None:
                rows.pop(sid, None)
        _queue_places(rows)
        self._forget(rows)
        if first:  # the first look: clients start from a snapshot of it
            return [], rows, touched
        events = []
        seq = self.seq
        for sid in gone + [sid for sid, r in fresh.items() if r is None and sid in old]:
            seq += 1
            events.append((seq, frame("removed", {"id": sid}, self.event_id(seq))))
        for sid, r in rows.items():
            if old.get(sid) != r:
                seq += 1
                events.append((seq, frame("session", r, self.event_id(seq))))
        return events, rows, touched

    def _row(self, api: Zwarm, sid: str) -> tuple[dict[str, Any], Session | None] | None:
        """``sid``'s row as ``ls --json`` lists it, plus what its running turn does now
        (``activity``, ``live_tokens``), and the session if it runs (its launcher is asked
        what it shows, ``Zwarm.launcher_says``, once for all); None if it is gone."""
        from zwarm.errors import DamagedSession, SessionNotFound, ZwarmError
        from zwarm.model.rows import damaged_row, row

        try:
            s = api.get(sid)
        except SessionNotFound:
            return None
        except DamagedSession as e:
            return {**damaged_row(sid, e.problem), "activity": None, "live_tokens": None}, None
        except ZwarmError as e:
            return {**damaged_row(sid, str(e)), "activity": None, "live_tokens": None}, None
        r = row(s)
        r["activity"], r["live_tokens"] = self._live(api, s)
        return r, s if r["status"] in RUNS else None

    def _live(self, api: Zwarm, s: Session) -> tuple[str | None, int | None]:
        from zwarm.model import RUNS
        from zwarm.model.steps import line
        from zwarm.ops.following import tokens_so_far

        t = s.current
        if t is None or t.status not in RUNS:
            return None, None
        key = (s.id, t.n)
        watch = self._watches.get(key)
        if watch is None:
            watch = self._watches[key] = api.turn_watch(s, t.n)
        watch.poll()
        doing = oneline(line(watch.latest), 200) if watch.latest is not None else ""
        return doing or None, tokens_so_far(s, watch)

    def _forget(self, rows: dict[str, dict[str, Any]]) -> None:
        """Drop the watches of turns that no longer run."""
        for key in list(self._watches):
            r = rows.get(key[0])
            if r is None or r["status"] not in RUNS or r["turns"] != key[1]:
                del self._watches[key]


def _stamps(sessions: Any) -> dict[str, int]:
    """Each session directory's change time (a meta.json rewrite renames into it)."""
    out: dict[str, int] = {}
    try:
        entries = os.scandir(sessions)
    except OSError:
        return out
    with entries:
        for e in entries:
            if _SID.fullmatch(e.name):
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                out[e.name] = st.st_mtime_ns ^ (st.st_ino << 1)
    return out


def _queue_places(rows: dict[str, dict[str, Any]]) -> None:
    """Queued rows' places in the queue, as ``ls`` shows them (copied before they change:
    published rows are never changed)."""
    from zwarm.ops.listing import queue_places as places

    if not any(r["status"] == "queued" for r in rows.values()):
        return
    for sid, r in rows.items():
        if r["status"] == "queued":
            rows[sid] = {**r, "queue_position": None, "waiting_for": []}
    places(list(rows.values()))


class Streams:
    """The hubs and the fleet watcher of one server, and its clients' streams."""

    def __init__(self, new_api: Callable[[], Zwarm]) -> None:
        self.new_api = new_api
        self.shared: dict[str, Hub] = {}
        self.hubs: set[Hub] = set()
        self.fleet: Fleet | None = None
        self.clients = 0
        self._fleet_task: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- one session
    async def session(
        self, sid: str, first: bytes, after: Cursor | None, turn: int, until_idle: bool
    ) -> AsyncIterator[bytes]:
        """``first`` (the session now), then its events after ``after`` (None: from turn
        ``turn``'s start), live; with ``until_idle``, the stream ends when the session is."""
        want = after if after is not None else (turn, 0, 0, 0)
        self.clients += 1
        hub = self._hub(sid, want)
        try:
            yield first
            index = 0
            while True:
                try:  # events at or before ``want`` are skipped, even those posted later
                    index = max(index, hub.feed.after(want))
                    frames = hub.feed.take(index)
                except Behind:  # too slow for the shared buffer: a reader of its own, from here
                    self._release(hub)
                    hub = self._private(sid, want)
                    index = 0
                    continue
                if frames:
                    index += len(frames)
                    want = max(want, hub.feed.key_at(index - 1))
                    hub.taken(index, len(frames))
                    yield b"".join(frames)
                    continue
                if hub.feed.closed or (until_idle and hub.idle):
                    return
                if not await hub.feed.wait(index, HEARTBEAT_S):
                    yield HEARTBEAT
        finally:
            self.clients -= 1
            self._release(hub)

    def full(self) -> bool:
        """Whether ``MAX_CLIENTS`` streams are open (a new one is refused)."""
        return self.clients >= MAX_CLIENTS

    def _hub(self, sid: str, want: Cursor) -> Hub:
        hub = self.shared.get(sid)
        if hub is not None and hub.covers(want):
            hub.users += 1
            return hub
        if hub is not None:
            return self._private(sid, want)
        hub = Hub(self, sid, want[0], shared=True)
        self.shared[sid] = hub
        return self._start(hub)

    def _private(self, sid: str, want: Cursor) -> Hub:
        return self._start(Hub(self, sid, want[0], shared=False))

    def _start(self, hub: Hub) -> Hub:
        hub.users += 1
        self.hubs.add(hub)
        self._ensure_fleet()
        hub.poke()
        return hub

    def _release(self, hub: Hub) -> None:
        hub.users -= 1
        hub.last_used = time.monotonic()
        if hub.users > 0:
            return
        if not hub.shared:
            self.drop(hub)
            return
        asyncio.get_running_loop().call_later(GRACE_S, self._expire, hub)

    def _expire(self, hub: Hub) -> None:
        if hub.users == 0 and time.monotonic() - hub.last_used >= GRACE_S - 0.01:
            self.drop(hub)

    def drop(self, hub: Hub) -> None:
        hub.stop()
        self.hubs.discard(hub)
        if self.shared.get(hub.sid) is hub:
            del self.shared[hub.sid]

    def poke(self, sid: str) -> None:
        for hub in list(self.hubs):
            if hub.sid == sid:
                hub.poke()

    # ---------------------------------------------------------------- every session
    async def fleet_events(self, last: str | None) -> AsyncIterator[bytes]:
        """A snapshot of every session (or, resuming from ``last``, what was missed), then
        each change."""
        self.clients += 1
        fleet = self._ensure_fleet()
        fleet.users += 1
        try:
            await fleet.ready.wait()
            index = fleet.resume_index(last)
            while True:
                if index is None:
                    await fleet.fresh(timeout=max(10.0, 2 * fleet.interval))
                    rows, seq = fleet.snapshot()
                    index = fleet.feed.after(seq)
                    data = {"sessions": rows}
                    yield await asyncio.to_thread(frame, "snapshot", data, fleet.event_id(seq))
                try:
                    frames = fleet.feed.take(index)
                except Behind:
                    index = None
                    continue
                if frames:
                    index += len(frames)
                    yield b"".join(frames)
                elif not await fleet.feed.wait(index, HEARTBEAT_S):
                    yield HEARTBEAT
        finally:
            fleet.users -= 1
            self.clients -= 1

    def _ensure_fleet(self) -> Fleet:
        if self.fleet is None or self._fleet_task is None or self._fleet_task.done():
            self.fleet = fleet = Fleet(self)
            self._fleet_task = asyncio.get_running_loop().create_task(self._run_fleet(fleet))
        return self.fleet

    async def _run_fleet(self, fleet: Fleet) -> None:
        try:
            await fleet.run(lambda: fleet.users > 0 or bool(self.hubs))
        finally:
            if self.fleet is fleet:
                self.fleet = None

    # ---------------------------------------------------------------- the server
    async def close(self) -> None:
        for hub in list(self.hubs):
            self.drop(hub)
        task = self._fleet_task
        if task is not None and not task.done():
            task.cancel()
