"""Codex CLI (``codex exec --json``) stdout -> zwarm steps and the turn's outcome.

Owns the whole reading of one codex turn log: ``iter_steps`` (the trajectory, as
``zwarm.model.steps`` dicts) and ``scan_outcome`` (status, final message, error, usage).

Must stay true:
- pure and stdlib-only (plus ``zwarm.model``, ``zwarm.model.steps``, ``zwarm.agents.jsonl``,
  and msgspec in ``iter_steps`` only);
  neither function raises on any input: blank, non-JSON, truncated or non-object lines, wrong-typed
  fields, and unknown event or item types are skipped (new codex versions add types);
- ``iter_steps`` streams, in the order the agent started things: an item (command, tool call,
  file change) is a step when it completes, in its place, so the steps after an open item are
  held until it completes (``zwarm.agents.ordering``); memory is bounded by that; the
  bulk of a log (messages, reasoning, commands) is decoded into typed shapes
  (``zwarm.agents.codex.shapes``), the rest as dicts, with the same steps either way;
- ``scan_outcome`` makes one pass and json-decodes only lines that can change the outcome
  (thread.started, turn.completed/failed, and lazily the last agent message or error event),
  with the same answer as decoding every line whatever the JSON spacing. Codex writes compact
  JSON with the event type first, so item events, the bulk of any log, are classified from
  their first bytes whatever their length; a line with ``"type"`` first in another spacing by
  its type value; any other line by whole-line patterns like ``"type" : "turn.completed"``. A
  quote inside a string value is escaped (``\\"``), so such a pattern only matches where a real
  ``"type"`` key holds that value; a false hit (a nested object) costs one decode, because the
  decoded type is checked again;
- usage is reported raw: ``turn.completed.usage`` is cumulative over a resumed thread and the
  caller computes deltas. Codex reports no cost and no model;
- a failure is typed (``classify``) from the ``turn.failed`` message alone, the only thing
  codex prints about it (no status code, no retry-after, no reset epoch on stdout: see
  ``/work/shared/reference/limits.md``): its fixed texts for a rate limit, a usage limit or
  quota, an overloaded or failing server, a refused key, a full context window. A reset time
  ("try again at 3:29 PM", codex's local time, no zone) is read as this process's local time,
  the next such moment after ``now``; "try again in 1.5s" is a retry-after.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from zwarm.agents.jsonl import (
    STRUCT_ERRORS,
    Event,
    raw_safe,
    raw_strings_wanted,
    struct_decoder,
)
from zwarm.agents.jsonl import as_bytes as _as_bytes
from zwarm.agents.jsonl import count as _count
from zwarm.agents.jsonl import decode as _decode
from zwarm.agents.jsonl import dict_ as _dict
from zwarm.agents.jsonl import int_ as _int
from zwarm.agents.jsonl import list_ as _list
from zwarm.agents.jsonl import newest as _newest
from zwarm.agents.jsonl import obj as _obj
from zwarm.agents.jsonl import str_ as _str
from zwarm.agents.ordering import InOrder
from zwarm.model import Reason, Status, TurnOutcome, Usage
from zwarm.model.steps import Step

OpenItems = dict[str, Any]  # item id -> its event dict, or a typed shapes.Item (commands)

# Item types that may be started and never completed (agent killed mid-way).
_TRACKED_ITEMS = frozenset({"command_execution", "mcp_tool_call", "file_change"})


# --------------------------------------------------------------------------- item -> steps


def _message(item: Event) -> list[Step]:
    return [{"kind": "message", "text": _str(item.get("text"))}]


def _reasoning(item: Event) -> list[Step]:
    text = _str(item.get("text"))
    return [{"kind": "reasoning", "text": text}] if text else []


def _command_step(item: Event, status: str | None = None) -> Step:
    exit_code = _int(item.get("exit_code"))
    if status is None:
        status = _str(item.get("status")) or ("failed" if exit_code else "completed")
    return {
        "kind": "command",
        "command": _str(item.get("command")),
        "exit_code": exit_code,
        "output": _str(item.get("aggregated_output")),
        "status": status,
    }


def _command(item: Event) -> list[Step]:
    return [_command_step(item)]


def _change(c: dict[str, Any]) -> dict[str, str]:
    kind = c.get("kind")
    if isinstance(kind, dict):  # tolerate a tagged-object form {"type": "update", ...}
        kind = kind.get("type")
    return {"path": _str(c.get("path")), "kind": _str(kind)}


def _file_change_step(item: Event, status: str | None = None) -> Step:
    changes = [_change(c) for c in _list(item.get("changes")) if isinstance(c, dict)]
    return {
        "kind": "file_change",
        "changes": changes,
        "status": status or _str(item.get("status")) or "completed",
    }


def _file_change(item: Event) -> list[Step]:
    return [_file_change_step(item)]


def _tool_call_step(item: Event) -> Step:
    server = item.get("server")
    return {
        "kind": "tool_call",
        "id": _str(item.get("id")),
        "name": _str(item.get("tool")),
        "arguments": _obj(item.get("arguments")),
        "server": server if isinstance(server, str) else None,
    }


def _mcp_result_text(item: Event) -> str:
    result = _dict(item.get("result"))
    texts = [_str(_dict(b).get("text")) for b in _list(result.get("content"))]
    text = "\n".join(t for t in texts if t)
    if text:
        return text
    structured = result.get("structured_content")
    if structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    error = item.get("error")
    return _str(_dict(error).get("message")) or _str(error)


def _mcp_tool_call(item: Event) -> list[Step]:
    call = _tool_call_step(item)
    is_error = item.get("status") == "failed" or item.get("error") is not None
    result = {
        "kind": "tool_result",
        "id": call["id"],
        "name": call["name"],
        "result": _mcp_result_text(item),
        "is_error": is_error,
    }
    return [call, result]


def _web_search(item: Event) -> list[Step]:
    query = _str(item.get("query")) or _str(_dict(item.get("action")).get("query"))
    return [{"kind": "web_search", "query": query}]


def _todo_list(item: Event) -> list[Step]:
    items = [
        {"text": _str(t.get("text")), "completed": t.get("completed") is True}
        for t in _list(item.get("items"))
        if isinstance(t, dict)
    ]
    return [{"kind": "todo", "items": items}]


def _error_item(item: Event) -> list[Step]:
    return [{"kind": "error", "message": _str(item.get("message")), "fatal": False}]


_ITEM_STEPS: dict[str, Callable[[Event], list[Step]]] = {
    "agent_message": _message,
    "reasoning": _reasoning,
    "command_execution": _command,
    "file_change": _file_change,
    "mcp_tool_call": _mcp_tool_call,
    "web_search": _web_search,
    "todo_list": _todo_list,
    "error": _error_item,
}

# What an item started and never completed still shows (status "in_progress").
_LEFTOVER_STEPS: dict[str, Callable[[Event], Step]] = {
    "command_execution": lambda item: _command_step(item, "in_progress"),
    "mcp_tool_call": _tool_call_step,
    "file_change": lambda item: _file_change_step(item, "in_progress"),
}


# --------------------------------------------------------------------------- event -> steps


def _on_item_open(event: Event, open_items: OpenItems) -> list[Step]:
    """item.started / item.updated: no step; remember the item until it completes."""
    item = _dict(event.get("item"))
    item_id = _str(item.get("id"))
    if item_id and _str(item.get("type")) in _TRACKED_ITEMS:
        open_items[item_id] = item
    return []


def _on_item_completed(event: Event, open_items: OpenItems) -> list[Step]:
    item = _dict(event.get("item"))
    open_items.pop(_str(item.get("id")), None)
    convert = _ITEM_STEPS.get(_str(item.get("type")))
    return convert(item) if convert else []


def _on_error(event: Event, open_items: OpenItems) -> list[Step]:
    return [{"kind": "error", "message": _str(event.get("message")), "fatal": False}]


def _turn_failed_message(event: Event) -> str:
    error = event.get("error")
    return _str(_dict(error).get("message")) or _str(error) or "codex reported turn.failed"


def _on_turn_failed(event: Event, open_items: OpenItems) -> list[Step]:
    return [{"kind": "error", "message": _turn_failed_message(event), "fatal": True}]


_EVENT_STEPS: dict[str, Callable[[Event, OpenItems], list[Step]]] = {
    "item.started": _on_item_open,
    "item.updated": _on_item_open,
    "item.completed": _on_item_completed,
    "error": _on_error,
    "turn.failed": _on_turn_failed,
}


def iter_steps(lines: Iterable[bytes]) -> Iterator[Step]:
    """Normalized steps of one codex turn, in the order the agent started them.

    A command, tool call or file change becomes a step when it completes, in the place it
    started (``zwarm.agents.ordering``: the steps after an open one are held, boundedly). One
    started and never completed (the agent was killed, or codex never reported its end)
    comes in its place with status ``in_progress``. An open item gets its place only once a
    step comes while it is open: a command that starts and completes with nothing between,
    the usual case, costs nothing more.
    """
    from zwarm.agents.codex import shapes

    fast, fast_step, slow = struct_decoder(shapes.Line), shapes.step, shapes.SLOW
    raw = struct_decoder(shapes.RawLine) if raw_strings_wanted() else None
    open_items: OpenItems = {}
    order = InOrder(lambda key: _leftover(open_items.pop(key, None)))
    for line in lines:
        prev = list(open_items) if open_items else None  # open before the line, oldest first
        try:
            typed = raw(line) if raw is not None and raw_safe(line) else fast(line)
            step = fast_step(typed, open_items)
        except STRUCT_ERRORS:
            step = slow
        steps: list[Step]
        if step is slow:
            event = _decode(line)
            handle = None if event is None else _EVENT_STEPS.get(_str(event.get("type")))
            steps = handle(event, open_items) if handle is not None else []  # type: ignore[arg-type]
            if not steps:
                continue
        elif step is None:
            continue  # an item started (placed once a step comes while it is open), or nothing
        elif open_items or order.held:
            steps = [step]  # type: ignore[list-item]  # a Step: neither None nor SLOW
        else:
            yield step  # type: ignore[misc]  # nothing open or held: at once
            continue
        if not open_items and not order.held:
            yield from steps  # the one open item ended, or none was open
            continue
        _place(order, prev or [], open_items, steps)
        yield from order.ready()
    yield from order.finish()
    for item in open_items.values():  # not reached: every open item has its place
        yield from _leftover(item)


def _place(order: InOrder, prev: list[str], open_items: OpenItems, steps: list[Step]) -> None:
    """Hold one line's steps, after the places of the items open before it (given now, in
    the order they started); the steps of an item that just completed (no longer open) go in
    its place."""
    for key in prev:
        if key in open_items:
            if not order.has(key):
                order.open(key)
        elif order.close(key, steps):  # one line completes at most one item
            return
    for one in steps:
        order.add(one)


def _leftover(item: Any) -> list[Step]:
    """What an item started and never completed shows (status ``in_progress``)."""
    from zwarm.agents.codex import shapes

    if item is None:
        return []
    if isinstance(item, shapes.Item):
        return [shapes.command_step(item, "in_progress")]
    return [_LEFTOVER_STEPS[_str(item.get("type"))](item)]


# --------------------------------------------------------------------------- outcome

# Codex writes compact JSON with the event type first (a serde tag): most lines are item
# events, classified by their first bytes whatever their length.
_HEAD_ITEM = b'{"type":"item.'
_HEAD_ITEM_COMPLETED = b'{"type":"item.completed",'
_ITEM_BODY_AT = len(b'{"type":"item.completed"')  # as the spaced path: right after the head
_TYPE_KEY = b'"type":"'
_AGENT_MESSAGE_VALUE = b'agent_message"'
# Any other layout: the same decisions, with JSON whitespace allowed between tokens. A quote
# inside a string value is escaped (\"), so a ``"type"`` key pattern only matches a real key.
# Codex's other lines (thread.started, turn.*) start with the type too: read up to its quote.
_HEAD_TYPE = b'{"type":"'
_WS = rb"[ \t\r\n]*"
_TYPE_VALUE = rb'"type"' + _WS + b":" + _WS + b'"'


def _marker(value: bytes) -> re.Pattern[bytes]:
    """``"type": "<value>`` anywhere in a line, whatever the spacing."""
    return re.compile(_TYPE_VALUE + re.escape(value))


class _Markers:
    """The patterns of a layout other than codex's own, compiled when first needed
    (``_markers``): a log in codex's compact layout never needs one."""

    def __init__(self) -> None:
        self.head = re.compile(_WS + rb"\{" + _WS + rb'"type"' + _WS + b":" + _WS + rb'"([^"\\]*)"')
        self.type_value = re.compile(_TYPE_VALUE)
        self.item = _marker(b"item.")
        self.item_completed = _marker(b'item.completed"')
        self.agent_message = _marker(b'agent_message"')
        self.completed = _marker(b'turn.completed"')
        self.failed = _marker(b'turn.failed"')
        self.error = _marker(b'error"')
        self.thread_started = _marker(b'thread.started"')


@functools.cache
def _markers() -> _Markers:
    return _Markers()


# Candidate lines are kept raw and decoded lazily, newest first, only if needed.
_CANDIDATES = 8


class _Scan:
    """State of ``scan_outcome`` and the handling of the rare lines that can matter."""

    def __init__(self) -> None:
        self.outcome = TurnOutcome()
        self.messages: deque[bytes] = deque(maxlen=_CANDIDATES)
        self.errors: deque[bytes] = deque(maxlen=_CANDIDATES)
        self.items = False  # an item event was seen: the model answered (output, a command)

    def typed(self, kind: bytes, line: bytes, end: int) -> None:
        """A line whose first key is ``"type"`` (value ``kind``), in any spacing."""
        if kind.startswith(b"item."):
            self.items = True
        if kind == b"item.completed":
            at = _markers().type_value.search(line, end)  # the item's own type: the next one
            if at is not None and line.startswith(_AGENT_MESSAGE_VALUE, at.end()):
                self.messages.append(line)
        elif kind in (b"turn.completed", b"turn.failed"):
            self.terminal(line)
        elif kind == b"error":
            self.errors.append(line)
        elif kind == b"thread.started":
            self.thread_started(line)

    def other(self, line: bytes) -> None:
        """A line whose first key is not ``"type"``: whole-line markers, then a decode."""
        m = _markers()
        if m.item.search(line):
            self.items = True
            if m.agent_message.search(line) and m.item_completed.search(line):
                self.messages.append(line)
        elif m.completed.search(line) or m.failed.search(line):
            self.terminal(line)
        elif m.error.search(line):
            self.errors.append(line)
        elif m.thread_started.search(line):
            self.thread_started(line)

    def thread_started(self, line: bytes) -> None:
        if self.outcome.agent_session_id is not None:
            return
        event = _decode(line)
        if event is not None and event.get("type") == "thread.started":
            self.outcome.agent_session_id = _str(event.get("thread_id")) or None

    def terminal(self, line: bytes) -> None:
        event = _decode(line) or {}
        if event.get("type") == "turn.completed":
            self.outcome.status = Status.COMPLETED
            self.outcome.error = None
            self.outcome.usage = _usage(event.get("usage"))
        elif event.get("type") == "turn.failed":
            self.outcome.status = Status.FAILED
            self.outcome.error = _turn_failed_message(event)

    def finish(self, now: float | None = None) -> TurnOutcome:
        self.outcome.final_message = _newest(self.messages, _agent_message_text)
        if self.outcome.status is None:
            self.outcome.error = _newest(self.errors, _error_event_message)
        if self.outcome.status is Status.FAILED:
            self.outcome.unanswered = not self.items
        if self.outcome.status is Status.FAILED and self.outcome.error:
            typed = classify(self.outcome.error, time.time() if now is None else now)
            o = self.outcome
            o.reason, o.retry_after_s, o.reset_at = typed
        return self.outcome


# --------------------------------------------------------------------------- failure reasons

Typed = tuple[Reason | None, float | None, float | None]  # reason, retry after (s), reset at


class _Failures:
    """codex's failure texts (``classify``), compiled when first needed (``_failures``):
    only a failed turn is classified."""

    def __init__(self) -> None:
        self.usage_limit = re.compile(
            r"hit your usage limit|usage limit has been reached|^Quota exceeded\b|"
            r"To use Codex with your ChatGPT plan, upgrade",
            re.IGNORECASE,
        )
        self.rate_limited = re.compile(
            r"last status: 429\b|\b429 Too Many Requests|^rate limit exceeded\b", re.IGNORECASE
        )
        self.context = re.compile(r"ran out of room in the model's context window", re.IGNORECASE)
        self.auth = re.compile(r"\b(401 Unauthorized|403 Forbidden)\b|last status: 40[13]\b")
        self.overloaded = re.compile(
            r"Selected model is at capacity|currently experiencing high demand|"
            r"unexpected status 5\d\d\b|last status: 5\d\d\b",
            re.IGNORECASE,
        )
        self.retry_in = re.compile(
            r"try again in (?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)(ms|s))?\b",
            re.IGNORECASE,
        )
        self.try_at = re.compile(
            r"try again at (?:([A-Z][a-z]{2,8}) (\d{1,2})(?:st|nd|rd|th)?, (\d{4}) )?"
            r"(\d{1,2}):(\d{2}) ?([AP]M)",
            re.IGNORECASE,
        )


@functools.cache
def _failures() -> _Failures:
    return _Failures()


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def classify(message: str, now: float) -> Typed:
    """The typed reason of a ``turn.failed`` message, and when codex says to try again."""
    text = message.replace("\u2019", "'")
    f = _failures()
    if f.usage_limit.search(text):
        return Reason.USAGE_LIMIT, None, _reset_at(text, now)
    if f.rate_limited.search(text):
        return Reason.RATE_LIMITED, _retry_in(text), None
    if f.context.search(text):
        return Reason.CONTEXT_OVERFLOW, None, None
    if f.auth.search(text):
        return Reason.AUTH_FAILED, None, None
    if f.overloaded.search(text):
        return Reason.OVERLOADED, _retry_in(text), None
    return None, None, None


def _retry_in(text: str) -> float | None:
    """``try again in 1.5s`` / ``in 20ms`` / ``in 6m0s`` as seconds (None if not said)."""
    m = _failures().retry_in.search(text)
    if m is None or not any(m.groups()):
        return None
    hours, minutes, number, unit = m.groups()
    secs = float(int(hours or 0) * 3600 + int(minutes or 0) * 60)
    if number:
        secs += float(number) / (1000 if unit.lower() == "ms" else 1)
    return secs if 0 < secs <= 7 * 86400 else None


def _reset_at(text: str, now: float) -> float | None:
    """``try again at 3:29 PM`` (the next such local time after ``now``) or ``try again at
    Nov 25th, 2026 10:03 PM``, as epoch seconds; None for ``try again later``."""
    m = _failures().try_at.search(text)
    if m is None:
        return None
    month, day, year, hour, minute, half = m.groups()
    h = int(hour) % 12 + (12 if half.upper() == "PM" else 0)
    if not (0 <= h < 24 and 0 <= int(minute) < 60):
        return None
    local = time.localtime(now)
    if month is not None:
        mon = month[:3].lower()
        if mon not in _MONTHS:
            return None
        fields = (int(year), _MONTHS.index(mon) + 1, int(day), h, int(minute), 0, 0, 0, -1)
        return _mktime(fields)
    fields = (local.tm_year, local.tm_mon, local.tm_mday, h, int(minute), 0, 0, 0, -1)
    at = _mktime(fields)
    if at is not None and at <= now - 60:  # a time of day already past: tomorrow's
        at = _mktime((*fields[:2], fields[2] + 1, *fields[3:]))
    return at


def _mktime(fields: tuple[int, ...]) -> float | None:
    try:
        return time.mktime(fields)  # type: ignore[arg-type]
    except (OverflowError, ValueError):
        return None


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    return Usage(
        input_tokens=_count(raw.get("input_tokens")),
        cached_input_tokens=_count(raw.get("cached_input_tokens")),
        output_tokens=_count(raw.get("output_tokens")),
        reasoning_tokens=_count(raw.get("reasoning_output_tokens")),
    )


def _agent_message_text(event: Event) -> str | None:
    item = _dict(event.get("item"))
    if event.get("type") != "item.completed" or item.get("type") != "agent_message":
        return None
    return _str(item.get("text"))


def _error_event_message(event: Event) -> str | None:
    return _str(event.get("message")) if event.get("type") == "error" else None


def scan_outcome(lines: Iterable[bytes], now: float | None = None) -> TurnOutcome:
    """The turn's outcome, decoding only the few lines that can change it.

    ``status`` is COMPLETED on ``turn.completed``, FAILED on ``turn.failed`` (an ``error`` event
    alone is a retry notice, not failure), None when the stream has neither; then ``error`` is the
    last ``error`` event's message, if any. ``final_message`` is the last agent message. A
    failure is typed by ``classify`` (``now``: when to read a reset time of day from; default
    the clock). The same answer whatever the JSON spacing: codex's compact layout only takes a
    faster path.
    """
    scan = _Scan()
    for line in lines:
        if type(line) is not bytes:
            line = _as_bytes(line)
        if line.startswith(_HEAD_ITEM):  # compact item event: item.started/updated never matter
            scan.items = True
            if line.startswith(_HEAD_ITEM_COMPLETED):
                # The item's own type is the next type key (serde writes it right after "id");
                # agent messages, the only items that matter, hold no nested objects before it.
                at = line.find(_TYPE_KEY, _ITEM_BODY_AT) + len(_TYPE_KEY)
                if line.startswith(_AGENT_MESSAGE_VALUE, at):
                    scan.messages.append(line)
            continue
        if line.startswith(_HEAD_TYPE):  # compact: as ``head`` would match, without a regex
            end = line.find(b'"', len(_HEAD_TYPE))
            kind = line[len(_HEAD_TYPE) : end]
            if end >= 0 and b"\\" not in kind:
                scan.typed(kind, line, end + 1)
                continue
        head = _markers().head.match(line)
        if head is None:
            scan.other(line)
        else:
            scan.typed(head.group(1), line, head.end())
    return scan.finish(now)
