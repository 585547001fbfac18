"""The normalized trajectory step: zwarm's one vocabulary for what an agent did.

Adapters translate their CLI's events into these dicts; everything else (trajectory rendering,
follow-up summaries, the orchestrator tools) reads only these. Must stay true: a step is a plain
``dict`` (cheap to build while streaming a 200 MB log) with a ``kind`` from ``KINDS`` and the
fields listed for that kind; ``turn`` and ``index`` are added by the reader, not the adapter.
Steps come in the order the agent started them. ``in_progress`` is a step started and not
ended; in a turn that has ended, the reader makes it ``unfinished`` (``UNFINISHED``): it never
finished, and never will.

Kinds and fields:
- ``message``     text
- ``reasoning``   text
- ``command``     command, exit_code (int|None), output,
                  status (completed|failed|in_progress|declined|unfinished)
- ``file_change`` changes: [{path, kind: add|delete|update}], status
- ``tool_call``   id, name, arguments (object), server (str|None; codex mcp_tool_call)
- ``tool_result`` id, name (str|None), result (str), is_error (bool)
- ``web_search``  query
- ``todo``        items: [{text, completed}]
- ``error``       message, fatal (bool)
"""

from __future__ import annotations

from typing import Any

Step = dict[str, Any]

UNFINISHED = "unfinished"  # the status of a step whose turn ended before it did


def ended_turn(step: Step) -> Step:
    """``step`` as a turn that has ended shows it: one still ``in_progress`` is
    ``unfinished``."""
    if step.get("status") == "in_progress":
        step["status"] = UNFINISHED
    return step


KINDS = (
    "message",
    "reasoning",
    "command",
    "file_change",
    "tool_call",
    "tool_result",
    "web_search",
    "todo",
    "error",
)
