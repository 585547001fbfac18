"""Scripted fake LLM servers, so the real agent CLIs can run offline in tests.

This module owns everything a test needs to drive the *real* ``codex`` and
``claude`` binaries with no API key and no network: two tiny HTTP servers that
speak just enough of each vendor's streaming API, the reply script they play
back, and helpers that point each CLI at a fake with isolated directories.
Standard library only.

Servers (both bind 127.0.0.1 on a free port, run in a background thread, and
are context managers that stop cleanly on exit)::

    FakeResponsesServer(script)   OpenAI Responses API, SSE at POST /v1/responses
                                  (codex). ``srv.base_url`` is ``.../v1``.
    FakeMessagesServer(script)    Anthropic Messages API, SSE at POST /v1/messages
                                  (claude, which adds ``?beta=true``).

A *script* is a list of :class:`Reply`. Model request ``i`` gets reply ``i``.
When the script is exhausted every further model request gets an HTTP 500 with
the message ``fake server: script exhausted ...`` (chosen over repeating the
last reply so that a runaway tool loop fails fast instead of spinning).
Every model request is recorded in ``srv.requests``; any other endpoint gets a
harmless JSON answer (404 in the API's error format, or a token count for
``count_tokens``) and is recorded in ``srv.other_requests``.

A reply is built from parts and behaviours::

    Reply([reasoning("plan"), text("hi"), shell("ls")], Usage(input=460, cached=200, output=30))
    write_file("/abs/path.txt", "content\\n")    # claude: Write tool; codex: apply_patch
    tool_call("TodoWrite", {...})                # any other tool, by its native name
    mcp_call("zwarm", "delegate", {...})         # an MCP server's tool: claude's
                                                 # mcp__zwarm__delegate, codex's delegate in
                                                 # namespace mcp__zwarm
    tool_search("zwarm delegate")                # codex: load its deferred (MCP) tools
    http_error(500, "boom")                      # JSON error body in the API's format
    http_error(529, "busy", "overloaded_error")  # ...with an explicit error type
    broken_stream(text("partial"))               # stream some events, then cut the connection
    failed_stream("usage_limit_reached", "...")  # codex: a 200 stream ending response.failed
    delay(2.0, Reply([text("late")]))            # wait before answering
    hang()                                       # never answer (until the server stops)

Usage numbers are passed through verbatim: codex reports their sum over the
replies of a turn (``input_tokens``, ``cached_input_tokens``,
``cache_write_input_tokens`` = ``cache_write``, ``reasoning_output_tokens``),
claude sums them over the replies of a run in its ``result`` line
(``input_tokens``, ``cache_read_input_tokens`` = ``cached``,
``cache_creation_input_tokens`` = ``cache_write``, ``output_tokens``).

How the real CLIs react (0.169.0 / 2.1.330, proven in ``test_llm_fakes.py``):

- HTTP error: codex ``turn.failed``, exit 1 (for a 5xx codex shows its own
  "high demand" text, not our message); claude ``result`` with
  ``is_error: true``, ``subtype: "success"``, ``api_error_status``, exit 1.
- ``broken_stream``: codex ``turn.failed`` "stream disconnected before
  completion", exit 1. Claude instead retries the request ONCE WITHOUT
  streaming (``stream: false``, request ``i+1``; even with
  CLAUDE_CODE_MAX_RETRIES=0): if that reply answers, the run succeeds; give it
  another ``broken_stream()`` (a truncated JSON body) or an error to make it fail.
  A non-streaming request is answered with a plain JSON message / response.
- ``hang``: both CLIs just wait; kill them (``codex`` in node_modules/.bin is a
  node shim with a native child: kill the process group).

Pointing the CLIs at a fake (zwarm's own config passes the same things through
``[codex] env / extra_args / [codex.config]`` and ``[claude] env / extra_args``)::

    env, overrides = codex_setup(srv.base_url, tmp_path)
        env:        CODEX_HOME (created), HOME, TMPDIR, OPENAI_API_KEY=dummy, NO_PROXY
        overrides:  the ``-c key=value`` settings (model_provider="mock", model,
                    model_providers.mock{base_url, wire_api="responses",
                    request_max_retries=0, stream_max_retries=0}, analytics off);
                    ``codex_config_args(overrides)`` renders them as ``-c`` argv
        argv:       CODEX_EXTRA_ARGS = ("--disable", "plugins")
    env = claude_setup(srv.url, tmp_path)
        env:        HOME, CLAUDE_CONFIG_DIR, TMPDIR, ANTHROPIC_BASE_URL,
                    ANTHROPIC_API_KEY, DISABLE_* switches, CLAUDE_CODE_MAX_RETRIES=0,
                    IS_SANDBOX=1 (needed for --dangerously-skip-permissions as root)
        argv:       CLAUDE_EXTRA_ARGS = () (nothing extra is needed)

The env dicts hold only the variables to set; ``isolated_env(env)`` adds a
minimal base (PATH, locale, shell) so nothing from the caller's environment
(proxies, real API keys) leaks in. ``codex_argv``/``claude_argv`` build the
headless command lines, ``run_cli`` runs one with the prompt on stdin, and
``binary(name)`` finds the pinned binaries installed by ``.ci/install-agents``.

Codex ``file_change`` items come from the freeform ``apply_patch`` tool (a
``custom_tool_call`` whose input is a ``*** Begin Patch`` envelope), which is
what :func:`write_file` sends to codex.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

REPO_ROOT = Path(__file__).resolve().parents[2]
NPM_BIN = REPO_ROOT / ".tools" / "npm" / "node_modules" / ".bin"

CODEX_MODEL = "gpt-5.5"
CODEX_EXTRA_ARGS: tuple[str, ...] = ("--disable", "plugins")
CLAUDE_EXTRA_ARGS: tuple[str, ...] = ()
NO_PROXY = "127.0.0.1,localhost"


# --------------------------------------------------------------------------- script


@dataclass(frozen=True)
class Usage:
    """Token counts one reply reports (passed through verbatim)."""

    input: int = 0
    cached: int = 0
    output: int = 0
    reasoning: int = 0
    cache_write: int = 0


@dataclass(frozen=True)
class Part:
    """One output item (codex) / content block (claude) of a reply.

    ``kind`` is one of ``text``, ``reasoning``, ``shell``, ``write_file``, ``tool``, ``mcp``,
    ``tool_search`` (codex only).
    """

    kind: str
    text: str = ""
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """What the fake answers to one model request.

    ``status`` other than 200 answers with an API error body carrying
    ``error_message`` (and ``error_type``, default: the API's usual type for
    that status; ``error_fields`` adds fields to the body's error object, e.g.
    ``resets_at``); ``headers`` are added to the response (e.g. ``retry-after``,
    ``anthropic-ratelimit-unified-*``); ``break_stream`` cuts the connection after
    the parts' events (no terminal event); ``stream_failure`` (Responses API only) ends
    the stream in a ``response.failed`` event carrying that error object (the in-stream
    error form: HTTP 200, then a failure); ``delay`` waits first; ``hang`` never answers.
    """

    parts: Sequence[Part] = ()
    usage: Usage = Usage()
    delay: float = 0.0
    status: int = 200
    error_message: str = ""
    error_type: str | None = None
    break_stream: bool = False
    hang: bool = False
    error_fields: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    stream_failure: Mapping[str, Any] | None = None  # Responses: end in ``response.failed``


def text(s: str) -> Part:
    """An assistant message (codex ``agent_message``, claude text block)."""
    return Part("text", text=s)


def reasoning(s: str) -> Part:
    """Codex reasoning summary / claude thinking block."""
    return Part("reasoning", text=s)


def shell(command: str) -> Part:
    """Codex ``exec_command {cmd}`` function call / claude ``Bash {command}`` tool use."""
    return Part("shell", args={"command": command})


def write_file(path: str, content: str) -> Part:
    """Create a file: claude ``Write {file_path, content}``; codex ``apply_patch`` (Add File).

    Claude's Write tool wants an absolute path; codex accepts either.
    """
    return Part("write_file", args={"path": path, "content": content})


def tool_call(name: str, arguments: Mapping[str, Any]) -> Part:
    """Any other tool by its native name (codex function call / claude tool use)."""
    return Part("tool", text=name, args=dict(arguments))


def mcp_call(server: str, tool: str, arguments: Mapping[str, Any]) -> Part:
    """A tool of MCP server ``server``: claude's ``mcp__SERVER__TOOL`` tool use; codex's
    function call ``TOOL`` in namespace ``mcp__SERVER`` (callable once ``tool_search`` loaded
    it: codex 0.169.0 defers every MCP tool behind its tool search)."""
    return Part("mcp", text=tool, args={"server": server, "arguments": dict(arguments)})


def tool_search(query: str, limit: int = 20) -> Part:
    """Codex's client-side ``tool_search`` (a ``tool_search_call``): the tools it finds are
    loaded for the next request. Claude has no such part (its tools load upfront or through
    its own ToolSearch tool: use ``tool_call``)."""
    return Part("tool_search", text=query, args={"limit": limit})


def http_error(
    status: int,
    message: str = "fake error",
    error_type: str | None = None,
    *,
    fields: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """Answer with HTTP ``status`` and a JSON error body in the API's own format.

    ``error_type`` overrides the error's ``type`` (Anthropic) / ``type`` and ``code`` (OpenAI);
    ``fields`` are added to the error object, ``headers`` to the response.
    """
    return Reply(
        status=status,
        error_message=message,
        error_type=error_type,
        error_fields=dict(fields or {}),
        headers=dict(headers or {}),
    )


def broken_stream(*parts: Part) -> Reply:
    """Start a normal stream, send ``parts``, then close the connection mid-stream.

    No terminal event (``response.completed`` / ``message_stop``) and no final
    HTTP chunk. Answering a non-streaming request, it sends half the JSON body.
    """
    return Reply(parts=parts, break_stream=True)


def failed_stream(code: str, message: str, *parts: Part) -> Reply:
    """Responses API (codex): a 200 stream of ``parts``, then ``response.failed`` with the
    error ``{code, message}`` (e.g. ``usage_limit_reached``): how a limit arrives inside a
    successful stream (/work/shared/reference/limits.md)."""
    return Reply(parts=parts, stream_failure={"code": code, "message": message})


def delay(seconds: float, reply: Reply | None = None) -> Reply:
    """``reply`` (default: a short text answer) sent after waiting ``seconds``."""
    return dataclasses.replace(reply or Reply([text("ok")]), delay=seconds)


def hang() -> Reply:
    """Accept the request and never answer, until the server stops."""
    return Reply(hang=True)


@dataclass(frozen=True)
class Request:
    """One HTTP request the fake received."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw: bytes

    def dump(self) -> str:
        """The body as one JSON string, handy for ``"needle" in req.dump()``."""
        return json.dumps(self.body, ensure_ascii=False)

    def texts(self) -> list[str]:
        """Every string value in the JSON body, depth first (prompts, tool outputs...)."""
        found: list[str] = []
        stack = [self.body]
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                found.append(node)
            elif isinstance(node, dict):
                stack.extend(reversed(list(node.values())))
            elif isinstance(node, list):
                stack.extend(reversed(node))
        return found

    def contains(self, needle: str) -> bool:
        """True if some string in the body contains ``needle`` verbatim."""
        return any(needle in s for s in self.texts())


# --------------------------------------------------------------------------- server core


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60  # socket timeout: a stuck client can't pin a handler thread forever
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.fake._handle(self)

    def do_POST(self) -> None:
        self.server.fake._handle(self)

    def do_HEAD(self) -> None:
        self.server.fake._handle(self)

    def read_request(self) -> Request:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        return Request(self.command, self.path, headers, body, raw)

    def send_json(
        self,
        status: int,
        payload: Mapping[str, Any],
        truncate: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Send a JSON body; ``truncate`` sends only half of it, then closes the connection."""
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.send_header("request-id", _new_id("req"))
        self.send_header("x-request-id", _new_id("req"))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data[: len(data) // 2] if truncate else data)
        self.close_connection = True

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.send_header("request-id", _new_id("req"))
        self.send_header("x-request-id", _new_id("req"))
        self.end_headers()
        self.close_connection = True

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins handler threads: a clean stop
    block_on_close = True
    fake: FakeLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # the client went away (killed CLI, cut stream): not a fake bug
        super().handle_error(request, client_address)


class FakeLLMServer:
    """Shared machinery: thread, script playback, request log. Subclasses speak a protocol.

    Single use: ``start()`` (or ``with``) once, ``stop()`` (idempotent) once.
    ``requests``/``other_requests`` are appended under a lock, in arrival order.
    """

    model_path = "/"

    def __init__(self, script: Sequence[Reply]):
        self.script: list[Reply] = list(script)
        self.requests: list[Request] = []
        self.other_requests: list[Request] = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle -----------------------------------------------------------

    def start(self) -> Self:
        if self._stopping.is_set():
            raise RuntimeError("fake servers are single-use: make a new one")
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},  # how soon stop() is noticed
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()  # releases hang() / delay() handlers
        self._httpd.shutdown()
        self._httpd.server_close()  # joins handler threads
        if self._thread is not None:
            self._thread.join()
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """Base URL without a path: ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    # waiting -------------------------------------------------------------

    def wait_for_requests(self, n: int, timeout: float = 30.0) -> list[Request]:
        """Block until at least ``n`` model requests arrived; return them all."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.requests) >= n, timeout):
                raise TimeoutError(f"{len(self.requests)} of {n} requests after {timeout}s")
            return list(self.requests)

    # request handling ----------------------------------------------------

    def _handle(self, h: _Handler) -> None:
        req = h.read_request()
        if h.command != "POST" or req.path.split("?")[0] != self.model_path:
            self._record(self.other_requests, req)
            self._answer_other(h, req)
            return
        index = self._record(self.requests, req)
        self._play(h, req, self._reply_for(index))

    def _record(self, log: list[Request], req: Request) -> int:
        with self._cond:
            log.append(req)
            self._cond.notify_all()
            return len(log) - 1

    def _reply_for(self, index: int) -> Reply:
        if index < len(self.script):
            return self.script[index]
        msg = f"fake server: script exhausted (request #{index + 1}, script has {len(self.script)})"
        return http_error(500, msg)

    def _play(self, h: _Handler, req: Request, reply: Reply) -> None:
        if reply.hang:
            self._stopping.wait()
            return
        if reply.delay and self._stopping.wait(reply.delay):
            return
        if reply.status != 200:
            error = self.error_body(reply.status, reply.error_message, reply.error_type)
            error["error"].update(reply.error_fields)
            h.send_json(reply.status, error, headers=reply.headers)
            return
        body = req.body if isinstance(req.body, dict) else {}
        if not body.get("stream", False):
            h.send_json(200, self.final_object(reply, body), truncate=reply.break_stream)
            return
        h.start_stream()
        for chunk in self.stream_events(reply, body):
            h.send_chunk(chunk)
        if not reply.break_stream:
            h.end_stream()
        # else: return without the terminating chunk; the server closes the socket.

    # protocol hooks --------------------------------------------------------

    def _answer_other(self, h: _Handler, req: Request) -> None:
        h.send_json(404, self.error_body(404, f"fake server: no such endpoint {req.path}"))

    def error_body(self, status: int, message: str, etype: str | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def stream_events(self, reply: Reply, body: Mapping[str, Any]) -> list[bytes]:
        raise NotImplementedError

    def final_object(self, reply: Reply, body: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


# --------------------------------------------------------------------------- OpenAI Responses

_OPENAI_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", None),
    404: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
}


def _patch_add_file(path: str, content: str) -> str:
    lines = content.splitlines() or [""]
    body = "".join(f"+{line}\n" for line in lines)
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch"


class FakeResponsesServer(FakeLLMServer):
    """OpenAI Responses API (streaming) at ``POST /v1/responses``, for codex."""

    model_path = "/v1/responses"

    @property
    def base_url(self) -> str:
        """What codex's ``model_providers.<id>.base_url`` must be: ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    def error_body(self, status: int, message: str, etype: str | None = None) -> dict[str, Any]:
        default_type, code = _OPENAI_ERROR_TYPES.get(status, ("server_error", None))
        error = {"message": message, "type": etype or default_type, "param": None}
        return {"error": {**error, "code": etype or code}}

    def _items(self, reply: Reply) -> list[dict[str, Any]]:
        return [self._item(part) for part in reply.parts]

    def _item(self, part: Part) -> dict[str, Any]:
        call_id = _new_id("call")
        if part.kind == "text":
            content = [{"type": "output_text", "text": part.text, "annotations": []}]
            return {
                "type": "message",
                "id": _new_id("msg"),
                "role": "assistant",
                "status": "completed",
                "content": content,
            }
        if part.kind == "reasoning":
            summary = [{"type": "summary_text", "text": part.text}]
            return {"type": "reasoning", "id": _new_id("rs"), "summary": summary}
        if part.kind == "write_file":
            patch = _patch_add_file(part.args["path"], part.args["content"])
            return {
                "type": "custom_tool_call",
                "id": _new_id("ctc"),
                "call_id": call_id,
                "name": "apply_patch",
                "input": patch,
                "status": "completed",
            }
        if part.kind == "tool_search":
            arguments = {"query": part.text, "limit": part.args["limit"]}
            return {
                "type": "tool_search_call",
                "id": _new_id("tsc"),
                "call_id": call_id,
                "execution": "client",
                "status": "completed",
                "arguments": arguments,
            }
        if part.kind == "mcp":
            return {
                "type": "function_call",
                "id": _new_id("fc"),
                "call_id": call_id,
                "namespace": f"mcp__{part.args['server']}",
                "name": part.text,
                "arguments": json.dumps(part.args["arguments"]),
                "status": "completed",
            }
        if part.kind == "shell":
            name, args = "exec_command", {"cmd": part.args["command"]}
        else:
            name, args = part.text, dict(part.args)
        return {
            "type": "function_call",
            "id": _new_id("fc"),
            "call_id": call_id,
            "name": name,
            "arguments": json.dumps(args),
            "status": "completed",
        }

    def _response(
        self, reply: Reply, body: Mapping[str, Any], rid: str, output: list[dict[str, Any]]
    ) -> dict[str, Any]:
        u = reply.usage
        usage = {
            "input_tokens": u.input,
            "input_tokens_details": {
                "cached_tokens": u.cached,
                "cache_write_tokens": u.cache_write,  # codex: cache_write_input_tokens
            },
            "output_tokens": u.output,
            "output_tokens_details": {"reasoning_tokens": u.reasoning},
            "total_tokens": u.input + u.output,
        }
        return {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model", CODEX_MODEL),
            "output": output,
            "usage": usage,
        }

    def final_object(self, reply: Reply, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._response(reply, body, _new_id("resp"), self._items(reply))

    def stream_events(self, reply: Reply, body: Mapping[str, Any]) -> list[bytes]:
        seq = itertools.count()
        rid = _new_id("resp")
        events: list[tuple[str, dict[str, Any]]] = []
        created = self._response(reply, body, rid, [])
        created.update(status="in_progress", usage=None)
        events.append(("response.created", {"response": created}))
        items = self._items(reply)
        for index, item in enumerate(items):
            events += self._item_events(index, item)
        if reply.stream_failure is not None:
            failed = self._response(reply, body, rid, items)
            failed.update(status="failed", error=dict(reply.stream_failure), usage=None)
            events.append(("response.failed", {"response": failed}))
        elif not reply.break_stream:
            done = self._response(reply, body, rid, items)
            events.append(("response.completed", {"response": done}))
        return [_sse(n, {"type": n, "sequence_number": next(seq), **d}) for n, d in events]

    @staticmethod
    def _item_events(index: int, item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        if item["type"] == "message":
            text_ = item["content"][0]["text"]
            added = {**item, "status": "in_progress", "content": []}
            events.append(("response.output_item.added", {"output_index": index, "item": added}))
            delta = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(("response.output_text.delta", {**delta, "delta": text_}))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
        return events


# --------------------------------------------------------------------------- Anthropic Messages

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class FakeMessagesServer(FakeLLMServer):
    """Anthropic Messages API (streaming) at ``POST /v1/messages``, for claude.

    Give claude ``ANTHROPIC_BASE_URL=srv.url``.
    """

    model_path = "/v1/messages"

    def error_body(self, status: int, message: str, etype: str | None = None) -> dict[str, Any]:
        etype = etype or _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": etype, "message": message}}

    def _answer_other(self, h: _Handler, req: Request) -> None:
        if "count_tokens" in req.path:
            h.send_json(200, {"input_tokens": 1})
            return
        super()._answer_other(h, req)

    @staticmethod
    def _blocks(reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        for part in reply.parts:
            if part.kind == "text":
                blocks.append({"type": "text", "text": part.text})
            elif part.kind == "reasoning":
                blocks.append({"type": "thinking", "thinking": part.text, "signature": "fakesig"})
            else:
                name, args = FakeMessagesServer._tool(part)
                block = {"type": "tool_use", "id": _new_id("toolu"), "name": name, "input": args}
                blocks.append(block)
        return blocks

    @staticmethod
    def _tool(part: Part) -> tuple[str, dict[str, Any]]:
        if part.kind == "shell":
            return "Bash", {"command": part.args["command"]}
        if part.kind == "write_file":
            return "Write", {"file_path": part.args["path"], "content": part.args["content"]}
        if part.kind == "mcp":
            return f"mcp__{part.args['server']}__{part.text}", dict(part.args["arguments"])
        return part.text, dict(part.args)

    @staticmethod
    def _usage(u: Usage) -> dict[str, int]:
        return {
            "input_tokens": u.input,
            "cache_creation_input_tokens": u.cache_write,
            "cache_read_input_tokens": u.cached,
            "output_tokens": u.output,
        }

    def _message(
        self, reply: Reply, body: Mapping[str, Any], content: list[dict[str, Any]]
    ) -> dict[str, Any]:
        has_tool = any(b["type"] == "tool_use" for b in content)
        return {
            "id": _new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-fake"),
            "content": content,
            "stop_reason": "tool_use" if has_tool else "end_turn",
            "stop_sequence": None,
            "usage": self._usage(reply.usage),
        }

    def final_object(self, reply: Reply, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._message(reply, body, self._blocks(reply))

    def stream_events(self, reply: Reply, body: Mapping[str, Any]) -> list[bytes]:
        blocks = self._blocks(reply)
        final = self._message(reply, body, blocks)
        start = {**final, "content": [], "stop_reason": None}
        start["usage"] = {**final["usage"], "output_tokens": 1}
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start})]
        for index, block in enumerate(blocks):
            events += self._block_events(index, block)
        if not reply.break_stream:
            delta = {"stop_reason": final["stop_reason"], "stop_sequence": None}
            events.append(("message_delta", {"delta": delta, "usage": final["usage"]}))
            events.append(("message_stop", {}))
        return [_sse(name, {"type": name, **data}) for name, data in events]

    @staticmethod
    def _block_events(index: int, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        kind = block["type"]
        empty: dict[str, Any]
        if kind == "text":
            empty = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        elif kind == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        else:
            empty = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        events = [("content_block_start", {"index": index, "content_block": empty})]
        events += [("content_block_delta", {"index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"index": index}))
        return events


# --------------------------------------------------------------------------- pointing the CLIs


def binary(name: str) -> str | None:
    """Path of the pinned ``codex``/``claude`` from ``.ci/install-agents``, else from PATH."""
    local = NPM_BIN / name
    if local.exists():
        return str(local)
    return shutil.which(name)


def _dirs(root: Path, *names: str) -> list[Path]:
    paths = [root / n for n in names]
    for p in paths:
        p.mkdir(parents=True, exist_ok=True)
    return paths


def nested(dotted: dict[str, Any]) -> dict[str, Any]:
    """``codex_setup``'s dotted ``-c`` keys as nested tables, for a ``[codex.config]`` table:
    ``{"a.b": 1}`` -> ``{"a": {"b": 1}}`` (zwarm flattens them back into ``-c`` keys)."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        *parents, last = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def codex_setup(
    base_url: str, tmp_path: os.PathLike[str] | str
) -> tuple[dict[str, str], dict[str, Any]]:
    """(env, ``-c`` overrides) pointing codex at the fake; dirs live under ``tmp_path/codex-env``.

    Calling it again with the same ``tmp_path`` reuses the same CODEX_HOME (needed to resume).
    """
    home, codex_home, tmp = _dirs(Path(tmp_path) / "codex-env", "home", "codex_home", "tmp")
    env = {
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "TMPDIR": str(tmp),
        "OPENAI_API_KEY": "dummy",
        "NO_PROXY": NO_PROXY,
        "no_proxy": NO_PROXY,
    }
    provider = {
        "name": "mock",
        "base_url": base_url,
        "wire_api": "responses",
        "env_key": "OPENAI_API_KEY",
        "request_max_retries": 0,
        "stream_max_retries": 0,
    }
    overrides: dict[str, Any] = {
        "model_provider": "mock",
        "model": CODEX_MODEL,
        "model_providers.mock": provider,
        "analytics.enabled": False,
    }
    return env, overrides


def claude_setup(url: str, tmp_path: os.PathLike[str] | str) -> dict[str, str]:
    """Env pointing claude at the fake; dirs live under ``tmp_path/claude-env``.

    Calling it again with the same ``tmp_path`` reuses the same config dir (needed to resume).
    """
    home, tmp = _dirs(Path(tmp_path) / "claude-env", "home", "tmp")
    return {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "TMPDIR": str(tmp),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "IS_SANDBOX": "1",
        "NO_PROXY": NO_PROXY,
        "no_proxy": NO_PROXY,
    }


_BASE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "USER", "LOGNAME", "SHELL", "TERM")


def isolated_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` on top of a minimal base taken from ``os.environ`` (no keys, no proxies)."""
    base = {k: os.environ[k] for k in _BASE_ENV_KEYS if k in os.environ}
    return {**base, **env}


def toml_value(value: Any) -> str:
    """Render a Python value as a TOML inline value (for codex ``-c key=value``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_toml_key(k)}={toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _toml_key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key)
    return key if bare else json.dumps(key)


def codex_config_args(overrides: Mapping[str, Any]) -> list[str]:
    """``["-c", "key=<toml>", ...]`` for codex (dotted keys are passed as they are)."""
    args: list[str] = []
    for key, value in overrides.items():
        args += ["-c", f"{key}={toml_value(value)}"]
    return args


def codex_argv(
    codex: str,
    workdir: os.PathLike[str] | str,
    overrides: Mapping[str, Any],
    resume: str | None = None,
) -> list[str]:
    """Headless ``codex exec --json`` reading the prompt from stdin; ``resume`` a thread id."""
    argv = [codex, "exec", "--json", "--skip-git-repo-check", "-C", str(workdir), *CODEX_EXTRA_ARGS]
    argv += [*codex_config_args(overrides), "--dangerously-bypass-approvals-and-sandbox"]
    if resume:
        argv += ["resume", resume]
    return [*argv, "-"]


def claude_argv(claude: str, *extra: str, resume: str | None = None) -> list[str]:
    """Headless ``claude -p`` with stream-json output reading the prompt from stdin."""
    argv = [claude, "-p", "--output-format", "stream-json", "--verbose"]
    argv += ["--dangerously-skip-permissions", *CLAUDE_EXTRA_ARGS, *extra]
    if resume:
        argv += ["--resume", resume]
    return argv


@dataclass
class CliRun:
    """Outcome of :func:`run_cli`: exit code, raw output, and the parsed JSONL events."""

    returncode: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]]
    seconds: float

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == type_]


def parse_jsonl(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL stream, skipping any non-JSON lines."""
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def run_cli(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: os.PathLike[str] | str,
    prompt: str,
    timeout: float = 60.0,
) -> CliRun:
    """Run a CLI with ``isolated_env(env)``, the prompt on stdin, and wait for it to exit."""
    started = time.monotonic()
    proc = subprocess.run(
        list(argv),
        input=prompt,
        capture_output=True,
        text=True,
        env=isolated_env(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    elapsed = time.monotonic() - started
    return CliRun(proc.returncode, proc.stdout, proc.stderr, parse_jsonl(proc.stdout), elapsed)
