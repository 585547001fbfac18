"""Who may talk to ``zwarm serve``: the access token, and the checks every request passes.

Owns the token file and ``Guard``, the ASGI layer in front of every route. The token file is
kept where an agent's workspace is not: the state dir lies in the agent's working folder, so a
token there could be read, or planted, by the agent. It is ``$XDG_RUNTIME_DIR/zwarm/`` when
that is a private directory of this user, else ``$XDG_STATE_HOME/zwarm/serve/`` (default
``~/.local/state``), one file per state dir (``serve-<project>-<hash of the state dir's
path>.token``): made on first start, 0600 in a 0700 directory, replaced with a new one when
it is not a plain private file of this user holding a token. A ``serve.token`` in the state
dir (where older versions kept it) is never read: serve removes it and says so. Must stay
true:
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
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OLD_TOKEN_FILE = "serve.token"  # in the state dir: never read, removed by serve
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


def token_dir(environ: Mapping[str, str]) -> Path:
    """Where token files are kept: ``$XDG_RUNTIME_DIR/zwarm`` if that variable names a
    private (0700) directory of this user, as the XDG spec says it is, else zwarm's user state
    dir (the launch pins' parent, ``$XDG_STATE_HOME/zwarm``) ``/serve``."""
    from zwarm.xdg import user_state_dir, xdg_runtime_dir

    run = xdg_runtime_dir(environ)
    if run is not None and _private_dir(str(run.parent)):
        return run
    return user_state_dir(environ) / "serve"


def token_path(environ: Mapping[str, str], state_dir: Path) -> Path:
    """The token file of the server of ``state_dir`` (named by its real path)."""
    import hashlib

    real = os.path.realpath(state_dir)
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    project = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(os.path.dirname(real)))
    return token_dir(environ) / f"serve-{project.strip('._')[:40] or 'root'}-{digest}.token"


def load_token(
    environ: Mapping[str, str], state_dir: Path, cwd: Path, new: bool = False
) -> tuple[str, Path, list[str]]:
    """The access token of ``state_dir``'s server (made if there is none, or ``new``), its
    file, and notes for the user (an old token file removed, a bad one replaced: why; the
    file lies inside ``cwd``, where the server's sessions run by default)."""
    from zwarm.errors import StoreError
    from zwarm.system.files import write_private

    notes = []
    old = state_dir / OLD_TOKEN_FILE
    if os.path.lexists(old):
        try:
            os.unlink(old)  # a link is removed, never followed
            notes.append(
                f"removed {old}: the token is no longer kept in the state dir, where an agent "
                "could read or plant it"
            )
        except OSError as e:
            notes.append(f"ignored {old} (it is never read): cannot remove it: {e.strerror}")
    path = token_path(environ, state_dir)
    _make_private_dir(path.parent)
    work = Path(os.path.realpath(cwd))
    if Path(os.path.realpath(path)).is_relative_to(work):
        notes.append(
            f"the token file lies inside {work}, where this server's agents work: set "
            "XDG_RUNTIME_DIR or XDG_STATE_HOME to a directory outside it"
        )
    why, kept = ("new", None) if new else _check(path)
    if kept is not None:
        return kept, path, notes
    token = secrets.token_urlsafe(32)
    try:
        write_private(path, token.encode() + b"\n")
    except FileNotFoundError:
        raise StoreError(f"cannot write {path}: its directory is gone") from None
    if why not in ("missing", "new"):
        notes.append(f"replaced {path}: {why}")
    return token, path, notes


def _private_dir(path: str | Path) -> bool:
    """``path`` is a directory (not a link) of this user, 0700: it alone may enter and write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    ok = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    return ok and stat.S_IMODE(st.st_mode) & 0o777 == 0o700


def _make_private_dir(d: Path) -> None:
    """Make ``d`` and its missing parents (each 0700, whatever the umask); ``StoreError`` if
    ``d`` is not then a directory of this user (a link, another's); loosened modes of an own
    ``d`` are tightened to 0700."""
    from zwarm.errors import StoreError

    missing = [p for p in (d, *d.parents) if not os.path.lexists(p)]
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise StoreError(f"cannot create {p}: {e.strerror}") from None
    try:
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise StoreError(f"cannot keep the access token in {d}: not a directory of yours")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(d, 0o700)
    except OSError as e:
        raise StoreError(f"cannot use {d}: {e.strerror}") from None


def _check(path: Path) -> tuple[str, str | None]:
    """The token in ``path``, or why it cannot be used as the token file."""
    from zwarm.system.files import read_file

    try:
        data, st = read_file(path, 4096)
    except FileNotFoundError:
        return "missing", None
    except OSError as e:
        return f"it {e.strerror or e}", None
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        return "it was not private to you (0600)", None
    if not _TOKEN.fullmatch(data.strip()):
        return "it held no valid token", None
    return "", data.strip().decode()


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

    def carries_token(self, raw_headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether a request with these headers (as the server read them) has the token."""
        return self.token_ok(_headers({"headers": raw_headers}).get("authorization", ""))

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
