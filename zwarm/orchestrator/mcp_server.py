"""``zwarm mcp``: zwarm's orchestrator tools served over MCP on stdio, on the official SDK.

Owns only the MCP glue: the tool list is ``tools.schemas("mcp")`` and every call is
``tools.Toolbox.dispatch`` (nothing about a tool is defined here). Must stay true:
- stdout carries only the protocol (the SDK points fd 1 at stderr while serving; agents are
  started with their own files, never the server's stdio);
- a tool call never kills the server: dispatch never raises, a failed call is a result with
  ``is_error`` set, and blocking tools (``wait``) run in a worker thread so the server keeps
  answering other requests meanwhile;
- each session started here records ``source = "mcp:<client name>"`` (``mcp`` if the client
  gave none), so ``zwarm ls`` shows which orchestrator started it;
- this module imports ``mcp`` at import time: only ``zwarm mcp`` imports it.
"""

from __future__ import annotations

import functools
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
    "zwarm runs coding agents (OpenAI Codex, Claude Code, Gemini CLI) as background sessions. "
    "delegate "
    "starts one and returns its session_id at once; wait blocks until one of your sessions "
    "finishes (call it again while others run; do not poll check_session); check_session and "
    "get_trajectory show what an agent did so you can verify it; converse continues a "
    "session; end_session stops it. Results are JSON; ok=false carries an error message."
)


def client_source(ctx: ServerRequestContext[Any, Any]) -> str:
    """``mcp:<client name>`` from the client's initialize request, else ``mcp``."""
    params = ctx.session.client_params
    info = getattr(params, "client_info", None)
    name = str(getattr(info, "name", "") or "").strip()
    return f"mcp:{name[:60]}" if name else "mcp"


def build_server(api: Zwarm) -> Server[Any]:
    """A low-level MCP server whose tools are exactly ``zwarm.orchestrator.tools.TOOLS``."""
    tool_list = [types.Tool.model_validate(t) for t in tools.schemas("mcp")]

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        box = tools.Toolbox(api, client_source(ctx))
        run = functools.partial(box.dispatch, params.name, params.arguments or {})
        result = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=tools.to_json(result))],
            structured_content=result,
            is_error=not result.get("ok", False),
        )

    return Server(
        "zwarm",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def _serve(api: Zwarm) -> None:
    server = build_server(api)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve(api: Zwarm) -> None:
    """Serve on stdin/stdout until the client closes stdin."""
    anyio.run(_serve, api)
