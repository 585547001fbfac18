"""The normalized trajectory step: zwarm's one vocabulary for what an agent did.

Adapters translate their CLI's events into these dicts; everything else (trajectory rendering,
follow-up summaries, the orchestrator tools) reads only these. Owns the kinds (``KINDS``,
declared once with their labels) and how people read a step before any styling or cutting:
``label`` and ``text`` (a trajectory line: ``cli.render.step_line``), ``line`` (one line in the
live views and the dashboard's "doing": ``cli.render.activity``), ``command_text`` and
``exit_text``; the terminal adds only its styling. (The dashboard's ``serve/static/app.js``
reads the same fields in the browser: the one other place that knows the kinds.) Must stay
true: a step is a plain ``dict`` (cheap to build while streaming a 200 MB log) with a ``kind``
from ``KINDS`` and the fields listed for that kind; ``turn`` and ``index`` are added by the
reader, not the adapter. Steps come in the order the agent started them. ``in_progress`` is
a step started and not ended; in a turn that has ended, the reader makes it ``unfinished``
(``UNFINISHED``): it never finished, and never will.

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


# Each kind, with its label in a trajectory and the start of its one line in the live views.
_LOOKS: dict[str, tuple[str, str]] = {
    "message": ("message", ""),
    "reasoning": ("reasoning", "thinking: "),
    "command": ("$", "$ "),
    "file_change": ("files", "files: "),
    "tool_call": ("tool", "tool "),
    "tool_result": ("result", "result: "),
    "web_search": ("search", "search: "),
    "todo": ("todo", "todo: "),
    "error": ("error", "error: "),  # "warning" when not fatal
}
KINDS = tuple(_LOOKS)


def switched_text(n: int, account: str | None, left: str) -> str:
    """What a turn re-run on another account says (``show``, a trajectory's notice): turn
    ``n`` ran on ``account`` (None: not started yet) after account ``left`` hit its usage
    limit, as a new session of its agent with the summarized context."""
    where = f"on account {account}" if account else "on another account"
    return (
        f"turn {n} re-run {where}: account {left} hit its usage limit; a new agent session "
        "with the summarized context"
    )


def label(step: Step) -> str:
    """The word a trajectory shows before ``step``'s text: ``message``, ``$``, ``files``...;
    ``warning`` for an error that is not fatal; an unknown kind as it is."""
    kind = step.get("kind")
    if kind == "error" and not step.get("fatal"):
        return "warning"
    look = _LOOKS.get(kind) if isinstance(kind, str) else None
    return look[0] if look else str(kind)


def text(step: Step) -> str:
    """What ``step`` says, without its label (nothing cleaned or cut): a message's text, a
    command as people read it (``command_text``), the files changed, a tool's name and its
    arguments as JSON...; an unknown kind as JSON."""
    kind = step.get("kind")
    if kind in ("message", "reasoning"):
        return str(step.get("text", ""))
    if kind == "command":
        return command_text(step.get("command"))
    if kind == "file_change":
        changes = step.get("changes") or []
        return ", ".join(f"{c.get('kind')} {c.get('path')}" for c in changes)
    if kind == "tool_call":
        return f"{step.get('name')} {as_json(step.get('arguments'))}"
    if kind == "tool_result":
        return str(step.get("result", ""))
    if kind == "web_search":
        return str(step.get("query"))
    if kind == "todo":
        items = step.get("items") or []
        return "; ".join(
            ("[x] " if i.get("completed") else "[ ] ") + str(i.get("text")) for i in items
        )
    if kind == "error":
        return str(step.get("message"))
    return as_json(step)


def line(step: Step) -> str:
    """``step`` on one line as the live views show it (``$ pytest -q (exit 1)``, a message
    alone, ``thinking: ...``, ``files: ...``; an unknown kind by its name), not yet cleaned."""
    kind = step.get("kind")
    look = _LOOKS.get(kind) if isinstance(kind, str) else None
    if look is None:
        return str(kind)
    start = "warning: " if kind == "error" and not step.get("fatal") else look[1]
    end = f" ({exit_text(step)})" if kind == "command" else ""
    return start + text(step) + end


def exit_text(step: Step) -> str:
    """A command's end: ``exit N``, or without an exit code ``running``, ``did not finish``,
    ``declined`` (its status) or ``no exit code``."""
    code = step.get("exit_code")
    if code is not None:
        return f"exit {code}"
    status = step.get("status")
    if status == "in_progress":
        return "running"
    if status == UNFINISHED:
        return "did not finish"
    return str(status or "no exit code")


_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})


def command_text(command: Any) -> str:
    """A command step's text as people read it (trajectory, top): the command inside a
    shell wrapper (``/bin/bash -lc 'pytest -q'``, ``sh -c X``, ``zsh -lc X`` -> ``pytest -q``),
    as codex runs every command; anything else as it is."""
    line = str(command or "")
    head = line.split(" ", 2)
    if len(head) < 3 or head[0].rsplit("/", 1)[-1] not in _SHELLS:
        return line
    flag = head[1]
    if not (flag.startswith("-") and "c" in flag and flag[1:].isalpha()):
        return line
    import shlex

    try:
        words = shlex.split(line)
    except ValueError:  # unbalanced quotes: shown as it is
        return line
    return words[2] if len(words) == 3 and words[2].strip() else line


def as_json(value: Any) -> str:
    """Tool inputs and unknown values as JSON (never a Python repr); a string as it is."""
    if isinstance(value, str):
        return value
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)
