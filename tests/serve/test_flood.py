"""``zwarm serve`` under a flood of connections that never send a request (``zwarm.serve.conns``):
authorised requests and open streams are still served, and idle connections are closed."""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator

import pytest

from tests.support import wait_until
from tests.support.serve import Server

pytestmark = pytest.mark.timeout(300)

_ESTABLISHED = 1  # Linux's TCP_ESTABLISHED, the first byte of TCP_INFO
FLOOD = 1100  # more than uvicorn's limit_concurrency=1000 that once made every request a 503


@contextlib.contextmanager
def _files(n: int) -> Iterator[None]:
    """This test process may hold ``n`` more open files (its soft limit raised for the test)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the open-files hard limit ({hard}) is below the {want} this test needs")
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _connect(srv: Server) -> socket.socket:
    return socket.create_connection((srv.host, srv.port), timeout=30)


def _closed(s: socket.socket) -> bool:
    """Whether the server closed or reset ``s``: its TCP state is no longer ESTABLISHED (what
    the server sent stays unread: a client that never reads is closed all the same)."""
    try:
        return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != _ESTABLISHED
    except OSError:
        return True


def test_idle_connections_cannot_starve_authorised_requests(zw, serve) -> None:
    srv: Server = serve(env_extra=zw.replay("codex_toolcall"))
    events = srv.stream("/api/events")  # an authorised stream, open before the flood
    assert events.next().event == "snapshot"
    flood: list[socket.socket] = []
    with _files(FLOOD + 16):
        try:
            for _ in range(FLOOD):  # connections that never send a byte
                flood.append(_connect(srv))
            slow = _connect(srv)  # one that sends its request head a line at a time
            flood.append(slow)
            slow.send(b"GET /api/info HTTP/1.1\r\nHost: " + srv.host.encode() + b"\r\n")

            started = time.monotonic()
            r = srv.get("/api/sessions", timeout=60)
            took = time.monotonic() - started
            assert r.status == 200, (r.status, r.body)
            assert r.json() == []
            print(f"an authorised request under {FLOOD} idle connections: {took:.3f} s")
            assert srv.get("/api/sessions", auth=False).status == 401

            last = [0.0]

            def every_idle_one_closed() -> bool:
                if time.monotonic() - last[0] > 1.0:  # a header line a second keeps it busy
                    last[0] = time.monotonic()
                    with contextlib.suppress(OSError):
                        slow.send(b"X-Slow: 1\r\n")
                return all(_closed(s) for s in flood)

            wait_until(every_idle_one_closed, timeout=90, message="the idle connections closed")
        finally:
            for s in flood:
                s.close()

    # the stream opened before the flood was never cut: it still tells what happens
    r = srv.post("/api/sessions", {"task": "after the flood", "name": "after"})
    assert r.status == 201, r.body
    sid = r.json()["id"]
    seen = events.until(lambda e: e.event == "session" and e.data.get("id") == sid)
    assert seen[-1].data["name"] == "after"
    assert srv.get("/api/sessions").status == 200
    assert "Traceback" not in srv.stderr()


def test_a_refused_request_closes_its_connection(server: Server) -> None:
    """A request without the token is answered 401 and its connection closed (it cannot be
    kept open for more tries, or to hold a place)."""
    with socket.create_connection((server.host, server.port), timeout=30) as s:
        head = f"GET /api/sessions HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n\r\n"
        s.sendall(head.encode())
        data = b""
        while chunk := s.recv(65536):  # until the server closes it
            data += chunk
        assert data.startswith(b"HTTP/1.1 401 ")
        assert b"connection: close" in data.lower()


def test_a_full_server_refuses_new_connections_and_never_runs_out_of_files(zw, serve) -> None:
    """Under an open-files limit the server keeps its connections below it: when every
    connection is busy (here: streams) a new one is answered 503 and closed; an idle one
    gives its place to a new one; a freed place is used again."""
    from zwarm.serve import conns

    total = conns.MIN_CONNECTIONS
    srv: Server = serve(files=conns.SPARE_FILES + total)
    streams = [srv.stream("/api/events") for _ in range(total)]
    for ev in streams:
        assert ev.next().event == "snapshot"
    r = srv.get("/api/sessions")
    assert r.status == 503 and "too many connections" in r.json()["error"]
    assert r.headers["connection"] == "close"

    streams.pop().close()
    wait_until(lambda: srv.get("/api/sessions").status == 200, message="a freed place")
    with _files(100):
        idle = [_connect(srv) for _ in range(100)]  # more than the one free place
        try:
            assert srv.get("/api/sessions").status == 200  # the oldest idle one made room
            assert sum(_closed(s) for s in idle) >= 99
        finally:
            for s in idle:
                s.close()
    for ev in streams:  # the busy connections were never closed to make room
        assert ev.conn.sock is not None and not _closed(ev.conn.sock)
    assert "out of system resource" not in srv.stderr()
    assert "Traceback" not in srv.stderr()


def _unread(srv: Server, requests: int) -> socket.socket:
    """A connection that asks for the page's script ``requests`` times at once (no token is
    needed for it) and never reads an answer."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect((srv.host, srv.port))
    head = f"GET /static/app.js HTTP/1.1\r\nHost: {srv.host}:{srv.port}\r\n\r\n".encode()
    s.sendall(head * requests)
    return s


def test_clients_without_the_token_cannot_hold_the_server_by_not_reading(zw, serve) -> None:
    """Connections that ask for the page's files (no token needed) and never read the answers
    keep a response waiting forever; without the token that holds no place for long: an
    authorised request is answered, and those connections are closed in time."""
    from zwarm.serve import conns

    srv: Server = serve(files=conns.SPARE_FILES + conns.MIN_CONNECTIONS)
    with _files(64):
        stuck = [_unread(srv, 400) for _ in range(conns.MIN_CONNECTIONS + 4)]
        try:
            r = srv.get("/api/sessions", timeout=60)
            assert r.status == 200, (r.status, r.body)
            wait_until(lambda: all(_closed(s) for s in stuck), timeout=90,
                       message="the connections that never read closed")  # fmt: skip
        finally:
            for s in stuck:
                s.close()
    assert "Traceback" not in srv.stderr()
