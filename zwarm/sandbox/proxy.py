"""The filtering proxy of a sandboxed turn: the agent's only way to its model APIs by name.

Owns the proxy a sandboxed turn reaches its hosted endpoints through (``serve``; run per turn
by ``zwarm.sandbox.bwrap`` as ``python -I -m zwarm.sandbox.proxy``, listening on a Unix socket
bridged into the sandbox): HTTP ``CONNECT host:port`` (TLS stays end to end: the proxy never
sees the content) and plain ``http://`` requests in absolute form, each only to a ``host:port``
of its allow list (``Allowed``); anything else is answered 403 and logged, one line on stderr
(the turn's stderr file). Must stay true:
- only the exact ``host:port`` pairs allowed are reached; a name is resolved here, outside the
  sandbox (there is no DNS inside), and connected to by the address resolved, never re-resolved;
- a name never leads to a non-public address (loopback, private, link-local, ...: DNS
  rebinding onto ``127.0.0.1:other``) unless its entry is that address literally or the
  trusted ``[sandbox] resolve`` map names it (``Allowed.pinned``);
- a request's head is bounded (``HEAD_MAX`` bytes, ``HEAD_TIMEOUT_S``): no unbounded read;
- a plain request goes out with the ``Host`` its target names (the client's is dropped), and
  a tunnel carries a TLS ClientHello only if it names the tunnel's host (SNI) and hides no
  name (ECH): a CDN behind an allowed name, which routes by either, reaches no other site
  through it (``_client_hello``; a tunnel that does not start with TLS is carried as is);
- imports only the standard library (it starts once per turn: start-up is on the turn's path).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

HEAD_MAX = 64 * 1024  # a request line and its headers, at most
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 30.0
_CHUNK = 64 * 1024
_HOP = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


class Refused(Exception):
    """A request the proxy does not carry; ``status`` and the reason it logs."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


def split_host_port(text: str, default: int | None = None) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; without a port: ``default``) as a lower-case host
    without a trailing dot and a port; ``ValueError`` if it is not one."""
    host, sep, port = text.rpartition(":")
    if text.startswith("[") and "]" in text:
        host, _, rest = text[1:].partition("]")
        sep, port = (":", rest[1:]) if rest.startswith(":") else ("", "")
    elif not sep or ":" in host:  # no port, or a bare IPv6 address
        host, port = text, ""
    if not port and default is not None:
        port = str(default)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: not host:port")
    host = host.strip("[]").rstrip(".").lower()
    if not host or any(c in host for c in "/@ \t\r\n\x00"):
        raise ValueError(f"{text!r}: not a host name")
    return host, int(port)


def _literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def public(addr: str) -> bool:
    """Whether ``addr`` is a public (globally routed) address: not loopback, private,
    link-local, multicast, reserved or unspecified, nor an IPv4 one mapped into IPv6."""
    ip = _literal(addr.split("%", 1)[0])
    if ip is None:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


@dataclass(frozen=True)
class Allowed:
    """The allow list: ``hosts`` (``(host, port)`` pairs) and ``pinned`` (host -> address:
    the trusted ``[sandbox] resolve`` map, not looked up in DNS, may be any address)."""

    hosts: frozenset[tuple[str, int]]
    pinned: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, allow: Iterable[str], pins: Iterable[str] = ()) -> Allowed:
        """From ``host:port`` and ``host=address`` strings (``ValueError`` on a bad one)."""
        hosts = frozenset(split_host_port(a) for a in allow)
        pinned: dict[str, str] = {}
        for p in pins:
            name, sep, addr = p.partition("=")
            if not sep or _literal(addr) is None:
                raise ValueError(f"{p!r}: not host=address")
            pinned[name.rstrip(".").lower()] = addr
        return cls(hosts, pinned)

    async def addresses(self, host: str, port: int) -> list[str]:
        """The addresses ``host:port`` may be connected at, or ``Refused`` (403) saying why."""
        if (host, port) not in self.hosts:
            raise Refused(403, "not an allowed host:port")
        if host in self.pinned:
            return [self.pinned[host]]
        if _literal(host) is not None:  # the entry names this address itself
            return [host]
        if host == "localhost":  # never looked up: it is this machine's loopback
            return ["127.0.0.1"]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise Refused(502, f"cannot resolve: {e}") from None
        found = [str(info[4][0]) for info in infos]
        ok = [a for a in dict.fromkeys(found) if public(a)]
        if not ok:
            shown = ", ".join(dict.fromkeys(found)) or "nothing"
            raise Refused(403, f"resolves to a non-public address ({shown})")
        return ok


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
    except asyncio.LimitOverrunError:
        raise Refused(431, "request head too large") from None
    except (asyncio.IncompleteReadError, TimeoutError):
        raise Refused(400, "incomplete request head") from None


def _target(method: bytes, target: bytes) -> tuple[str, int, bytes | None, bytes]:
    """(host, port, the origin-form path to send, or None for a tunnel, the ``Host`` header's
    value the target names) of a request."""
    text = target.decode("ascii", "replace")
    if method == b"CONNECT":
        return (*split_host_port(text), None, b"")
    if not text.lower().startswith("http://"):
        raise Refused(400, f"{method.decode('ascii', 'replace')} {text[:200]}: not an http:// URL")
    rest = text[len("http://") :]
    end = min([i for i in (rest.find(c) for c in "/?#") if i >= 0] or [len(rest)])
    authority, path = rest[:end].rpartition("@")[2], rest[end:].partition("#")[0]
    host, port = split_host_port(authority, 80)
    path = path if path.startswith("/") else f"/{path}"
    return host, port, path.encode("ascii", "replace"), authority.encode()


TLS_HANDSHAKE = 0x16
HELLO_MAX = 64 * 1024  # a TLS ClientHello, at most (with post-quantum key shares: ~2 KiB)
_ECH = 0xFE0D  # TLS's encrypted_client_hello extension: it hides the name a CDN routes by


async def _client_hello(reader: asyncio.StreamReader, host: str) -> bytes:
    """The first bytes a client sends through a tunnel to ``host``: up to the end of its TLS
    ClientHello if they start one, else the first few, as they are (plain HTTP in a tunnel).
    ``Refused`` if the ClientHello names another server (SNI: a CDN behind an allowed name
    routes by it, so the tunnel would reach any site that CDN serves), names none for a host
    name, hides it (ECH), or is malformed."""

    async def read(n: int) -> bytes:
        return await asyncio.wait_for(reader.readexactly(n), HEAD_TIMEOUT_S)

    try:
        got = await reader.read(5)  # (an idle tunnel may wait: the server may speak first)
        if not got or got[0] != TLS_HANDSHAKE:
            return got
        got += await read(5 - len(got))
        hello, need = b"", 0
        while not need or len(hello) < need:
            record = got[-5:]  # a record's header: type, version, length
            size = int.from_bytes(record[3:5])
            if record[0] != TLS_HANDSHAKE or record[1] != 3 or not 0 < size <= 16384:
                raise Refused(400, "not a TLS ClientHello")
            body = await read(size)
            got, hello = got + body, hello + body
            if not need and len(hello) >= 4:
                need = 4 + int.from_bytes(hello[1:4])
                if hello[0] != 1 or need > HELLO_MAX:
                    raise Refused(400, "not a TLS ClientHello (or too large)")
            if not need or len(hello) < need:
                got += await read(5)
    except (asyncio.IncompleteReadError, TimeoutError):
        raise Refused(400, "incomplete TLS ClientHello") from None
    name, hidden = server_name(hello[4:need])
    if hidden:
        raise Refused(403, "the TLS ClientHello hides its server name (ECH)")
    if name is None and _literal(host) is None:
        raise Refused(403, "the TLS ClientHello names no server")
    if name is not None and name.rstrip(".").lower() != host:
        raise Refused(403, f"the TLS ClientHello names another server ({name[:200]})")
    return got


def server_name(hello: bytes) -> tuple[str | None, bool]:
    """The host name a ClientHello's body names (SNI; None: none) and whether it carries an
    encrypted ClientHello (ECH); ``Refused`` (400) if it is malformed."""

    at = 0

    def take(n: int) -> bytes:
        nonlocal at
        if at + n > len(hello):
            raise Refused(400, "malformed TLS ClientHello")
        at += n
        return hello[at - n : at]

    take(34)  # version, random
    take(take(1)[0])  # session id
    take(int.from_bytes(take(2)))  # cipher suites
    take(take(1)[0])  # compression methods
    if at == len(hello):
        return None, False
    end = at + int.from_bytes(take(2))
    name, hidden = None, False
    while at < end:
        kind, data = int.from_bytes(take(2)), take(int.from_bytes(take(2)))
        if kind == _ECH:
            hidden = True
        elif kind == 0 and len(data) >= 5 and data[2] == 0:  # server_name: host_name
            size = int.from_bytes(data[3:5])
            raw = data[5 : 5 + size]
            if len(raw) != size or not raw.isascii():
                raise Refused(400, "malformed TLS server name")
            name = raw.decode("ascii")
    return name, hidden


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _open(addrs: Sequence[str], port: int) -> Stream:
    last: Exception | None = None
    for addr in addrs:
        try:
            return await asyncio.wait_for(asyncio.open_connection(addr, port), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            last = e
    raise Refused(502, f"cannot connect: {last}")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        pass


def _log(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"zwarm proxy: {line}", file=sys.stderr, flush=True)


async def handle(
    allowed: Allowed, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Carry one client connection: its first request decides where it goes."""
    upstream: asyncio.StreamWriter | None = None
    what = "request"
    try:
        head = await _read_head(reader)
        line, _, headers = head.partition(b"\r\n")
        parts = line.split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            raise Refused(400, f"not an HTTP/1 request line: {line[:200]!r}")
        method, target, version = parts
        what = f"{method.decode('ascii', 'replace')} {target[:200].decode('ascii', 'replace')}"
        try:
            host, port, path, authority = _target(method, target)
        except ValueError as e:
            raise Refused(400, str(e)) from None
        up_reader, upstream = await _open(await allowed.addresses(host, port), port)
        if path is None:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            tunnel = asyncio.ensure_future(_pipe(up_reader, writer))
            try:
                upstream.write(await _client_hello(reader, host))
            except BaseException as e:
                tunnel.cancel()
                if isinstance(e, Refused):  # (answered 200 already: the tunnel is closed)
                    _log(f"refused {what}: {e}")
                    return
                raise
            await asyncio.gather(_pipe(reader, upstream), tunnel)
            return
        # origin form, without the hop-by-hop headers, with the Host the target names (a
        # server behind an allowed name may route by Host: RFC 9112's rule for proxies);
        # one request per connection
        kept = [
            h
            for h in headers.split(b"\r\n")
            if h and h.split(b":", 1)[0].strip().lower() not in (*_HOP, b"host")
        ]
        upstream.write(b"\r\n".join([b" ".join([method, path, version]), *kept]))
        upstream.write(b"\r\nHost: " + authority + b"\r\nConnection: close\r\n\r\n")
        await asyncio.gather(_pipe(reader, upstream), _pipe(up_reader, writer))
    except Refused as e:
        _log(f"refused {what}: {e}")
        reason = {400: "Bad Request", 403: "Forbidden", 431: "Too Large", 502: "Bad Gateway"}
        body = f"zwarm proxy: {e}\n".encode()
        with contextlib.suppress(OSError, RuntimeError):
            writer.write(
                f"HTTP/1.1 {e.status} {reason.get(e.status, 'Error')}\r\n"
                f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        for w in (upstream, writer):
            if w is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    w.close()


async def serve(allowed: Allowed, path: str) -> None:
    """Listen on the Unix socket ``path`` (0600) until cancelled. The socket appears at
    ``path`` only once it listens (bound under another name, then renamed): whoever waits
    for the file to connect is never refused."""

    async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await handle(allowed, r, w)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    old = os.umask(0o177)
    try:
        sock.bind(tmp)
        sock.listen(128)
        os.rename(tmp, path)
    finally:
        os.umask(old)
    server = await asyncio.start_unix_server(on_client, sock=sock, limit=HEAD_MAX)
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str]) -> int:
    """``--unix PATH [--allow HOST:PORT]... [--pin HOST=ADDRESS]...``: serve until killed."""
    import signal

    path, allow, pins = "", list[str](), list[str]()
    args = list(argv)
    while args:
        flag = args.pop(0)
        if not args or flag not in ("--unix", "--allow", "--pin"):
            print(f"zwarm proxy: bad argument {flag!r}", file=sys.stderr)
            return 2
        value = args.pop(0)
        if flag == "--unix":
            path = value
        else:
            (allow if flag == "--allow" else pins).append(value)
    try:
        allowed = Allowed.parse(allow, pins)
    except ValueError as e:
        print(f"zwarm proxy: {e}", file=sys.stderr)
        return 2
    # the turn's end (the outer shell's SIGTERM) ends it at once, tunnels open or not: it
    # holds nothing to save, and unwinding asyncio from a signal printed tracebacks into the
    # turn's stderr
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(allowed, path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
