"""The ``zwarm serve`` command: start the HTTP server (``zwarm.serve.app``) with uvicorn (the
command is the CLI's: ``zwarm.serve`` never imports ``zwarm.cli``).

Owns the command's options, the listening socket and what is printed. Must stay true:
- it binds 127.0.0.1 unless ``--host`` says otherwise, and then warns on stderr;
- uvicorn runs its h11 protocol under ``conns``' connection limits (never without them),
  which ask the ``Guard`` whether a request carries the token;
- stdout carries one line, the dashboard's URL with the access token in its fragment (the
  only place it is printed), as soon as the socket listens; everything else goes to stderr
  (``--token-path`` prints only the token file's path, and starts nothing);
- importing this module imports only click, ``zwarm.cli.common`` and ``zwarm.cli.output``:
  Starlette, uvicorn and the MCP SDK are imported when the command runs, and their absence
  is one line, exit 1.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Callable
from typing import Any

import click

from zwarm.cli.common import get_api
from zwarm.cli.output import warn


@click.command("serve")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; any but a loopback one is reachable from elsewhere.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port to listen on (0: any free one).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name the server also answers to (a proxy's, a LAN name).",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="URL",
    help="A web origin that may also call the API (e.g. https://proxy.example).",
)
@click.option(
    "--allow-dangerous",
    is_flag=True,
    help="Let clients start sessions with --dangerous (off: they are refused).",
)
@click.option("--no-mcp", is_flag=True, help="Do not serve zwarm's MCP tools at /mcp.")
@click.option(
    "--new-token", is_flag=True, help="Make a new access token (the old one stops working)."
)
@click.option(
    "--token-path",
    is_flag=True,
    help="Print the path of the file the access token is kept in, and exit.",
)
@click.pass_context
def serve_command(ctx: click.Context, host: str, port: int, allow_hosts: tuple[str, ...],
                  allow_origins: tuple[str, ...], allow_dangerous: bool, no_mcp: bool,
                  new_token: bool, token_path: bool) -> None:  # fmt: skip
    """Serve the HTTP API, live event streams and the web dashboard.

    Prints the dashboard's URL, with the access token after '#token=': open it in a browser.
    Programs send the token as 'Authorization: Bearer TOKEN'; it is kept (0600) outside the
    state dir, where agents cannot reach it, in the file 'zwarm serve --token-path' names
    (under $XDG_RUNTIME_DIR/zwarm, else $XDG_STATE_HOME/zwarm/serve). The API is described
    at /api/openapi.json; zwarm's MCP tools are at /mcp. Ctrl-C stops the server; sessions
    keep running.

    \b
    Examples:
      zwarm serve
      zwarm serve --port 0 --no-mcp
      zwarm serve --host 0.0.0.0 --allow-host devbox.lan
      curl -H "Authorization: Bearer $(cat "$(zwarm serve --token-path)")" \\
        http://127.0.0.1:8765/api/sessions
    """
    if token_path:
        from zwarm.serve import auth

        api = get_api(ctx)
        click.echo(str(auth.token_path(api.env.environ, api.state_dir)))
        return
    _need_extra()
    api = get_api(ctx)
    api.ensure_state_dir()
    import msgspec

    from zwarm.serve import app, auth

    token, path, notes = auth.load_token(api.env.environ, api.state_dir, api.env.cwd, new_token)
    for note in notes:
        warn(note)
    mcp = not no_mcp and _has_mcp()
    sock = _listen(host, port)
    port = sock.getsockname()[1]
    opts = app.Options(
        env=msgspec.structs.replace(api.env, state_dir=api.state_dir),
        token=token,
        allow_hosts=allow_hosts,
        allow_origins=allow_origins,
        allow_dangerous=allow_dangerous,
        mcp=mcp,
    )
    asgi = app.build(opts)
    click.echo(f"http://{_url_host(host)}:{port}/#token={token}")
    sys.stdout.flush()
    _tell(host, api.state_dir, mcp, path)
    _run(asgi, sock, asgi.carries_token)


def _need_extra() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise click.ClickException(
            "zwarm serve needs Starlette and uvicorn: pip install 'zwarm[serve]'"
        ) from None


def _has_mcp() -> bool:
    """Whether the MCP SDK is installed (it is imported once the server runs: it is slow)."""
    from importlib.util import find_spec

    if find_spec("mcp") is None:
        warn("the MCP SDK is not installed: /mcp is not served (pip install 'zwarm[serve]')")
        return False
    return True


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``, or one line saying why it cannot."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, IndexError) as e:
        raise click.ClickException(f"cannot listen on {host}: {_why(e)}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise click.ClickException(f"cannot listen on {host} port {port}: {_why(e)}") from None
    return sock


def _why(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    """``host`` as a URL shows it (a wildcard address: this machine's loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _tell(host: str, state_dir: Any, mcp: bool, token_file: Any = None) -> None:
    extra = ", MCP at /mcp" if mcp else ""
    kept = f"; the token is kept in {token_file}" if token_file is not None else ""
    click.echo(
        f"zwarm serve: sessions of {state_dir}; API at /api (openapi.json){extra}{kept}. "
        "Ctrl-C stops the server; sessions keep running.",
        err=True,
    )
    if not _loopback(host):
        warn(
            f"listening on {host}, reachable from other machines: anyone who has the token "
            "can run agents as you, and plain HTTP shows it to the network (put a TLS proxy "
            "in front, and --allow-host its name)"
        )


def _run(
    asgi: Any, sock: socket.socket, authorised: Callable[[list[tuple[bytes, bytes]]], bool]
) -> None:
    import uvicorn

    from zwarm.serve import conns

    config = uvicorn.Config(
        asgi,
        log_level="warning",
        access_log=False,  # no request lines on the terminal (and never a token: none in URLs)
        lifespan="on",
        http=conns.protocol(conns.Gate(conns.total_for_files(), authorised)),  # h11, limited
        ws="none",
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=2,
        limit_concurrency=None,  # the gate bounds connections; idle ones never crowd out others
    )
    uvicorn.Server(config).run(sockets=[sock])
