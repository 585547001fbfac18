"""A scripted fake OpenAI Chat Completions server with tool calling, for orchestrator tests.

Standard library only. ``FakeChatServer(script)`` binds 127.0.0.1 on a free port, serves in a
background thread, and is a context manager that stops cleanly. ``srv.base_url`` is
``http://127.0.0.1:PORT/v1`` (what the ``openai`` client's ``base_url`` wants).

- ``POST /v1/chat/completions``: request ``i`` gets ``script[i]``. A script entry is a
  ``ChatReply``, or a callable ``(ChatRequest) -> ChatReply`` so a reply can use what earlier
  tool calls returned (session ids...). A ``stream: true`` request gets the same reply as
  server-sent events (chunked: the content in pieces, each tool call's arguments in two, the
  finish, then the usage if ``stream_options.include_usage``); ``ChatReply(cut_after=N)``
  sends N content pieces and then drops the connection (no finish, no end of body).
  ``FakeChatServer(..., streaming=False)`` answers a stream request with a 400 instead (an
  endpoint that cannot stream). ``ChatReply(headers=...)`` adds response headers (an error's
  ``retry-after``).
- When the script is exhausted every further request gets HTTP 500 ``fake chat server: script
  exhausted`` (so a runaway loop fails fast instead of spinning).
- Every completion request is recorded in ``srv.requests`` (``ChatRequest``: headers, body,
  helpers to read the transcript it carried); anything else gets a 404 in OpenAI's error
  format and is recorded in ``srv.other_requests``.

Building replies::

    reply(call("delegate", task="..."), call("delegate", task="..."))   # parallel tool calls
    reply(call("bash", command="ls"), content="Let me check.")          # text + a tool call
    final("All done: ...")                                               # no tool call: the end
    ChatReply(status=400, error="bad request")                          # an API error
    reply(..., usage=(prompt_tokens, completion_tokens))                 # default (100, 20)

Reading what the orchestrator sent (in a callable entry or afterwards)::

    req.results("delegate")      # parsed JSON results of every delegate call in the transcript
    req.last_results()           # [(tool name, parsed result)] answering the last assistant turn
    req.messages, req.tools      # the raw lists
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

_ids = itertools.count(1)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    raw_arguments: str | None = None  # sent verbatim instead of json.dumps(arguments)


@dataclass(frozen=True)
class ChatReply:
    content: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    usage: tuple[int, int] | None = (100, 20)
    status: int = 200
    error: str = ""
    delay: float = 0.0
    cut_after: int | None = None  # streamed: drop the connection after this many pieces
    headers: tuple[tuple[str, str], ...] = ()


def call(tool: str, /, **arguments: Any) -> ToolCall:
    return ToolCall(tool, arguments)


def raw_call(name: str, raw_arguments: str) -> ToolCall:
    """A tool call whose arguments string is sent as is (e.g. invalid JSON)."""
    return ToolCall(name, {}, raw_arguments)


def reply(
    *calls: ToolCall, content: str | None = None, usage: tuple[int, int] | None = (100, 20)
) -> ChatReply:
    return ChatReply(content=content, tool_calls=calls, usage=usage)


def final(text: str, usage: tuple[int, int] | None = (100, 20)) -> ChatReply:
    return ChatReply(content=text, usage=usage)


ScriptEntry = ChatReply | Callable[["ChatRequest"], ChatReply]


@dataclass
class ChatRequest:
    path: str
    headers: dict[str, str]  # names lowercased
    body: Any

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or []) if isinstance(self.body, dict) else []

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.body.get("tools") or []) if isinstance(self.body, dict) else []

    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    def _call_names(self) -> dict[str, str]:
        names: dict[str, str] = {}
        for m in self.messages:
            for c in m.get("tool_calls") or []:
                names[c["id"]] = c["function"]["name"]
        return names

    def all_results(self) -> list[tuple[str, Any]]:
        """(tool name, parsed JSON result) for every tool message, in order."""
        names = self._call_names()
        out = []
        for m in self.messages:
            if m.get("role") == "tool":
                out.append((names.get(m.get("tool_call_id", ""), "?"), _parse(m.get("content"))))
        return out

    def results(self, name: str) -> list[Any]:
        return [r for n, r in self.all_results() if n == name]

    def last_results(self) -> list[tuple[str, Any]]:
        last = max((i for i, m in enumerate(self.messages) if m.get("role") == "assistant"),
                   default=-1)  # fmt: skip
        names = self._call_names()
        return [
            (names.get(m.get("tool_call_id", ""), "?"), _parse(m.get("content")))
            for m in self.messages[last + 1 :]
            if m.get("role") == "tool"
        ]

    def dump(self) -> str:
        return json.dumps(self.body, ensure_ascii=False)


def _parse(content: Any) -> Any:
    try:
        return json.loads(content)
    except (TypeError, ValueError):
        return content


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.server.owner.handle(self)

    def do_GET(self) -> None:
        self.server.owner.handle(self)

    def read_body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode("utf-8", "replace")

    def send_json(self, status: int, payload: Any, headers: Sequence[tuple[str, str]] = ()) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_events(self, events: list[Any], cut: bool) -> None:
        """Server-sent events, chunked; ``cut``: the connection drops before the end."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            data = f"data: {json.dumps(event)}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        if cut:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        done = b"data: [DONE]\n\n"
        self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeChatServer


class FakeChatServer:
    def __init__(
        self,
        script: Sequence[ScriptEntry],
        model: str = "fake-orchestrator",
        streaming: bool = True,
    ) -> None:
        self.script = list(script)
        self.model = model
        self.streaming = streaming
        self.requests: list[ChatRequest] = []
        self.other_requests: list[ChatRequest] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    # ----- life cycle
    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def extend(self, entries: Sequence[ScriptEntry]) -> None:
        with self._lock:
            self.script.extend(entries)

    # ----- serving
    def handle(self, h: _Handler) -> None:
        body = h.read_body() if h.command == "POST" else None
        req = ChatRequest(h.path, {k.lower(): v for k, v in h.headers.items()}, body)
        if h.command != "POST" or h.path.rstrip("/") != "/v1/chat/completions":
            self.other_requests.append(req)
            h.send_json(404, _error(f"fake chat server: no route {h.command} {h.path}", 404))
            return
        with self._lock:
            index = len(self.requests)
            self.requests.append(req)
            entry = self.script[index] if index < len(self.script) else None
        if isinstance(body, dict) and body.get("stream") and not self.streaming:
            h.send_json(400, _error("fake chat server: streaming is not supported", 400))
            return
        if entry is None:
            h.send_json(500, _error(f"fake chat server: script exhausted at request {index}", 500))
            return
        self._answer(h, req, entry, index)

    def _answer(self, h: _Handler, req: ChatRequest, entry: ScriptEntry, index: int) -> None:
        try:
            r = entry(req) if callable(entry) else entry
        except Exception as e:  # a broken test script shows up as an API error, and is logged
            self.errors.append(f"request {index}: {type(e).__name__}: {e}")
            h.send_json(500, _error(f"fake chat server: script entry {index} raised {e!r}", 500))
            return
        if r.delay:
            time.sleep(r.delay)
        if r.status != 200:
            h.send_json(r.status, _error(r.error or "fake error", r.status), r.headers)
            return
        if isinstance(req.body, dict) and req.body.get("stream"):
            usage = (req.body.get("stream_options") or {}).get("include_usage")
            h.send_events(self.chunks(self.completion(r, req), r.cut_after, bool(usage)),
                          r.cut_after is not None)  # fmt: skip
            return
        h.send_json(200, self.completion(r, req))

    @staticmethod
    def chunks(done: dict[str, Any], cut_after: int | None, usage: bool) -> list[Any]:
        """A completion as the stream of chunks an OpenAI endpoint sends (the first
        ``cut_after`` content pieces only, when it is cut)."""
        choice = done["choices"][0]
        msg = choice["message"]
        head = {k: done[k] for k in ("id", "created", "model")}
        head["object"] = "chat.completion.chunk"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        text = msg.get("content") or ""
        pieces = [text[i : i + 8] for i in range(0, len(text), 8)]
        out = [chunk({"role": "assistant", "content": ""})]
        out += [chunk({"content": p}) for p in pieces]
        if cut_after is not None:
            return out[: 1 + cut_after]
        for i, c in enumerate(msg.get("tool_calls") or []):
            args = c["function"]["arguments"]
            half = len(args) // 2
            fn = {"name": c["function"]["name"], "arguments": args[:half]}
            first = {"index": i, "id": c["id"], "type": "function", "function": fn}
            rest = {"index": i, "function": {"arguments": args[half:]}}
            out.append(chunk({"tool_calls": [first]}))
            out.append(chunk({"tool_calls": [rest]}))
        out.append(chunk({}, choice["finish_reason"]))
        if usage and "usage" in done:
            out.append({**head, "choices": [], "usage": done["usage"]})
        return out

    def completion(self, r: ChatReply, req: ChatRequest) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": r.content}
        if r.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{next(_ids)}",
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.raw_arguments
                        if c.raw_arguments is not None
                        else json.dumps(c.arguments),
                    },
                }
                for c in r.tool_calls
            ]
        out: dict[str, Any] = {
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": (req.body or {}).get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if r.tool_calls else "stop",
                    "logprobs": None,
                }
            ],
        }
        if r.usage is not None:
            p, c = r.usage
            out["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
        return out


def _error(message: str, status: int) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
