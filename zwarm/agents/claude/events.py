"""Claude Code (``claude -p --output-format stream-json --verbose``) stdout -> zwarm steps and
the turn's outcome.

Owns the whole reading of one claude turn log: ``iter_steps`` (the trajectory, as
``zwarm.model.steps`` dicts) and ``scan_outcome`` (status, final message, error, usage, cost).

Must stay true:
- pure and stdlib-only (plus ``zwarm.model``, ``zwarm.model.steps``, ``zwarm.agents.jsonl``,
  and msgspec in ``iter_steps`` only);
  neither function raises on any input: blank, non-JSON, truncated or non-object lines, wrong-typed
  fields, and unknown line, subtype or content-block types are skipped (new claude versions add
  them);
- ``iter_steps`` streams (assistant and user lines, the bulk of a log, decoded into typed
  shapes, ``zwarm.agents.claude.shapes``, with the same steps as the dict path); it keeps
  only tool names by id and the tool calls still waiting for
  their result. A ``Bash`` call is one ``command`` step, made when its result arrives, in the
  place the call was made (``in_progress`` if it never does: ``zwarm.agents.ordering``);
  file-editing tools add a ``file_change`` step after a successful result;
- failure is ``result.is_error`` (whatever the ``subtype``: an API error ends in subtype
  "success" with ``is_error`` true);
- ``scan_outcome`` makes one pass and json-decodes only lines that can change the outcome,
  with the same answer as decoding every line whatever the JSON spacing. ``user`` lines (tool
  results, the bulk of a log) are skipped by their first bytes, an ``assistant`` line is
  decoded only if it holds a text block and only when its text is needed. Claude writes
  compact JSON, which takes byte-prefix fast paths; any spacing is matched by patterns like
  ``"type" : "result"``. A quote inside a string value is escaped (``\\"``), so such a pattern
  only matches where a real key holds that value; a false hit costs one decode, because the
  decoded type is checked again; a cost that is not a finite number is no cost;
- usage and cost are reported raw: on a resumed session ``total_cost_usd`` is cumulative (usage
  is not); the caller computes deltas. zwarm's ``input_tokens`` includes cached tokens, so it is
  input + cache creation + cache read;
- a failure is typed (``classify``) from claude's typed fields only, never its text: the
  result's and the synthetic assistant message's ``api_error_status``, ``api_error_type``,
  ``error``, ``api_error`` (``usage_limit_reached``) and ``terminal_reason``
  (``prompt_too_long``); a reset time comes from ``rate_limit_info.resetsAt`` (the assistant
  line's ``api_error_params``, or a ``rate_limit_event`` that rejected the request), a
  retry-after from the last ``system/api_retry`` delay (see ``/work/shared/reference/limits.md``);
- ``LiveUsage`` reads usage while the turn streams (a line at a time, each message once): what
  ``usage_so_far`` reports at the end, and what a budget is checked against meanwhile.
"""

import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

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

# Tools whose successful result changed a file: name -> change kind.
_FILE_TOOLS = {"Write": "add", "Edit": "update", "MultiEdit": "update", "NotebookEdit": "update"}
_DONE_KINDS = {"create": "add", "update": "update"}
# A failed Bash result starts with "Exit code N" ("Error: Exit code N" in tool_use_result).
_EXIT_CODE = re.compile(r"(?:Error: )?Exit code (-?\d+)")


# --------------------------------------------------------------------------- decoding helpers


def _number(v: Any) -> float | None:
    """A finite number (JSON allows 1e999, and json reads NaN), else None."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except OverflowError:  # an int too big for a float
        return None
    return f if math.isfinite(f) else None


def _content_text(content: Any) -> str:
    """A tool_result's content: a string, or a list of blocks whose text parts are joined."""
    if isinstance(content, str):
        return content
    texts = [_str(_dict(block).get("text")) for block in _list(content)]
    return "\n".join(t for t in texts if t)


def _blocks(event: Event) -> list[dict[str, Any]]:
    content = _dict(event.get("message")).get("content")
    return [b for b in _list(content) if isinstance(b, dict)]


def _with_status(message: str, status: Any) -> str:
    """Append an API error status to a message that does not already name it."""
    code = _int(status)
    if code is None or str(code) in message:
        return message
    return f"{message} (API error status {code})"


def _result_error(result: Event) -> str:
    """The agent's own words for a failed run (``result`` line with ``is_error``)."""
    message = _str(result.get("result")).strip()
    if not message:
        message = "; ".join(e for e in _list(result.get("errors")) if isinstance(e, str))
    if not message:
        message = f"claude reported {_str(result.get('subtype')) or 'an error'}"
    return _with_status(message, result.get("api_error_status"))


def _denied_tools(result: Event) -> list[str]:
    denials = _list(result.get("permission_denials"))
    return [_str(_dict(d).get("tool_name")) or "unknown tool" for d in denials]


# --------------------------------------------------------------------------- steps


class _Calls(msgspec.Struct):
    """What ``iter_steps`` remembers between lines, by tool_use id."""

    names: dict[str, str] = msgspec.field(default_factory=dict)
    bash: dict[str, str] = msgspec.field(default_factory=dict)  # pending Bash: id -> command
    edits: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)  # pending file change


def _on_text(block: dict[str, Any], calls: _Calls) -> list[Step]:
    return [{"kind": "message", "text": _str(block.get("text"))}]


def _on_thinking(block: dict[str, Any], calls: _Calls) -> list[Step]:
    text = _str(block.get("thinking"))
    return [{"kind": "reasoning", "text": text}] if text else []


def _on_tool_use(block: dict[str, Any], calls: _Calls) -> list[Step]:
    call_id, name, args = _str(block.get("id")), _str(block.get("name")), _obj(block.get("input"))
    calls.names[call_id] = name
    if name == "Bash":
        calls.bash[call_id] = _str(args.get("command"))
        return [{"kind": _OPEN, "id": call_id}]  # its place: iter_steps holds what follows
    if name in _FILE_TOOLS:
        path = _str(args.get("file_path")) or _str(args.get("notebook_path"))
        calls.edits[call_id] = {"path": path, "kind": _FILE_TOOLS[name]}
    return [{"kind": "tool_call", "id": call_id, "name": name, "arguments": args, "server": None}]


_BLOCK_STEPS: dict[str, Callable[[dict[str, Any], _Calls], list[Step]]] = {
    "text": _on_text,
    "thinking": _on_thinking,
    "tool_use": _on_tool_use,
}


def _bash_exit_code(is_error: bool, text: str, extra: Any) -> int:
    for source in (extra, text):
        match = _EXIT_CODE.match(source) if isinstance(source, str) else None
        if match:
            return int(match.group(1))
    return 1 if is_error else 0


def _on_tool_result(
    block: dict[str, Any], extra: Any, calls: _Calls, rejected: frozenset[str] = frozenset()
) -> list[Step]:
    """One tool_result block; ``extra`` is the line's ``tool_use_result`` (None if shared);
    ``rejected``: the line's tool_use ids refused by permission checks (never executed)."""
    text = _content_text(block.get("content"))
    result = (_str(block.get("tool_use_id")), block.get("is_error") is True, text, text)
    return _result_steps(result, extra, calls, rejected)


Result = tuple[str, bool, Any, str]  # tool_use id, is_error, text, the text an exit code starts


def _result_steps(
    result: Result, extra: Any, calls: _Calls, rejected: frozenset[str] = frozenset()
) -> list[Step]:
    """The steps of one tool result. Its text is a str, or inside ``jsonl.raw_strings`` may
    be a Raw JSON string; the exit code of a Bash result is read from ``extra`` or the head."""
    call_id, is_error, text, head = result
    if call_id in calls.bash:
        declined = call_id in rejected  # never ran: no exit code
        return [
            {
                _OF: call_id,  # goes in its place (iter_steps takes this key out)
                "kind": "command",
                "command": calls.bash.pop(call_id),
                "exit_code": None if declined else _bash_exit_code(is_error, head, extra),
                "output": text,
                "status": "declined" if declined else "failed" if is_error else "completed",
            }
        ]
    steps: list[Step] = [
        {
            "kind": "tool_result",
            "id": call_id,
            "name": calls.names.get(call_id),
            "result": text,
            "is_error": is_error,
        }
    ]
    change = calls.edits.pop(call_id, None)
    if change is not None and not is_error:
        # Write reports whether it created or overwrote the file: {"type": "create"|"update"}.
        done = _str(_dict(extra).get("type"))
        if done in _DONE_KINDS:
            change = {**change, "kind": _DONE_KINDS[done]}
        steps.append({"kind": "file_change", "changes": [change], "status": "completed"})
    return steps


def _on_assistant(event: Event, calls: _Calls) -> list[Step]:
    steps: list[Step] = []
    for block in _blocks(event):
        handle = _BLOCK_STEPS.get(_str(block.get("type")))
        if handle is not None:
            steps.extend(handle(block, calls))
    return steps


def _on_user(event: Event, calls: _Calls) -> list[Step]:
    results = [b for b in _blocks(event) if b.get("type") == "tool_result"]
    extra = event.get("tool_use_result") if len(results) == 1 else None
    rejected = _rejected_ids(event)
    steps: list[Step] = []
    for block in results:
        steps.extend(_on_tool_result(block, extra, calls, rejected))
    return steps


def _rejected_ids(event: Event) -> frozenset[str]:
    """Tool uses a permission check refused, from the user line's ``tool_result_meta``
    (``{"id", "non_execution_kind": "user-rejected", "permission_decision": {"decision":
    "reject"}}``, claude 2.1.330)."""
    ids = set()
    for raw in _list(event.get("tool_result_meta")):
        meta = _dict(raw)
        decision = _str(_dict(meta.get("permission_decision")).get("decision"))
        kind = _str(meta.get("non_execution_kind"))
        if decision in ("reject", "deny") or kind == "user-rejected":
            ids.add(_str(meta.get("id")))
    return frozenset(ids)


def _on_result(event: Event, calls: _Calls) -> list[Step]:
    steps: list[Step] = [
        {"kind": "error", "message": f"permission denied: {tool}", "fatal": False}
        for tool in _denied_tools(event)
    ]
    if event.get("is_error") is True:
        steps.append({"kind": "error", "message": _result_error(event), "fatal": True})
    return steps


def _retry_message(event: Event) -> str:
    attempt, most = _int(event.get("attempt")), _int(event.get("max_retries"))
    delay = _int(event.get("retry_delay_ms"))
    status, error = _int(event.get("error_status")), _str(event.get("error"))
    cause = " ".join(p for p in (str(status) if status is not None else "", error) if p)
    message = f"API error ({cause or 'unknown'}), retrying"
    if attempt is not None:
        message += f" (attempt {attempt}" + (f" of {most})" if most is not None else ")")
    if delay is not None:
        message += f" in {delay / 1000:g}s"
    return message


def _on_system(event: Event, calls: _Calls) -> list[Step]:
    if event.get("subtype") != "api_retry":
        return []
    return [{"kind": "error", "message": _retry_message(event), "fatal": False}]


_LINE_STEPS: dict[str, Callable[[Event, _Calls], list[Step]]] = {
    "assistant": _on_assistant,
    "user": _on_user,
    "result": _on_result,
    "system": _on_system,
}


def iter_steps(lines: Iterable[bytes]) -> Iterator[Step]:
    """Normalized steps of one claude turn, in the order the agent started them: a Bash call's
    ``command`` step (made when its result arrives) comes where the call was made, the steps
    after it held meanwhile (``zwarm.agents.ordering``). One that never got its result (the
    agent was killed) comes in its place with status ``in_progress`` and no exit code.
    """
    from zwarm.agents.claude import shapes

    fast, slow = struct_decoder(shapes.Line), shapes.SLOW
    raw = struct_decoder(shapes.RawLine) if raw_strings_wanted() else None
    calls = _Calls()
    order = InOrder(lambda key: _unended(calls.bash.pop(key, None)))
    for line in lines:
        was_open = bool(calls.bash)
        try:
            typed = raw(line) if raw is not None and raw_safe(line) else fast(line)
            steps = _fast_steps(typed, calls, shapes)
        except STRUCT_ERRORS:
            steps = slow
        if steps is slow:
            event = _decode(line)
            handle = None if event is None else _LINE_STEPS.get(_str(event.get("type")))
            steps = handle(event, calls) if handle is not None else []  # type: ignore[arg-type]
        if not (was_open or calls.bash or order.held):
            yield from steps  # type: ignore[misc]  # a list of steps: not SLOW
            continue
        for step in steps:  # type: ignore[attr-defined]
            if step["kind"] == _OPEN:
                order.open(step["id"])
            elif _OF not in step or not order.close(step.pop(_OF), [step]):
                order.add(step)
        yield from order.ready()
    for step in order.finish():
        step.pop(_OF, None)
        yield step
    for command in calls.bash.values():  # not reached: every open call has its place
        yield from _unended(command)


_OPEN = "_open"  # a Bash call's place among the steps (never yielded)
_OF = "_of"  # the call a Bash command step ends (taken out before it is yielded)


def _unended(command: str | None) -> list[Step]:
    if command is None:
        return []
    return [{"kind": "command", "command": command, "exit_code": None, "output": "",
             "status": "in_progress"}]  # fmt: skip


def _fast_steps(line: Any, calls: _Calls, shapes: Any) -> list[Step] | object:
    """The steps of a typed line (``shapes.Line``), or ``shapes.SLOW``: the dict path reads it.
    Built by the same handlers, from the typed fields (``shapes``: that module, loaded by
    ``iter_steps``)."""
    kind = line.type
    if kind == "assistant":
        steps: list[Step] = []
        for b in shapes.blocks(line):
            handle = _BLOCK_STEPS.get(b.type)
            if handle is not None:
                block = {"text": b.text, "thinking": b.thinking, "id": b.id, "name": b.name,
                         "input": b.input}  # fmt: skip
                steps.extend(handle(block, calls))
        return steps
    if kind == "user":
        return _fast_user(line, calls, shapes)
    slow: object = shapes.SLOW
    return slow if kind in _LINE_STEPS else []


def _fast_user(line: Any, calls: _Calls, shapes: Any) -> list[Step] | object:
    if shapes.has_meta(line):
        slow: object = shapes.SLOW
        return slow
    blocks = [b for b in shapes.blocks(line) if b.type == "tool_result"]
    extra = None
    if len(blocks) == 1:
        tid = blocks[0].tool_use_id
        if tid in calls.bash or tid in calls.edits:
            extra = shapes.extra(line, tid in calls.bash)  # may raise: nothing remembered yet
    results = [shapes.result(b) for b in blocks]  # may raise too
    steps: list[Step] = []
    for result in results:
        steps.extend(_result_steps(result, extra, calls))
    return steps


# --------------------------------------------------------------------------- outcome

# Claude writes compact JSON with "type" first on every line but the result line.
_HEAD_USER = b'{"type":"user"'
_HEAD_ASSISTANT = b'{"type":"assistant"'
_HEAD_SYSTEM = b'{"type":"system"'
_CONTENT_HEAD = b'"content":[{"type":"'
_TEXT_VALUE = b'text"'
# Any other layout: the same decisions, with JSON whitespace allowed between tokens. A quote
# inside a string value is escaped (\"), so a key pattern only matches a real key.
_WS = rb"[ \t\r\n]*"
_HEAD = re.compile(_WS + rb"\{" + _WS + rb'"type"' + _WS + b":" + _WS + rb'"([^"\\]*)"')
_CONTENT = re.compile(
    rb'"content"'
    + _WS
    + b":"
    + _WS
    + rb"\["
    + _WS
    + rb"\{"
    + _WS
    + rb'"type"'
    + _WS
    + b":"
    + _WS
    + b'"'
)


def _marker(key: bytes, value: bytes) -> re.Pattern[bytes]:
    """``"<key>": <value>`` anywhere in a line, whatever the spacing."""
    return re.compile(b'"' + key + b'"' + _WS + b":" + _WS + re.escape(value))


_M_RESULT = _marker(b"type", b'"result"')
_M_ASSISTANT = _marker(b"type", b'"assistant"')
_M_TEXT = _marker(b"type", b'"text"')
_M_INIT = _marker(b"subtype", b'"init"')
_M_API_ERROR = _marker(b"is_api_error_message", b"true")
_M_SYNTHETIC = _marker(b"model", b'"<synthetic>"')
_HEAD_RATE_LIMIT = b'{"type":"rate_limit_event"'
_M_RATE_LIMIT = _marker(b"type", b'"rate_limit_event"')
_M_API_RETRY = _marker(b"subtype", b'"api_retry"')

# Candidate lines are kept raw and decoded lazily, newest first, only if needed.
_CANDIDATES = 8


class _Scan:
    """State of ``scan_outcome`` and the handling of the rare lines that can matter."""

    def __init__(self) -> None:
        self.outcome = TurnOutcome()
        self.result: Event | None = None
        self.init_seen = False
        self.texts: deque[bytes] = deque(maxlen=_CANDIDATES)
        self.api_errors: deque[bytes] = deque(maxlen=_CANDIDATES)
        self.rate_limit: bytes | None = None  # the last rate_limit_event line
        self.retry: bytes | None = None  # the last system/api_retry line

    def typed(self, kind: bytes, line: bytes) -> None:
        """A line whose first key is ``"type"`` (value ``kind``), in any spacing."""
        if kind == b"assistant":
            self.assistant(line)
        elif kind == b"system":
            self.system(line)
        elif kind == b"result":
            self.other(line)
        elif kind == b"rate_limit_event":
            self.rate_limit = line
        # else: user (tool results), stream_event, tool_use_summary...: never matter

    def assistant(self, line: bytes) -> None:
        """An assistant line: keep it if its block is text.

        Claude writes one content block per assistant line; the first block's type is read
        where ``"content"`` starts, so a long tool input is never searched.
        """
        at = line.find(_CONTENT_HEAD)
        if at >= 0:
            is_text = line.startswith(_TEXT_VALUE, at + len(_CONTENT_HEAD))
        else:
            content = _CONTENT.search(line)
            if content is not None:
                is_text = line.startswith(_TEXT_VALUE, content.end())
            else:
                is_text = _M_TEXT.search(line) is not None
        if is_text:
            self.text(line)

    def text(self, line: bytes) -> None:
        is_api_error = _M_API_ERROR.search(line) or _M_SYNTHETIC.search(line)
        (self.api_errors if is_api_error else self.texts).append(line)

    def system(self, line: bytes) -> None:
        if not self.init_seen and _M_INIT.search(line):
            self.take_init(line)
        elif b"api_retry" in line and _M_API_RETRY.search(line):
            self.retry = line

    def other(self, line: bytes) -> None:
        """The result line, and any line whose first key is not ``"type"``."""
        if _M_RESULT.search(line):
            self.take_result(line)
        elif _M_RATE_LIMIT.search(line):
            self.rate_limit = line
        elif _M_ASSISTANT.search(line):
            if _M_TEXT.search(line):
                self.text(line)
        else:
            self.system(line)

    def take_init(self, line: bytes) -> None:
        event = _decode(line)
        if event is None or event.get("type") != "system" or event.get("subtype") != "init":
            return
        self.init_seen = True
        self.outcome.agent_session_id = _str(event.get("session_id")) or None
        self.outcome.model = _str(event.get("model")) or None

    def take_result(self, line: bytes) -> None:
        event = _decode(line)
        if event is not None and event.get("type") == "result":
            self.result = event

    def finish(self) -> TurnOutcome:
        if self.result is not None:
            _apply_result(self.outcome, self.result)
            if self.outcome.status is Status.FAILED:
                self.classify(self.result)
        else:
            self.outcome.error = _newest(self.api_errors, _api_error_text)
        if self.outcome.final_message is None:
            self.outcome.final_message = _newest(self.texts, _assistant_text)
        return self.outcome

    def classify(self, result: Event) -> None:
        """Type the failure from the result and the newest synthetic API-error message."""
        message: Event = {}
        for line in reversed(self.api_errors):
            event = _decode(line)
            if event is not None and _is_api_error(event):
                message = event
                break
        rate = _dict(_decode(self.rate_limit) if self.rate_limit else None)
        retry = _dict(_decode(self.retry) if self.retry else None)
        o = self.outcome
        o.reason, o.retry_after_s, o.reset_at = classify(result, message, rate, retry)


def _apply_result(outcome: TurnOutcome, result: Event) -> None:
    failed = result.get("is_error") is True
    outcome.status = Status.FAILED if failed else Status.COMPLETED
    outcome.error = _result_error(result) if failed else None
    outcome.final_message = None if failed else (_str(result.get("result")) or None)
    outcome.usage = _usage(result.get("usage"))
    outcome.cost_usd = _number(result.get("total_cost_usd"))
    outcome.agent_session_id = outcome.agent_session_id or _str(result.get("session_id")) or None
    outcome.model = outcome.model or _main_model(result.get("modelUsage"))


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    cache_read = _count(raw.get("cache_read_input_tokens"))
    return Usage(
        input_tokens=_count(raw.get("input_tokens"))
        + _count(raw.get("cache_creation_input_tokens"))
        + cache_read,
        cached_input_tokens=cache_read,
        output_tokens=_count(raw.get("output_tokens")),
        reasoning_tokens=_count(_dict(raw.get("output_tokens_details")).get("thinking_tokens")),
    )


class LiveUsage:
    """The usage of a run so far, fed its output a line at a time: the usage of each model
    call (assistant message), summed. Claude repeats a message's usage on every content-block
    line of it, so each message id counts once, with its latest figures; output tokens are as
    streamed so far (a lower bound). ``usage`` is None until a message reported some;
    ``model`` is the model the latest one names (what a cost estimate prices)."""

    def __init__(self) -> None:
        self._by_message: dict[str, Usage] = {}
        self.usage: Usage | None = None
        self.model: str | None = None

    def feed(self, line: bytes) -> bool:
        """Take one output line; True if the usage so far changed."""
        if type(line) is not bytes:
            line = _as_bytes(line)
        if b'"assistant"' not in line or b'"usage"' not in line:
            return False  # cheap: tool results, the bulk of a log, never match
        event = _decode(line)
        if event is None or event.get("type") != "assistant":
            return False
        message = _dict(event.get("message"))
        used = _usage(message.get("usage"))
        if used is None:
            return False
        model = _str(message.get("model"))
        if model and model != "<synthetic>":
            self.model = model[:200]
        key = _str(message.get("id")) or f"#{len(self._by_message)}"
        if self._by_message.get(key) == used:
            return False
        self._by_message[key] = used
        total = Usage()
        for u in self._by_message.values():
            total = total + u
        self.usage = total
        return True


def usage_so_far(lines: Iterable[bytes]) -> Usage | None:
    """What a run that ended without a ``result`` line (killed, timed out) had used (see
    ``LiveUsage``). None if it reported none."""
    live = LiveUsage()
    for line in lines:
        live.feed(line)
    return live.usage


# --------------------------------------------------------------------------- failure reasons

_CONTEXT_REASONS = frozenset({"prompt_too_long"})
# claude's own list of a subscription's "wait" errors (usage_limit_reached: a plan limit or a
# spend cap; model_requires_usage_credits), and an API key's used-up credit (billing_error)
_USAGE_ERRORS = frozenset({"usage_limit_reached", "model_requires_usage_credits", "billing_error"})
_AUTH_ERRORS = frozenset({"authentication_failed", "authentication_error", "permission_error"})
# api_error_type of a 529 and of a 5xx (claude's own ``error`` says "server_error" for those,
# and for a lost connection too, which is no overload: the status or the type decides)
_OVERLOAD_ERRORS = frozenset({"overloaded_error", "api_error"})


def classify(
    result: Event, message: Event, rate_limit: Event, retry: Event
) -> tuple[Reason | None, float | None, float | None]:
    """(reason, retry after in seconds, reset at in epoch seconds) of a failed run, from the
    ``result`` line, the synthetic API-error ``message`` (or {}), the last
    ``rate_limit_event`` and the last ``system/api_retry`` line (or {})."""
    status = _int(result.get("api_error_status")) or _int(message.get("api_error_status"))
    kinds = {
        _str(x)
        for x in (
            result.get("api_error_type"),
            message.get("api_error_type"),
            message.get("error"),
            result.get("api_error"),
            message.get("api_error"),
        )
    }
    if kinds & _USAGE_ERRORS:
        return Reason.USAGE_LIMIT, None, _reset_at(message, rate_limit)
    if _str(result.get("terminal_reason")) in _CONTEXT_REASONS:
        return Reason.CONTEXT_OVERFLOW, None, None
    if status in (401, 403) or kinds & _AUTH_ERRORS:
        return Reason.AUTH_FAILED, None, None
    if status == 429 or kinds & {"rate_limit", "rate_limit_error"}:
        return Reason.RATE_LIMITED, _retry_after(retry), _reset_at(message, rate_limit)
    if (status is not None and (status == 529 or 500 <= status < 600)) or (
        kinds & _OVERLOAD_ERRORS
    ):
        return Reason.OVERLOADED, _retry_after(retry), None
    if _str(result.get("result")).startswith("Not logged in"):
        return Reason.AUTH_FAILED, None, None
    return None, None, None


def _reset_at(message: Event, rate_limit: Event) -> float | None:
    """``resetsAt`` of the rejecting rate limit (the message's own, else the event's)."""
    params = _dict(_dict(message.get("api_error_params")).get("rate_limit_info"))
    info = _dict(rate_limit.get("rate_limit_info"))
    for source in (params, info):
        at = _number(source.get("resetsAt"))
        rejected = source.get("status") == "rejected" and source.get("isUsingOverage") is not True
        if at is not None and rejected and 0 < at < 1e11:
            return at
    return None


def _retry_after(retry: Event) -> float | None:
    delay = _number(retry.get("retry_delay_ms"))
    return delay / 1000 if delay is not None and 0 < delay <= 7 * 86400 * 1000 else None


def _main_model(model_usage: Any) -> str | None:
    """The model that cost the most (claude may also bill a small helper model)."""

    def cost(name: str) -> float:
        return _number(_dict(_dict(model_usage).get(name)).get("costUSD")) or 0.0

    names = [name for name in _dict(model_usage) if name]
    return max(names, key=cost) if names else None


def _last_text(event: Event) -> str | None:
    if event.get("type") != "assistant":
        return None
    texts = [_str(b.get("text")) for b in _blocks(event) if b.get("type") == "text"]
    return texts[-1] if texts else None


def _is_api_error(event: Event) -> bool:
    model = _dict(event.get("message")).get("model")
    return event.get("is_api_error_message") is True or model == "<synthetic>"


def _assistant_text(event: Event) -> str | None:
    return None if _is_api_error(event) else _last_text(event)


def _api_error_text(event: Event) -> str | None:
    text = _last_text(event) if _is_api_error(event) else None
    return _with_status(text, event.get("api_error_status")) if text else None


def scan_outcome(lines: Iterable[bytes]) -> TurnOutcome:
    """The turn's outcome, decoding only the few lines that can change it.

    ``status`` comes from the ``result`` line: FAILED iff ``is_error``, else COMPLETED; None when
    there is no result line (then ``error`` is the text of an API-error message, if one was
    seen). ``final_message`` is ``result.result`` on success, else the last assistant text that
    is not a synthetic API-error message. The same answer whatever the JSON spacing: claude's
    compact layout only takes a faster path.
    """
    scan = _Scan()
    for line in lines:
        if type(line) is not bytes:
            line = _as_bytes(line)
        if line.startswith(_HEAD_USER):  # tool results: never matter
            continue
        if line.startswith(_HEAD_ASSISTANT):
            scan.assistant(line)
        elif line.startswith(_HEAD_SYSTEM):
            scan.system(line)
        elif line.startswith(_HEAD_RATE_LIMIT):
            scan.rate_limit = line
        else:
            head = _HEAD.match(line)
            if head is None:
                scan.other(line)
            else:
                scan.typed(head.group(1), line)
    return scan.finish()
