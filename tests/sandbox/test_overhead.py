"""The start-up cost of zwarm's sandbox per turn (issue 34: target under 20 ms beyond an
unsandboxed start), measured in one run, interleaved so load hits both sides alike: a start
of ``true`` plain, in bubblewrap, in bubblewrap with one port bridged, and with the filtering
proxy too (as every sandboxed turn of codex, claude or gemini runs); and the latency the
proxy adds to one request (a new connection each, as a CONNECT tunnel is). Printed (run with
``-s``); asserted only loosely, since the absolute figures follow the machine's load."""

from __future__ import annotations

import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.support import wait_until
from zwarm.sandbox import Policy, bwrap

RUNS = 15


def _time(argv: list[str], cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t


@pytest.mark.perf
def test_sandbox_start_up_overhead_per_turn(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    plain = ["/bin/true"]
    boxed = Policy(cwd=str(tree), tree=str(tree), home=str(tmp_path / "home"))
    bridged = Policy(cwd=str(tree), tree=str(tree), home=str(tmp_path / "home"), ports=(port,))
    proxied = msgspec.structs.replace(bridged, hosts=("api.example.com:443",))
    times: dict[str, list[float]] = {"plain": [], "bwrap": [], "bwrap+bridge": [], "+proxy": []}
    try:
        for _ in range(RUNS):
            times["plain"].append(_time(plain, tree))
            times["bwrap"].append(_time(bwrap.command(plain, boxed, None), tree))
            argv = bwrap.command(plain, bridged, bwrap.bridge_dir())
            times["bwrap+bridge"].append(_time(argv, tree))
            argv = bwrap.command(plain, proxied, bwrap.bridge_dir())
            times["+proxy"].append(_time(argv, tree))
    finally:
        srv.close()
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    over, over_bridge = med["bwrap"] - med["plain"], med["bwrap+bridge"] - med["plain"]
    print(
        f"\nsandbox start-up, median of {RUNS} (ms): plain {med['plain']:.1f}, "
        f"bwrap {med['bwrap']:.1f} (+{over:.1f}, x{med['bwrap'] / med['plain']:.1f}), "
        f"bwrap+bridge {med['bwrap+bridge']:.1f} (+{over_bridge:.1f}), "
        f"bwrap+bridge+proxy {med['+proxy']:.1f} (+{med['+proxy'] - med['plain']:.1f}, "
        f"x{med['+proxy'] / med['bwrap+bridge']:.2f} of bwrap+bridge)"
    )
    assert over < 500 and over_bridge < 1000, med  # loose: the figures are what matters


class _Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


def _get(connect: Callable[[], socket.socket], first: bytes) -> float:
    t = time.perf_counter()
    with connect() as c:
        c.sendall(first)
        while c.recv(4096):
            pass
    return time.perf_counter() - t


@pytest.mark.perf
def test_proxy_latency_per_request(tmp_path: Path) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    sock = tmp_path / "proxy.sock"
    policy = Policy(cwd="/", tree="/", hosts=(f"llm.test:{port}",), pins=("llm.test=127.0.0.1",))
    proc = subprocess.Popen(bwrap.proxy_argv(policy, str(sock)))
    try:
        wait_until(sock.exists)

        def direct() -> socket.socket:
            return socket.create_connection(("127.0.0.1", port))

        def proxied() -> socket.socket:
            c = socket.socket(socket.AF_UNIX)
            c.connect(str(sock))
            return c

        get = b"GET / HTTP/1.0\r\n\r\n"
        via = f"GET http://llm.test:{port}/ HTTP/1.0\r\n\r\n".encode()
        times: dict[str, list[float]] = {"direct": [], "proxy": []}
        for _ in range(RUNS * 4):
            times["direct"].append(_get(direct, get))
            times["proxy"].append(_get(proxied, via))
    finally:
        proc.terminate()
        proc.wait(10)
        srv.shutdown()
        srv.server_close()
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(
        f"\nrequest latency, median of {RUNS * 4} (ms): direct {med['direct']:.2f}, "
        f"through the proxy {med['proxy']:.2f} (+{med['proxy'] - med['direct']:.2f})"
    )
    assert med["proxy"] < 1000, med


@pytest.mark.perf
def test_limits_overhead_per_turn(tmp_path: Path) -> None:
    """What a turn's limits add to a sandboxed start: the supervisor's cgroup made and
    written, the outer shell joining it, the cgroup removed at the end (or the rlimits)."""
    from zwarm.sandbox import limits

    tree = tmp_path / "tree"
    tree.mkdir()
    policy = Policy(cwd=str(tree), tree=str(tree), home=str(tmp_path / "home"))
    plain = ["/bin/true"]
    want = limits.Limits(memory=512 << 20, cpus=1.0, pids=256)
    times: dict[str, list[float]] = {"bwrap": [], "bwrap+limits": []}
    for _ in range(RUNS):
        times["bwrap"].append(_time(bwrap.command(plain, policy, None), tree))
        t = time.perf_counter()
        applied = limits.make(want)
        subprocess.run(
            bwrap.command(plain, policy, None, limits.shell(applied)), cwd=tree, check=True
        )
        limits.release(applied.group)
        times["bwrap+limits"].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    over = med["bwrap+limits"] - med["bwrap"]
    print(
        f"\nlimits per turn, median of {RUNS} (ms): bwrap {med['bwrap']:.1f}, with limits "
        f"{med['bwrap+limits']:.1f} (+{over:.1f}, x{med['bwrap+limits'] / med['bwrap']:.2f}); "
        f"{applied.line}"
    )
    assert over < 500, med  # loose: the figures are what matters
