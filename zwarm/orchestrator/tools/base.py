"""What every part of the tool layer shares: a tool, a result, a tool's error.

Owns the ``Tool`` record (name, LLM-facing description, JSON Schema, handler, hints), the
``ToolError`` a handler raises for a call it cannot carry out, ``object_schema`` (the shape of
every tool's arguments) and ``to_json`` (a result as the compact text an LLM reads). Must stay
true: it imports only the standard library and ``zwarm.errors``, so every other module of the
layer imports it without a cycle.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zwarm.errors import ZwarmError

if TYPE_CHECKING:
    from zwarm.orchestrator.tools.toolbox import Toolbox

Result = dict[str, Any]
Handler = Callable[["Toolbox", dict[str, Any]], Result]


class ToolError(ZwarmError):
    """A tool call that cannot be carried out; its message is the tool result's ``error``."""


@dataclass(frozen=True)
class Tool:
    """One tool: everything every surface needs, in one place."""

    name: str
    description: str
    schema: dict[str, Any]
    handler: Handler
    read_only: bool = False
    destructive: bool = False


def object_schema(props: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(required),
        "additionalProperties": False,
    }


def to_json(result: Result) -> str:
    """A tool result as the compact JSON text an LLM reads."""
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"), default=str)
