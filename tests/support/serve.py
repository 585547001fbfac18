"""Helpers for testing ``zwarm serve``: a real server (the installed ``zwarm serve --port 0``,
in the test's isolated world) and a plain HTTP and server-sent-events client on the standard
library.

Owns ``start_server``, ``Server`` (requests to it), ``Events`` (an SSE stream read event by
event), ``first_line`` (a process's first line of output, with a deadline) and
``codex_stream``. The fixtures that use them (``serve``, ``server``) are in
tests/serve/conftest.py. Must stay true: servers listen on 127.0.0.1 only, on a port the
kernel picks; every read has a timeout; a server is stopped (then killed) by ``Server.stop``.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import os
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import ZW, ZWARM_BIN

START_TIMEOUT = 60.0


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Event:
    event: str
    data: Any
    id: str | None


class Events:
    """An open server-sent-events response, read one event at a time."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.conn = conn
        self.resp = resp
        self.status = resp.status
        self.last_id: str | None = None

    def next(self, timeout: float = 60.0) -> Event | None:
        """The next event (comments skipped), or None when the server ended the stream."""
        assert self.conn.sock is not None
        self.conn.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        event, data, eid = "message", [], None
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no event in {timeout}s")
            line = self.resp.readline()  # through the chunked transfer coding
            if not line:
                return None
            line = line.rstrip(b"\n").decode()
            if not line:
                if data:
                    if eid is not None:
                        self.last_id = eid
                    return Event(event, json.loads("\n".join(data)), eid)
                event, data, eid = "message", [], None
                continue
            if line.startswith(":"):
                continue
            key, _, value = line.partition(": ")
            if key == "event":
                event = value
            elif key == "data":
                data.append(value)
            elif key == "id":
                eid = value

    def until(self, pred: Callable[[Event], bool], timeout: float = 60.0) -> list[Event]:
        """Every event up to and including the first for which ``pred`` holds."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no matching event in {timeout}s (got {len(got)})"
            e = self.next(left)
            assert e is not None, f"the stream ended first (got {len(got)})"
            got.append(e)
            if pred(e):
                return got

    def rest(self, timeout: float = 120.0) -> list[Event]:
        """Every event until the server ends the stream."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"the stream did not end in {timeout}s (got {len(got)})"
            e = self.next(left)
            if e is None:
                return got
            got.append(e)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.resp.close()
        self.conn.close()


@dataclass
class Server:
    base: str
    host: str
    port: int
    token: str
    proc: subprocess.Popen[bytes]
    stderr_path: Path
    opened: list[Events] = field(default_factory=list)

    def headers(self, extra: dict[str, str] | None = None, auth: bool = True) -> dict[str, str]:
        h = {"Host": f"{self.host}:{self.port}"}
        if auth:
            h["Authorization"] = f"Bearer {self.token}"
        h.update(extra or {})
        return h

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        raw: bytes | None = None,
        timeout: float = 60.0,
    ) -> Reply:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = self.headers(headers, auth)
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def get(self, path: str, **kw: Any) -> Reply:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return self.request("POST", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Reply:
        return self.request("DELETE", path, **kw)

    def stream(self, path: str, last_id: str | None = None, timeout: float = 60.0) -> Events:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        h = self.headers({"Accept": "text/event-stream"})
        if last_id is not None:
            h["Last-Event-ID"] = last_id
        conn.request("GET", path, headers=h)
        ev = Events(conn, conn.getresponse())
        self.opened.append(ev)
        return ev

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        for ev in self.opened:
            ev.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)


def start_server(
    zw: ZW, *args: str, env_extra: dict[str, str] | None = None, files: int | None = None
) -> Server:
    """``zwarm serve --port 0 ARGS`` in ``zw``'s world, once it printed its URL (``files``:
    its open-files soft limit)."""
    zw.state_dir.mkdir(exist_ok=True, mode=0o700)
    err = zw.tmp / f"serve-{time.monotonic_ns()}.stderr"
    env = {**zw.env, **(env_extra or {})}
    proc = subprocess.Popen(
        [str(ZWARM_BIN), "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=err.open("wb"),
        env=env,
        cwd=str(zw.cwd),
        preexec_fn=None if files is None else functools.partial(_limit_files, files),
    )
    assert proc.stdout is not None
    line = first_line(proc, START_TIMEOUT)
    if not line.startswith("http://"):
        proc.kill()
        raise AssertionError(f"zwarm serve printed {line!r}; stderr: {err.read_text()}")
    base, _, token = line.partition("/#token=")
    hostport = base.removeprefix("http://")
    host, _, port = hostport.rpartition(":")
    return Server(base, host, int(port), token, proc, err)


def _limit_files(n: int) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def first_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            proc.kill()
            raise AssertionError("zwarm serve printed no URL in time")
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            raise AssertionError(f"zwarm serve exited {proc.wait()} before printing its URL")
        buf += chunk
    return buf.split(b"\n", 1)[0].decode()


def codex_stream(path: Path, n: int, text: str = "step") -> Path:
    """A codex turn of ``n`` agent messages (``{text} {i}``), then its terminal event."""
    lines = ['{"type":"thread.started","thread_id":"01a1ffe6-3595-7f80-954f-f6552aa38b0a"}']
    lines.append('{"type":"turn.started"}')
    for i in range(n):
        item = {"id": f"item_{i}", "type": "agent_message", "text": f"{text} {i}"}
        lines.append(json.dumps({"type": "item.completed", "item": item}, separators=(",", ":")))
    usage = {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": n}
    lines.append(json.dumps({"type": "turn.completed", "usage": usage}, separators=(",", ":")))
    path.write_text("\n".join(lines) + "\n")
    return path
