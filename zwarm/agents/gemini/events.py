"""Gemini CLI (``gemini --output-format stream-json``) stdout -> zwarm steps and the turn's
outcome.

Owns the whole reading of one gemini turn log: ``iter_steps`` (the trajectory, as
``zwarm.model.steps`` dicts) and ``scan_outcome`` (status, final message, error, usage, model,
session id). Six event types (0.61.0): ``init``, ``message`` (user, or assistant text as
``delta`` chunks only), ``tool_use``, ``tool_result``, ``error`` (``severity`` warning or
error), ``result`` (``status`` success|error, ``error``, ``stats``).

Must stay true:
- pure and stdlib-only (plus ``zwarm.model``, ``zwarm.model.steps``, ``zwarm.agents.jsonl``);
  neither function raises on any input: blank, non-JSON, truncated or non-object lines,
  wrong-typed fields and unknown event types are skipped;
- assistant text is the concatenation of its ``delta`` chunks; a run of chunks is one message,
  ended only by a tool event (``tool_use``/``tool_result``) or the ``result``, so unknown
  events and warnings never split a message. The final message is the last run;
- failure is ``result.status == "error"`` (whatever the exit code: a broken stream exits 0),
  with the result's own error message, else the ``severity: "error"`` event just before it;
  no ``result`` line is no status. A ``severity: "error"`` event that the result adopts as its
  message is not also reported on its own;
- ``tool_result`` carries no exit code: a shell command's comes from ``facts`` (kept after
  the turn from gemini's own session record, ``zwarm.agents.gemini.tools``), else it
  is 0 for a successful run and None otherwise; ``write_file``/``replace`` become
  ``file_change`` steps (path and add/update from ``facts`` when known);
- usage is reported raw and per run (not cumulative over ``--resume``): input includes cached
  tokens; thoughts are only in ``total_tokens``, so reasoning = total - input - output and
  zwarm's output includes it (Gemini bills thinking as output). Gemini reports no cost;
- ``scan_outcome`` makes one pass: gemini writes compact JSON with ``"type"`` first, so tool
  lines (the bulk of a log) are classified by their first bytes and never decoded; any other
  layout is decoded, with the same answer.
"""

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import msgspec

from zwarm.agents.jsonl import Event
from zwarm.agents.jsonl import as_bytes as _as_bytes
from zwarm.agents.jsonl import count as _count
from zwarm.agents.jsonl import decode as _decode
from zwarm.agents.jsonl import dict_ as _dict
from zwarm.agents.jsonl import int_ as _int
from zwarm.agents.jsonl import obj as _obj
from zwarm.agents.jsonl import str_ as _str
from zwarm.agents.ordering import InOrder
from zwarm.model import Reason, Status, TurnOutcome, Usage
from zwarm.model.steps import Step

SHELL = "run_shell_command"
FILE_TOOLS = {"write_file": "update", "replace": "update"}  # kind when the record says nothing
DECLINED = frozenset({"tool_not_registered", "policy_violation"})  # the tool never ran
TEXT_CAP = 4 << 20  # characters of one message kept (the rest is cut with "…")

Facts = Mapping[str, Mapping[str, Any]]  # tool_id -> {"exit_code", "path", "kind"}


# --------------------------------------------------------------------------- text runs


class _Text(msgspec.Struct):
    """One run of assistant ``delta`` chunks, bounded by ``TEXT_CAP``."""

    parts: list[str] = msgspec.field(default_factory=list)
    size: int = 0

    def add(self, chunk: str) -> None:
        if self.size < TEXT_CAP:
            self.parts.append(chunk[: TEXT_CAP - self.size])
        self.size += len(chunk)

    def take(self) -> str | None:
        if not self.parts:
            return None
        text = "".join(self.parts) + ("…" if self.size > TEXT_CAP else "")
        self.parts, self.size = [], 0
        return text


def _assistant_chunk(event: Event) -> str | None:
    if event.get("role") != "assistant":
        return None
    content = event.get("content")
    return content if isinstance(content, str) else None


# --------------------------------------------------------------------------- steps


class _State(msgspec.Struct):
    facts: Facts
    text: _Text = msgspec.field(default_factory=_Text)
    calls: dict[str, tuple[str, dict[str, Any]]] = msgspec.field(default_factory=dict)  # pending
    held_error: str | None = None  # a severity:error event the result may adopt


def _command_step(call: dict[str, Any], event: Event, fact: Mapping[str, Any]) -> Step:
    status = _str(event.get("status"))
    kind = _str(_dict(event.get("error")).get("type"))
    output = _str(event.get("output")) or _str(_dict(event.get("error")).get("message"))
    if status == "success":
        code = _int(fact.get("exit_code")) if "exit_code" in fact else 0
        state = "completed" if code == 0 else "failed"
    else:
        code = _int(fact.get("exit_code"))
        state = "declined" if kind in DECLINED else "failed"
    return {
        "kind": "command",
        "command": _str(call.get("command")),
        "exit_code": code,
        "output": output,
        "status": state,
    }


def _change(name: str, call: dict[str, Any], fact: Mapping[str, Any], status: str) -> Step:
    path = _str(fact.get("path")) or _str(call.get("file_path"))
    kind = _str(fact.get("kind")) or FILE_TOOLS[name]
    return {"kind": "file_change", "changes": [{"path": path, "kind": kind}], "status": status}


def _tool_call(tool_id: str, name: str, args: dict[str, Any]) -> Step:
    return {"kind": "tool_call", "id": tool_id, "name": name, "arguments": args, "server": None}


def _on_tool_result(event: Event, st: _State) -> list[Step]:
    tool_id = _str(event.get("tool_id"))
    name, args = st.calls.pop(tool_id, ("", {}))
    fact = _dict(st.facts.get(tool_id))
    if name == SHELL:
        return [_ends(tool_id, [_command_step(args, event, fact)])]
    ok = _str(event.get("status")) == "success"
    if name in FILE_TOOLS and ok:
        return [_ends(tool_id, [_change(name, args, fact, "completed")])]
    error = _dict(event.get("error"))
    result = _str(event.get("output")) or _str(error.get("message"))
    steps: list[Step] = [_tool_call(tool_id, name, args)] if name in FILE_TOOLS else []
    steps.append(
        {
            "kind": "tool_result",
            "id": tool_id,
            "name": name or None,
            "result": result,
            "is_error": not ok,
        }
    )
    return [_ends(tool_id, steps)] if name in FILE_TOOLS else steps


def _on_tool_use(event: Event, st: _State) -> list[Step]:
    tool_id, name = _str(event.get("tool_id")), _str(event.get("tool_name"))
    args = _obj(event.get("parameters"))
    st.calls[tool_id] = (name, args)
    if name == SHELL or name in FILE_TOOLS:
        return [{"kind": _OPEN, "id": tool_id}]  # its place: its step comes with its result
    return [_tool_call(tool_id, name, args)]


_OPEN = "_open"  # a call's place among the steps (never yielded: ``iter_steps``)
_ENDS = "_ends"  # the steps of a call that ended, for its place (never yielded)
_MARKS = frozenset({_OPEN, _ENDS})


def _ends(tool_id: str, steps: list[Step]) -> Step:
    return {"kind": _ENDS, "id": tool_id, "steps": steps}


def _own_error(event: Event) -> str | None:
    return _str(_dict(event.get("error")).get("message")).strip() or None


def _result_error(event: Event, held: str | None) -> str:
    """A failed result's message: its own, else the error event just before it."""
    return _own_error(event) or held or "gemini reported an error"


def _flush_text(st: _State) -> list[Step]:
    text = st.text.take()
    return [{"kind": "message", "text": text}] if text is not None else []


def _flush_error(st: _State) -> list[Step]:
    held, st.held_error = st.held_error, None
    return [{"kind": "error", "message": held, "fatal": False}] if held is not None else []


def _step(event: Event, st: _State) -> list[Step]:
    kind = event.get("type")
    if kind == "message":
        chunk = _assistant_chunk(event)
        if chunk is not None:
            st.text.add(chunk)
        return []
    if kind == "error":
        message = _str(event.get("message")) or "gemini reported an error"
        steps = _flush_error(st)
        if event.get("severity") == "error":
            st.held_error = message
            return steps
        return [*steps, {"kind": "error", "message": message, "fatal": False}]
    if kind == "tool_use":
        return [*_flush_text(st), *_flush_error(st), *_on_tool_use(event, st)]
    if kind == "tool_result":
        return [*_flush_text(st), *_flush_error(st), *_on_tool_result(event, st)]
    if kind == "result":
        steps = _flush_text(st)
        if event.get("status") != "error":
            return [*steps, *_flush_error(st)]
        if _own_error(event) is None and st.held_error is not None:
            adopted, st.held_error = st.held_error, None  # the result's message
            return [*steps, {"kind": "error", "message": adopted, "fatal": True}]
        steps += _flush_error(st)  # the result has its own words: the event stays a warning
        return [*steps, {"kind": "error", "message": _result_error(event, None), "fatal": True}]
    return []


def iter_steps(lines: Iterable[bytes], facts: Facts | None = None) -> Iterator[Step]:
    """Normalized steps of one gemini turn, in the order the agent started them: a shell
    command or file change (one step, made when its result arrives) comes where it was
    called, the steps after it held meanwhile (``zwarm.agents.ordering``). One that never got
    its result (the agent was killed) comes in its place, ``in_progress``."""
    st = _State(facts or {})
    order = InOrder(lambda key: _unended(st, key))
    for line in lines:
        event = _decode(line)
        if event is None:
            continue
        steps = _step(event, st)
        if not order.held and not any(s["kind"] in _MARKS for s in steps):
            yield from steps
            continue
        _hold(order, steps)
        yield from order.ready()
    _hold(order, [*_flush_text(st), *_flush_error(st)])
    yield from order.finish()


def _hold(order: InOrder, steps: list[Step]) -> None:
    for step in steps:
        kind = step["kind"]
        if kind == _OPEN:
            order.open(step["id"])
        elif kind != _ENDS:
            order.add(step)
        elif not order.close(step["id"], step["steps"]):  # given up meanwhile: where it ends
            for one in step["steps"]:
                order.add(one)


def _unended(st: _State, tool_id: str) -> list[Step]:
    """A call that never got its result, as it looks (and forgotten)."""
    name, args = st.calls.pop(tool_id, ("", {}))
    if name == SHELL:
        return [{"kind": "command", "command": _str(args.get("command")), "exit_code": None,
                 "output": "", "status": "in_progress"}]  # fmt: skip
    if name in FILE_TOOLS:
        return [_change(name, args, _dict(st.facts.get(tool_id)), "in_progress")]
    return []


# --------------------------------------------------------------------------- outcome

_TOOL_HEAD = b'{"type":"tool_'  # tool_use / tool_result, as gemini writes them


def usage(stats: Any) -> Usage | None:
    """zwarm's usage from ``result.stats`` (None if it has none)."""
    if not isinstance(stats, dict):
        return None
    prompt, output = _count(stats.get("input_tokens")), _count(stats.get("output_tokens"))
    thoughts = max(0, _count(stats.get("total_tokens")) - prompt - output)
    return Usage(
        input_tokens=prompt,
        cached_input_tokens=min(_count(stats.get("cached")), prompt),
        output_tokens=output + thoughts,
        reasoning_tokens=thoughts,
    )


def _main_model(stats: Any, asked: str | None) -> str | None:
    """The model of the run's main requests: the one ``init`` names (every main request goes
    to it) when it made requests, else (``auto``, an alias) the one of the main requests that
    used the most tokens. The
    CLI's side calls (the ``auto`` router's classifier, summaries, loop checks) go to a
    flash-lite model and are not the main ones: a run whose main request failed at once
    reports the router's tokens and zero for the model it routed to."""
    models = {k: v for k, v in _dict(_dict(stats).get("models")).items() if k}
    if not models or asked in models:
        return asked
    main = {k: v for k, v in models.items() if "flash-lite" not in k} or models
    return max(main, key=lambda m: _count(_dict(main[m]).get("total_tokens")))


class _Scan(msgspec.Struct):
    outcome: TurnOutcome = msgspec.field(default_factory=TurnOutcome)
    text: _Text = msgspec.field(default_factory=_Text)
    last_text: str | None = None
    held_error: str | None = None
    init_model: str | None = None
    answered: bool = False  # the model said something or called a tool

    def pending(self) -> bool:
        return bool(self.text.parts) or self.held_error is not None

    def end_run(self) -> None:
        text = self.text.take()
        if text is not None:
            self.last_text = text

    def take(self, event: Event) -> None:
        kind = event.get("type")
        if kind == "message":
            chunk = _assistant_chunk(event)
            if chunk is not None:
                self.text.add(chunk)
                self.answered = True
        elif kind in ("tool_use", "tool_result"):
            self.answered = True
            self.end_run()
            self.held_error = None
        elif kind == "error":
            serious = event.get("severity") == "error"
            self.held_error = (_str(event.get("message")) or None) if serious else None
        elif kind == "init":
            self.take_init(event)
        elif kind == "result":
            self.take_result(event)

    def take_init(self, event: Event) -> None:
        if self.outcome.agent_session_id is None:
            self.outcome.agent_session_id = _str(event.get("session_id")) or None
            model = _str(event.get("model"))
            self.init_model = model if model and not model.startswith("auto") else None

    def take_result(self, event: Event) -> None:
        self.end_run()
        o = self.outcome
        failed = event.get("status") == "error"
        o.status = Status.FAILED if failed else Status.COMPLETED
        o.error = _result_error(event, self.held_error) if failed else None
        o.usage = usage(event.get("stats"))
        o.model = _main_model(event.get("stats"), self.init_model)
        self.held_error = None

    def finish(self) -> TurnOutcome:
        self.end_run()
        o = self.outcome
        o.final_message = self.last_text
        o.model = o.model or self.init_model
        if o.status is Status.FAILED:
            o.unanswered = not self.answered
        if o.status is Status.FAILED and o.error:
            o.reason, o.retry_after_s = classify(o.error)
        return o


# --------------------------------------------------------------------------- failure reasons


class _Failures:
    """Gemini puts the API's error (its JSON body, or its own words for a 429) in the message.
    Compiled when first needed (``_failures``): only a failed run is classified."""

    def __init__(self) -> None:
        self.quota_day = re.compile(r"quota.{0,200}(per[_ ]?day|daily)", re.I | re.S)
        self.rate = re.compile(
            r'"code":\s*429\b|RESOURCE_EXHAUSTED|Resource has been exhausted|'
            r"Please wait and try again later\. To increase your limits|Possible quota limitations",
            re.I,
        )
        self.auth = re.compile(
            r'"code":\s*40[13]\b|UNAUTHENTICATED|PERMISSION_DENIED|API key not valid'
        )
        self.overloaded = re.compile(
            r'"code":\s*5\d\d\b|"status":\s*"(INTERNAL|UNAVAILABLE)"|overloaded', re.I
        )
        self.context = re.compile(
            r"input token count.{0,80}exceeds|exceeds the maximum number of tokens", re.I
        )
        self.retry = re.compile(r"retry (?:after|in) (\d+(?:\.\d+)?)\s*s", re.I)


@functools.cache
def _failures() -> _Failures:
    return _Failures()


def classify(message: str) -> tuple[Reason | None, float | None]:
    """The typed reason of a failed run's message, and the retry delay it suggests."""
    f = _failures()
    retry = f.retry.search(message)
    after = float(retry.group(1)) if retry else None
    if f.quota_day.search(message):
        return Reason.USAGE_LIMIT, after
    if f.rate.search(message):
        return Reason.RATE_LIMITED, after
    if f.auth.search(message):
        return Reason.AUTH_FAILED, None
    if f.context.search(message):
        return Reason.CONTEXT_OVERFLOW, None
    if f.overloaded.search(message):
        return Reason.OVERLOADED, after
    return None, None


def scan_outcome(lines: Iterable[bytes]) -> TurnOutcome:
    """The turn's outcome: ``status`` from the ``result`` line (FAILED iff its status is
    ``error``), None without one; ``final_message`` the last run of assistant text (also on a
    failure: what it said before it stopped); usage as reported by this run."""
    scan = _Scan()
    for line in lines:
        if type(line) is not bytes:
            line = _as_bytes(line)
        if line.startswith(_TOOL_HEAD) and not scan.pending():
            scan.answered = True
            continue  # a compact tool line only ends a text run: with none, it changes nothing
        event = _decode(line)
        if event is not None:
            scan.take(event)
    return scan.finish()
