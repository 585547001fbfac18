"""The toolbox: one caller's tools on one ``Zwarm``, and the tools rendered for each surface.

Owns ``Toolbox.dispatch`` (look the tool up, check its arguments against its schema, run its
handler, shape the result), the caller's identity (``source``) and run, and ``schemas``: the
tool definitions in the shapes OpenAI, Anthropic and MCP expect. Must stay true:
- ``Toolbox.dispatch`` never raises: unknown tools, bad arguments, unknown or ambiguous ids,
  finished sessions, even bugs come back as ``{"ok": false, "error": "<one clear line>"}``;
  every success is ``{"ok": true, ...}``;
- arguments are checked against the tool's own schema (``args``) before its handler runs;
- what a call showed as finished is recorded as told only when its caller says the result
  was delivered (``call``; ``dispatch`` says so at once): a cancelled call marks nothing;
- every surface is generated from the same ``Tool`` records (``catalog.TOOLS`` and a
  caller's extras): nothing about a tool is written twice.
"""

from __future__ import annotations

import copy
import functools
import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from zwarm.api import Zwarm
from zwarm.errors import InvalidInput, ZwarmError
from zwarm.orchestrator.tools.args import parse_arguments, validate_args
from zwarm.orchestrator.tools.base import Result, Tool, ToolError
from zwarm.orchestrator.tools.catalog import TOOLS
from zwarm.orchestrator.tools.confine import confine_cwd
from zwarm.orchestrator.tools.looked import Looked

FORMATS = ("openai", "anthropic", "mcp")


class Toolbox:
    """Runs tools for one caller (``source``: which orchestrator is calling) on one ``Zwarm``."""

    def __init__(
        self,
        api: Zwarm | None = None,
        source: str = "python",
        extra: Sequence[Tool] = (),
        run: str | None = None,
    ) -> None:
        self.api = api or Zwarm()
        self.source = source or "python"
        self.run = run  # the orchestrator run calling (zwarm orchestrate): its sessions' root
        self.tools = {t.name: t for t in (*TOOLS, *extra)}
        self.told: dict[str, str] | None = None  # in a ``call``: the finishes it showed
        self.stop: threading.Event | None = None  # in a ``call``: set when it is given up

    def dispatch(self, name: str, arguments: Any = None) -> Result:
        """Run tool ``name`` with ``arguments`` (a dict or a JSON object string). Never raises.
        The finished sessions the result shows are recorded as told to the caller at once:
        for a caller that gets the result in the same process (a loop, a script)."""
        result, told = self.call(name, arguments)
        told()
        return result

    def call(
        self, name: str, arguments: Any = None, stop: threading.Event | None = None
    ) -> tuple[Result, Callable[[], None]]:
        """``dispatch`` for a caller that learns only later whether the result reached the
        model (an MCP client may give up on a call, or go away): the result, and what
        records as told the finished sessions it shows. Run that once the result has been
        delivered, never for a call cancelled or abandoned: a finish stays news until then.
        ``stop``, once set, makes a blocking tool (``wait``) give up soon; its result is
        not to be used. Never raises."""
        box = copy.copy(self)
        box.told, box.stop = {}, stop
        result = box._run(name, arguments)
        return result, functools.partial(Looked(self.api, self.source).record, box.told)

    def _run(self, name: str, arguments: Any) -> Result:
        try:
            tool = self.tools.get(name) if isinstance(name, str) else None
            if tool is None:
                known = ", ".join(self.tools)
                raise ToolError(f"unknown tool {name!r}; the tools are: {known}")
            args = validate_args(tool.schema, parse_arguments(arguments))
            if self.api.has_sessions():
                self.looked().start(self.api.env.now_iso())
            self.api.warnings.clear()
            result = {"ok": True, **tool.handler(self, args)}
            if self.api.warnings:  # e.g. a native follow-up that gets a summary instead
                result["warnings"] = list(self.api.warnings)
            return result
        except ZwarmError as e:
            return {"ok": False, "error": _one_line(str(e))}
        except Exception as e:  # a bug must not kill the server or the loop
            where = traceback.extract_tb(e.__traceback__)[-1]
            return {
                "ok": False,
                "error": _one_line(
                    f"internal error in tool {name!r}: {type(e).__name__}: {e} "
                    f"({Path(where.filename).name}:{where.lineno})"
                ),
            }

    # ----- helpers for handlers
    def confine(self, raw: str | None) -> Path:
        return confine_cwd(self.api, raw)

    def looked(self) -> Looked:
        return Looked(self.api, self.source, self.told)

    def stopped(self) -> bool:
        """Whether the caller gave up on this call (a blocking tool then stops)."""
        return self.stop is not None and self.stop.is_set()

    def max_wait(self) -> float:
        return float(self.api.setting("tools", "max_wait_s"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def dispatch(
    name: str, arguments: Any = None, *, api: Zwarm | None = None, source: str = "python"
) -> Result:
    """Run one tool (see ``Toolbox.dispatch``): for people writing their own LLM loops."""
    return Toolbox(api, source).dispatch(name, arguments)


def schemas(format: str = "openai", tools: Iterable[Tool] | None = None) -> list[dict[str, Any]]:
    """The tool definitions in the shape ``format`` (openai, anthropic or mcp) expects."""
    items = list(TOOLS if tools is None else tools)
    if format == "openai":
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.schema},
            }
            for t in items
        ]
    if format == "anthropic":
        return [
            {"name": t.name, "description": t.description, "input_schema": t.schema} for t in items
        ]
    if format == "mcp":
        return [_mcp_tool(t) for t in items]
    raise InvalidInput(f"unknown schema format {format!r} (use {', '.join(FORMATS)})")


def _mcp_tool(t: Tool) -> dict[str, Any]:
    hints: dict[str, Any] = {"readOnlyHint": t.read_only}
    if not t.read_only:
        hints["destructiveHint"] = t.destructive
    return {
        "name": t.name,
        "description": t.description,
        "inputSchema": t.schema,
        "annotations": hints,
    }
