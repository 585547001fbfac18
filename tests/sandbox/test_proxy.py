"""The filtering proxy of a sandboxed turn (``zwarm.sandbox.proxy``, issue 34), run as zwarm
runs it (``bwrap.proxy_argv``: its own process on a Unix socket), against a local fake
target: CONNECT and plain ``http://`` reach an allowed ``host:port`` by name, at the address
the trusted ``[sandbox] resolve`` map pins it to (nothing here reaches the internet); any other
host, another port of an allowed host, a loopback port not allowed, an ``https://`` URL
without CONNECT and an endless head are refused with a status and one logged line; a name
whose DNS answer is not a public address is refused (DNS rebinding onto 127.0.0.1)."""

from __future__ import annotations

import asyncio
import itertools
import socket
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until
from tests.support.http import serve
from zwarm.sandbox import Policy, bwrap, proxy


class _Echo(BaseHTTPRequestHandler):
    """Answers every GET with what it was asked: the request line and two headers."""

    def do_GET(self) -> None:
        body = (
            f"line={self.requestline}\nhost={self.headers.get('Host')}\n"
            f"auth={self.headers.get('Proxy-Authorization')}\n"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def target() -> Iterator[int]:
    with serve(_Echo) as port:
        yield port


class Proxy:
    def __init__(self, sock: Path, log: Path, proc: subprocess.Popen[bytes]) -> None:
        self.sock, self.log, self.proc = sock, log, proc

    def ask(self, raw: bytes, then: bytes = b"") -> bytes:
        """Send ``raw`` (and, once answered, ``then`` through the same connection); all the
        bytes that come back until the proxy closes."""
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(30)
            c.connect(str(self.sock))
            c.sendall(raw)
            out = b""
            if then:
                while b"\r\n\r\n" not in out:
                    chunk = c.recv(65536)
                    assert chunk, out
                    out += chunk
                c.sendall(then)
                c.shutdown(socket.SHUT_WR)
            while chunk := c.recv(65536):
                out += chunk
            return out

    def logged(self) -> list[str]:
        return self.log.read_text().splitlines()


@pytest.fixture
def run_proxy(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(hosts: tuple[str, ...], pins: tuple[str, ...] = ()) -> Proxy:
        sock, log = tmp_path / "proxy.sock", tmp_path / "proxy.log"
        policy = Policy(cwd=str(tmp_path), tree=str(tmp_path), hosts=hosts, pins=pins)
        with log.open("wb") as err:
            proc = subprocess.Popen(bwrap.proxy_argv(policy, str(sock)), stderr=err)
        procs.append(proc)
        wait_until(sock.exists, message="the proxy's socket")
        return Proxy(sock, log, proc)

    try:
        yield start
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


def test_connect_reaches_an_allowed_name_at_its_pinned_address(run_proxy: Any, target: int) -> None:
    p = run_proxy((f"fake-llm.test:{target}",), ("fake-llm.test=127.0.0.1",))
    # a tunnel: what goes through is the client's own (TLS with a real API), here plain HTTP
    got = p.ask(
        f"CONNECT fake-llm.test:{target} HTTP/1.1\r\nHost: fake-llm.test:{target}\r\n\r\n".encode(),
        then=b"GET /v1/x HTTP/1.1\r\nHost: fake-llm.test\r\nConnection: close\r\n\r\n",
    )
    assert got.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200"), got
    assert b"line=GET /v1/x HTTP/1.1" in got
    assert p.logged() == []


def test_plain_http_is_forwarded_in_origin_form_without_proxy_headers(
    run_proxy: Any, target: int
) -> None:
    p = run_proxy((f"fake-llm.test:{target}",), ("fake-llm.test=127.0.0.1",))
    got = p.ask(
        f"GET http://fake-llm.test:{target}/v1/models?a=1 HTTP/1.1\r\n"
        f"Host: fake-llm.test:{target}\r\nProxy-Authorization: Basic eDp5\r\n"
        "Proxy-Connection: keep-alive\r\n\r\n".encode()
    )
    assert got.startswith(b"HTTP/1.0 200"), got
    assert b"line=GET /v1/models?a=1 HTTP/1.1\n" in got
    assert f"host=fake-llm.test:{target}\n".encode() in got and b"auth=None\n" in got


def test_everything_else_is_refused_with_a_status_and_one_logged_line(
    run_proxy: Any, target: int
) -> None:
    other = socket.create_server(("127.0.0.1", 0))  # a loopback port nobody allowed
    try:
        p = run_proxy(
            (f"fake-llm.test:{target}", f"127.0.0.1:{target}"), ("fake-llm.test=127.0.0.1",)
        )
        asks = {
            "CONNECT evil.test:443": b"403",
            f"CONNECT fake-llm.test:{target + 1}": b"403",  # an allowed host, another port
            f"CONNECT 127.0.0.1:{other.getsockname()[1]}": b"403",
            f"CONNECT localhost:{target}": b"403",  # another name for an allowed address
            "GET http://evil.test/": b"403",
            f"GET https://fake-llm.test:{target}/": b"400",  # TLS only through CONNECT
        }
        for line, status in asks.items():
            got = p.ask(f"{line} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert got.startswith(b"HTTP/1.1 " + status), (line, got)
        logged = p.logged()
        assert len(logged) == len(asks), logged
        for line, entry in zip(asks, logged, strict=True):
            assert entry.startswith(f"zwarm proxy: refused {line}"), (line, entry)
        assert "not an allowed host:port" in logged[0]
        # the loopback endpoint it does allow still answers, by its literal address
        got = p.ask(f"GET http://127.0.0.1:{target}/ok HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert got.startswith(b"HTTP/1.0 200"), got
    finally:
        other.close()


def test_an_endless_or_broken_head_is_refused_and_the_proxy_lives_on(
    run_proxy: Any, target: int
) -> None:
    p = run_proxy((f"fake-llm.test:{target}",), ("fake-llm.test=127.0.0.1",))
    got = p.ask(b"GET http://fake-llm.test/ HTTP/1.1\r\nX: " + b"a" * (proxy.HEAD_MAX + 10))
    assert got.startswith(b"HTTP/1.1 431"), got[:100]
    assert p.ask(b"\x16\x03\x01 not http\r\n\r\n").startswith(b"HTTP/1.1 400")
    got = p.ask(f"GET http://fake-llm.test:{target}/ HTTP/1.1\r\n\r\n".encode())
    assert got.startswith(b"HTTP/1.0 200"), got
    assert p.proc.poll() is None


@pytest.mark.parametrize(
    "answer",
    ["127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1", "10.1.2.3", "192.168.0.9",
     "169.254.169.254", "0.0.0.0", "fd00::1", "100.64.0.1"],
)  # fmt: skip
def test_a_name_resolving_to_a_non_public_address_is_refused(
    answer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS is the world's (a name's owner may point it at 127.0.0.1 after it was allowed):
    its answer is played here, every other part is the proxy's own."""
    family = socket.AF_INET6 if ":" in answer else socket.AF_INET

    def dns(host: str, port: int, *args: Any, **kw: Any) -> list[Any]:
        return [(family, socket.SOCK_STREAM, 6, "", (answer, port))]

    monkeypatch.setattr(socket, "getaddrinfo", dns)
    allowed = proxy.Allowed.parse(
        ["api.example.com:443", "pinned.test:8080"], ["pinned.test=127.0.0.1"]
    )
    with pytest.raises(proxy.Refused, match="non-public address") as e:
        asyncio.run(allowed.addresses("api.example.com", 443))
    assert e.value.status == 403
    # a public answer is used; a pinned name never asks DNS
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda h, p, *a, **k: [(2, 1, 6, "", ("8.8.8.8", p))]
    )
    assert asyncio.run(allowed.addresses("api.example.com", 443)) == ["8.8.8.8"]
    assert asyncio.run(allowed.addresses("pinned.test", 8080)) == ["127.0.0.1"]


def test_bad_allow_entries_are_refused_at_start(tmp_path: Path) -> None:
    for bad in (["--allow", "no-port"], ["--allow", "h:99999"], ["--pin", "h=not-an-ip"], ["-x"]):
        res = subprocess.run(
            bwrap.proxy_argv(Policy(cwd="/", tree="/"), str(tmp_path / "s")) + bad,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert res.returncode == 2 and res.stderr.startswith("zwarm proxy: "), (bad, res.stderr)
        assert "Traceback" not in res.stderr


def test_the_proxy_ends_quietly_when_the_turn_ends_with_a_tunnel_open(
    run_proxy: Any, target: int
) -> None:
    """The outer shell ends the proxy with SIGTERM when the turn ends, tunnels open or not:
    it exits 0 and writes nothing to the turn's stderr (a SystemExit raised inside asyncio
    printed a traceback there)."""
    p = run_proxy((f"fake-llm.test:{target}",), ("fake-llm.test=127.0.0.1",))
    with socket.socket(socket.AF_UNIX) as c:
        c.settimeout(30)
        c.connect(str(p.sock))
        c.sendall(f"CONNECT fake-llm.test:{target} HTTP/1.1\r\n\r\n".encode())
        assert c.recv(65536).startswith(b"HTTP/1.1 200")
        c.sendall(b"GET /slow HTTP/1.1\r\nHost: fake-llm.test\r\n\r\n")  # a tunnel in use
        p.proc.terminate()
        assert p.proc.wait(10) == 0
    assert p.log.read_text() == ""


def _len2(b: bytes) -> bytes:
    return len(b).to_bytes(2, "big")


def _hello(sni: str | None, ech: bool = False, records: int = 1) -> bytes:
    """A TLS 1.3 ClientHello naming ``sni`` (None: no server_name extension), with an
    encrypted_client_hello extension if ``ech``, split into ``records`` TLS records."""
    exts = b""
    if sni is not None:
        entry = b"\x00" + _len2(sni.encode()) + sni.encode()
        exts += b"\x00\x00" + _len2(_len2(entry) + entry) + _len2(entry) + entry
    if ech:
        exts += b"\xfe\x0d" + _len2(b"\x00" * 8) + b"\x00" * 8
    body = b"\x03\x03" + b"\x07" * 32 + b"\x00" + _len2(b"\x13\x01") + b"\x13\x01" + b"\x01\x00"
    body += _len2(exts) + exts
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    cut = [len(hs) * i // records for i in range(records + 1)]
    parts = [hs[a:b] for a, b in itertools.pairwise(cut)]
    return b"".join(b"\x16\x03\x01" + _len2(p) + p for p in parts)


def _real_hello(name: str) -> bytes:
    """The ClientHello Python's own TLS client sends for ``name``."""
    import ssl

    ctx = ssl.create_default_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(inc, out, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return out.read()


def test_a_tunnel_carries_tls_only_to_the_server_it_was_asked_for(
    run_proxy: Any, target: int
) -> None:
    """Regression: a tunnel to an allowed name carried a ClientHello naming any other server
    (SNI): through a CDN that serves the allowed name (chatgpt.com is behind one) that
    reaches any site the CDN serves, so the allow list held only by IP. Now the tunnel is
    closed, before a byte reaches the server, unless the ClientHello names the host asked
    for; a hidden name (ECH) or none is refused too. A matching one goes through, whole,
    even split over several records; a tunnel that does not start with TLS is carried."""
    p = run_proxy((f"fake-llm.test:{target}",), ("fake-llm.test=127.0.0.1",))
    connect = f"CONNECT fake-llm.test:{target} HTTP/1.1\r\nHost: fake-llm.test\r\n\r\n".encode()
    ok = b"HTTP/1.1 200 Connection established\r\n\r\n"
    refused = {
        "another server (evil.test)": _real_hello("evil.test"),
        "another server (api.openai.com)": _hello("api.openai.com", records=3),
        "hides its server name (ECH)": _hello("fake-llm.test", ech=True),
        "names no server": _hello(None),
    }
    for why, hello in refused.items():
        got = p.ask(connect, then=hello)
        assert got == ok, (why, got)  # closed: the target never answered
        assert p.logged()[-1].endswith(f"{why}"), (why, p.logged())
        assert p.logged()[-1].startswith(f"zwarm proxy: refused CONNECT fake-llm.test:{target}")
    assert len(p.logged()) == len(refused)
    for hello in (_real_hello("fake-llm.test"), _hello("FAKE-LLM.TEST.", records=2)):
        got = p.ask(connect, then=hello)
        assert got.startswith(ok) and b"400 - Bad request" in got, got  # it reached the target
    assert len(p.logged()) == len(refused)


def test_plain_http_goes_out_with_the_host_its_target_names(run_proxy: Any, target: int) -> None:
    """Regression: a plain request to an allowed name kept the client's ``Host`` header, so a
    server behind that name that routes by Host (a shared front end) served another site."""
    p = run_proxy((f"fake-llm.test:{target}",), ("fake-llm.test=127.0.0.1",))
    for url in (f"fake-llm.test:{target}/x", f"user@fake-llm.test:{target}?q#frag"):
        got = p.ask(
            f"GET http://{url} HTTP/1.1\r\nHost: evil.test\r\nhOsT: evil.test\r\n\r\n".encode()
        )
        assert got.startswith(b"HTTP/1.0 200"), got
        assert f"\nhost=fake-llm.test:{target}\n".encode() in got, got
    assert b"line=GET /?q HTTP/1.1\n" in got
    got = p.ask(f"GET http://evil.test#@fake-llm.test:{target}/ HTTP/1.1\r\n\r\n".encode())
    assert got.startswith(b"HTTP/1.1 403"), got  # the authority ends at '#'
