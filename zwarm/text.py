"""Making text safe and short for a terminal: control characters, one-line cells, widths.

Owns the one rule for printing text zwarm did not write itself (a task, a name, an agent's
message or command output, an error quoting either): ``clean`` removes terminal escape
sequences and control characters, so nothing an agent or a user wrote can recolour, move the
cursor in, retitle or otherwise drive the terminal. Must stay true:
- every human-readable output path passes such text through ``clean`` (or ``oneline`` /
  ``cut``, which use it) before printing; ``--json`` output is JSON-escaped instead;
- ``clean`` keeps newlines (and tabs) only where asked and removes: ANSI/VT escape sequences
  (CSI, OSC, DCS/PM/APC/SOS strings, two-character escapes), the C0 and C1 control characters,
  DEL, and the Unicode bidirectional overrides and isolates (which reorder what is shown);
- widths are terminal cells (wide East Asian characters count 2, combining marks 0);
- it imports only the standard library and the step vocabulary (``zwarm.model.steps``), cheap
  to import: ``zwarm ls`` imports it, and every front end (the CLI, serve, the orchestrator)
  shares it, none owning it.
Also owns how a trajectory step reads as text wherever it is shown: ``activity`` (one plain
line, for the live views of the CLI and the dashboard's rows), ``command_text`` (the command
inside a shell wrapper), ``as_json`` (tool inputs), ``no_exit``, ``file_changes`` and
``todo_items``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import unicodedata
from collections.abc import Sequence
from typing import Any, TextIO

from zwarm.model.steps import UNFINISHED, Step

# ESC-introduced sequences, and the 8-bit CSI/OSC/DCS forms. A string sequence (OSC, DCS...)
# runs to BEL or ST (ESC \), or to the end of the text if unterminated.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI ... final byte
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"  # two-character (and nF) escapes; a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|[\x90\x9d\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?",  # 8-bit string sequences
)
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_CONTROLS}]")
_BREAKS = re.compile("\r\n|[\t\n\r\x0b\x0c]")  # become one space in one-line text
_NEEDS_CLEANING = re.compile(f"[{_CONTROLS}]")
_SHOWN = re.compile(f"[{_CONTROLS}\t\n]")
# Text whose every character takes one cell: Latin, Greek, Cyrillic... (below the combining
# marks at U+0300) and the common punctuation of U+2010..U+205E (dashes, quotes, …).
_NARROW = re.compile("[\x20-\u02ff\u2010-\u2027\u2030-\u205e]*+\\Z")


def clean(text: object, newlines: bool = True) -> str:
    """``text`` as a string with escape sequences and control characters removed; newlines
    and tabs are kept if ``newlines``, else each line break or tab becomes a space."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    if not newlines:
        s = _BREAKS.sub(" ", s)
    elif "\r\n" in s:
        s = s.replace("\r\n", "\n")
    if not _NEEDS_CLEANING.search(s):
        return s
    return _CONTROL.sub("", _ESCAPES.sub("", s))


def visible(text: object) -> str:
    """``text`` with every control character, escape and bidi override shown as a ``\\uXXXX``
    escape instead of removed: for what a user must see exactly (``zwarm trust``'s review)."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    return _SHOWN.sub(lambda m: f"\\u{ord(m.group()):04x}", s)


def oneline(text: object, width: int | None = None) -> str:
    """``text`` cleaned, its whitespace runs collapsed to one space, cut to ``width`` cells."""
    if text is None:
        return ""
    s = " ".join(clean(text, newlines=False).split())
    return s if width is None else cut(s, width)


def cells(s: str) -> int:
    """How many terminal cells ``s`` takes (no control characters: see ``clean``)."""
    if s.isascii() or _NARROW.match(s):
        return len(s)
    return sum(_char_cells(c) for c in s)


def _char_cells(c: str) -> int:
    if unicodedata.combining(c) or c in "\u200b\u200c\u200d\ufeff":
        return 0
    return 2 if unicodedata.east_asian_width(c) in "WF" else 1


def cut(s: str, width: int) -> str:
    """``s`` cut to at most ``width`` cells, ending in … when cut."""
    if width <= 0:
        return ""
    if s.isascii() or _NARROW.match(s):  # one cell per character: cut by length
        return s if len(s) <= width else s[: width - 1] + "…"
    if cells(s) <= width:
        return s
    out, used = [], 0
    for c in s:
        w = _char_cells(c)
        if used + w > width - 1:
            break
        out.append(c)
        used += w
    return "".join(out) + "…"


def pad(s: str, width: int) -> str:
    """``s`` padded with spaces to ``width`` cells."""
    return s + " " * max(0, width - cells(s))


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The width to fit output to: ``$COLUMNS`` if set, else the terminal's (of ``stream``,
    default stdout), else None (not a terminal: do not fit)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    out = stream if stream is not None else sys.stdout
    try:
        if out.isatty():
            return os.get_terminal_size(out.fileno()).columns
    except (AttributeError, OSError, ValueError):
        pass
    return None


class ByteCleaner:
    """``clean`` for a byte stream cut into arbitrary chunks (``zwarm logs`` on a terminal):
    UTF-8 and escape sequences split across chunks are handled; newlines are kept."""

    def __init__(self) -> None:
        import codecs

        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""  # an escape sequence that may continue in the next chunk

    def feed(self, data: bytes, final: bool = False) -> bytes:
        text = self._held + self._decoder.decode(data, final)
        self._held = ""
        esc = max(text.rfind("\x1b"), text.rfind("\x9b"))
        if not final and esc >= 0 and len(text) - esc < 256 and not _complete(text[esc:]):
            text, self._held = text[:esc], text[esc:]
        return clean(text).encode("utf-8", "replace")


def _complete(tail: str) -> bool:
    """Whether the escape sequence starting ``tail`` ends inside it."""
    m = _ESCAPES.match(tail)
    return m is not None and m.end() < len(tail)


# ---------------------------------------------------------------------- steps as text
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})


def command_text(command: Any) -> str:
    """A command step's text as people read it (trajectory, top): the command inside a
    shell wrapper (``/bin/bash -lc 'pytest -q'``, ``sh -c X``, ``zsh -lc X`` -> ``pytest -q``),
    as codex runs every command; anything else as it is."""
    text = str(command or "")
    head = text.split(" ", 2)
    if len(head) < 3 or head[0].rsplit("/", 1)[-1] not in _SHELLS:
        return text
    flag = head[1]
    if not (flag.startswith("-") and "c" in flag and flag[1:].isalpha()):
        return text
    import shlex

    try:
        words = shlex.split(text)
    except ValueError:  # unbalanced quotes: shown as it is
        return text
    return words[2] if len(words) == 3 and words[2].strip() else text


def no_exit(status: Any) -> str:
    """What a command without an exit code says instead."""
    if status == "in_progress":
        return "running"
    if status == UNFINISHED:
        return "did not finish"
    return str(status or "no exit code")


def activity(s: Step | None, width: int = 80) -> str:
    """A step as one plain line (live views): ``$ pytest -q (exit 1)``, ``message Done…``."""
    if s is None:
        return ""
    kind = s.get("kind")
    if kind in ("message", "reasoning"):
        text = f"{'' if kind == 'message' else 'thinking: '}{s.get('text', '')}"
    elif kind == "command":
        code = s.get("exit_code")
        ended = f"exit {code}" if code is not None else no_exit(s.get("status") or "running")
        text = f"$ {command_text(s.get('command'))} ({ended})"
    elif kind == "file_change":
        text = f"files: {file_changes(s)}"
    elif kind == "tool_call":
        text = f"tool {s.get('name')} {as_json(s.get('arguments'))}"
    elif kind == "tool_result":
        text = f"result: {s.get('result', '')}"
    elif kind == "web_search":
        text = f"search: {s.get('query')}"
    elif kind == "todo":
        text = f"todo: {todo_items(s)}"
    elif kind == "error":
        text = f"{'error' if s.get('fatal') else 'warning'}: {s.get('message')}"
    else:
        text = str(kind)
    return oneline(text, width)


def as_json(value: Any) -> str:
    """Tool inputs and unknown values as JSON (never a Python repr)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def file_changes(s: Step) -> str:
    """A ``file_change`` step's changes: ``update a.py, add b.py``."""
    return ", ".join(f"{c.get('kind')} {c.get('path')}" for c in s.get("changes") or [])


def todo_items(s: Step) -> str:
    """A ``todo`` step's items: ``[x] done; [ ] not yet``."""
    items: Sequence[dict[str, Any]] = s.get("items") or []
    return "; ".join(("[x] " if i.get("completed") else "[ ] ") + str(i.get("text")) for i in items)
