"""The typed fast path of ``zwarm.agents.claude.events.iter_steps``: Claude Code's assistant
and user lines as msgspec Structs.

Owns which claude lines take the fast path. The steps themselves are still built by the
``events`` handlers, from the typed fields, so both paths share one definition of every step.
Imported only by ``iter_steps``.

Must stay true:
- a decoded ``Line`` is only trusted for the fields declared here, each with the type the dict
  path accepts (another type fails the decode and the dict path reads the line);
- ``tool_use_result`` (a second copy of a tool's output, the largest part of a user line) is
  kept raw and only what a step needs of it is decoded: a Bash result's text when it is a
  string (its exit code), a file change's kind. All decoding of a line happens before
  anything is remembered, so a failure still hands the whole line to the dict path;
- a ``RawLine`` (inside ``jsonl.raw_strings``, for a ``jsonl.raw_safe`` line only) gives the
  same steps with a tool result's string content as the raw JSON string the agent wrote; its
  head is decoded only when it could start with an exit code (``Exit code N``);
- ``result`` and ``system`` lines, and user lines with ``tool_result_meta`` (permission
  decisions), are left to the dict path (``SLOW``).
"""

from typing import Any, Final

import msgspec


class Part(msgspec.Struct):
    """One part of a tool result's content list: only its text is read."""

    text: str = ""


class Block(msgspec.Struct):
    """A content block: text, thinking, tool_use (assistant) or tool_result (user)."""

    type: str = ""
    text: str = ""
    thinking: str = ""
    id: str = ""
    name: str = ""
    input: dict[str, Any] | None = None
    tool_use_id: str = ""
    content: str | list[Part] | None = None
    is_error: bool | None = None


class Message(msgspec.Struct):
    content: str | list[Block] | None = None


_NULL = msgspec.Raw(b"null")


class Line(msgspec.Struct):
    type: str = ""
    message: Message | None = None
    tool_use_result: msgspec.Raw = _NULL
    tool_result_meta: msgspec.Raw = _NULL


class RawBlock(Block):
    """``Block`` with a tool result's content kept as raw JSON (see ``content_text``)."""

    content: msgspec.Raw = _NULL  # type: ignore[assignment]


class RawMessage(msgspec.Struct):
    content: str | list[RawBlock] | None = None


class RawLine(Line):
    message: RawMessage | None = None  # type: ignore[assignment]


SLOW: Final = object()  # this line is for the dict path


def blocks(line: Line) -> list[Block]:
    """The line's content blocks (a string content has none)."""
    m = line.message
    content = m.content if m is not None else None
    return content if isinstance(content, list) else []


_QUOTE, _BRACKET, _BACKSLASH, _E = b'"[\\E'


def content_text(content: str | list[Part] | msgspec.Raw | None) -> Any:
    """As ``events._content_text``: a string, or the non-empty texts of its parts joined. A
    Raw string stays Raw; a Raw list is decoded (raises as a struct decoder does)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.text for p in content if p.text)
    if content is None or not len(content):
        return ""
    first = memoryview(content)[0]
    if first == _QUOTE:
        return content
    return content_text(msgspec.json.decode(content, type=list[Part])) if first == _BRACKET else ""


def result(b: Block) -> tuple[str, bool, Any, str]:
    """A tool_result block as ``events.Result``: its id, is_error, text (str or Raw string),
    and the text as a str where an exit code may start it (else "": a Raw string's decoded
    text starts with "E" only if its JSON does, or with an escape)."""
    text = content_text(b.content)
    head = text
    if not isinstance(text, str):
        second = memoryview(text)[1] if len(text) > 1 else 0
        head = msgspec.json.decode(text) if second in (_E, _BACKSLASH) else ""
    return b.tool_use_id, b.is_error is True, text, head


class _Done(msgspec.Struct):
    type: str = ""


def extra(line: Line, bash: bool) -> Any:
    """What the dict path reads of the line's ``tool_use_result`` (raises as a struct decoder
    does): for a Bash result, the value only if it is a string (an exit code is read from
    it); for a file change, its ``type`` (create or update)."""
    raw = line.tool_use_result
    if raw is _NULL:
        return None
    if bash:
        return msgspec.json.decode(raw) if memoryview(raw)[0] == _QUOTE else None
    return {"type": msgspec.json.decode(raw, type=_Done).type}


def has_meta(line: Line) -> bool:
    raw = line.tool_result_meta
    return raw is not _NULL and bytes(raw) != b"null"
