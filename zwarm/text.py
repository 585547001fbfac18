"""Making text safe and short: control characters, one-line cells, widths, every cut.

Owns ``plural`` (a count and its noun), ``usd`` (an amount of dollars, never ``$0.00`` for a
small one) and every way zwarm shortens text: ``cut`` (terminal cells, ending in …), ``clip``
(characters, ending in …: a bound on what is stored, logged or sent, which must not depend on
how wide a character shows), ``elide`` (head and tail around a ``[... N chars cut ...]``
note: what a model reads, which should know text is missing) and ``brief`` (the first lines
and characters, with how much more: a long output in a terminal).
No other module slices text and appends a marker of its own. Owns too the one rule for
printing text zwarm did not write itself (a task, a name, an agent's message or command
output, an error quoting either): ``clean`` removes terminal escape sequences and control
characters, so nothing an agent or a user wrote can recolour, move the cursor in, retitle or
otherwise drive the terminal.
Must stay true:
- every human-readable output path passes such text through ``clean`` (or ``oneline`` /
  ``cut``, which use it) before printing; ``--json`` output is JSON-escaped instead;
- ``clean`` keeps newlines (and tabs) only where asked and removes: ANSI/VT escape sequences
  (CSI, OSC, DCS/PM/APC/SOS strings, two-character escapes), the C0 and C1 control characters,
  DEL, and the Unicode bidirectional overrides and isolates (which reorder what is shown);
- widths are terminal cells (wide East Asian characters count 2, combining marks 0);
- it imports only the standard library, cheap
  to import: ``zwarm ls`` imports it, and every front end (the CLI, serve, the orchestrator)
  shares it, none owning it.
"""

from __future__ import annotations

import os
import re
import sys
import unicodedata
from typing import TextIO

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


def plural(n: int, word: str) -> str:
    """``1 turn``, ``2 turns``: a count and its noun (an English plural in -s)."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def usd(amount: float) -> str:
    """``$0.0123`` under a dollar, ``$12.34`` from one on: a small spend or budget never reads
    ``$0.00`` (``$0.0003 spent today (budget_daily $0.0001)``, not ``$0.00 ... $0.00``)."""
    return f"${amount:.4f}" if amount < 1 else f"${amount:.2f}"


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


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters (not cells: see ``cut``), ending in … when
    cut: a bound on what is stored, logged or sent to a model or a browser."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"


def elide(text: str, limit: int, head: int | None = None, sep: str = " ") -> str:
    """``text`` if it has at most ``limit`` characters; else ``head`` characters of its start
    (default half of ``limit``) and the rest of ``limit`` from its end, around a note of the
    cut: ``<head><sep>[... N chars cut ...]<sep><tail>`` (the note and ``sep`` come on top of
    ``limit``). For what a model reads: it knows text is missing, and how much."""
    if len(text) <= limit:
        return text
    first = limit // 2 if head is None else max(min(head, limit), 0)
    rest = max(limit - first, 0)
    note = f"[... {len(text) - first - rest} chars cut ...]"
    return text[:first] + sep + note + (sep + text[len(text) - rest :] if rest else "")


def brief(text: str, lines: int, chars: int) -> str:
    """``text``'s first ``lines`` lines and ``chars`` characters, each cut said after it with
    how much more there was: ``… (N more lines)``, ``… (N more chars)`` (a long message or
    output in a terminal, unless asked in full)."""
    split = text.splitlines()
    if len(split) > lines:
        text = "\n".join(split[:lines]) + f"\n… ({len(split) - lines} more lines)"
    if len(text) > chars:
        text = text[:chars] + f"… ({len(text) - chars} more chars)"
    return text


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
