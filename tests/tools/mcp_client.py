"""Drive ``zwarm mcp`` with the MCP Python SDK's own client over stdio (used by the tests)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from tests.support import ZWARM_BIN

Call = Callable[..., Awaitable[tuple[bool, dict[str, Any]]]]


def run_client(
    zw: Any,
    body: Callable[[ClientSession, Call], Awaitable[None]],
    env: dict[str, str] | None = None,
) -> None:
    """Start ``zwarm mcp`` in the zw world and run ``body(session, call)`` against it."""
    params = StdioServerParameters(
        command=str(ZWARM_BIN), args=["mcp"], env={**zw.env, **(env or {})}, cwd=str(zw.cwd)
    )

    async def main() -> None:
        async with stdio_client(params) as (read, write):
            info = types.Implementation(name="pytest-client", version="1.0")
            async with ClientSession(read, write, client_info=info) as session:
                await session.initialize()

                async def call(name: str, args: dict[str, Any] | None = None) -> Any:
                    res = await session.call_tool(name, args)
                    (content,) = res.content
                    assert isinstance(content, types.TextContent)
                    data = json.loads(content.text)
                    assert res.structured_content == data
                    assert data["ok"] is (not res.is_error)
                    return res.is_error, data

                with anyio.fail_after(120):
                    await body(session, call)

    anyio.run(main)
