"""docs/endpoints.md, tested: each agent pointed at an endpoint of one's own with exactly the
config snippet the page shows, run by zwarm with the real pinned CLI against a local fake of
that endpoint's API, completes its turn and sends the key the page says it sends.

The snippet is read from the page itself (the ```toml block after ``<!-- tested: NAME -->``);
only the documented address ``http://127.0.0.1:4000`` becomes the fake's. The rest is what a
user's shell holds: the key in the variable the page names, and (for isolation) an empty HOME,
a TMPDIR and ``NO_PROXY`` for loopback. PATH leads to the pinned CLIs, not the fake agents.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gemini_api import GEMINI_MODEL, FakeGeminiServer
from tests.fakes.llm import NO_PROXY, NPM_BIN, FakeMessagesServer, FakeResponsesServer, Reply, text
from tests.support import ROOT, VENV_BIN
from tests.support.real import require

PAGE = ROOT / "docs" / "endpoints.md"
DOCUMENTED = "http://127.0.0.1:4000"
KEY = "sk-gateway-test-7f3a"
ANSWER = "Hello from your own endpoint."


def snippet(name: str) -> str:
    """The ```toml block the page marks ``<!-- tested: name -->``, as written."""
    page = PAGE.read_text()
    found = re.search(rf"<!-- tested: {re.escape(name)} -->\n```toml\n(.*?)```", page, re.S)
    assert found, f"docs/endpoints.md has no tested example {name!r}"
    assert DOCUMENTED in found.group(1)
    return found.group(1)


def run_turn(zw: Any, adapter: str, name: str, url: str, **env: str) -> dict[str, Any]:
    """Write the page's snippet ``name`` (pointed at ``url``) as the trusted config, run one
    turn of ``adapter`` with ``zwarm spawn --wait``, and return ``show`` of the session."""
    require(adapter)
    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config(snippet(name).replace(DOCUMENTED, url))
    path = os.pathsep.join([str(NPM_BIN), str(VENV_BIN), "/usr/local/bin:/usr/bin:/bin"])
    shell = {"PATH": path, "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY, **env}
    res = zw.run("spawn", "--adapter", adapter, "--wait", "--json", "say hello", env_extra=shell,
                 timeout=240)  # fmt: skip
    assert res.returncode == 0, f"stdout: {res.stdout}\nstderr: {res.stderr}"
    shown: dict[str, Any] = zw.json("show", json.loads(res.stdout)["id"])
    assert shown["status"] == "completed" and shown["last_message"] == ANSWER
    return shown


def test_codex_on_a_gateway(zw, tmp_path: Path) -> None:
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    with FakeResponsesServer([Reply([text(ANSWER)])]) as srv:
        shown = run_turn(zw, "codex", "codex", srv.url, GATEWAY_API_KEY=KEY,
                         CODEX_HOME=str(codex_home))  # fmt: skip
    (req,) = srv.requests
    assert req.path == "/v1/responses" and req.headers["authorization"] == f"Bearer {KEY}"
    assert req.body["model"] == "gpt-5.5" and shown["model"] == "gpt-5.5"


def test_claude_on_a_gateway(zw) -> None:
    with FakeMessagesServer([Reply([text(ANSWER)])]) as srv:
        shown = run_turn(zw, "claude", "claude", srv.url, ANTHROPIC_AUTH_TOKEN=KEY,
                         DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                         CLAUDE_CODE_MAX_RETRIES="0")  # fmt: skip
    (req,) = srv.requests
    assert req.path.startswith("/v1/messages") and req.headers["authorization"] == f"Bearer {KEY}"
    assert req.body["model"] == "claude-sonnet-4-5" and shown["model"] == "claude-sonnet-4-5"


@pytest.mark.parametrize("name", ["gemini", "gemini-keyless"])
def test_gemini_on_an_endpoint(zw, name: str) -> None:
    key = {"GEMINI_API_KEY": KEY} if name == "gemini" else {}
    with FakeGeminiServer([Reply([text(ANSWER)])]) as srv:
        shown = run_turn(zw, "gemini", name, srv.url, **key)
    (req,) = srv.requests
    assert req.path.startswith(f"/v1beta/models/{GEMINI_MODEL}:streamGenerateContent")
    assert req.headers.get("x-goog-api-key", "") == (KEY if key else "")  # keyless: empty
    assert shown["model"] == GEMINI_MODEL
