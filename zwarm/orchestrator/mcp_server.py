"""``zwarm mcp``: zwarm's orchestrator tools served over MCP on stdio, on the official SDK.

Owns only the MCP glue: the tool list is ``tools.schemas("mcp")`` and every call is
``tools.Toolbox.call`` (nothing about a tool is defined here); who each caller is; when what
a call showed counts as told. Must stay true:
- stdout carries only the protocol (the SDK points fd 1 at stderr while serving; agents are
  started with their own files, never the server's stdio);
- a tool call never kills the server: dispatch never raises, a failed call is a result with
  ``is_error`` set, and blocking tools (``wait``) run in a worker thread so the server keeps
  answering other requests meanwhile;
- each connection is a caller of its own (``Callers``): ``source = "mcp:<client
  name>/<connection>"`` (``mcp/<connection>`` if the client gave no name), recorded on the
  sessions it starts, so ``zwarm ls`` shows which orchestrator started each and two
  conversations of one client never take each other's news; a source given to the server
  (``--source``, ``ZWARM_SOURCE``) names every connection's caller instead;
- delivery is at least once: what a call showed as finished is recorded as told only when a
  later call of the same caller begins (over stdio a reply cannot be seen arriving; a client
  that calls again has it). A call cancelled or abandoned, or a reply the client never
  acknowledged by calling again (it went away), marks nothing; a cancelled ``wait`` stops;
- the instructions say what zwarm is, how to use the tools, and which state dir (and project)
  this server serves;
- this module imports ``mcp`` at import time: only ``zwarm mcp`` and ``zwarm serve``'s
  ``/mcp`` import it.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from zwarm import __version__
from zwarm.orchestrator import tools

if TYPE_CHECKING:
    from zwarm.api import Zwarm

INSTRUCTIONS = (
    "zwarm runs coding agents (OpenAI Codex, Claude Code, Gemini CLI) as background sessions: "
    "use it to hand a coding task to another agent and keep working meanwhile, or to run "
    "several tasks in parallel. delegate starts one and returns its session_id at once "
    "(worktree=true gives it its own git worktree and branch, so parallel agents never "
    "overwrite each other); wait blocks until one of your sessions finishes, at most "
    f"{tools.MAX_WAIT_S:g} s per call by default, so call it again while others run (do not "
    "poll check_session); "
    "check_session and get_trajectory show what an agent did so you can verify it; get_diff "
    "shows exactly what it changed, comment annotates a line for its next turn, and merge "
    "brings a finished worktree session's branch into the main checkout (merge_queue: many, "
    "rebased, checked and merged one by one); converse continues "
    "a session; end_session stops it; list_sessions lists them all. Results are JSON; "
    "ok=false carries an error message."
)
CALLERS_KEPT = 256  # callers whose last replies await acknowledgement (oldest forgotten)


def instructions(api: Zwarm) -> str:
    """``INSTRUCTIONS`` and the state dir (and project) this server serves."""
    where = f" This server serves the zwarm state dir {api.state_dir}"
    if api.state_dir.name == ".zwarm":
        where += f" (project {api.state_dir.parent})"
    return INSTRUCTIONS + where + "."


def client_name(ctx: ServerRequestContext[Any, Any]) -> str:
    """The client's name from its initialize request ("" if it gave none)."""
    params = ctx.session.client_params
    info = getattr(params, "client_info", None)
    return " ".join(str(getattr(info, "name", "") or "").split())[:60]


class Callers:
    """Who calls: one caller per connection, unless the server was given a ``source``.

    A connection is this process (stdio has one) or, over streamable HTTP, one MCP session
    (its ``mcp-session-id``, hashed with a secret of this process: the id itself is never
    recorded). Keeps, per caller, what its replied calls showed as finished until its next
    call begins (``acknowledged``). Used from the event loop only."""

    def __init__(self, source: str | None = None) -> None:
        self.fixed = source
        self._secret = secrets.token_hex(16)
        self._process = hashlib.sha256(self._secret.encode()).hexdigest()[:6]
        self._replied: OrderedDict[str, list[Callable[[], None]]] = OrderedDict()

    def source(self, ctx: ServerRequestContext[Any, Any]) -> str:
        if self.fixed:
            return self.fixed
        name = client_name(ctx)
        headers = getattr(ctx.request, "headers", None)
        session = headers.get("mcp-session-id") if headers is not None else None
        conn = self._process
        if session:
            conn = hashlib.sha256(f"{self._secret}:{session}".encode()).hexdigest()[:6]
        return f"mcp:{name}/{conn}" if name else f"mcp/{conn}"

    def acknowledged(self, source: str) -> list[Callable[[], None]]:
        """What ``source``'s earlier replies showed: delivered, now that it calls again."""
        return self._replied.pop(source, [])

    def replied(self, source: str, told: Callable[[], None]) -> None:
        self._replied.setdefault(source, []).append(told)
        self._replied.move_to_end(source)
        while len(self._replied) > CALLERS_KEPT:
            self._replied.popitem(last=False)


def build_server(api: Zwarm, source: str | None = None) -> Server[Any]:
    """A low-level MCP server whose tools are exactly ``zwarm.orchestrator.tools.TOOLS``;
    ``source`` names its one caller (else each connection is its own)."""
    tool_list = [types.Tool.model_validate(t) for t in tools.schemas("mcp")]
    callers = Callers(source)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        who = callers.source(ctx)
        delivered = callers.acknowledged(who)
        if delivered:  # written whole even if this call is cancelled meanwhile
            await anyio.to_thread.run_sync(functools.partial(_record, delivered))
        box = tools.Toolbox(api, who)
        stop = threading.Event()
        run = functools.partial(box.call, params.name, params.arguments or {}, stop)
        try:
            result, told = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        finally:
            stop.set()  # cancelled: the abandoned thread stops waiting, and marks nothing
        callers.replied(who, told)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=tools.to_json(result))],
            structured_content=result,
            is_error=not result.get("ok", False),
        )

    return Server(
        "zwarm",
        version=__version__,
        instructions=instructions(api),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _record(delivered: list[Callable[[], None]]) -> None:
    for told in delivered:
        told()


async def _serve(api: Zwarm, source: str | None) -> None:
    server = build_server(api, source)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve(api: Zwarm, source: str | None = None) -> None:
    """Serve on stdin/stdout until the client closes stdin."""
    anyio.run(_serve, api, source)
