"""Drive ``zwarm mcp`` with the MCP Python SDK's own client over stdio (used by the tests)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from tests.support import ZWARM_BIN

Call = Callable[..., Awaitable[tuple[bool, dict[str, Any]]]]


@contextlib.asynccontextmanager
async def connect(
    zw: Any,
    env: dict[str, str] | None = None,
    name: str = "pytest-client",
    drop: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    cwd: Path | None = None,
) -> AsyncIterator[tuple[ClientSession, Call]]:
    """A connection to a ``zwarm mcp`` of its own in the zw world (its environment ``zw.env``
    with ``env`` over it, without the variables ``drop``; in ``cwd``, else ``zw.cwd``): the
    session, and ``call(tool, args)`` returning (is_error, the result's JSON), checked to be
    consistent."""
    server_env = {k: v for k, v in {**zw.env, **(env or {})}.items() if k not in drop}
    params = StdioServerParameters(
        command=str(ZWARM_BIN), args=["mcp", *args], env=server_env, cwd=str(cwd or zw.cwd)
    )
    async with stdio_client(params) as (read, write):
        info = types.Implementation(name=name, version="1.0")
        async with ClientSession(read, write, client_info=info) as session:
            await session.initialize()

            async def call(tool: str, arguments: dict[str, Any] | None = None) -> Any:
                res = await session.call_tool(tool, arguments)
                (content,) = res.content
                assert isinstance(content, types.TextContent)
                data = json.loads(content.text)
                assert res.structured_content == data
                assert data["ok"] is (not res.is_error)
                return res.is_error, data

            yield session, call


def run_client(
    zw: Any,
    body: Callable[[ClientSession, Call], Awaitable[None]],
    env: dict[str, str] | None = None,
) -> None:
    """Start ``zwarm mcp`` in the zw world and run ``body(session, call)`` against it."""

    async def main() -> None:
        async with connect(zw, env) as (session, call):
            with anyio.fail_after(120):
                await body(session, call)

    anyio.run(main)
