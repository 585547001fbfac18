"""The HTTP API of ``zwarm serve``: JSON routes over ``zwarm.api.Zwarm``, the live event
streams (``streams``), the dashboard's files, and zwarm's MCP tools at ``/mcp``.

Owns the routes and how a result or an error becomes a response. Must stay true:
- every route is a thin call into ``Zwarm`` run in a worker thread, and each request gets a
  ``Zwarm`` of its own (``config.toml`` read afresh: a ``zwarm trust`` counts at once);
- a ``ZwarmError`` becomes ``{"error": <the CLI's message>, "type": ...}`` in one place
  (``_error``): 404 no such session, 409 ambiguous reference or wrong state, 422 bad input,
  403 refused; anything else is a 500 with one line on the server's stderr, never a
  traceback in a response;
- a request body is a JSON object of a fixed shape (``bodies``) of at most ``MAX_BODY``
  bytes, a bad field refused in the words the orchestrator tools use for it (``_refusal``);
  nothing a request holds reaches a shell; a spawn's ``cwd`` must lie inside
  ``[tools] allowed_roots`` (as for the orchestrator tools), and ``dangerous`` needs
  ``--allow-dangerous``;
- ``/api/sessions/{ref}/diff`` is served only when ``Zwarm`` has ``diff``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from zwarm.api import Zwarm, row
from zwarm.env import Env
from zwarm.errors import ZwarmError
from zwarm.ops.listing import select_rows
from zwarm.serve import bodies, streams
from zwarm.serve.auth import Guard
from zwarm.text import clip

T = TypeVar("T")
MAX_BODY = (4 << 20) + (64 << 10)  # a 4 MiB prompt and its JSON around it
CUT = 4000  # a step's long text is cut to this many characters unless ?full=1
STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


class HttpError(Exception):
    """A refusal that is not a ``ZwarmError``: a status and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@dataclass
class Options:
    """How the server was started (``zwarm serve``'s options)."""

    env: Env  # its state_dir is the resolved state dir
    token: str
    allow_hosts: tuple[str, ...] = ()
    allow_origins: tuple[str, ...] = ()
    allow_dangerous: bool = False
    mcp: bool = True
    log: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr))


def has_diff() -> bool:
    """Whether the API can show what a session changed (the workspace work has landed)."""
    return callable(getattr(Zwarm, "diff", None))


def build(opts: Options) -> Guard:
    """The whole server as one ASGI app."""
    server = Server(opts)
    routes = server.routes()
    lifespan = server.lifespan
    if opts.mcp:
        routes.append(server.mcp_route())
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error},  # type: ignore[dict-item]
    )
    return Guard(app, opts.token, opts.allow_hosts, opts.allow_origins)


class Server:
    """The routes' handlers, on one server's options and streams."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.streams = streams.Streams(self.new_api)
        self._mcp: Any = None
        self._tasks: Any = None  # the lifespan's task group

    def new_api(self) -> Zwarm:
        return Zwarm(env=msgspec.structs.replace(self.opts.env))

    def routes(self) -> list[Route]:
        h = self._handle
        out = [
            Route("/", self.page),
            Route("/static/{name}", self.static),
            Route("/api/info", h(self.info)),
            Route("/api/openapi.json", h(self.openapi)),
            Route("/api/sessions", h(self.list_sessions), methods=["GET"]),
            Route("/api/sessions", h(self.spawn), methods=["POST"]),
            Route("/api/sessions/{ref}", h(self.show), methods=["GET"]),
            Route("/api/sessions/{ref}", h(self.remove), methods=["DELETE"]),
            Route("/api/sessions/{ref}/trajectory", h(self.trajectory)),
            Route("/api/sessions/{ref}/messages", h(self.inject), methods=["POST"]),
            Route("/api/sessions/{ref}/kill", h(self.kill), methods=["POST"]),
            Route("/api/sessions/{ref}/stream", h(self.stream)),
            Route("/api/events", h(self.events)),
            Route("/api/sets", h(self.best_of), methods=["POST"]),
            Route("/api/sets/{ref}", h(self.compare), methods=["GET"]),
            Route("/api/sets/{ref}/messages", h(self.inject_set), methods=["POST"]),
            Route("/api/accounts", h(self.accounts)),
            Route("/api/usage", h(self.usage)),
            Route("/api/merges", h(self.merges), methods=["GET"]),
            Route("/api/merges", h(self.enqueue_merge), methods=["POST"]),
            Route("/api/merges/run", h(self.run_merges), methods=["POST"]),
            Route("/api/merges/pause", h(self.pause_merges), methods=["POST"]),
            Route("/api/merges/resume", h(self.pause_merges), methods=["POST"]),
            Route("/api/merges/{ref}", h(self.unqueue_merge), methods=["DELETE"]),
        ]
        if has_diff():
            out.append(Route("/api/sessions/{ref}/diff", h(self.diff)))
        return out

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            if self.opts.mcp:
                async with anyio.create_task_group() as tg:
                    self._tasks = tg  # /mcp's session manager runs here once it is used
                    yield
                    tg.cancel_scope.cancel()
            else:
                yield
        finally:
            await self.streams.close()

    def mcp_route(self) -> Route:
        """zwarm's orchestrator tools over MCP's streamable HTTP transport (Host, Origin and
        the token are checked by ``Guard``, as for every route). The MCP SDK takes seconds to
        import: it is loaded when ``/mcp`` is first used, and that request waits for it."""
        self._mcp_ready = anyio.Event()
        self._mcp_started = False
        return Route("/mcp", _Asgi(self._mcp_app))

    async def _run_mcp(self) -> None:
        try:
            manager = await anyio.to_thread.run_sync(self._mcp_manager, abandon_on_cancel=True)
        except Exception as e:  # a broken MCP SDK: the rest of the server serves on
            self.opts.log(f"zwarm serve: /mcp is not served: {type(e).__name__}: {e}")
            self._mcp_ready.set()
            return
        async with manager.run():
            self._mcp = manager
            self._mcp_ready.set()
            await anyio.sleep_forever()

    def _mcp_manager(self) -> Any:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        from zwarm.orchestrator.mcp_server import build_server

        return StreamableHTTPSessionManager(
            app=build_server(self.new_api()),
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=MAX_BODY,
        )

    async def _mcp_app(self, scope: Any, receive: Any, send: Any) -> None:
        if not self._mcp_started:
            self._mcp_started = True
            self._tasks.start_soon(self._run_mcp)
        with anyio.move_on_after(120):
            await self._mcp_ready.wait()
        if self._mcp is None:
            reply = _json({"error": "MCP is not available on this server"}, 503)
            await reply(scope, receive, send)
            return
        await self._mcp.handle_request(scope, receive, send)

    # ---------------------------------------------------------------- error handling
    def _handle(
        self, fn: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        @functools.wraps(fn)
        async def handler(request: Request) -> Response:
            try:
                return await fn(request)
            except ZwarmError as e:
                return _error(e)
            except HttpError as e:
                return _json({"error": str(e), "type": "HttpError"}, e.status)
            except Exception as e:  # a bug: one line here, a plain 500 there
                self.opts.log(
                    f"zwarm serve: {request.method} {request.url.path}: {type(e).__name__}: {e}"
                )
                return _json({"error": "internal error (see the server's log)"}, 500)

        return handler

    # ---------------------------------------------------------------- the page
    async def page(self, request: Request) -> Response:
        return _static("index.html")

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return _json({"error": "not found"}, 404)
        return _static(name)

    # ---------------------------------------------------------------- reading
    async def info(self, request: Request) -> Response:
        def work() -> dict[str, Any]:
            from zwarm import __version__, agents

            api = self.new_api()
            try:
                adapter = api.setting("defaults", "adapter")
            except ZwarmError:
                adapter = None
            return {
                "version": __version__,
                "state_dir": str(api.state_dir),
                "cwd": str(api.env.cwd),
                "agents": sorted(agents.names()),
                "default_adapter": adapter,
                "allow_dangerous": self.opts.allow_dangerous,
                "diff": has_diff(),
                "mcp": self.opts.mcp,
            }

        return _json(await run_in_threadpool(work))

    async def openapi(self, request: Request) -> Response:
        from zwarm.serve import openapi

        return _json(openapi.spec(diff=has_diff(), mcp=self.opts.mcp))

    async def list_sessions(self, request: Request) -> Response:
        q = request.query_params
        limit = _int(q.get("limit"), "limit")

        def work() -> list[dict[str, Any]]:
            api = self.new_api()
            rows = api.sessions(q.get("status")) if api.has_sessions() else []
            return select_rows(rows, q.get("name"), q.get("adapter"), q.get("source"), limit)

        return _json(await run_in_threadpool(work))

    async def accounts(self, request: Request) -> Response:
        return _json(await run_in_threadpool(lambda: self.new_api().accounts()))

    async def usage(self, request: Request) -> Response:
        q = request.query_params
        by, since = q.get("by") or "account", q.get("since")
        return _json(await run_in_threadpool(lambda: self.new_api().usage(by, since)))

    async def show(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        return _json(await run_in_threadpool(lambda: self.new_api().show(ref)))

    async def trajectory(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        turn = _int(request.query_params.get("turn"), "turn")
        full = _bool(request.query_params.get("full"), "full")
        steps = await run_in_threadpool(lambda: self.new_api().trajectory(ref, turn))
        return StreamingResponse(_trajectory_json(steps, full), media_type="application/json")

    async def diff(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        turn = _int(request.query_params.get("turn"), "turn")
        text = _bool(request.query_params.get("text"), "text")
        hunks = not _bool(request.query_params.get("stat"), "stat")
        diff: Callable[..., dict[str, Any]] = self.new_api().diff
        return _json(await run_in_threadpool(lambda: diff(ref, turn, hunks=hunks, text=text)))

    # ---------------------------------------------------------------- changing
    async def spawn(self, request: Request) -> Response:
        req = bodies.spawn_request(await _body(request, bodies.Spawn))
        if req.dangerous and not self.opts.allow_dangerous:
            raise HttpError(
                403,
                "this server does not start sessions with --dangerous "
                "(start it with zwarm serve --allow-dangerous to allow that)",
            )

        def work() -> dict[str, Any]:
            from zwarm.orchestrator.tools import confine_cwd

            api = self.new_api()
            s = api.spawn(msgspec.structs.replace(req, cwd=str(confine_cwd(api, req.cwd))))
            return {**row(api.get(s.id)), "warnings": list(api.warnings)}

        return _json(await run_in_threadpool(work), 201)

    async def best_of(self, request: Request) -> Response:
        req = bodies.best_of_request(await _body(request, bodies.BestOf))

        def work() -> dict[str, Any]:
            from zwarm.orchestrator.tools import confine_cwd

            api = self.new_api()
            v = api.best_of(msgspec.structs.replace(req, cwd=str(confine_cwd(api, req.cwd))))
            return {**v, "warnings": list(api.warnings)}

        return _json(await run_in_threadpool(work), 201)

    async def compare(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        rank = request.query_params.get("rank")
        return _json(await run_in_threadpool(lambda: self.new_api().compare(ref, rank)))

    async def inject_set(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        req = bodies.message_request(await _body(request, bodies.Message))
        done = await run_in_threadpool(lambda: self.new_api().inject_set(ref, req))
        return _json({"attempts": done})

    async def inject(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        req = bodies.message_request(await _body(request, bodies.Message))

        def work() -> dict[str, Any]:
            api = self.new_api()
            s, state = api.inject(ref, req)
            turn = s.count + (len(s.queue) if state == "queued" else 0)
            return {"session": row(s), "state": state, "turn": turn, "warnings": api.warnings}

        return _json(await run_in_threadpool(work))

    async def kill(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        return _json(await run_in_threadpool(lambda: self.new_api().kill([ref])[0]))

    async def remove(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        force = _bool(request.query_params.get("force"), "force")
        removed = await run_in_threadpool(lambda: self.new_api().rm([ref], force=force))
        return _json({"removed": removed})

    # ---------------------------------------------------------------- the merge queue
    async def merges(self, request: Request) -> Response:
        target = request.query_params.get("target") or None
        return _json(await run_in_threadpool(lambda: self.new_api().merge_queues(target)))

    async def enqueue_merge(self, request: Request) -> Response:
        b = await _body(request, bodies.Merges)

        def work() -> dict[str, Any]:
            api = self.new_api()
            return api.enqueue_merge(list(b.sessions), target=b.target, priority=b.priority,
                                     send=b.send, run=b.run)  # fmt: skip

        return _json(await run_in_threadpool(work))

    async def run_merges(self, request: Request) -> Response:
        target = request.query_params.get("target") or None
        runs = await run_in_threadpool(lambda: self.new_api().run_merge_queues(target))
        return _json({"runs": runs})

    async def pause_merges(self, request: Request) -> Response:
        target = request.query_params.get("target") or None
        paused = request.url.path.endswith("/pause")
        return _json(
            await run_in_threadpool(lambda: self.new_api().pause_merge_queue(paused, target))
        )

    async def unqueue_merge(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        target = request.query_params.get("target") or None
        return _json(await run_in_threadpool(lambda: self.new_api().unqueue_merge(ref, target)))

    # ---------------------------------------------------------------- live
    async def stream(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        q = request.query_params
        raw = request.headers.get("last-event-id") or q.get("after")
        after = streams.parse_cursor(raw) if raw else None
        if raw and after is None:
            why = f"{raw[:80]!r} is not an event id of this stream (TURN.OFFSET.RANK)"
            raise HttpError(422, why)
        turn = _int(q.get("turn"), "turn") or 1
        until_idle = _bool(q.get("until_idle"), "until_idle")
        self._room()

        def work() -> tuple[str, bytes]:
            s = self.new_api().get(ref)
            shown = streams.cursor_id(after) if after is not None else None
            return s.id, streams.frame("session", row(s), shown)

        sid, first = await run_in_threadpool(work)
        events = self.streams.session(sid, first, after, turn, until_idle)
        return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)

    async def events(self, request: Request) -> Response:
        last = request.headers.get("last-event-id") or request.query_params.get("after")
        self._room()
        events = self.streams.fleet_events(last)
        return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)

    def _room(self) -> None:
        if self.streams.full():
            raise HttpError(503, f"too many streams open ({streams.MAX_CLIENTS}); try again later")


# -------------------------------------------------------------------- helpers
class _Asgi:
    """An ASGI callable as a route's endpoint (a plain function would get a ``Request``)."""

    def __init__(self, app: Callable[[Any, Any, Any], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def status_of(e: ZwarmError) -> int:
    """The HTTP status of an error (its message is the CLI's)."""
    from zwarm import errors
    from zwarm.orchestrator.tools import ToolError

    if isinstance(e, errors.SessionNotFound):
        return 404
    if isinstance(e, (errors.InvalidInput, errors.InvalidRef, ToolError)):
        return 422
    if isinstance(e, errors.StoreError):
        return 500
    return 409  # ambiguous, wrong state, damaged, config, workspace, agent missing


def _error(e: ZwarmError) -> Response:
    from zwarm.text import clean

    out: dict[str, Any] = {"error": clean(str(e), newlines=False), "type": type(e).__name__}
    for key in ("ref", "candidates", "session_id"):
        if isinstance(getattr(e, key, None), (str, list)):
            out[key] = getattr(e, key)
    return _json(out, status_of(e))


async def _http_error(request: Request, e: HTTPException) -> Response:
    what = {404: "no such route", 405: "method not allowed"}.get(e.status_code, str(e.detail))
    return _json({"error": what, "type": "HttpError"}, e.status_code)


def _json(data: Any, status: int = 200) -> Response:
    try:
        body = msgspec.json.encode(data)
    except (TypeError, ValueError):
        return JSONResponse(data, status)
    return Response(body, status, media_type="application/json")


def _static(name: str) -> Response:
    from importlib import resources

    data = (resources.files("zwarm.serve") / "static" / name).read_bytes()
    return Response(data, media_type=STATIC[name])


async def _body(request: Request, cls: type[T]) -> T:
    """The request's JSON body as ``cls`` (413, 415 or 422 if it is not one)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise HttpError(415, "the request body must be JSON (Content-Type: application/json)")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise HttpError(413, f"the request body is over {MAX_BODY:,} bytes")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY:
            raise HttpError(413, f"the request body is over {MAX_BODY:,} bytes")
    try:
        return msgspec.json.decode(bytes(data), type=cls)
    except msgspec.ValidationError as e:
        raise HttpError(422, f"invalid request body: {_refusal(bytes(data), cls, e)}") from None
    except msgspec.DecodeError:
        raise HttpError(422, "the request body is not a valid JSON object") from None


def _refusal(data: bytes, cls: type[Any], e: msgspec.ValidationError) -> str:
    """Why a body of ``cls`` was refused, in the words the orchestrator tools use for the same
    field (``delegate`` and ``converse`` take the same requests, checked against the same
    schema: one wording for one mistake); msgspec's own when the tools' check finds nothing."""
    from zwarm.model.requests import object_schema
    from zwarm.orchestrator.tools import ToolError
    from zwarm.orchestrator.tools.args import validate_args

    body = msgspec.json.decode(data)
    if isinstance(body, dict):
        try:
            validate_args(object_schema(cls), body)
        except ToolError as why:
            return str(why)
    return str(e)


def _int(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 9 or int(value) < 1:
        raise HttpError(422, f"{name} must be a positive whole number, not {value[:40]!r}")
    return int(value)


def _bool(value: str | None, name: str) -> bool:
    if value is None or value.lower() in ("", "0", "false", "no"):
        return False
    if value.lower() in ("1", "true", "yes"):
        return True
    raise HttpError(422, f"{name} must be 1 or 0, not {value[:40]!r}")


def _trajectory_json(steps: Any, full: bool) -> Iterator[bytes]:
    """``{"steps": [...], "problems": [...]}`` written as the steps are read (a 200 MB
    log never sits in memory); run in a worker thread by ``StreamingResponse``."""
    enc = msgspec.json.Encoder()
    yield b'{"steps":['
    batch: list[bytes] = []
    first = True
    for step in steps:
        if not full:
            _cut(step)
        batch.append(enc.encode(step))
        if len(batch) >= 256:
            yield (b"" if first else b",") + b",".join(batch)
            first, batch = False, []
    if batch:
        yield (b"" if first else b",") + b",".join(batch)
    yield b'],"problems":' + enc.encode(list(steps.problems)) + b"}"


def _cut(step: dict[str, Any]) -> None:
    """Long texts of a step cut to ``CUT`` characters; ``truncated`` names the fields cut."""
    cut = []
    for key in ("text", "output", "result", "message"):
        value = step.get(key)
        if isinstance(value, str) and len(value) > CUT:
            step[key] = clip(value, CUT)
            cut.append(key)
    if cut:
        step["truncated"] = cut


__all__ = ["Options", "build", "has_diff"]
