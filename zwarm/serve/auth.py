"""Who may talk to ``zwarm serve``: the access token, and the checks every request passes.

Owns the token file (``<state dir>/serve.token``: made on first start, 0600, replaced with a
new one when it is not a plain private file holding a token) and ``Guard``, the ASGI layer in
front of every route. Must stay true:
- every request under ``/api`` and ``/mcp`` carries ``Authorization: Bearer <token>``,
  compared in constant time; the page and its files (``/``, ``/static/``) hold no data and
  need none (the page reads the token from the URL fragment, which browsers never send);
  no cookie is ever set or read;
- the ``Host`` header must be an IP address, ``localhost``, or a name given with
  ``--allow-host`` (DNS rebinding needs a name of the attacker's); a request with an
  ``Origin`` must come from this same origin or one given with ``--allow-origin``, and a
  browser's ``Sec-Fetch-Site: cross-site`` is refused: no other site's page can call the API;
- refusals are JSON (``{"error": ...}``) with 401, 403, and close their connection (a client
  without the token cannot keep one open: ``conns``); every response carries headers that
  keep the page from loading anything from elsewhere or being framed.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
import secrets
import stat
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOKEN_FILE = "serve.token"
_TOKEN = re.compile(rb"[A-Za-z0-9_-]{32,256}")
PROTECTED = ("/api", "/mcp")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


def load_token(state_dir: Path, new: bool = False) -> tuple[str, str | None]:
    """The access token (made if there is none, or ``new``), and a note when an existing
    file was replaced (why)."""
    path = state_dir / TOKEN_FILE
    why = None if new else _check(path)
    if why is None and not new:
        from zwarm.store.files import read_file

        return read_file(path, 4096)[0].strip().decode(), None
    from zwarm.store.files import write_private

    token = secrets.token_urlsafe(32)
    write_private(path, token.encode() + b"\n")
    return token, None if why in ("missing", None) else f"replaced {path}: {why}"


def _check(path: Path) -> str | None:
    """Why ``path`` cannot be used as the token file (None: it can)."""
    from zwarm.store.files import read_file

    try:
        data, st = read_file(path, 4096)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"it {e.strerror or e}"
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        return "it was not private to you (0600)"
    if not _TOKEN.fullmatch(data.strip()):
        return "it held no valid token"
    return None


@dataclass
class Guard:
    """The ASGI layer every request passes (see the module's rules)."""

    app: ASGIApp
    token: str
    allow_hosts: Iterable[str] = ()
    allow_origins: Iterable[str] = ()
    _hosts: frozenset[str] = field(init=False)
    _origins: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self._hosts = frozenset(h.lower() for h in self.allow_hosts)
        self._origins = frozenset(o.lower().rstrip("/") for o in self.allow_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return  # no websockets here
        refusal = self.refusal(scope)
        if refusal is not None:
            await _refuse(send, *refusal)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """(status, why) if the request is refused, else None."""
        headers = _headers(scope)
        host = headers.get("host", "")
        if not self.host_ok(host):
            return 403, f"Host {host!r} is not allowed (zwarm serve --allow-host NAME allows it)"
        origin = headers.get("origin")
        if origin is not None and not self.origin_ok(origin, host, scope):
            return 403, f"requests from origin {origin!r} are not allowed"
        if headers.get("sec-fetch-site") == "cross-site":
            return 403, "cross-site requests are not allowed"
        path: str = scope.get("path", "")
        if path.startswith(PROTECTED) and not self.token_ok(headers.get("authorization", "")):
            return 401, "a valid access token is needed (Authorization: Bearer <token>)"
        return None

    def host_ok(self, host: str) -> bool:
        name = _host_name(host)
        if not name:
            return False
        if name == "localhost" or name in self._hosts:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def origin_ok(self, origin: str, host: str, scope: Scope) -> bool:
        origin = origin.lower().rstrip("/")
        if origin in self._origins:
            return True
        scheme = "https" if scope.get("scheme") == "https" else "http"
        return origin == f"{scheme}://{host.lower()}"

    def token_ok(self, header: str) -> bool:
        kind, _, given = header.partition(" ")
        if kind.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), self.token.encode())


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (a repeated one: the first)."""
    out: dict[str, str] = {}
    for k, v in scope.get("headers", []):
        out.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
    return out


def _host_name(host: str) -> str:
    """The name or address in a Host header, without its port (``[::1]:80`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else ""
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _refuse(send: Send, status: int, why: str) -> None:
    body = json.dumps({"error": why}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="zwarm"'))
    headers += SECURITY_HEADERS
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
