"""After ``zwarm mcp install``, a PLAIN headless run of the real pinned ``claude`` / ``codex``
(no --mcp-config, no --allowedTools, no bypass or dangerous flag) uses zwarm's tools: it
delegates, waits, reads the trajectory and answers with the worker's result; and a two-worker
worktree run ends in a merge. The clients' models are the scripted fakes of
``tests/fakes/llm.py``; the workers are the fake agents (tests/fakes/bin). A missing binary
skips locally and fails with CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.fakes.llm import (
    FakeMessagesServer,
    FakeResponsesServer,
    Reply,
    claude_setup,
    codex_setup,
    mcp_call,
    nested,
    text,
    tool_search,
)
from tests.orchestrator.test_real_cli import require
from tests.support import SAMPLES, ZW

pytestmark = pytest.mark.real

WORKER_SAYS = "Hi there! This is the fake server."  # the last message of codex_simple.jsonl


def _git(cwd: Path, env: dict[str, str], *args: str) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    res = subprocess.run(
        ["git", *ident, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return res.stdout


def _client_env(zw: ZW, client_env: dict[str, str]) -> dict[str, str]:
    """The client's environment: the world's (fake agents on PATH), its private home, and no
    ZWARM_DIR: the installed entry pins the state dir itself."""
    env = {**zw.env, **client_env, "FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl")}
    env.pop("ZWARM_DIR")
    env.pop("IS_SANDBOX", None)  # only --dangerously-skip-permissions needs it: not used here
    return env


def _install(zw: ZW, env: dict[str, str], *args: str) -> str:
    res = zw.run("mcp", "install", *args, env_extra=env, check=True)
    return res.stdout


def _run(argv: list[str], env: dict[str, str], cwd: Path, prompt: str) -> list[dict[str, Any]]:
    res = subprocess.run(
        argv, input=prompt, capture_output=True, text=True, env=env, cwd=cwd, timeout=240
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def _tool_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude's tool results, parsed (each is zwarm's JSON)."""
    out = []
    for e in events:
        if e.get("type") != "user":
            continue
        for c in e["message"]["content"]:
            if c.get("type") == "tool_result":
                assert not c.get("is_error"), c
                body = c["content"]
                body = body if isinstance(body, str) else body[0]["text"]
                out.append(json.loads(body))
    return out


def _claude_project(zw: ZW, url: str, *install_args: str) -> dict[str, str]:
    """A private claude home that trusts zw.cwd (as accepting claude's trust dialog there
    does), and ``zwarm mcp install claude`` run in zw.cwd (project scope)."""
    env = _client_env(zw, claude_setup(url, zw.tmp))
    conf = Path(env["CLAUDE_CONFIG_DIR"])
    conf.mkdir(parents=True, exist_ok=True)
    trusted = {"projects": {str(zw.cwd): {"hasTrustDialogAccepted": True}}}
    (conf / ".claude.json").write_text(json.dumps(trusted))
    out = _install(zw, env, "claude", *install_args)
    assert f"created {zw.cwd / '.mcp.json'}" in out and "trust this folder" not in out, out
    return env


def test_plain_claude_p_delegates_waits_reads_and_answers_after_install(zw: ZW) -> None:
    claude = require("claude")
    answer = f"The worker finished: {WORKER_SAYS}"
    script = [
        Reply([mcp_call("zwarm", "delegate", {"task": "say hi", "name": "w1"})]),
        Reply([mcp_call("zwarm", "wait", {"timeout_s": 45})]),
        Reply([mcp_call("zwarm", "get_trajectory", {"session_id": "w1"})]),
        Reply([text(answer)]),
    ]
    started = time.monotonic()
    with FakeMessagesServer(script) as srv:
        env = _claude_project(zw, srv.url)
        argv = [claude, "-p", "--output-format", "stream-json", "--verbose"]
        events = _run(argv, env, zw.cwd, "Have a background agent say hi; what did it say?")
        assert len(srv.requests) == 4
        # loaded upfront: in the model's tool list with no tool search (a server still
        # starting when the first request leaves has a placeholder there: look at the last)
        last = {t["name"] for t in srv.requests[-1].body["tools"]}
        assert {"mcp__zwarm__delegate", "mcp__zwarm__wait"} <= last, last
        assert srv.requests[3].contains(WORKER_SAYS)  # the model read the worker's result
    delegated, waited, trajectory = _tool_results(events)
    assert delegated["ok"] and delegated["name"] == "w1"
    assert waited["finished"][0]["last_message"] == WORKER_SAYS
    assert any(WORKER_SAYS in json.dumps(s) for s in trajectory["steps"])
    assert events[-1]["result"] == answer
    (row,) = zw.json("ls")
    assert (row["name"], row["status"]) == ("w1", "completed")
    assert row["source"].startswith("mcp:claude-code/")  # this connection's own caller
    print(f"claude plain headless run after install: {time.monotonic() - started:.1f}s")


def test_plain_codex_exec_delegates_waits_reads_and_answers_after_install(zw: ZW) -> None:
    codex = require("codex")
    answer = f"The worker finished: {WORKER_SAYS}"
    script = [
        Reply([tool_search("zwarm delegate a task to a background coding agent")]),
        Reply([mcp_call("zwarm", "delegate", {"task": "say hi", "name": "w1"})]),
        Reply([mcp_call("zwarm", "wait", {"timeout_s": 45})]),
        Reply([mcp_call("zwarm", "get_trajectory", {"session_id": "w1"})]),
        Reply([text(answer)]),
    ]
    started = time.monotonic()
    _git(zw.cwd, zw.env, "init", "-q")
    with FakeResponsesServer(script) as srv:
        codex_env, overrides = codex_setup(srv.base_url, zw.tmp)
        env = _client_env(zw, codex_env)
        user_config = Path(env["CODEX_HOME"]) / "config.toml"
        user_config.write_text(tomli_w.dumps(nested(overrides)))  # the user's own settings
        out = _install(zw, env, "codex", "--user")
        assert f"updated {user_config}" in out, out
        installed = tomllib.loads(user_config.read_text())
        assert installed["model_provider"] == "mock"  # the user's settings are kept
        # codex gives a server only a few variables of its own environment (PATH, HOME...):
        # the fake worker's script is handed over in the entry, as a user would an API key
        installed["mcp_servers"]["zwarm"]["env"]["FAKE_REPLAY"] = env["FAKE_REPLAY"]
        user_config.write_text(tomli_w.dumps(installed))
        argv = [codex, "exec", "--json", "-"]
        events = _run(argv, env, zw.cwd, "Have a background agent say hi; what did it say?")
        assert len(srv.requests) == 5
        found = next(i for i in srv.requests[1].body["input"] if i["type"] == "tool_search_output")
        (ns,) = [t for t in found["tools"] if t["name"] == "mcp__zwarm"]
        assert {t["name"] for t in ns["tools"]} >= {"delegate", "wait", "get_trajectory"}
        outputs = [
            i["output"]
            for r in srv.requests[2:]
            for i in r.body["input"][-1:]
            if i["type"] == "function_call_output"
        ]
        assert srv.requests[4].contains(WORKER_SAYS)
    assert len(outputs) == 3, outputs
    delegated, waited = (json.loads(o[o.index("{") :]) for o in outputs[:2])
    assert delegated["ok"] and delegated["name"] == "w1"  # approved: codex exec ran it
    assert waited["finished"][0]["last_message"] == WORKER_SAYS
    assert WORKER_SAYS in outputs[2]
    items = [e["item"] for e in events if e.get("type") == "item.completed"]
    messages = [i["text"] for i in items if i["type"] == "agent_message"]
    assert messages[-1] == answer
    (row,) = zw.json("ls")
    assert (row["name"], row["status"]) == ("w1", "completed")
    assert row["source"].startswith("mcp:")
    print(f"codex plain headless run after install: {time.monotonic() - started:.1f}s")


def test_plain_claude_p_runs_two_worktree_workers_and_merges_them(zw: ZW) -> None:
    claude = require("claude")
    env0 = {**zw.env}
    (zw.cwd / "README.md").write_text("# demo\n")
    _git(zw.cwd, env0, "init", "-q", "-b", "main")
    _git(zw.cwd, env0, "add", "README.md")
    _git(zw.cwd, env0, "commit", "-q", "-m", "init")
    both = {"session_ids": ["a", "b"], "all": True, "timeout_s": 45}
    script = [
        Reply(
            [
                mcp_call("zwarm", "delegate", {"task": "write a", "name": "a", "worktree": True}),
                mcp_call("zwarm", "delegate", {"task": "write b", "name": "b", "worktree": True}),
            ]
        ),
        Reply([mcp_call("zwarm", "wait", both)]),
        Reply([mcp_call("zwarm", "get_diff", {"session_id": "a", "stat_only": True})]),
        Reply([mcp_call("zwarm", "merge", {"session_id": "a"})]),
        Reply([mcp_call("zwarm", "merge", {"session_id": "b"})]),
        Reply([text("Both merged.")]),
    ]
    started = time.monotonic()
    with FakeMessagesServer(script) as srv:
        env = _claude_project(zw, srv.url)
        # each worker writes a file named after its own worktree folder: no conflict
        env["FAKE_SHELL"] = 'echo "from $(basename "$PWD")" > "$(basename "$PWD").txt"'
        # the install's files are the user's to commit (or not): keep them out of the merge
        (zw.cwd / ".git" / "info" / "exclude").write_text(".mcp.json\n.claude/\n")
        argv = [claude, "-p", "--output-format", "stream-json", "--verbose"]
        events = _run(argv, env, zw.cwd, "Split the work over two worktree agents and merge.")
        assert len(srv.requests) == 6
    a, b, waited, diff, merged_a, merged_b = _tool_results(events)
    assert a["ok"] and b["ok"], (a, b)
    assert waited["running"] == [] and len(waited["finished"]) == 2, waited
    assert diff["ok"] and diff["files"], diff
    assert merged_a["ok"] and merged_b["ok"], (merged_a, merged_b)
    assert events[-1]["result"] == "Both merged."
    tracked = _git(zw.cwd, env0, "ls-files").split()
    assert len([f for f in tracked if f.endswith(".txt")]) == 2, tracked
    assert _git(zw.cwd, env0, "status", "--porcelain").strip() == ""
    print(f"claude two-worker worktree run with merges: {time.monotonic() - started:.1f}s")
    assert os.path.isdir(zw.state_dir)


def test_plain_runs_reach_zwarm_serve_over_http_with_the_token_from_the_environment(
    zw: ZW,
) -> None:
    """``--http``: the project files name $ZWARM_SERVE_TOKEN, never the token; both clients
    send it from their environment and reach zwarm serve's /mcp."""
    from tests.support.serve import start_server

    claude, codex = require("claude"), require("codex")
    _git(zw.cwd, zw.env, "init", "-q")
    server = start_server(zw)
    try:
        url = f"{server.base}/mcp"
        call = mcp_call("zwarm", "list_sessions", {})
        cl_script = [Reply([call]), Reply([text("listed")])]
        search = tool_search("zwarm list sessions")
        cx_script = [Reply([search]), Reply([call]), Reply([text("ok")])]
        with FakeMessagesServer(cl_script) as asrv, FakeResponsesServer(cx_script) as csrv:
            env = _claude_project(zw, asrv.url, "--http", url)
            codex_env, overrides = codex_setup(csrv.base_url, zw.tmp)
            env.update(codex_env)
            user_config = Path(env["CODEX_HOME"]) / "config.toml"
            project = {str(zw.cwd): {"trust_level": "trusted"}}  # as `codex exec --trust` does
            user_config.write_text(tomli_w.dumps({**nested(overrides), "projects": project}))
            out = _install(zw, env, "codex", "--http", url)
            assert "ZWARM_SERVE_TOKEN" in out and "note: codex reads" not in out, out
            for name in (".mcp.json", ".codex/config.toml"):
                assert server.token not in (zw.cwd / name).read_text()
            env["ZWARM_SERVE_TOKEN"] = server.token
            argv = [claude, "-p", "--output-format", "stream-json", "--verbose"]
            (listed,) = _tool_results(_run(argv, env, zw.cwd, "list my zwarm sessions"))
            assert listed["ok"] and listed["sessions"] == []
            _run([codex, "exec", "--json", "-"], env, zw.cwd, "list my zwarm sessions")
            last = csrv.requests[2].body["input"][-1]
            assert last["type"] == "function_call_output", last
            assert '"ok":true' in last["output"] and '"sessions":[]' in last["output"], last
    finally:
        server.stop()
