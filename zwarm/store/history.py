"""A session's turn history: finished turns moved out of ``meta.json`` into ``history.jsonl``.

Owns that file and the ``Archive`` summary that ``meta.json`` keeps of it, so that what a turn
costs its supervisor (each load and save of ``meta.json``) does not grow with the turns before
it: ``meta.json`` holds turn 1, the archive's sums, and the few latest turns.
Must stay true:
- only finished turns that are neither turn 1 nor among the latest ``KEEP`` are archived, in
  order, ``BATCH`` at a time; archived turns never change (``Store`` refuses a save that would
  change one);
- the history holds exactly ``archive.bytes`` valid bytes: what lies past them (a save that
  died between writing the history and ``meta.json``) is ignored by readers and cut off by
  the next append, so a crash at any instant loses nothing and duplicates nothing;
- the file is untrusted like ``meta.json``: read without following a link or blocking, every
  line decoded by the one schema, turn numbers checked; a bad history is a ``ValueError``
  with a one-line reason (the session is damaged for readers that need it; a listing, which
  does not, still shows it).
"""

from __future__ import annotations

import errno
import os
import time

import msgspec

from zwarm.model.records import Archive, Resumable, Session, Spend, Turn
from zwarm.model.status import FINISHED
from zwarm.system.files import CLOEXEC, NOFOLLOW, NotRegularFile, open_regular, write_all

NAME = "history.jsonl"
KEEP = 2  # the latest turns always kept in meta.json (a rerun, a native resume read them)
BATCH = 2  # turns archived at once: one append and fsync per BATCH turns
RECENT_S = 2 * 86400  # how long an archived turn's cost is kept for the day's spend

_turn = msgspec.json.Decoder(Turn)
_encoder = msgspec.json.Encoder()


def movable(s: Session) -> list[Turn]:
    """The turns the next save moves to the history: a prefix of the turns after turn 1 (and
    the archived ones), all finished, none among the latest ``KEEP``; none until ``BATCH``."""
    archived = s.archive.turns if s.archive else 0
    start = 1 if s.head_only else 1 + archived
    out: list[Turn] = []
    for t in s.turns[start : max(start, len(s.turns) - KEEP)]:
        if t.status not in FINISHED:
            break
        out.append(t)
    return out if len(out) >= BATCH else []


def archive(directory: str, s: Session) -> None:
    """Move ``movable(s)`` into ``directory``'s history and account for them in
    ``s.archive``. A session loaded without its history loses them from ``turns``; one loaded
    with it keeps them (``schema.encode`` leaves them out of ``meta.json``)."""
    moving = movable(s)
    if not moving:
        return
    was_head = s.head_only
    a = s.archive or Archive()
    data = b"".join(_encoder.encode(t) + b"\n" for t in moving)
    append(directory, a.bytes, data)
    for t in moving:
        _account(a, t)
    _prune(a, time.time())
    a.bytes += len(data)
    s.archive = a
    if was_head:
        del s.turns[1 : 1 + len(moving)]


def _account(a: Archive, t: Turn) -> None:
    a.turns += 1
    a.usage = a.usage + t.usage
    if t.started:
        if t.cost_usd is None:
            a.unpriced += 1
        else:
            a.cost_usd = round(a.cost_usd + t.cost_usd, 8)
            a.priced += 1
    if t.final_message:
        a.last_message = t.final_message
    a.changes.append(t.changes)
    if t.agent_session_id:
        a.resumes[t.agent_session_id] = Resumable(t.reported_usage, t.reported_cost_usd)
    if a.first_before is None and t.before:
        a.first_before = t.before
    if t.ended_at and t.cost_usd is not None and t.started:
        a.recent.append(Spend(t.ended_at, t.cost_usd, t.account))


def _prune(a: Archive, now: float) -> None:
    """Keep in ``recent`` only the costs of the last 2 days (a day's spend needs no more)."""
    from datetime import datetime

    def when(x: Spend) -> float:
        try:
            return datetime.fromisoformat(x.ended_at.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0

    a.recent = [x for x in a.recent if when(x) >= now - RECENT_S]


def append(directory: str, at: int, data: bytes) -> None:
    """Write ``data`` at byte ``at`` of ``directory``'s history (cutting off what lies past
    ``at``), durably. ``ValueError`` if the file is shorter than ``at`` (someone cut it)."""
    fd = _open(directory, os.O_WRONLY | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        if size < at:
            raise ValueError(f"{NAME} is shorter than meta.json says ({size} < {at} bytes)")
        if size != at:
            os.ftruncate(fd, at)
        os.lseek(fd, at, os.SEEK_SET)
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(directory: str, a: Archive) -> list[Turn]:
    """The archived turns (2 .. ``a.turns`` + 1), validated. ``ValueError`` if the file is
    missing, short, or any line or number is wrong."""
    if not a.turns:
        return []
    try:
        fd = _open(directory, os.O_RDONLY)
    except FileNotFoundError:
        raise ValueError(f"{NAME} is missing ({a.turns} turns are archived)") from None
    try:
        data = _read_exactly(fd, a.bytes)
    finally:
        os.close(fd)
    return _decode(data, a.turns)


def _decode(data: bytes, count: int) -> list[Turn]:
    lines = data.split(b"\n")
    if lines[-1] != b"" or len(lines) - 1 != count:
        raise ValueError(f"{NAME} holds {len(lines) - 1} turns where {count} are archived")
    out: list[Turn] = []
    for i, line in enumerate(lines[:-1]):
        try:
            t = _turn.decode(line)
        except (msgspec.DecodeError, RecursionError) as e:
            raise ValueError(f"{NAME} line {i + 1} is not a valid turn: {e}") from None
        if t.n != i + 2:
            raise ValueError(f"{NAME} line {i + 1} is turn {t.n}, not turn {i + 2}")
        out.append(t)
    return out


def _read_exactly(fd: int, size: int) -> bytes:
    if os.fstat(fd).st_size < size:
        raise ValueError(f"{NAME} is shorter than meta.json says")
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 22))
        if not chunk:
            raise ValueError(f"{NAME} is shorter than meta.json says")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _open(directory: str, flags: int) -> int:
    """``directory``/history.jsonl, neither a link nor anything but a regular file."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC)
    try:
        return open_regular(NAME, flags, dir_fd=dfd)
    except NotRegularFile as e:
        raise ValueError(f"{NAME} is not a regular file") from e
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError(f"{NAME} is a symbolic link") from None
        raise
    finally:
        os.close(dfd)
