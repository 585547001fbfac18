"""The tools with REAL agents: an MCP client drives ``zwarm mcp``, which delegates to the pinned
``codex`` and ``claude`` binaries (``.ci/install-agents``), which talk to the fake LLM servers
of ``tests/fakes/llm.py`` on 127.0.0.1. A missing binary skips locally and fails with CI=true.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from mcp import ClientSession

from tests.fakes.llm import (
    CLAUDE_EXTRA_ARGS,
    CODEX_EXTRA_ARGS,
    FakeMessagesServer,
    FakeResponsesServer,
    Reply,
    Usage,
    binary,
    claude_setup,
    codex_setup,
    nested,
    shell,
    text,
    tool_call,
)
from tests.orchestrator.helpers import write_config
from tests.support import SAMPLES, ZWARM_BIN
from tests.support.mcp_client import Call, run_client
from zwarm.orchestrator.tools import TOOL_NAMES


def require(name: str) -> str:
    path = binary(name)
    if path is None:
        reason = f"the real {name} binary is not installed: run .ci/install-agents"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def test_mcp_delegates_to_real_codex_and_claude(zw) -> None:
    codex, claude = require("codex"), require("claude")
    usage = Usage(input=460, cached=200, output=30)
    codex_script = [
        Reply([shell("echo codex-says-$((40+2))")], usage),
        Reply([text("REAL CODEX DONE")], usage),
        Reply([text("REAL CODEX SECOND TURN")], usage),
    ]
    claude_script = [
        Reply([shell("echo claude-says-$((40+2))")], usage),
        Reply([text("REAL CLAUDE DONE")], usage),
    ]
    with FakeResponsesServer(codex_script) as csrv, FakeMessagesServer(claude_script) as asrv:
        codex_env, overrides = codex_setup(csrv.base_url, zw.tmp)
        config = {
            "codex": {
                "command": [codex],
                "dangerous": True,
                "extra_args": list(CODEX_EXTRA_ARGS),
                "env": codex_env,
                "config": nested(overrides),
            },
            "claude": {
                "command": [claude],
                "dangerous": True,
                "extra_args": list(CLAUDE_EXTRA_ARGS),
                "env": claude_setup(asrv.url, zw.tmp),
            },
        }
        write_config(zw, tomli_w.dumps(config))
        found: dict[str, Any] = {}

        async def body(session: ClientSession, call: Call) -> None:
            _, c = await call("delegate", {"task": "say hi", "name": "cx"})
            _, a = await call("delegate", {"task": "say hi", "name": "cl", "adapter": "claude"})
            ids = [c["session_id"], a["session_id"]]
            for _ in range(6):  # each call waits at most max_wait_s
                _, w = await call("wait", {"session_ids": ids, "all": True})
                if not w["running"]:
                    break
            assert w["running"] == [], w
            for name in ("cx", "cl"):
                found[name] = (await call("check_session", {"session_id": name}))[1]
                found[name + "_traj"] = (await call("get_trajectory", {"session_id": name}))[1]
            _, v = await call("converse", {"session_id": "cx", "message": "once more"})
            assert v["state"] == "started"
            _, w = await call("wait", {"session_ids": ["cx"]})
            found["cx2"] = (await call("check_session", {"session_id": "cx"}))[1]

        run_client(zw, body)
        assert len(csrv.requests) == 3 and len(asrv.requests) == 2

    cx, cl = found["cx"], found["cl"]
    assert (cx["status"], cx["last_message"]) == ("completed", "REAL CODEX DONE")
    assert cx["source"].startswith("mcp:pytest-client/")
    assert (cl["status"], cl["last_message"], cl["adapter"]) == (
        "completed",
        "REAL CLAUDE DONE",
        "claude",
    )
    assert cx["usage"]["input_tokens"] == 920 and cx["usage"]["output_tokens"] == 60
    assert cl["cost_usd"] is not None and cl["cost_source"] == "reported"
    commands = {
        name: [s for s in found[name + "_traj"]["steps"] if s["kind"] == "command"]
        for name in ("cx", "cl")
    }
    assert commands["cx"][0]["output"].strip() == "codex-says-42"
    assert commands["cx"][0]["exit_code"] == 0
    assert "claude-says-42" in commands["cl"][0]["output"]
    assert found["cx2"]["turns"] == 2 and found["cx2"]["last_message"] == "REAL CODEX SECOND TURN"


def test_real_claude_code_orchestrates_through_zwarm_mcp(zw) -> None:
    """Claude Code itself is the orchestrator: its fake LLM calls zwarm's MCP tools."""
    claude = require("claude")
    script = [
        Reply([tool_call("mcp__zwarm__delegate", {"task": "say hi", "name": "from-claude"})]),
        Reply([tool_call("mcp__zwarm__wait", {"timeout_s": 45})]),
        Reply([text("Delegated, waited, done.")]),
    ]
    mcp_config = {
        "mcpServers": {"zwarm": {"type": "stdio", "command": str(ZWARM_BIN), "args": ["mcp"]}}
    }
    (zw.tmp / "mcp.json").write_text(json.dumps(mcp_config))
    with FakeMessagesServer(script) as srv:
        env = {
            **zw.env,
            **claude_setup(srv.url, zw.tmp),
            "FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl"),
        }
        argv = [
            claude,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--mcp-config",
            str(zw.tmp / "mcp.json"),
            "--strict-mcp-config",
        ]
        res = subprocess.run(
            argv,
            input="orchestrate",
            capture_output=True,
            text=True,
            env=env,
            cwd=zw.cwd,
            timeout=180,
        )
    assert res.returncode == 0, res.stderr[-2000:]
    events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    init = next(e for e in events if e.get("subtype") == "init")
    assert {f"mcp__zwarm__{n}" for n in TOOL_NAMES} <= set(init["tools"])  # listed over MCP
    results = [
        c
        for e in events
        if e.get("type") == "user"
        for c in e["message"]["content"]
        if c.get("type") == "tool_result"
    ]
    delegated, waited = (json.loads(r["content"]) for r in results)
    assert delegated["ok"] and delegated["name"] == "from-claude"
    assert waited["finished"], waited
    assert waited["finished"][0]["last_message"] == "Hi there! This is the fake server."
    assert events[-1]["result"] == "Delegated, waited, done."
    (row,) = zw.json("ls")
    assert (row["name"], row["status"]) == ("from-claude", "completed")
    assert re.fullmatch(r"mcp:claude-code/[0-9a-f]{6}", row["source"])  # its connection's


def _docs_text() -> str:
    root = Path(__file__).resolve().parents[2]
    return (root / "docs" / "orchestrator.md").read_text()


def test_docs_registration_lines_work_with_the_pinned_clis(zw) -> None:
    """The install lines docs/orchestrator.md shows, run as shown, then checked with the real
    binaries in a private HOME: each client sees the zwarm server (and claude starts it)."""
    codex, claude = require("codex"), require("claude")
    text_ = _docs_text()
    lines = ["zwarm mcp install claude", "zwarm mcp install codex --user"]
    for line in lines:
        assert line in text_
    home = zw.tmp / "reg-home"
    (home / ".codex").mkdir(parents=True)
    env = {
        **zw.env,
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    trusted = {"projects": {str(zw.cwd): {"hasTrustDialogAccepted": True}}}
    (home / ".claude.json").write_text(json.dumps(trusted))  # as claude's trust dialog does
    for line in lines:
        zw.run(*line.split()[1:], env_extra=env, check=True)
    written = tomllib.loads((home / ".codex" / "config.toml").read_text())["mcp_servers"]
    assert written["zwarm"]["command"] == str(ZWARM_BIN)
    manual = text_.split("By hand, the codex entry is:", 1)[1].split("```toml\n", 1)[1]
    manual_entry = tomllib.loads(manual.split("```", 1)[0])["mcp_servers"]["zwarm"]
    assert manual_entry.keys() == written["zwarm"].keys()  # the docs show what install writes
    res = subprocess.run(
        [codex, "mcp", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=zw.cwd,
        timeout=120,
    )
    assert res.returncode == 0 and '"zwarm"' in res.stdout, res.stdout + res.stderr
    res = subprocess.run(
        [claude, "mcp", "get", "zwarm"],
        capture_output=True,
        text=True,
        env=env,
        cwd=zw.cwd,
        timeout=120,
    )
    assert "Connected" in res.stdout, res.stdout + res.stderr  # it started `zwarm mcp` itself
