"""``zwarm.serve.streams`` in-process: the feed's bounds, a client too slow for the shared
buffer resumed exactly by a reader of its own, and what an idle stream costs (no reader
thread, a heartbeat), on sessions made by the real ``zwarm`` with the fake agents."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support import wait_until
from tests.support.serve import codex_stream
from zwarm.serve import streams

pytestmark = pytest.mark.timeout(180)


def _events(chunks: list[bytes]) -> list[tuple[str, Any, str | None]]:
    out = []
    for block in b"".join(chunks).split(b"\n\n"):
        fields = dict(
            line.decode().split(": ", 1) for line in block.split(b"\n") if line and b": " in line
        )
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return out


async def _drain(gen: AsyncIterator[bytes]) -> list[bytes]:
    return [chunk async for chunk in gen]


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("zwarm-serve-")]


def test_feed_keeps_its_bounds_and_says_what_it_dropped() -> None:
    async def run() -> None:
        feed = streams.Feed(0, max_bytes=100, max_events=5)
        for k in range(1, 21):
            feed.append(k, b"x" * 10)
        assert feed.end == 20 and feed.end - feed.head == 5 and feed.floor == 15
        assert feed.after(15) == 15 and feed.after(18) == 18
        with pytest.raises(streams.Behind):
            feed.after(14)
        with pytest.raises(streams.Behind):
            feed.take(3)
        assert feed.take(17) == [b"x" * 10] * 3
        feed.append(21, b"y" * 95)  # over the byte limit: only it is kept
        assert feed.head == feed.end - 1 and feed.take(feed.head) == [b"y" * 95]
        assert await feed.wait(feed.end, 0.05) is False
        feed.close()
        assert await feed.wait(feed.end, 5) is True

    asyncio.run(run())


def test_cursor_ids_round_trip() -> None:
    for c in [(1, 0, 1, 0), (3, 10452, 2, 0), (2, 7, 1, 4)]:
        assert streams.parse_cursor(streams.cursor_id(c)) == c
    for bad in ["", "0.1.1", "1.2", "1.2.3.0", "a.b.c", "1.2.3.4.5", "-1.0.1", "1.2.3 x"]:
        assert streams.parse_cursor(bad) is None, bad


def test_a_client_too_slow_for_the_shared_buffer_still_gets_every_step(zw, monkeypatch) -> None:
    monkeypatch.setattr(streams, "HUB_EVENTS", 30)
    private = []
    real = streams.Streams._private
    monkeypatch.setattr(
        streams.Streams, "_private", lambda self, *a: private.append(a) or real(self, *a)
    )
    log = codex_stream(zw.tmp / "s.jsonl", 200)
    sid = zw.spawn("many", env_extra={"FAKE_REPLAY": str(log)})
    assert zw.wait(sid).returncode == 0

    async def run() -> tuple[list[bytes], list[bytes], int]:
        st = streams.Streams(zw.api)
        slow = st.session(sid, b"", None, 1, True)
        assert await slow.__anext__() == b""  # attached to the shared hub, then stalls
        fast = await _drain(st.session(sid, b"", None, 1, True))
        shared = st.shared[sid]
        assert shared.feed.end - shared.feed.head <= 30  # the buffer kept only the latest
        rest = await _drain(slow)
        hubs = len(st.hubs)
        await st.close()
        return fast, rest, hubs

    fast, rest, hubs = asyncio.run(run())
    want = [f"step {i}" for i in range(200)]
    for got in (fast, rest):
        steps = [d for e, d, _ in _events(got) if e == "step"]
        assert [s["text"] for s in steps] == want
    # the slow client fell behind the shared buffer and got a reader of its own (so may the
    # fast one: the buffer is tiny), which ended with it
    assert (sid, (1, 0, 0, 0)) in private
    assert hubs == 1


def test_an_idle_stream_costs_a_heartbeat_and_no_thread(zw, monkeypatch) -> None:
    monkeypatch.setattr(streams, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(streams, "GRACE_S", 0.5)
    sid = zw.spawn("hi", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0

    async def run() -> None:
        st = streams.Streams(zw.api)
        gen = st.session(sid, b"", None, 1, False)
        got: list[bytes] = []
        while not any(e == "idle" for e, _, _ in _events(got)):
            got.append(await asyncio.wait_for(gen.__anext__(), 30))
        deadline = time.monotonic() + 30
        while _reader_threads():  # the reader is gone once there is nothing to read
            assert time.monotonic() < deadline, "the reader thread did not end"
            await asyncio.sleep(0.05)
        beats = [await asyncio.wait_for(gen.__anext__(), 5) for _ in range(3)]
        assert beats == [streams.HEARTBEAT] * 3
        await gen.aclose()
        wait = time.monotonic() + 30
        while st.hubs or (st._fleet_task is not None and not st._fleet_task.done()):
            assert time.monotonic() < wait, "the hub and the watcher outlived their grace"
            await asyncio.sleep(0.1)
        assert st.clients == 0

    asyncio.run(run())
    wait_until(lambda: not _reader_threads(), timeout=10)
