"""The fake Gemini API alone (``tests/fakes/gemini_api.py``), over HTTP with ``urllib``.

What the real ``gemini`` makes of it is proven through zwarm in ``tests/agents/real/test_gemini.py``
(and directly, without zwarm, by ``test_the_real_cli_against_the_fake`` below).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gemini_api import (
    GEMINI_MODEL,
    FakeGeminiServer,
    gemini_argv,
    gemini_binary,
    gemini_setup,
)
from tests.fakes.llm import (
    Reply,
    Usage,
    broken_stream,
    http_error,
    reasoning,
    run_cli,
    shell,
    text,
    tool_call,
    write_file,
)

STREAM = f"/v1beta/models/{GEMINI_MODEL}:streamGenerateContent?alt=sse"


def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def chunks(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(x[6:]) for x in raw.decode().split("\r\n\r\n") if x.startswith("data: ")]


def test_a_reply_streams_its_parts_and_ends_with_finish_reason_and_usage() -> None:
    parts = [reasoning("hm"), text("Hi"), shell("ls"), write_file("a.txt", "x"),
             tool_call("read_file", {"file_path": "a"})]  # fmt: skip
    with FakeGeminiServer([Reply(parts, Usage(460, 200, 30, 7))]) as srv:
        status, raw = post(srv.url + STREAM, {"contents": [{"parts": [{"text": "Say hi."}]}]})
    assert status == 200
    got = chunks(raw)
    assert len(got) == 5
    flat = [c["candidates"][0]["content"]["parts"][0] for c in got]
    assert flat[0] == {"text": "hm", "thought": True} and flat[1] == {"text": "Hi"}
    calls = [p["functionCall"] for p in flat[2:]]
    assert [(c["name"], c["args"]) for c in calls] == [
        ("run_shell_command", {"command": "ls"}),
        ("write_file", {"file_path": "a.txt", "content": "x"}),
        ("read_file", {"file_path": "a"}),
    ]
    assert all("finishReason" not in c["candidates"][0] for c in got[:-1])
    assert got[-1]["candidates"][0]["finishReason"] == "STOP"
    assert got[-1]["usageMetadata"] == {
        "promptTokenCount": 460, "cachedContentTokenCount": 200, "candidatesTokenCount": 30,
        "thoughtsTokenCount": 7, "totalTokenCount": 497,
    }  # fmt: skip
    (req,) = srv.requests
    assert req.contains("Say hi.") and srv.other_requests == []


def test_errors_broken_streams_side_calls_and_other_paths() -> None:
    script = [http_error(429, "slow down"), broken_stream(text("Part")), Reply([text("side")])]
    with FakeGeminiServer(script) as srv:
        status, raw = post(srv.url + STREAM, {})
        assert status == 429
        assert json.loads(raw) == {
            "error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}
        }
        try:
            post(srv.url + STREAM, {})
        except Exception:
            pass  # the connection was cut mid-stream: what the client sees varies
        side = f"/v1beta/models/{GEMINI_MODEL}:generateContent"
        status, raw = post(srv.url + side, {})
        assert status == 200
        assert json.loads(raw)["candidates"][0]["content"]["parts"] == [{"text": "side"}]
        status, raw = post(srv.url + STREAM, {})  # script exhausted: an error, not a loop
        assert status == 500 and b"script exhausted" in raw
        status, _ = post(srv.url + "/v1beta/models", {})
        assert status == 404
    assert len(srv.requests) == 4
    assert [r.path for r in srv.other_requests] == ["/v1beta/models"]


def test_the_real_cli_against_the_fake(tmp_path: Path) -> None:
    exe = gemini_binary()
    if exe is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("gemini binary not found: run .ci/install-agents")
        pytest.skip("gemini binary not found: run .ci/install-agents")
    work = tmp_path / "work"
    work.mkdir()
    with FakeGeminiServer([Reply([text("Hello!")], Usage(200, 0, 8))]) as srv:
        env = gemini_setup(srv.url, tmp_path)
        run = run_cli(gemini_argv(exe), env, work, "say hi", timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert [e["type"] for e in run.events] == ["init", "message", "message", "result"]
    assert run.of_type("result")[0]["stats"]["total_tokens"] == 208
    assert srv.requests[0].path == STREAM and srv.other_requests == []
