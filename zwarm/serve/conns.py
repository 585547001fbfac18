"""What a client may hold of ``zwarm serve`` before it has sent a request: connection limits.

Owns ``Gate`` (the server's open connections, and which of them are idle) and ``protocol``
(uvicorn's h11 protocol class run under a gate). uvicorn alone keeps a connection that never
sends a request open forever, and counts it against ``limit_concurrency``: 1,100 such
connections, which any local program can open without the token, made every request a 503.
A connection is *idle* from when it opens, and again from when a response ends, until a whole
request head has arrived; it is *busy* while a request is being answered (a stream: as long
as it is open). Must stay true:
- an idle connection is closed ``HEAD_TIMEOUT_S`` after it became idle, however it sends its
  bytes (a request head dribbled a line at a time is no request);
- one client address holds at most ``PER_CLIENT`` idle connections: a new one closes that
  address's oldest idle one, not itself (a client on a flood's address, as every local
  program is on loopback, still gets in and is answered);
- at most ``Gate.total`` connections are open (below the open-files limit, so ``accept``
  never fails): a new one closes the oldest idle one of any address, or, if every one is
  busy, is answered 503 and closed;
- a busy connection is never closed by these rules: authorised requests and open streams
  are served whatever idle connections arrive. A refused request (401, 403) closes its
  connection (``auth.Guard`` says ``Connection: close``), so without the token a client
  holds a busy connection only while the page's own files are sent;
- everything here runs on the server's event loop (no locks).
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT_S = 10.0  # an idle connection's whole request head must arrive within this
PER_CLIENT = 64  # idle connections one client address may hold
MAX_CONNECTIONS = 1000  # connections open at once, at most
MIN_CONNECTIONS = 16  # ... and at least, however low the open-files limit
SPARE_FILES = 256  # open files kept for everything else (logs read, the state dir, threads)
_BUSY = b'{"error": "the server has too many connections open; try again later"}'
_BUSY_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_BUSY), _BUSY)
)


def total_for_files() -> int:
    """How many connections may be open at once under this process's open-files limit."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, soft - SPARE_FILES))


class Gate:
    """The connections of one server: all open ones, and the idle ones oldest first."""

    def __init__(
        self, total: int, head_timeout: float = HEAD_TIMEOUT_S, per_client: int = PER_CLIENT
    ) -> None:
        self.total = total
        self.head_timeout = head_timeout
        self.per_client = per_client
        self.open: set[_Limited] = set()
        self.idle: dict[_Limited, None] = {}  # in the order they became idle
        self.idle_of: dict[str, dict[_Limited, None]] = {}

    def opened(self, conn: _Limited) -> bool:
        """Count a new connection (closing idle ones to make room); False: refuse it."""
        mine = self.idle_of.get(conn.client_key)
        if mine is not None and len(mine) >= self.per_client:
            next(iter(mine)).drop()
        if len(self.open) >= self.total:
            if not self.idle:
                return False
            next(iter(self.idle)).drop()
        self.open.add(conn)
        self.set_idle(conn)
        return True

    def set_idle(self, conn: _Limited) -> None:
        self.set_busy(conn)
        self.idle[conn] = None
        self.idle_of.setdefault(conn.client_key, {})[conn] = None

    def set_busy(self, conn: _Limited) -> None:
        if conn in self.idle:
            del self.idle[conn]
            mine = self.idle_of[conn.client_key]
            del mine[conn]
            if not mine:
                del self.idle_of[conn.client_key]

    def closed(self, conn: _Limited) -> None:
        if conn in self.open:
            self.set_busy(conn)
            self.open.discard(conn)


class _Limited(H11Protocol):
    """uvicorn's h11 protocol under ``gate``'s rules (``protocol`` makes the class)."""

    gate: Gate
    client_key: str = ""
    _timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.client_key = self.client[0] if self.client else ""
        if not self.gate.opened(self):
            transport.write(_BUSY_503)
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._look()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request at once
        if self._waiting():
            self.gate.set_idle(self)
            self._arm()
        else:
            self._look()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.gate.closed(self)
        super().connection_lost(exc)

    def drop(self) -> None:
        """Close this idle connection (its time is up, or another needs its place)."""
        self._disarm()
        self.gate.closed(self)
        if not self.transport.is_closing():
            self.transport.close()

    def _waiting(self) -> bool:
        """Whether no request is being answered (none came yet, or the last one's response
        is complete): uvicorn's own test before it closes a connection at shutdown."""
        return self.cycle is None or self.cycle.response_complete

    def _look(self) -> None:
        if self._timer is not None and not self._waiting():
            self._disarm()
            self.gate.set_busy(self)

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.gate.head_timeout, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self._waiting():
            self.drop()
        else:
            self.gate.set_busy(self)


def protocol(gate: Gate) -> type[Any]:
    """uvicorn's h11 protocol class under ``gate`` (``uvicorn.Config(http=...)``)."""
    return type("ZwarmH11Protocol", (_Limited,), {"gate": gate})


__all__ = ["HEAD_TIMEOUT_S", "PER_CLIENT", "Gate", "protocol", "total_for_files"]
