"""What a client may hold of ``zwarm serve`` without the access token: connection limits.

Owns ``Gate`` (the server's open connections, and which of them are unproven) and ``protocol``
(uvicorn's h11 protocol class run under a gate). uvicorn alone keeps a connection that never
sends a request open forever, and counts it against ``limit_concurrency``: 1,100 such
connections, which any local program can open without the token, made every request a 503.
A connection is *proven* while it answers a request that carries the access token (a stream:
as long as it is open); it is *unproven* otherwise: from when it opens, and again from when an
authorised response ends, while it sends a request head, answers a request without the token
(the page's own files, a refusal) or waits. Must stay true:
- an unproven connection is closed ``HEAD_TIMEOUT_S`` after it became unproven, whatever it
  sends meanwhile (a request head dribbled a line at a time, requests for the page's files
  whose answers it never reads);
- one client address holds at most ``PER_CLIENT`` unproven connections: a new one closes that
  address's oldest unproven one, not itself (a client on a flood's address, as every local
  program is on loopback, still gets in and is answered);
- at most ``Gate.total`` connections are open (below the open-files limit, so ``accept``
  never fails): a new one closes the oldest unproven one of any address, or, if every one is
  proven, is answered 503 and closed;
- a proven connection is never closed by these rules: authorised requests and open streams
  are served whatever arrives without the token. A refused request (401, 403) also closes its
  connection (``auth.Guard`` says ``Connection: close``). Whether a request carries the token
  is ``auth.Guard.carries_token``'s answer (one check, the Guard's);
- everything here runs on the server's event loop (no locks).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import struct
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT_S = 10.0  # an idle connection's whole request head must arrive within this
PER_CLIENT = 64  # idle connections one client address may hold
MAX_CONNECTIONS = 1000  # connections open at once, at most
MIN_CONNECTIONS = 16  # ... and at least, however low the open-files limit
SPARE_FILES = 256  # open files kept for everything else (logs read, the state dir, threads)
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() resets the connection
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
    """The connections of one server: all open ones, and the unproven ones oldest first."""

    def __init__(
        self,
        total: int,
        authorised: Callable[[list[tuple[bytes, bytes]]], bool],
        head_timeout: float = HEAD_TIMEOUT_S,
        per_client: int = PER_CLIENT,
    ) -> None:
        self.total = total
        self.authorised = authorised  # whether a request's headers carry the access token
        self.head_timeout = head_timeout
        self.per_client = per_client
        self.open: set[_Limited] = set()
        self.unproven: dict[_Limited, None] = {}  # in the order they became unproven
        self.unproven_of: dict[str, dict[_Limited, None]] = {}

    def opened(self, conn: _Limited) -> bool:
        """Count a new connection (closing unproven ones to make room); False: refuse it."""
        mine = self.unproven_of.get(conn.client_key)
        if mine is not None and len(mine) >= self.per_client:
            next(iter(mine)).drop()
        if len(self.open) >= self.total:
            if not self.unproven:
                return False
            next(iter(self.unproven)).drop()
        self.open.add(conn)
        self.set_unproven(conn)
        return True

    def set_unproven(self, conn: _Limited) -> None:
        self.set_proven(conn)
        self.unproven[conn] = None
        self.unproven_of.setdefault(conn.client_key, {})[conn] = None

    def set_proven(self, conn: _Limited) -> None:
        if conn in self.unproven:
            del self.unproven[conn]
            mine = self.unproven_of[conn.client_key]
            del mine[conn]
            if not mine:
                del self.unproven_of[conn.client_key]

    def closed(self, conn: _Limited) -> None:
        if conn in self.open:
            self.set_proven(conn)
            self.open.discard(conn)


class _Limited(H11Protocol):
    """uvicorn's h11 protocol under ``gate``'s rules (``protocol`` makes the class)."""

    gate: Gate
    client_key: str = ""
    proven: bool = False
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
        answered = self.cycle
        super().on_response_complete()  # may start a pipelined request at once
        if self.proven and not self.transport.is_closing():
            self.proven = False  # its next request proves itself again
            self.gate.set_unproven(self)
            self._arm()
        if self.cycle is not answered:
            self._look()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.gate.closed(self)
        super().connection_lost(exc)

    def drop(self) -> None:
        """Close this unproven connection (its time is up, or another needs its place)."""
        self._disarm()
        self.gate.closed(self)
        sock = self.transport.get_extra_info("socket")
        if sock is not None:  # a reset: what it was sent and never read is dropped at once,
            with contextlib.suppress(OSError):  # not kept by the kernel for its FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self.transport.abort()  # not close(): that waits for a client that may never read

    def _look(self) -> None:
        """A request being answered that carries the token proves the connection."""
        answering = self.cycle is not None and not self.cycle.response_complete
        if not self.proven and answering and self.gate.authorised(self.headers):
            self.proven = True
            self._disarm()
            self.gate.set_proven(self)

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.gate.head_timeout, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if not self.proven:
            self.drop()


def protocol(gate: Gate) -> type[Any]:
    """uvicorn's h11 protocol class under ``gate`` (``uvicorn.Config(http=...)``)."""
    return type("ZwarmH11Protocol", (_Limited,), {"gate": gate})


__all__ = ["HEAD_TIMEOUT_S", "PER_CLIENT", "Gate", "protocol", "total_for_files"]
