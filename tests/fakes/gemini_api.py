"""A scripted fake of Google's Gemini API, so the real ``gemini`` CLI runs offline in tests.

Owns ``FakeGeminiServer`` and the helpers that point the real CLI at it directly (without
zwarm). It plays the same scripts as the OpenAI/Anthropic fakes in ``tests/fakes/llm.py``
(``Reply``, ``text``, ``shell``, ``write_file``, ``tool_call``, ``http_error``,
``broken_stream``, ``delay``, ``hang``), with the same playback rules: model request ``i``
gets reply ``i``, an exhausted script answers HTTP 500, every model request is recorded in
``srv.requests`` and every other request in ``srv.other_requests``. Standard library only.

What it speaks (``@google/gemini-cli`` 0.61.0, see ``shared/reference/gemini-cli.md``)::

    POST /v1beta/models/{model}:streamGenerateContent?alt=sse   every agent-loop request
    POST /v1beta/models/{model}:generateContent                 side calls (plain JSON)

A reply streams one ``data: <GenerateContentResponse>`` chunk per part; the last chunk
carries ``finishReason: "STOP"`` and the reply's ``usageMetadata``. Parts map to::

    text(s)              {"text": s}
    reasoning(s)         {"text": s, "thought": true}     (the CLI never shows thoughts)
    shell(cmd)           functionCall run_shell_command {command}
    write_file(p, c)     functionCall write_file {file_path, content}
    tool_call(name, a)   functionCall name a

Usage maps to ``promptTokenCount`` = input (cached included, as Gemini counts it),
``cachedContentTokenCount`` = cached, ``candidatesTokenCount`` = output,
``thoughtsTokenCount`` = reasoning. ``http_error(status, msg)`` answers that status with
``{"error": {"code", "message", "status"}}``; ``broken_stream(...)`` streams the parts with no
``finishReason`` and cuts the connection (the CLI then ends its run with ``result.status:
"error"``, exit 0).

Must stay true: it binds 127.0.0.1 only, and a request for any other path is recorded (so a
test can assert the CLI asked for nothing else).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.fakes.llm import (
    NO_PROXY,
    FakeLLMServer,
    Part,
    Reply,
    Request,
    Usage,
    _Handler,
    binary,
)

GEMINI_MODEL = "gemini-2.5-flash"
FAKE_KEY = "fake-gemini-key"
_MODEL_CALL = re.compile(r"^/v1beta/models/([^/:]+):(streamGenerateContent|generateContent)$")
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class FakeGeminiServer(FakeLLMServer):
    """The Gemini API (``streamGenerateContent?alt=sse``), for the ``gemini`` CLI.

    Give the CLI ``GOOGLE_GEMINI_BASE_URL=srv.url`` and a settings file choosing
    ``gemini-api-key`` auth (``gemini_setup``); zwarm's own ``[gemini]`` table does the same.
    """

    model_path = "/v1beta/models"

    def _handle(self, h: _Handler) -> None:
        req = h.read_request()
        call = _MODEL_CALL.match(req.path.split("?")[0]) if h.command == "POST" else None
        if call is None:
            self._record(self.other_requests, req)
            self._answer_other(h, req)
            return
        index = self._record(self.requests, req)
        self._play_gemini(h, req, self._reply_for(index), stream=call.group(2).startswith("s"))

    def _play_gemini(self, h: _Handler, req: Request, reply: Reply, stream: bool) -> None:
        if reply.hang:
            self._stopping.wait()
            return
        if reply.delay and self._stopping.wait(reply.delay):
            return
        if reply.status != 200:
            h.send_json(reply.status, self.error_body(reply.status, reply.error_message))
            return
        if not stream:
            h.send_json(200, self.final_object(reply, {}), truncate=reply.break_stream)
            return
        h.start_stream()
        for chunk in self.stream_events(reply, {}):
            h.send_chunk(chunk)
        if not reply.break_stream:
            h.end_stream()
        # else: no terminating chunk; the server closes the socket

    # ------------------------------------------------------------------ protocol
    def error_body(self, status: int, message: str, etype: str | None = None) -> dict[str, Any]:
        name = etype or _STATUS_NAMES.get(status, "UNKNOWN")
        return {"error": {"code": status, "message": message, "status": name}}

    @staticmethod
    def part(part: Part) -> dict[str, Any]:
        if part.kind == "text":
            return {"text": part.text}
        if part.kind == "reasoning":
            return {"text": part.text, "thought": True}
        name, args = _tool(part)
        return {"functionCall": {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:12]}"}}

    @staticmethod
    def usage(u: Usage) -> dict[str, int]:
        return {
            "promptTokenCount": u.input,
            "cachedContentTokenCount": u.cached,
            "candidatesTokenCount": u.output,
            "thoughtsTokenCount": u.reasoning,
            "totalTokenCount": u.input + u.output + u.reasoning,
        }

    def _chunk(self, parts: list[dict[str, Any]], last: Reply | None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": GEMINI_MODEL}
        if last is not None:
            candidate["finishReason"] = "STOP"
            chunk["usageMetadata"] = self.usage(last.usage)
        return chunk

    def final_object(self, reply: Reply, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._chunk([self.part(p) for p in reply.parts], reply)

    def stream_events(self, reply: Reply, body: Mapping[str, Any]) -> list[bytes]:
        parts = [self.part(p) for p in reply.parts]
        if reply.break_stream:
            chunks = [self._chunk([p], None) for p in parts]
        elif parts:
            chunks = [self._chunk([p], None) for p in parts[:-1]]
            chunks.append(self._chunk(parts[-1:], reply))
        else:
            chunks = [self._chunk([], reply)]
        return [f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks]


def _tool(part: Part) -> tuple[str, dict[str, Any]]:
    if part.kind == "shell":
        return "run_shell_command", {"command": part.args["command"]}
    if part.kind == "write_file":
        return "write_file", {"file_path": part.args["path"], "content": part.args["content"]}
    return part.text, dict(part.args)


# --------------------------------------------------------------------------- pointing the CLI


def settings(**extra: Any) -> dict[str, Any]:
    """The settings the CLI needs headless and offline: API-key auth, no usage statistics,
    no telemetry, no update checks, one attempt per request (no retries)."""
    base: dict[str, Any] = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            "maxAttempts": 1,
        },
    }
    for key, value in extra.items():
        base.setdefault(key, {}).update(value)
    return base


def gemini_setup(url: str, tmp_path: os.PathLike[str] | str, **extra: Any) -> dict[str, str]:
    """Env pointing ``gemini`` at the fake, with its home (and settings) under
    ``tmp_path/gemini-env``; calling it again with the same ``tmp_path`` keeps the home
    (needed to resume). ``extra`` settings tables are merged into ``settings()``."""
    root = Path(tmp_path) / "gemini-env"
    home, tmp = root / "home", root / "tmp"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings(**extra)))
    return {
        "GEMINI_CLI_HOME": str(home),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_API_KEY": FAKE_KEY,
        "NO_PROXY": NO_PROXY,
        "no_proxy": NO_PROXY,
    }


def gemini_argv(exe: str, *extra: str, resume: str | None = None) -> list[str]:
    """Headless ``gemini`` with stream-json output reading the prompt from stdin."""
    argv = [exe, "--output-format", "stream-json", "-m", GEMINI_MODEL, *extra]
    if resume:
        argv += ["--resume", resume]
    return argv


def gemini_binary() -> str | None:
    """The pinned ``gemini`` from ``.ci/install-agents``, else from PATH."""
    return binary("gemini")
