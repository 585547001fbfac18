"""The orchestrator's model endpoint: one Chat Completions call (streamed), and retries.

Owns talking to an OpenAI-compatible endpoint for ``zwarm orchestrate``: ``OpenAIChat`` makes
one request (streamed, with usage; once the endpoint refuses streaming, plain requests), and
``Retrying`` retries the transient failures with exponential backoff and jitter. Must stay
true:
- transient means: the connection failed or was cut (a stream that ends without its finish),
  a 5xx status, or a 429 that says when to retry (``retry-after``); anything else (4xx, a 429
  without a retry time, such as an exhausted quota) is not retried: one clear error;
- a reply cut mid-stream keeps the text it had so far: every failed attempt is handed to the
  caller (``on_retry``) with that text, before the next attempt or the final error, so the
  run store records it (``orchestrate show --all``);
- a wait never exceeds ``MAX_WAIT_S``; a ``retry-after`` longer than that stops the run
  instead (it can be resumed later) rather than holding a process for an hour;
- ``openai`` is imported only when a client is made (``zwarm orchestrate`` only).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from zwarm.errors import OrchestratorError

MAX_WAIT_S = 120.0  # longest wait between two attempts
MAX_BACKOFF_S = 60.0  # the exponential part never waits longer than this


@dataclass
class Completion:
    message: dict[str, Any]  # the assistant message, chat format
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0


class ChatLLM(Protocol):
    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], model: str | None = None
    ) -> Completion: ...


class ChatError(OrchestratorError):
    """One failed request: whether a later attempt may succeed, when the endpoint said to
    retry, and the text a cut stream had delivered."""

    def __init__(
        self,
        message: str,
        transient: bool,
        retry_after: float | None = None,
        partial: str | None = None,
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_after = retry_after
        self.partial = partial


class Endpoint(Protocol):
    """What a client needs of the orchestrator's settings."""

    @property
    def model(self) -> str: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def api_key(self) -> str: ...


# ---------------------------------------------------------------------------- one request
class OpenAIChat:
    """Chat Completions through the official ``openai`` client (any compatible endpoint),
    streamed so that a reply cut off is not lost whole; its own retries are off (``Retrying``
    does them, visibly)."""

    def __init__(self, s: Endpoint) -> None:
        try:
            import openai
        except ImportError:
            raise OrchestratorError(
                "zwarm orchestrate needs the openai package: pip install 'zwarm[orchestrate]'"
            ) from None
        self.openai = openai
        self.model = s.model
        self.where = s.base_url or "the OpenAI API"
        self.stream = True
        self.client = openai.OpenAI(
            api_key=s.api_key, base_url=s.base_url, max_retries=0, timeout=600.0
        )

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], model: str | None = None
    ) -> Completion:
        kw: dict[str, Any] = {"model": model or self.model, "messages": cast(Any, messages)}
        if tools:
            kw["tools"] = cast(Any, tools)
        if self.stream:
            try:
                return self._streamed(kw)
            except self.openai.BadRequestError as e:
                if "stream" not in str(e).lower():
                    raise self._error(e) from None
                self.stream = False  # an endpoint that cannot stream: plain requests from now
        try:
            resp = self.client.chat.completions.create(**kw)
        except self.openai.APIError as e:
            raise self._error(e) from None
        if not resp.choices:
            raise ChatError(f"{self.where} returned no choices", transient=False)
        return _completion(resp)

    def _streamed(self, kw: dict[str, Any]) -> Completion:
        acc = _Accumulator()
        try:
            stream = self.client.chat.completions.create(
                **kw, stream=True, stream_options={"include_usage": True}
            )
            for chunk in stream:
                acc.feed(chunk)
        except self.openai.BadRequestError:
            raise
        except self.openai.APIError as e:
            raise self._error(e, acc.text()) from None
        except OSError as e:
            why = f"the connection to {self.where} failed mid-reply: {e}"
            raise ChatError(why, transient=True, partial=acc.text()) from None
        if not acc.finished:
            why = f"the reply from {self.where} was cut off mid-stream"
            raise ChatError(why, transient=True, partial=acc.text())
        return acc.completion()

    def _error(self, e: Exception, partial: str | None = None) -> ChatError:
        status = getattr(e, "status_code", None)
        what = f"the model request to {self.where} failed: {e}"
        if isinstance(e, self.openai.APIConnectionError):  # includes timeouts and cut streams
            return ChatError(what, transient=True, partial=partial or None)
        if isinstance(status, int) and status >= 500:
            return ChatError(what, transient=True, partial=partial or None)
        if status == 429:
            after = retry_after(getattr(e, "response", None))
            if after is not None:
                return ChatError(what, transient=True, retry_after=after)
            return ChatError(f"{what} (rate limited with no retry time: not retried)", False)
        return ChatError(what, transient=False, partial=partial or None)


@dataclass
class _Accumulator:
    """A streamed reply put back together: text, tool calls by index, usage, finish."""

    parts: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    usage: Any = None
    finished: bool = False

    def feed(self, chunk: Any) -> None:
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "finish_reason", None):
                self.finished = True
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            if getattr(delta, "content", None):
                self.parts.append(delta.content)
            for tc in getattr(delta, "tool_calls", None) or []:
                slot = self.calls.setdefault(int(tc.index or 0), {"id": "", "name": "", "args": ""})
                slot["id"] = tc.id or slot["id"]
                fn = getattr(tc, "function", None)
                if fn is not None:
                    slot["name"] += fn.name or ""
                    slot["args"] += fn.arguments or ""

    def text(self) -> str:
        return "".join(self.parts)

    def completion(self) -> Completion:
        text = self.text()
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        calls = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["args"] or "{}"},
            }
            for _, c in sorted(self.calls.items())
            if c["name"]
        ]
        if calls:
            out["tool_calls"] = calls
        return _with_usage(out, self.usage)


def _completion(resp: Any) -> Completion:
    msg = resp.choices[0].message
    out: dict[str, Any] = {"role": "assistant", "content": msg.content}
    calls = [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.function.name, "arguments": c.function.arguments or "{}"},
        }
        for c in msg.tool_calls or []
        if getattr(c, "function", None) is not None
    ]
    if calls:
        out["tool_calls"] = calls
    return _with_usage(out, resp.usage)


def _with_usage(message: dict[str, Any], u: Any) -> Completion:
    details = getattr(u, "prompt_tokens_details", None) if u else None
    return Completion(
        message,
        u.prompt_tokens if u else None,
        u.completion_tokens if u else None,
        int(getattr(details, "cached_tokens", 0) or 0),
    )


def retry_after(response: Any) -> float | None:
    """Seconds the endpoint said to wait (``retry-after-ms`` or ``retry-after`` in seconds);
    None if it said nothing usable (an HTTP date is not trusted to a clock we share)."""
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            return value
    return None


# ---------------------------------------------------------------------------- retries
@dataclass(frozen=True)
class Retry:
    """One failed attempt, as told to the caller: which, of how many, the error, how long
    until the next (None: no next), and the text a cut stream had delivered."""

    attempt: int
    attempts: int
    error: str
    wait: float | None
    partial: str | None


def backoff(attempt: int, base: float, after: float | None, rand: Callable[[], float]) -> float:
    """The wait before attempt ``attempt + 1``: what the endpoint said, else ``base`` doubled
    per attempt (at most ``MAX_BACKOFF_S``), each with up to half of it as jitter."""
    if after is not None:
        return after + rand() * min(1.0, after / 2)
    d = min(MAX_BACKOFF_S, base * 2.0 ** (attempt - 1))
    return d / 2 + rand() * d / 2


class Retrying:
    """A ``ChatLLM`` that retries another's transient failures (see the module docstring)."""

    def __init__(
        self,
        llm: ChatLLM,
        attempts: int,
        base: float,
        on_retry: Callable[[Retry], None],
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.llm, self.attempts, self.base = llm, max(1, attempts), base
        self.on_retry, self.sleep, self.rand = on_retry, sleep, rand

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], model: str | None = None
    ) -> Completion:
        for attempt in range(1, self.attempts + 1):
            try:
                return self.llm.complete(messages, tools, model)
            except ChatError as e:
                wait = self._wait(e, attempt)
                self.on_retry(Retry(attempt, self.attempts, str(e), wait, e.partial))
                if wait is None:
                    raise self._final(e, attempt) from None
                self.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait(self, e: ChatError, attempt: int) -> float | None:
        if not e.transient or attempt >= self.attempts:
            return None
        if e.retry_after is not None and e.retry_after > MAX_WAIT_S:
            return None
        return min(MAX_WAIT_S, backoff(attempt, self.base, e.retry_after, self.rand))

    def _final(self, e: ChatError, attempt: int) -> OrchestratorError:
        if e.retry_after is not None and e.retry_after > MAX_WAIT_S:
            wait = f"{e.retry_after:g} s"
            return OrchestratorError(f"{e} (asked to retry after {wait}: resume the run later)")
        if e.transient:
            return OrchestratorError(f"{e} (gave up after {attempt} attempts)")
        return OrchestratorError(str(e))
