"""The gemini agent's own pieces, without the CLI: argv and permissions, the stream parser
(steps, outcome, usage, failure reasons), the tool facts read from gemini's session record,
and the session home's settings (auth, secrets, telemetry, the session marker).

The end-to-end proof with the real ``gemini`` is in ``tests/agents/real/test_gemini.py``; the
conformance kit (``tests/agents``) runs on the agent's samples too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from zwarm.agents import gemini
from zwarm.agents.base import AgentOptions, AgentSetupError, TurnFiles
from zwarm.agents.gemini import GeminiAgent, events, home, tools
from zwarm.model import Reason, Status, Usage

pytestmark = pytest.mark.unit

SAMPLES = Path(__file__).resolve().parents[2] / "zwarm" / "agents" / "gemini" / "samples"
REFERENCE = Path("/work/shared/reference/samples")
AGENT = GeminiAgent()


def line(**event: Any) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


def sample(name: str) -> list[bytes]:
    return (SAMPLES / f"{name}.jsonl").read_bytes().splitlines(keepends=True)


def table(**over: Any) -> dict[str, Any]:
    return {**AGENT.default_table(), **over}


# --------------------------------------------------------------------------- argv


def opts(dangerous: bool = False, **over: Any) -> AgentOptions:
    return AGENT.options(table(**over), cwd="/w", model="gemini-2.5-pro", dangerous=dangerous)


def test_argv_safe_by_default_and_yolo_only_when_dangerous() -> None:
    policies = Path(gemini.__file__).resolve().parent / "policies"
    assert AGENT.argv(opts()) == [
        "gemini", "--output-format", "stream-json", "--model", "gemini-2.5-pro",
        "--approval-mode", "auto_edit", "--policy", str(policies / "auto_edit.toml"),
    ]  # fmt: skip
    assert AGENT.argv(opts(dangerous=True), "c6421904-1c34-44af-a8c6-12337b83ec6a")[-5:] == [
        "--yolo", "--policy", str(policies / "yolo.toml"),
        "--resume", "c6421904-1c34-44af-a8c6-12337b83ec6a",
    ]  # fmt: skip
    assert AGENT.argv(opts(approval_mode="plan"))[-2:] == ["--approval-mode", "plan"]
    assert (policies / "auto_edit.toml").is_file() and (policies / "yolo.toml").is_file()
    assert "--yolo" not in AGENT.argv(opts(approval_mode="yolo"))  # never both: rc 1
    assert AGENT.permissions(table(), False) == ("--approval-mode auto_edit", False)
    assert AGENT.permissions(table(approval_mode="yolo"), False) == ("--approval-mode yolo", True)
    assert AGENT.permissions(table(), True) == ("--yolo", True)


def test_models_route_to_gemini_only() -> None:
    from zwarm import agents

    assert agents.agent_for_model("gemini-2.5-flash") == "gemini"
    assert agents.agent_for_model("gpt-5") == "codex"
    assert agents.agent_for_model("sonnet") == "claude"


# --------------------------------------------------------------------------- steps


def test_steps_of_a_real_turn_with_facts() -> None:
    lines = sample("completed")
    tool_ids = [json.loads(x)["tool_id"] for x in lines if b'"tool_use"' in x]
    facts = {
        tool_ids[0]: {"path": "/w/hello.py", "kind": "add"},
        tool_ids[1]: {"exit_code": 3},
    }
    steps = list(events.iter_steps(lines, facts))
    assert steps == [
        {"kind": "message", "text": "Writing hello.py."},
        {"kind": "file_change", "changes": [{"path": "/w/hello.py", "kind": "add"}],
         "status": "completed"},
        {"kind": "command", "command": "python3 hello.py; echo oops; exit 3", "exit_code": 3,
         "output": "hello\noops", "status": "failed"},
        {"kind": "message", "text": "Wrote hello.py; the command failed with exit 3."},
    ]  # fmt: skip


def test_without_facts_a_successful_command_exits_0_and_a_file_is_as_named() -> None:
    steps = list(events.iter_steps(sample("completed")))
    assert steps[1]["changes"] == [{"path": "hello.py", "kind": "update"}]
    assert (steps[2]["exit_code"], steps[2]["status"]) == (0, "completed")


def test_text_chunks_join_into_one_message_until_a_tool_event() -> None:
    lines = (REFERENCE / "gemini_toolcall.jsonl").read_bytes().splitlines(keepends=True)
    steps = list(events.iter_steps(lines))
    assert [s["kind"] for s in steps] == ["message", "command", "message"]
    assert steps[2]["text"] == "Done: wrote hello to out.txt."
    o = events.scan_outcome(lines)
    assert o.final_message == "Done: wrote hello to out.txt."
    # a warning between two chunks splits nothing
    warn = line(type="error", severity="warning", message="Loop detected")
    a = line(type="message", role="assistant", content="Hel", delta=True)
    b = line(type="message", role="assistant", content="lo", delta=True)
    done = line(type="result", status="success", stats={})
    assert events.scan_outcome([a, warn, b, done]).final_message == "Hello"
    assert list(events.iter_steps([a, warn, b, done])) == [
        {"kind": "error", "message": "Loop detected", "fatal": False},
        {"kind": "message", "text": "Hello"},
    ]


def test_refused_and_unfinished_tools() -> None:
    use = line(type="tool_use", tool_name="run_shell_command", tool_id="s1",
               parameters={"command": "echo hi"})  # fmt: skip
    refused = line(type="tool_result", tool_id="s1", status="error", output="not found",
                   error={"type": "tool_not_registered", "message": "not found"})  # fmt: skip
    (step,) = events.iter_steps([use, refused])
    assert (step["status"], step["exit_code"]) == ("declined", None)
    write = line(type="tool_use", tool_name="write_file", tool_id="w1",
                 parameters={"file_path": "a.txt", "content": "x"})  # fmt: skip
    other = line(type="tool_use", tool_name="read_file", tool_id="r1", parameters={"p": 1})
    steps = list(events.iter_steps([use, write, other]))  # killed before any result
    assert [s["kind"] for s in steps] == ["command", "file_change", "tool_call"]  # as called
    assert steps[0]["status"] == steps[1]["status"] == "in_progress"
    failed = line(type="tool_result", tool_id="w1", status="error",
                  error={"type": "file_write_failure", "message": "EACCES"})  # fmt: skip
    call, result = events.iter_steps([write, failed])
    assert (call["kind"], call["name"], result["is_error"], result["result"]) == (
        "tool_call", "write_file", True, "EACCES",
    )  # fmt: skip


def test_broken_stream_is_one_fatal_error_with_gemini_s_words() -> None:
    lines = sample("failed")
    o = events.scan_outcome(lines)
    assert (o.status, o.error) == (Status.FAILED, "Model stream ended without a finish reason.")
    assert o.final_message == "Partial answer"  # what it said before the stream broke
    errors = [s for s in events.iter_steps(lines) if s["kind"] == "error"]
    assert errors == [{"kind": "error", "message": o.error, "fatal": True}]
    # a result with its own message keeps the earlier error event as a warning
    own = line(type="result", status="error", error={"message": "boom"}, stats={})
    steps = list(events.iter_steps([*lines[:-1], own]))
    assert [(s["message"], s["fatal"]) for s in steps if s["kind"] == "error"] == [
        ("Model stream ended without a finish reason.", False), ("boom", True),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "reason", "retry"),
    [
        ("gemini_err429_noretry", Reason.RATE_LIMITED, 2.0),
        ("gemini_err500_noretry", Reason.OVERLOADED, None),
        ("gemini_max_turns", None, None),
    ],
)
def test_failures_are_typed_from_the_message(name: str, reason: Any, retry: Any) -> None:
    lines = (REFERENCE / f"{name}.jsonl").read_bytes().splitlines(keepends=True)
    o = events.scan_outcome(lines)
    assert o.status is Status.FAILED and o.error
    assert (o.reason, o.retry_after_s) == (reason, retry)
    assert events.classify('{"error":{"code":401,"status":"UNAUTHENTICATED"}}')[0] is (
        Reason.AUTH_FAILED
    )
    assert events.classify("Quota exceeded for metric generate_requests_per_day")[0] is (
        Reason.USAGE_LIMIT
    )


def test_usage_counts_thoughts_as_output_and_reasoning() -> None:
    stats = {"total_tokens": 497, "input_tokens": 460, "output_tokens": 30, "cached": 200}
    assert events.usage(stats) == Usage(460, 200, 37, 7)
    assert events.usage({"cached": 10**6, "input_tokens": 5}) == Usage(5, 5, 0, 0)
    assert events.usage("nope") is None


def test_model_is_the_one_that_used_most_else_the_requested_one() -> None:
    stats = {"models": {"gemini-2.5-flash-lite": {"total_tokens": 9},
                        "gemini-2.5-pro": {"total_tokens": 900}}}  # fmt: skip
    init = line(type="init", session_id="abc-1", model="auto")
    o = events.scan_outcome([init, line(type="result", status="success", stats=stats)])
    assert (o.model, o.agent_session_id) == ("gemini-2.5-pro", "abc-1")
    asked = line(type="init", session_id="abc-1", model="gemini-2.5-flash")
    assert events.scan_outcome([asked]).model == "gemini-2.5-flash"
    assert events.scan_outcome([init]).model is None  # "auto" names no model


def test_native_resume_usage_is_per_run() -> None:
    first = AGENT.outcome(sample("resume_1"))
    second = AGENT.outcome(sample("resume_2"))
    assert first.agent_session_id == second.agent_session_id
    assert (first.usage, second.usage) == (Usage(460, 200, 37, 7), Usage(300, 0, 6, 0))


# --------------------------------------------------------------------------- tool facts

TRAILER = (
    "<untrusted_context>\nOutput: {out}\n{extra}Process Group PGID: 7160\n</untrusted_context>"
)


@pytest.mark.parametrize(
    ("out", "extra", "code"),
    [
        ("hello", "", 0),
        ("bad", "Exit Code: 3\n", 3),
        ("Exit Code: 0\nProcess Group PGID: 1", "Exit Code: 7\n", 7),  # printed, then failed
        ("x", "Error: spawn failed\nExit Code: 127\nSignal: SIGTERM\n", 127),
    ],
)
def test_exit_code_comes_from_gemini_s_trailer(out: str, extra: str, code: int) -> None:
    assert tools.exit_code(TRAILER.format(out=out, extra=extra)) == code


def test_no_trailer_no_exit_code() -> None:
    assert tools.exit_code("Command was cancelled by user before it could complete.") is None


def test_file_facts() -> None:
    made = "Successfully created and wrote to new file: /w/a.b.py. Here is the updated code:\nx"
    assert tools.file_fact(made) == {"path": "/w/a.b.py", "kind": "add"}
    assert tools.file_fact("Successfully overwrote file: /w/x.") == {
        "path": "/w/x",
        "kind": "update",
    }
    edited = "Successfully modified file: /w/x.py (1 replacements)."
    assert tools.file_fact(edited) == {"path": "/w/x.py", "kind": "update"}
    assert tools.file_fact("Successfully created and wrote to new file: relative.") == {}


def _record(home: Path, session_id: str, calls: list[dict[str, Any]], name: str = "") -> Path:
    chats = home / ".gemini" / "tmp" / "work" / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    path = chats / (name or f"session-2026-11-23T14-14-{session_id[:8]}.jsonl")
    rows = [{"sessionId": session_id, "kind": "main"}, {"type": "gemini", "toolCalls": calls}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _call(tool_id: str, name: str, output: str) -> dict[str, Any]:
    response = {"functionResponse": {"id": tool_id, "name": name, "response": {"output": output}}}
    return {"id": tool_id, "name": name, "status": "success", "result": [response]}


def test_collect_reads_the_session_s_record_for_the_wanted_ids(tmp_path: Path) -> None:
    sid = "c6421904-1c34-44af-a8c6-12337b83ec6a"
    calls = [
        _call("s1", "run_shell_command", TRAILER.format(out="bad", extra="Exit Code: 3\n")),
        _call("w1", "write_file", "Successfully overwrote file: /w/x.txt."),
        _call("old", "run_shell_command", TRAILER.format(out="", extra="")),
    ]
    _record(tmp_path, sid, calls)
    _record(tmp_path, "c6421904-ffff", [_call("s1", "run_shell_command", "x")],
            name=f"session-other-{sid[:8]}.jsonl")  # same short id, another session  # fmt: skip
    facts = tools.collect(tmp_path, sid, {"s1", "w1"})
    assert facts == {"s1": {"exit_code": 3}, "w1": {"path": "/w/x.txt", "kind": "update"}}
    assert tools.load(tools.dump(facts)) == facts


def test_collect_follows_no_link(tmp_path: Path) -> None:
    sid = "c6421904-1c34-44af-a8c6-12337b83ec6a"
    real = _record(tmp_path / "elsewhere", sid, [_call("s1", "run_shell_command", "Exit Code: 9")])
    chats = tmp_path / "home" / ".gemini" / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    os.symlink(real, chats / real.name)
    assert tools.collect(tmp_path / "home", sid, {"s1"}) == {}


@pytest.mark.parametrize(
    "planted",
    [b"[]", b"{", b'{"s1": {"exit_code": "3"}}', b'{"s1": {"kind": "delete"}}',
     b'{"s1": {"exit_code": 3, "evil": 1}}', b'{"": {}}', b'{"s1": {"path": ""}}'],
)  # fmt: skip
def test_a_planted_sidecar_is_no_facts(planted: bytes) -> None:
    assert tools.load(planted) == {}


def test_the_turn_hooks_make_the_home_keep_the_facts_and_read_them(tmp_path: Path) -> None:
    """What the engine calls around a gemini turn (the agent's hooks, not an engine subclass):
    the home under the session's dir and the environment pointing at it; after the turn the
    facts of its own tool ids from gemini's record there, kept in the sidecar; a reading of
    the turn joins them to its steps."""
    d = tmp_path / "sessions" / "c6421904-1c34-44af-a8c6-12337b83ec6a"
    (d / "turns").mkdir(parents=True)
    log = d / "turns" / "turn_1.jsonl"
    turn = TurnFiles(d, log, d / "turns" / f"turn_1.{AGENT.turn_sidecar}")
    env = {"GEMINI_API_KEY": "k", "ZWARM_SESSION_ID": "s", "GEMINI_CLI_TRUSTED_FOLDERS_PATH": "/x"}
    got = AGENT.launch_env(table(user_settings=False), dict(env), "/w", turn, {})
    assert got == {
        "GEMINI_API_KEY": "k",
        "ZWARM_SESSION_ID": "s",
        "GEMINI_CLI_HOME": str(d / home.HOME_DIR),
        "GEMINI_CLI_TRUST_WORKSPACE": "false",
    }
    assert (d / home.HOME_DIR / ".gemini" / "settings.json").is_file()
    with pytest.raises(AgentSetupError, match="no Gemini credentials"):  # the turn is refused
        AGENT.launch_env(table(user_settings=False), {}, "/w", turn, {})
    lines = sample("completed")
    log.write_bytes(b"".join(lines))
    session_id, ids = tools.scan_log(lines)
    assert session_id is not None
    shell, write = sorted(ids, key=lambda i: "shell" not in i)
    exit_3 = TRAILER.format(out="x", extra="Exit Code: 3\n")
    made = "Successfully created and wrote to new file: /w/hello.py."
    calls = [_call(shell, "run_shell_command", exit_3), _call(write, "write_file", made)]
    _record(d / home.HOME_DIR, session_id, calls)
    assert AGENT.reader(turn) is AGENT  # no facts yet
    AGENT.after_turn(turn)
    assert tools.load(turn.sidecar.read_bytes()) == {  # type: ignore[union-attr]
        shell: {"exit_code": 3},
        write: {"path": "/w/hello.py", "kind": "add"},
    }
    steps = list(AGENT.reader(turn).steps(iter(lines)))
    assert steps[1]["changes"] == [{"path": "/w/hello.py", "kind": "add"}]
    assert (steps[2]["exit_code"], steps[2]["status"]) == (3, "failed")
    log.unlink()
    AGENT.after_turn(turn)  # a turn without a log: nothing, never an error


def test_scan_log_finds_the_session_and_the_tool_ids() -> None:
    lines = sample("completed")
    session_id, ids = tools.scan_log(lines)
    assert session_id == json.loads(lines[0])["session_id"]
    assert len(ids) == 2 and all("__" in i for i in ids)


# --------------------------------------------------------------------------- the home


def test_settings_hold_what_gemini_needs_and_no_key() -> None:
    env = {"GEMINI_API_KEY": "AIzaSy-real-key-value"}
    user = {"ui": {"theme": "x"}, "privacy": {"usageStatisticsEnabled": True},
            "mcpServers": {"s": {"env": {"API_KEY": "literal-secret", "TOKEN": "$MY_TOKEN"},
                                 "headers": {"Authorization": "Bearer zzz"}}},
            "security": {"environmentVariableRedaction": {"allowed": ["FOO"]}}}  # fmt: skip
    got = home.settings(table(max_attempts=1), env, user)
    assert got["security"]["auth"] == {"selectedType": "gemini-api-key", "useExternal": False}
    assert got["privacy"] == {"usageStatisticsEnabled": False}
    assert got["telemetry"] == {"enabled": False}
    assert got["general"]["maxAttempts"] == 1 and got["general"]["enableAutoUpdate"] is False
    assert got["ui"] == {"theme": "x"}
    assert got["mcpServers"]["s"] == {"env": {"TOKEN": "$MY_TOKEN"}, "headers": {}}
    assert got["security"]["environmentVariableRedaction"]["allowed"] == [
        "FOO", "ZWARM_SESSION_ID", "ZWARM_PARENT_SESSION", "ZWARM_DIR", "ZWARM",
        "ZWARM_AGENT_PATH",
    ]  # fmt: skip
    text = json.dumps(got)
    assert "AIzaSy" not in text and "literal-secret" not in text and "zzz" not in text


def test_overrides_come_last_but_never_drop_the_marker() -> None:
    over = {"security": {"environmentVariableRedaction": {"allowed": []}},
            "model": {"maxSessionTurns": 3}}  # fmt: skip
    got = home.settings(table(settings=over), {"GEMINI_API_KEY": "k"}, {})
    assert got["model"] == {"maxSessionTurns": 3}
    assert got["security"]["environmentVariableRedaction"]["allowed"] == list(home.KEEP)
    assert "maxAttempts" not in got["general"]  # 0: gemini's own default


@pytest.mark.parametrize(
    ("env", "user", "auth", "expected"),
    [
        ({"GOOGLE_GENAI_USE_VERTEXAI": "true"}, {}, "", "vertex-ai"),
        ({"GOOGLE_API_KEY": "k"}, {}, "", "gemini-api-key"),
        ({"GEMINI_CLI_USE_COMPUTE_ADC": "true"}, {}, "", "compute-default-credentials"),
        ({}, {"security": {"auth": {"selectedType": "vertex-ai"}}}, "", "vertex-ai"),
        ({}, {}, "gemini-api-key", "gemini-api-key"),
    ],
)
def test_auth_type(env: dict[str, str], user: dict[str, Any], auth: str, expected: str) -> None:
    assert home.auth_type(table(auth=auth), env, user) == expected


def test_google_login_and_no_credentials_are_refused_in_one_line() -> None:
    login = {"security": {"auth": {"selectedType": "oauth-personal"}}}
    with pytest.raises(home.GeminiSetupError, match="cannot use Google login"):
        home.auth_type(table(), {}, login)
    with pytest.raises(home.GeminiSetupError, match=r"no Gemini credentials.*GEMINI_API_KEY"):
        home.auth_type(table(), {}, {})
    external = home.settings(table(auth="external"), {}, {})
    assert external["security"]["auth"] == {"useExternal": True}


def test_user_settings_with_comments_and_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text('{\n  // the theme\n  "ui": {"theme": "a//b"} /* end */\n}\n')
    assert home.read_user_settings(path) == {"ui": {"theme": "a//b"}}
    assert home.user_settings_path({"HOME": str(tmp_path)}) == path
    assert home.user_settings_path({"GEMINI_CLI_HOME": "/g", "HOME": "/h"}) == Path(
        "/g/.gemini/settings.json"
    )
    assert home.read_user_settings(tmp_path / "missing.json") == {}
    path.write_text("{nope")
    with pytest.raises(home.GeminiSetupError, match=r"not valid JSON.*user_settings = false"):
        home.read_user_settings(path)
    path.unlink()
    os.mkfifo(path)  # never a hang
    with pytest.raises(home.GeminiSetupError, match="cannot read your Gemini settings"):
        home.read_user_settings(path)


def test_prepare_replaces_a_planted_link_and_trusts_no_folder(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    where = tmp_path / "gemini-home"
    where.mkdir()
    os.symlink(victim, where / ".gemini")  # an agent pointing the home elsewhere
    import datetime

    home.prepare(where, {"a": 1, "d": datetime.date(2026, 1, 2)})  # TOML has dates
    assert not (where / ".gemini").is_symlink() and list(victim.iterdir()) == []
    written = json.loads((where / ".gemini" / "settings.json").read_text())
    assert written == {"a": 1, "d": "2026-01-02"}
    trusted = json.loads((where / ".gemini" / "trustedFolders.json").read_text())
    assert trusted == {}  # the working folder is never trusted
    assert (where / ".gemini" / "settings.json").stat().st_mode & 0o777 == 0o600
    env = home.environment(
        {"GEMINI_CLI_TRUSTED_FOLDERS_PATH": "/x", "GEMINI_CLI_TRUST_WORKSPACE": "true", "A": "1"},
        where,
    )
    assert env == {"A": "1", "GEMINI_CLI_HOME": str(where), "GEMINI_CLI_TRUST_WORKSPACE": "false"}


def test_the_working_folder_stays_untrusted_whatever_the_settings_say() -> None:
    over = {"security": {"folderTrust": {"enabled": True}}, "advanced": {"ignoreLocalEnv": False}}
    user = {"security": {"folderTrust": {"enabled": True}}}
    merged = home.settings(table(settings=over), {"GEMINI_API_KEY": "k"}, user)
    assert merged["security"]["folderTrust"] == {"enabled": False}
    assert merged["advanced"] == {"ignoreLocalEnv": True}


def test_a_failed_auto_run_records_the_routed_model_not_the_routers() -> None:
    """Under ``auto`` the CLI's router asks a flash-lite model first; when the main request
    then fails at once, the router's tokens are the only ones reported (issue 30)."""
    stats = {"models": {"gemini-3.5-flash-lite": {"total_tokens": 130},
                        "gemini-3.5-flash": {"total_tokens": 0}}}  # fmt: skip
    init = line(type="init", session_id="abc-1", model="auto")
    error = {"type": "unknown", "message": '[API Error: {"error":{"code":429}}]'}
    o = events.scan_outcome([init, line(type="result", status="error", error=error, stats=stats)])
    assert (o.status, o.model) == (Status.FAILED, "gemini-3.5-flash")
    asked = line(type="init", session_id="abc-1", model="gemini-3.5-flash-lite")
    o = events.scan_outcome([asked, line(type="result", status="success", stats=stats)])
    assert o.model == "gemini-3.5-flash-lite"  # asked for by name: every main request's


def test_the_models_the_pinned_cli_routes_to_by_default_are_priced() -> None:
    for model in ("gemini-2.5-pro", "gemini-3.5-flash", "gemini-3.5-flash-lite",
                  "gemini-3.1-flash-lite"):  # fmt: skip
        assert AGENT.estimate_cost(Usage(1000, 0, 100, 0), model, {}) is not None, model
