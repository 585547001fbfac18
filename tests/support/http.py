"""A local HTTP server for a test: ``serve(handler)`` runs ``handler`` on a free loopback port
in a thread for the ``with`` block and shuts it down after (the fake targets of the sandbox's
network and proxy tests)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serve ``handler`` on 127.0.0.1 for the block; yields the port."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()
