"""The typed fast path of ``zwarm.agents.codex.events.iter_steps``: codex's hot event shapes
as msgspec Structs, and the step each gives.

Owns which codex lines take the fast path and what they become. Imported only by
``iter_steps`` (the supervisor's ``scan_outcome`` never loads it).

Must stay true:
- for every line, the fast path gives exactly what the dict path (``events``) gives, or says
  ``SLOW`` (or fails to decode, see ``jsonl.struct_decoder``) so the dict path reads it: a
  decoded ``Line`` is only trusted for the fields declared here, each with the type the dict
  path accepts (a field of another type fails the decode, never reads as a default);
- a ``RawLine`` (inside ``jsonl.raw_strings``, for a ``jsonl.raw_safe`` line only) gives the
  same steps with the command output as the raw JSON string the agent wrote;
- only events that are all of their kind's steps in one dict are handled here: messages,
  reasoning and commands (the bulk of any log); everything else (tool calls, file changes,
  errors, items of unknown or other types started) is ``SLOW``.
"""

from typing import Any, Final

import msgspec

from zwarm.model.steps import Step


class Item(msgspec.Struct):
    """The fields of an item that messages, reasoning and commands use (others are skipped)."""

    id: str = ""
    type: str = ""
    text: str = ""
    command: str = ""
    aggregated_output: str = ""
    exit_code: int | None = None
    status: str = ""


class Line(msgspec.Struct):
    type: str = ""
    item: Item | None = None


_EMPTY = msgspec.Raw(b'""')


class RawItem(Item):
    """``Item`` with the output kept as raw JSON (``jsonl.raw_strings``): only for a safe
    line (``jsonl.raw_safe``). Any JSON value is accepted there; ``output`` reads a
    non-string as "", as the dict path does."""

    aggregated_output: msgspec.Raw = _EMPTY  # type: ignore[assignment]


class RawLine(msgspec.Struct):
    type: str = ""
    item: RawItem | None = None


def output(item: Item) -> str | msgspec.Raw:
    """The command's output: a str, or a Raw JSON string (a Raw other JSON value: "")."""
    out: Any = item.aggregated_output
    if type(out) is str or (len(out) and memoryview(out)[0] == 0x22):  # a JSON string
        return out  # type: ignore[no-any-return]
    return ""


SLOW: Final = object()  # this line is for the dict path

_ITEM_EVENTS = frozenset({"item.started", "item.updated", "item.completed"})
_SLOW_EVENTS = frozenset({"error", "turn.failed"})  # the dict path's other event handlers
_TRACKED = frozenset({"mcp_tool_call", "file_change"})  # started: the dict path keeps them


def command_step(item: Item, status: str | None = None) -> Step:
    """As ``events._command_step`` for a typed item."""
    exit_code = item.exit_code
    if status is None:
        status = item.status or ("failed" if exit_code else "completed")
    return {
        "kind": "command",
        "command": item.command,
        "exit_code": exit_code,
        "output": output(item),
        "status": status,
    }


def step(line: Line | RawLine, open_items: dict[str, Any]) -> Step | object | None:
    """The one step of ``line`` (None: no step; ``SLOW``: the dict path must read it).
    Started commands are remembered in ``open_items`` as the dict path does."""
    kind, item = line.type, line.item
    if kind not in _ITEM_EVENTS:
        return SLOW if kind in _SLOW_EVENTS else None
    if item is None:
        return SLOW
    t = item.type
    if kind != "item.completed":
        if t == "command_execution":
            if item.id:
                open_items[item.id] = item
            return None
        return SLOW if t in _TRACKED else None
    if t == "agent_message":
        open_items.pop(item.id, None)
        return {"kind": "message", "text": item.text}
    if t == "command_execution":
        open_items.pop(item.id, None)
        return command_step(item)
    if t == "reasoning":
        open_items.pop(item.id, None)
        return {"kind": "reasoning", "text": item.text} if item.text else None
    return SLOW
