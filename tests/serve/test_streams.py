"""``zwarm serve``'s live streams over a real server on 127.0.0.1: a session's steps resumed
exactly after dropped connections (and on a restarted server) while a fake agent writes
10,000 events, 50 clients at once, follow-ups and removal, and the fleet's event stream."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until
from tests.support.serve import Event, Events, Server, codex_stream

pytestmark = pytest.mark.timeout(300)


def _cursor(eid: str) -> tuple[int, ...]:
    return tuple(int(x) for x in eid.split("."))


def _steps(events: list[Event]) -> list[Event]:
    return [e for e in events if e.event == "step"]


def _read_steps(ev: Events, n: int) -> list[Event]:
    """The next ``n`` step events (other events skipped)."""
    got: list[Event] = []
    while len(got) < n:
        e = ev.next(60)
        assert e is not None, f"the stream ended after {len(got)} steps"
        if e.event == "step":
            got.append(e)
    return got


def test_resume_after_drops_and_a_restart_while_10000_events_stream(zw, serve) -> None:
    """Two dropped connections while the agent writes (resumed from the server's buffer) and
    a server restart (resumed by reading the turn again): every step once, in order."""
    n = 10_000
    log = codex_stream(zw.tmp / "many.jsonl", n)
    env = {"FAKE_REPLAY": str(log), "FAKE_LINE_DELAY": "0.0005"}
    first = serve(env_extra=env)
    sid = first.post("/api/sessions", {"task": "many"}).json()["id"]
    path = f"/api/sessions/{sid}/stream?until_idle=1"

    ev = first.stream(path)
    opening = ev.next()
    assert opening is not None and opening.event == "session" and opening.data["id"] == sid
    got = _read_steps(ev, 1500)
    ev.close()  # dropped mid-stream
    running_at_drop = zw.meta(sid)["status"] == "running"

    ev = first.stream(path, last_id=got[-1].id)
    assert ev.next().event == "session"  # type: ignore[union-attr]
    got += _read_steps(ev, 2500)
    ev.close()
    first.stop()  # the server goes away; the session goes on

    second = serve(env_extra=env)
    assert second.token == first.token
    ev = second.stream(path, last_id=got[-1].id)
    rest = ev.rest(timeout=180)
    assert rest[0].event == "session"
    got += _steps(rest)
    assert rest[-1].event == "idle"

    texts = [e.data["text"] for e in got]
    assert len(texts) == n and texts == [f"step {i}" for i in range(n)]
    ids = [_cursor(e.id or "") for e in got]
    assert ids == sorted(ids) and len(set(ids)) == n
    assert running_at_drop, "the first drop should happen while the agent writes"
    api_steps = second.get(f"/api/sessions/{sid}/trajectory").json()["steps"]
    assert [s["text"] for s in api_steps] == texts


def test_fifty_clients_stream_at_once(zw, serve) -> None:
    n = 2_000
    log = codex_stream(zw.tmp / "some.jsonl", n, text="line")
    srv = serve(env_extra={"FAKE_REPLAY": str(log), "FAKE_LINE_DELAY": "0.001"})
    sid = srv.post("/api/sessions", {"task": "some"}).json()["id"]
    results: dict[int, Any] = {}

    def session_client(k: int) -> None:
        try:
            ev = _open(srv, f"/api/sessions/{sid}/stream?until_idle=1")
            results[k] = [e.data["text"] for e in _steps(ev.rest(timeout=180))]
        except BaseException as e:  # reported below
            results[k] = e

    def fleet_client(k: int) -> None:
        try:
            ev = _open(srv, "/api/events")
            seen = ev.until(lambda e: _done_in(e, sid), timeout=180)
            results[k] = seen[-1].event
        except BaseException as e:
            results[k] = e

    threads = [threading.Thread(target=session_client, args=(k,)) for k in range(40)]
    threads += [threading.Thread(target=fleet_client, args=(k,)) for k in range(40, 50)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    took = time.monotonic() - started
    expected = [f"line {i}" for i in range(n)]
    for k in range(40):
        assert results.get(k) == expected, (k, type(results.get(k)), str(results.get(k))[:300])
    for k in range(40, 50):
        assert results.get(k) in ("session", "snapshot"), (k, results.get(k))
    print(f"50 clients, {n} steps each to 40 of them: {took:.1f} s")


def _open(srv: Server, path: str) -> Events:
    return srv.stream(path, timeout=120)


def _done_in(e: Event, sid: str) -> bool:
    """Whether event ``e`` of the fleet stream says session ``sid`` completed."""
    rows = e.data["sessions"] if e.event == "snapshot" else [e.data] if e.event == "session" else []
    return any(r["id"] == sid and r["status"] == "completed" for r in rows)


def test_a_session_stream_follows_follow_ups_until_removed(zw, serve) -> None:
    srv = serve(env_extra=zw.replay("codex_toolcall"))
    sid = srv.post("/api/sessions", {"task": "one", "name": "follow"}).json()["id"]
    ev = srv.stream("/api/sessions/follow/stream")
    first = ev.until(lambda e: e.event == "idle")
    kinds = [e.event for e in first]
    assert kinds[0] == "session" and kinds.count("step") == 4 and "turn" in kinds
    turn_events = [e.data for e in first if e.event == "turn"]
    assert [(t["n"], t["phase"]) for t in turn_events] == [(1, "started"), (1, "ended")]
    assert turn_events[1]["turn"]["status"] == "completed"

    r = srv.post(f"/api/sessions/{sid}/messages", {"message": "two"})
    assert r.json()["turn"] == 2
    second = ev.until(lambda e: e.event == "idle", timeout=60)  # woken by the change
    steps = _steps(second)
    assert len(steps) == 4 and all(s.data["turn"] == 2 for s in steps)
    assert [s.data["seq"] for s in steps] == [0, 1, 2, 3]

    assert srv.delete(f"/api/sessions/{sid}").status == 200
    last = ev.rest(timeout=60)
    assert last and last[-1].event == "removed" and last[-1].data == {"id": sid}


def test_a_stream_from_a_later_turn_and_after_an_id(zw, serve) -> None:
    srv = serve(env_extra=zw.replay("codex_toolcall"))
    sid = srv.post("/api/sessions", {"task": "one"}).json()["id"]
    wait_until(lambda: zw.meta(sid)["status"] == "completed")
    srv.post(f"/api/sessions/{sid}/messages", {"message": "two"})
    wait_until(lambda: len(zw.meta(sid)["turns"]) == 2 and zw.meta(sid)["status"] == "completed")

    every = srv.stream(f"/api/sessions/{sid}/stream?until_idle=1").rest()
    steps = _steps(every)
    assert [s.data["turn"] for s in steps] == [1] * 4 + [2] * 4
    only2 = _steps(srv.stream(f"/api/sessions/{sid}/stream?turn=2&until_idle=1").rest())
    assert [s.data for s in only2] == [s.data for s in steps[4:]]
    later = f"/api/sessions/{sid}/stream?after={steps[5].id}&until_idle=1"
    after = _steps(srv.stream(later).rest())
    assert [s.id for s in after] == [s.id for s in steps[6:]]


def test_the_fleet_stream_resumes_exactly(zw, serve) -> None:
    hold = zw.tmp / "hold"
    hold.touch()
    srv = serve(env_extra=zw.gated(hold, **zw.replay("codex_simple")))
    ev = srv.stream("/api/events")
    snap = ev.next()
    assert snap is not None and snap.event == "snapshot" and snap.data == {"sessions": []}

    sid = srv.post("/api/sessions", {"task": "hi"}).json()["id"]
    running = ev.until(lambda e: e.event == "session" and e.data["status"] == "running")
    assert running[-1].data["id"] == sid and "activity" in running[-1].data
    ev.close()
    missed_from = running[-1].id
    hold.unlink()  # the turn ends while nobody watches
    wait_until(lambda: zw.meta(sid)["status"] == "completed")
    time.sleep(2.5)  # the watcher looks every second: the change is in its feed

    again = srv.stream("/api/events", last_id=missed_from)
    first = again.next()
    assert first is not None and first.event == "session"  # no snapshot: only what was missed
    assert first.data["id"] == sid and first.data["status"] == "completed"
    assert _cursor_f(first.id) > _cursor_f(missed_from)

    stale = srv.stream("/api/events", last_id="00000000.5")  # another server's id
    s = stale.next()
    assert s is not None and s.event == "snapshot"
    assert [r["id"] for r in s.data["sessions"]] == [sid]

    srv.delete(f"/api/sessions/{sid}")
    gone = again.until(lambda e: e.event == "removed")
    assert gone[-1].data == {"id": sid}


def _cursor_f(eid: str | None) -> int:
    return int((eid or "x.0").split(".")[1])


def test_stream_errors(server: Server, zw) -> None:
    r = server.get("/api/sessions/nothere/stream")
    assert r.status == 404 and r.json()["type"] == "SessionNotFound"
    assert server.get("/api/sessions/x/stream?after=1.2").status == 422
    assert server.get("/api/sessions/x/stream?turn=-1").status == 422


def test_the_stream_ids_name_turn_offset_and_rank(zw, serve, tmp_path: Path) -> None:
    """A step's id is TURN.OFFSET.RANK: the offset is where its line ends in the turn log."""
    srv = serve(env_extra=zw.replay("codex_toolcall"))
    sid = srv.post("/api/sessions", {"task": "one"}).json()["id"]
    steps = _steps(srv.stream(f"/api/sessions/{sid}/stream?until_idle=1").rest())
    log = zw.turn_file(sid, 1).read_bytes()
    ends = {i + 1 for i, b in enumerate(log) if b == ord("\n")}
    for s in steps:
        turn, offset, rank = _cursor(s.id or "")
        assert turn == 1 and offset in ends and rank == 1


def test_a_new_clients_snapshot_holds_the_sessions_made_since_the_last_look(zw, serve) -> None:
    """The fleet watcher looks every second and keeps its rows between looks; a client that
    connects just after a session was made must not get the older look's rows as its snapshot
    (the dashboard would say "No sessions yet", then draw the rows): its snapshot waits for a
    look that started after it connected. Five times, each a session made, then a client at
    once (the old code answered from the last look nearly every time)."""
    srv = serve(env_extra=zw.replay("codex_simple"))
    watching = srv.stream("/api/events")  # keeps the watcher running between the clients
    first = watching.next()
    assert first is not None and first.event == "snapshot" and first.data == {"sessions": []}
    made: list[str] = []
    for i in range(5):
        made.append(srv.post("/api/sessions", {"task": f"task {i}"}).json()["id"])
        client = srv.stream("/api/events")
        snap = client.next()
        assert snap is not None and snap.event == "snapshot"
        assert {r["id"] for r in snap.data["sessions"]} == set(made), i
        client.close()
    watching.close()
