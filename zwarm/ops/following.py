"""Following turn logs while they grow: an API operation the live views share
(``trajectory -f``, ``top``, the progress shown while ``wait`` blocks, ``zwarm serve``'s
streams, through ``Zwarm.follow``, ``Zwarm.turn_watch``, ``Zwarm.turn_log``).

Owns incremental reading: every reader here keeps a byte offset into the turn log and reads
only what was appended since, so a refresh costs what the agent wrote since the last one,
never a re-parse of the whole log. Two shapes:
- ``LiveLog`` is a growing log as a blocking binary file: ``readline`` waits for a complete
  line (or the end of the turn), so the agent's own parser (``Agent.steps``) streams over it
  with its state intact; ``follow`` chains it across a session's turns, queued ones included;
- ``TurnWatch`` never blocks: each ``poll`` parses the lines appended since the last one and
  keeps the latest step and the tokens reported so far.
Must stay true: ``follow`` sleeps until the session's files change (``system.notify``),
never on a short timer, and reads meta.json again only when it changed (or every
``ops.waiting.WAKE_S``: a process that died writes nothing); it knows no agent's format
(parsing is the agent's, through its manager); it opens logs with ``open_read`` (no link
followed, never blocking on a FIFO); memory is bounded by the parser's line cap plus one
poll's read (``POLL_BYTES``) whatever the log's size.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zwarm.model import Session, Usage
from zwarm.model.steps import ended_turn

if TYPE_CHECKING:
    from zwarm.agents.base import UsageFeed
    from zwarm.api import Zwarm
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.model.steps import Step
    from zwarm.system.notify import Sessions

READ_BYTES = 1 << 20  # what LiveLog reads at once
POLL_BYTES = 4 << 20  # what one TurnWatch.poll parses at most (it catches up over polls)
TAIL_BYTES = 256 << 10  # a watch started on a long log shows its latest step from this tail
ENDED_EVERY_S = 0.5  # how often a waiting LiveLog asks whether its turn has ended


class LiveLog:
    """A turn log that may still grow, read as a binary file. While the turn runs,
    ``readline`` returns complete lines only, waiting for them; once ``ended()`` is true it
    returns what is left, then b"" (end of file). With ``watch`` (the session's files,
    ``runtime.notify``) it sleeps until they change instead of every ``poll_s``, and asks
    ``ended()`` only when the session's meta.json may have changed."""

    def __init__(
        self,
        path: Path,
        ended: Callable[[], bool],
        poll_s: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
        watch: Sessions | None = None,
    ) -> None:
        self.path = path
        self.pos = 0
        self._ended = ended
        self._poll = poll_s
        self._sleep = sleep
        self._buf = bytearray()
        self._fd: int | None = None
        self._done = False
        self._asked = 0.0
        self._watch = watch
        self._look = True  # (with a watch) meta.json may have changed since ended() was asked

    @property
    def done(self) -> bool:
        """The turn is over and its log read to the end: a step still ``in_progress`` now
        never finished (``zwarm.model.steps.ended_turn``)."""
        return self._done

    def readline(self, size: int = -1) -> bytes:
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0 and (size < 0 or nl < size):
                return self._take(nl + 1)
            if 0 <= size <= len(self._buf):
                return self._take(size)
            if self._read():
                continue
            if self._done or self._turn_over():
                if self._read():  # written before the turn was recorded as ended
                    continue
                self._done = True
                return self._take(len(self._buf))
            self._pause()

    def _pause(self) -> None:
        if self._watch is None:
            self._sleep(self._poll)
        elif self._watch.pause():
            self._look = True

    def _take(self, n: int) -> bytes:
        line = bytes(self._buf[:n])
        del self._buf[:n]
        return line

    @property
    def consumed(self) -> int:
        """Bytes of the log ``readline`` has returned so far: where its next line starts
        (``zwarm serve`` names each step by this offset)."""
        return self.pos - len(self._buf)

    def _turn_over(self) -> bool:
        if self._watch is not None:
            look, self._look = self._look, False
            return look and self._ended()
        now = time.monotonic()
        if now - self._asked < ENDED_EVERY_S:
            return False
        self._asked = now
        return self._ended()

    def _read(self) -> bool:
        if self._fd is None:
            self._fd = _open(self.path)
            if self._fd is None:
                return False
        chunk = os.pread(self._fd, READ_BYTES, self.pos)
        self.pos += len(chunk)
        self._buf += chunk
        return bool(chunk)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _open(path: Path) -> int | None:
    from zwarm.system.files import open_read

    try:
        return open_read(path)
    except OSError:
        return None  # not there yet (or not a regular file: then never read)


@dataclass
class TurnEnd:
    """``follow`` yields this after the last step of each turn: the session as it ended."""

    session: Session
    n: int


def follow(
    api: Zwarm, sid: str, only_turn: int | None = None, poll_s: float = 0.1
) -> Iterator[Step | TurnEnd]:
    """The session's steps (numbered as ``Zwarm.trajectory`` numbers them), live: every turn
    from the first (or only ``only_turn``), then each turn that starts after them, until the
    session is idle (finished: no turn active, none to come). A ``TurnEnd`` follows each turn.
    Between writes it sleeps until the session's files change (``runtime.notify``)."""
    from zwarm.ops.waiting import WAKE_S
    from zwarm.system.notify import Sessions

    with Sessions({sid: api.store.session_dir(sid)}, turns=True, every=WAKE_S) as watch:
        yield from _follow(api, sid, only_turn, poll_s, watch)


def _follow(
    api: Zwarm, sid: str, only_turn: int | None, poll_s: float, watch: Sessions
) -> Iterator[Step | TurnEnd]:
    s = api.get(sid)
    mgr = api.reader(s.adapter)
    n, index = only_turn or 1, 0
    while True:
        if n > s.count:
            if only_turn is not None or s.status.finished:
                return
            watch.pause()  # between turns: the next one is about to begin
            s = api.get(sid)
            continue
        log = LiveLog(api.turn_log(sid, n), _ender(api, sid, n), poll_s, watch=watch)
        try:
            for step in mgr.iter_steps(log):
                if log.done:
                    ended_turn(step)
                step["turn"], step["index"] = n, index
                index += 1
                yield step
        finally:
            log.close()
        s = api.get(sid)
        yield TurnEnd(s, n)
        if only_turn is not None:
            return
        n += 1


def _ender(api: Zwarm, sid: str, n: int) -> Callable[[], bool]:
    def ended() -> bool:
        s = api.get(sid, history=False)  # asked at every wake-up: no archived turn read
        t = s.turn(n)
        return n > s.count or t is None or t.status.finished

    return ended


def turn_watch(api: Zwarm, s: Session, n: int | None = None) -> TurnWatch:
    """A ``TurnWatch`` on turn ``n`` of ``s`` (default: its latest), read by its agent's
    parser; nothing read until its first ``poll``."""
    t = s.current if n is None else s.turn(n)
    number = t.n if t is not None else (n or s.count)
    return TurnWatch(api.reader(s.adapter), api.turn_log(s.id, number))


class TurnWatch:
    """What a running turn is doing now, read incrementally: the latest step and the tokens
    its log reported so far. ``poll`` reads what was appended since the last call; each line
    goes once to the agent's live usage reader (``Agent.live_usage``), and the turn's final
    usage is taken from its terminal event when it comes."""

    def __init__(self, mgr: BaseSessionManager, path: Path) -> None:
        self.mgr = mgr
        self.path = path
        self.pos: int | None = None  # None: not started (the log may not exist yet)
        self.latest: Step | None = None
        self.final: Usage | None = None  # the terminal event's: the whole turn's
        self.feed: UsageFeed | None = _live_usage(mgr)
        self._skipping = False

    @property
    def usage(self) -> Usage | None:
        """This turn's usage as its log reported it so far (None: nothing reported yet)."""
        if self.final is not None:
            return self.final
        return self.feed.usage if self.feed is not None else None

    def poll(self) -> None:
        fd = _open(self.path)
        if fd is None:
            return
        try:
            size = os.fstat(fd).st_size
            if self.pos is None:
                self._start(fd, size)
            elif size > self.pos:
                data = os.pread(fd, min(size - self.pos, POLL_BYTES), self.pos)
                self._take(data)
        finally:
            os.close(fd)

    def _start(self, fd: int, size: int) -> None:
        """The first look at a log: its usage from one pass over all of it, its latest step
        from its tail only."""
        self.pos = 0
        if size > TAIL_BYTES:
            start = size - TAIL_BYTES
            tail = os.pread(fd, TAIL_BYTES, start)
            cut = tail.find(b"\n") + 1  # the tail starts at a line boundary
            self.pos = start + cut
            if self.feed is not None:
                with os.fdopen(os.dup(fd), "rb") as f:
                    self._feed(_Bounded(f, self.pos))
            self._take(tail[cut:])
            return
        self._take(os.pread(fd, size, 0))

    def _take(self, data: bytes) -> None:
        assert self.pos is not None
        if self._skipping:  # the rest of a line longer than one poll reads: never parsed
            nl = data.find(b"\n") + 1
            self.pos += nl or len(data)
            self._skipping = nl == 0
            data = data[nl:] if nl else b""
        end = data.rfind(b"\n") + 1  # complete lines only; the rest is read again next time
        if end == 0:
            if len(data) >= POLL_BYTES:
                self.pos += len(data)
                self._skipping = True
            return
        self.pos += end
        lines = data[:end].splitlines(keepends=True)
        self._feed(lines)
        o = self.mgr.scan_outcome(lines)
        if o.status is not None and o.usage is not None:
            self.final = o.usage
        for step in self.mgr.iter_steps(_last_bytes(lines, TAIL_BYTES)):
            if step.get("kind") != "reasoning" or self.latest is None:
                self.latest = step

    def _feed(self, source: Any) -> None:
        from zwarm.agents import jsonl

        if self.feed is None:
            return
        for line in jsonl.read_lines(source):
            if isinstance(line, bytes):
                try:
                    self.feed.feed(line)
                except Exception:  # a plugin's reader: the usage shown stays as it was
                    self.feed = None
                    return


def _live_usage(mgr: BaseSessionManager) -> UsageFeed | None:
    try:
        return mgr.agent.live_usage()
    except Exception:  # a plugin's: no live usage, never a broken view
        return None


def _last_bytes(lines: list[bytes], limit: int) -> list[bytes]:
    out: list[bytes] = []
    size = 0
    for line in reversed(lines):
        size += len(line)
        if size > limit and out:
            break
        out.append(line)
    return out[::-1]


class _Bounded:
    """A binary file read only up to offset ``end`` (the part of a log already written)."""

    def __init__(self, f: Any, end: int) -> None:
        self.f = f
        self.left = end

    def readline(self, size: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        limit = self.left if size < 0 else min(size, self.left)
        line: bytes = self.f.readline(limit)
        self.left -= len(line)
        return line


def tokens_so_far(s: Session, watch: TurnWatch | None) -> int:
    """The session's tokens: every turn's as recorded, but for a turn still active what its
    log reported so far when that is known (a native resume's cumulative report made a
    delta)."""
    t = s.current
    active = t is not None and not t.status.finished
    total = s.spent()[0] - (t.usage.total_tokens if t is not None and active else 0)
    if t is None or not active:
        return total
    live = watch.usage if watch is not None else None
    if live is None:
        return total + t.usage.total_tokens
    if t.context == "native" and watch is not None and watch.mgr.usage_cumulative_on_resume:
        prev = s.resumed(t, t.agent_session_id or s.agent_session_id)
        if prev is not None and prev.reported_usage is not None:
            live = live.minus(prev.reported_usage)
    return total + live.total_tokens
