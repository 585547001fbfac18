"""``zwarm.system.notify``: waiting on directories costs nothing while nothing changes.

With inotify a waiter does not wake up while its directories are idle and wakes when a file
in them is replaced (or, when asked, written); links are never watched through; the event
queue is read in bounded pieces and an overflow reports everything. Without inotify (forced)
the same interface polls with ``lstat`` and reports a directory only when a key changed."""

from __future__ import annotations

import os
import struct
import sys
import time
from pathlib import Path

import pytest

from zwarm.system import notify

pytestmark = pytest.mark.unit

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or notify._init() is None, reason="no inotify here"
)
MODES = [pytest.param(False, id="inotify", marks=linux_only), pytest.param(True, id="poll")]


def replace(path: Path, data: bytes) -> None:
    """As ``atomic_write`` does: a temp file renamed over the old one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.rename(tmp, path)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("poll", MODES)
def test_an_idle_directory_never_wakes_a_waiter(tmp_path: Path, poll: bool) -> None:
    (tmp_path / "meta.json").write_bytes(b"{}")
    with notify.Watcher(poll=poll) as w:
        w.add(tmp_path)
        assert w.mode == ("poll" if poll else "inotify")
        assert w.wait(1.2) == set()
        assert w.wakeups == 0


@pytest.mark.parametrize("poll", MODES)
def test_a_replaced_file_wakes_the_waiter_at_once(tmp_path: Path, poll: bool) -> None:
    meta = tmp_path / "meta.json"
    meta.write_bytes(b"{}")
    with notify.Watcher(poll=poll) as w:
        w.add(tmp_path)
        replace(meta, b'{"status": "completed"}')
        began = time.monotonic()
        assert w.wait(30) == {tmp_path}
        assert time.monotonic() - began < 10  # not the timeout
        assert w.wait(0.6) == set()  # reported once, then quiet again
        assert w.wakeups == 1


@pytest.mark.parametrize("poll", MODES)
def test_content_watches_see_a_log_grow(tmp_path: Path, poll: bool) -> None:
    log = tmp_path / "turn_1.jsonl"
    log.write_bytes(b"")
    with notify.Watcher(poll=poll) as w:
        w.add(tmp_path, content=True)
        with open(log, "ab") as f:
            f.write(b'{"type": "turn.started"}\n')
        assert w.wait(30) == {tmp_path}


@linux_only
def test_without_content_a_growing_file_does_not_wake(tmp_path: Path) -> None:
    log = tmp_path / "supervisor.log"
    log.write_bytes(b"")
    with notify.Watcher() as w:
        w.add(tmp_path)
        with open(log, "ab") as f:
            f.write(b"a line of stderr\n")
        assert w.wait(0.5) == set()


@pytest.mark.parametrize("poll", MODES)
def test_a_link_is_never_watched_through(tmp_path: Path, poll: bool) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    link = tmp_path / "session"
    link.symlink_to(real)
    with notify.Watcher(poll=poll) as w:
        w.add(link, content=True)
        assert w.mode == "poll"  # inotify refuses it (IN_ONLYDIR | IN_DONT_FOLLOW)
        replace(real / "meta.json", b"{}")
        (real / "more").write_bytes(b"x")
        assert w.wait(1.0) == set()


@pytest.mark.parametrize("poll", MODES)
def test_a_missing_directory_is_seen_when_it_appears(tmp_path: Path, poll: bool) -> None:
    later = tmp_path / "turns"
    with notify.Watcher(poll=poll) as w:
        w.add(later, content=True)
        assert w.wait(0.6) == set()
        later.mkdir()
        assert w.wait(30) == {later}


@linux_only
def test_a_removed_directory_is_reported_then_polled(tmp_path: Path) -> None:
    d = tmp_path / "sid"
    d.mkdir()
    with notify.Watcher() as w:
        w.add(d)
        d.rmdir()
        assert d in w.wait(30)
        assert w.mode == "poll"
        d.mkdir()
        assert w.wait(30) == {d}


def test_an_overflow_reports_every_path(tmp_path: Path) -> None:
    w = notify.Watcher(poll=True)
    w._wds = {1: tmp_path / "a", 2: tmp_path / "b"}
    w._by_path = {p: wd for wd, p in w._wds.items()}
    event = struct.pack("iIII", -1, notify.IN_Q_OVERFLOW, 0, 0)
    assert w._parse(event) == {tmp_path / "a", tmp_path / "b"}
    named = struct.pack("iIII", 2, notify.IN_MOVED_TO, 0, 16) + b"meta.json".ljust(16, b"\0")
    assert w._parse(named + struct.pack("iIII", 9, notify.IN_MODIFY, 0, 0)) == {tmp_path / "b"}
    assert w._parse(b"\x01\x02") == set()  # a truncated event is ignored, never read past


@linux_only
def test_a_flood_of_events_is_read_in_bounded_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    real_read = os.read

    def counting(fd: int, n: int) -> bytes:
        if fd == w.fd:  # os.read is global: count this watcher's reads only
            reads.append(n)
        return real_read(fd, n)

    with notify.Watcher() as w:
        w.add(tmp_path, content=True)
        log = tmp_path / "log"
        with open(log, "ab", buffering=0) as f:
            for _ in range(20_000):
                f.write(b"x")
        monkeypatch.setattr(os, "read", counting)
        assert w.wait(5) == {tmp_path}
    assert reads and len(reads) <= notify.MAX_READS
    assert all(n == notify.EVENT_BYTES for n in reads)


@pytest.mark.parametrize("poll", MODES)
def test_the_watcher_fd_is_closed(tmp_path: Path, poll: bool) -> None:
    before = open_fds()
    with notify.Watcher(poll=poll) as w:
        w.add(tmp_path)
    assert open_fds() == before


def test_the_environment_forces_polling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(notify.NO_INOTIFY, "1")
    with notify.Watcher() as w:
        w.add(tmp_path)
        assert w.fd is None and w.mode == "poll"


def test_polling_stats_only_and_reports_only_a_changed_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta = tmp_path / "meta.json"
    meta.write_bytes(b"{}")
    opened: list[str] = []
    real_open = os.open

    def counting(path: str, *a: object, **k: object) -> int:
        if str(path).startswith(str(tmp_path)):  # os.open is global: count this test's only
            opened.append(path)
        return real_open(path, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting)
    with notify.Watcher(poll=True) as w:
        w.add(tmp_path)
        assert w.wait(1.1) == set()
        replace(meta, b"{}")  # same size, same content: a new inode all the same
        assert w.wait(30) == {tmp_path}
    assert opened == []  # nothing read: lstat and the directory listing only


@pytest.mark.parametrize("poll", MODES)
def test_sessions_say_which_session_changed_and_when_a_full_look_is_due(
    tmp_path: Path, poll: bool
) -> None:
    dirs = {}
    for sid in ("a", "b"):
        (tmp_path / sid / "turns").mkdir(parents=True)
        (tmp_path / sid / "turns" / "turn_1.jsonl").write_bytes(b"")
        dirs[sid] = tmp_path / sid
    with notify.Sessions(dirs, turns=True, every=60, poll=poll) as watch:
        replace(dirs["b"] / "meta.json", b"{}")
        assert watch.pause(30) == {"b"} and not watch.due
        with open(dirs["a"] / "turns" / "turn_1.jsonl", "ab") as f:
            f.write(b"{}\n")
        assert watch.pause(30) == set() and watch.woke  # only a log grew
        assert watch.pause(0.3) == set() and not watch.woke  # timed out
    with notify.Sessions(dirs, every=0.3, poll=poll) as watch:
        assert watch.pause() == {"a", "b"} and watch.due and watch.changed == set()
