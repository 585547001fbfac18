"""``zwarm orchestrate`` end to end: the real command, the real ``openai`` client, a scripted
fake Chat Completions server on 127.0.0.1, and fake agents doing the delegated work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any

import pytest

from tests.fakes.chat_server import (
    ChatReply,
    FakeChatServer,
    call,
    final,
    raw_call,
    reply,
)
from tests.orchestrator.helpers import write_config
from tests.support import SAMPLES, ZWARM_BIN, wait_until
from tests.support.orch import (
    delegated,
    env_for,
    files_containing,
    load_run,
    orchestrate,
    runs,
)


# ---------------------------------------------------------------------------- the full story
def test_delegate_two_wait_read_converse_verify_finish(zw) -> None:
    (zw.cwd / "report.txt").write_text("all good\n")
    claude_replay = SAMPLES / "claude_simple.jsonl"
    write_config(zw, f'[claude]\nenv = {{ FAKE_REPLAY = "{claude_replay}" }}\n')
    script = [
        reply(
            call("delegate", task="Write the parser.", name="alpha"),
            call("delegate", task="Write the docs.", name="beta", adapter="claude"),
            content="Two independent parts; delegating both.",
        ),
        lambda req: reply(call("wait", session_ids=delegated(req), all=True)),
        lambda req: reply(call("get_trajectory", session_id=delegated(req)[0])),
        lambda req: reply(call("converse", session_id=delegated(req)[0], message="Add tests.")),
        lambda req: reply(call("wait", session_ids=[delegated(req)[0]])),
        reply(call("bash", command="cat report.txt && echo verified-$((6*7))")),
        final("SUMMARY: alpha wrote the parser (2 turns), beta the docs; verified-42."),
    ]
    with FakeChatServer(script) as srv:
        res = orchestrate(
            zw, srv, "Build a parser with docs.", FAKE_REPLAY=str(SAMPLES / "codex_simple.jsonl")
        )
        reqs = srv.requests
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == (
        "SUMMARY: alpha wrote the parser (2 turns), beta the docs; verified-42."
    )
    assert srv.errors == [] and len(reqs) == 7
    # the LLM was given the tools and a system prompt that makes it delegate and verify
    first = reqs[0]
    assert first.body["model"] == "fake-orchestrator"
    assert first.tool_names() == [
        "delegate",
        "converse",
        "check_session",
        "list_sessions",
        "get_trajectory",
        "wait",
        "end_session",
        "get_diff",
        "comment",
        "merge",
        "merge_queue",
        "best_of",
        "compare",
        "pick",
        "bash",
    ]
    system = first.messages[0]
    assert system["role"] == "system" and "delegate" in system["content"]
    assert "verify" in system["content"].lower() and str(zw.cwd) in system["content"]
    assert first.messages[1] == {"role": "user", "content": "Build a parser with docs."}
    assert first.headers.get("authorization") == "Bearer not-needed"
    # what the tools answered, as the LLM saw it
    results = reqs[-1].all_results()
    assert [n for n, _ in results] == [
        "delegate",
        "delegate",
        "wait",
        "get_trajectory",
        "converse",
        "wait",
        "bash",
    ]
    assert all(r["ok"] for _, r in results), results
    waited = results[2][1]
    assert waited["timed_out"] is False and len(waited["finished"]) == 2
    traj = results[3][1]
    assert traj["steps"][0]["text"] == "Hi there! This is the fake server."
    assert results[4][1]["state"] == "started" and results[4][1]["turn"] == 2
    assert results[6][1]["output"] == "all good\nverified-42\n"
    # the sessions, as zwarm sees them
    (run_dir,) = runs(zw)
    rows = {r["name"]: r for r in zw.json("ls")}
    assert set(rows) == {"alpha", "beta"}
    assert {r["source"] for r in rows.values()} == {f"orchestrate:{run_dir.name}"}
    assert (rows["alpha"]["turns"], rows["alpha"]["status"]) == (2, "completed")
    assert (rows["beta"]["adapter"], rows["beta"]["status"]) == ("claude", "completed")
    # the transcript on disk
    run, messages = load_run(run_dir)
    assert run["status"] == "finished" and run["steps"] == 7 and run["invocations"] == 1
    assert run["summary"].startswith("SUMMARY:")
    assert (run["prompt_tokens"], run["completion_tokens"], run["total_tokens"]) == (700, 140, 840)
    assert {s["name"] for s in run["sessions"]} == {"alpha", "beta"}
    assert [m["role"] for m in messages].count("tool") == 7
    assert messages[-1] == {"role": "assistant", "content": run["summary"]}
    assert messages[:2] == first.messages[:2]
    assert oct(run_dir.db.stat().st_mode & 0o777) == "0o600"
    # live progress went to stderr
    assert f"run {run_dir.name}" in res.stderr and "delegate" in res.stderr
    assert "finished after 7 steps" in res.stderr and "Traceback" not in res.stderr


def test_bad_tool_calls_are_results_the_llm_can_fix(zw, inproc) -> None:
    script = [
        reply(raw_call("delegate", "{not json"), call("frobnicate", x=1)),
        reply(call("delegate", task="", cwd="/")),
        reply(call("check_session", session_id="nope")),
        final("Could not do it."),
    ]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "do something")
    assert res.returncode == 0, res.stderr
    errors = [r["error"] for _, r in srv.requests[-1].all_results()]
    assert errors[0].startswith("arguments are not valid JSON")
    assert errors[1].startswith("unknown tool 'frobnicate'")
    assert errors[2] == "argument 'task' must not be empty"
    assert errors[3] == "no session matches 'nope'"
    assert "error: unknown tool" in res.stderr


# ---------------------------------------------------------------------------- limits and resume
def test_step_limit_then_resume(zw, inproc) -> None:
    looping = [reply(call("list_sessions")) for _ in range(3)]
    with FakeChatServer([*looping, final("Resumed and finished.")]) as srv:
        res = inproc(srv, "keep looking", "--max-steps", "3")
        assert res.returncode == 3, res.stderr
        (run_dir,) = runs(zw)
        assert "stopped: step limit reached (3 steps)" in res.stderr
        assert f"continue with: zwarm orchestrate --resume {run_dir.name}" in res.stderr
        run, messages = load_run(run_dir)
        assert (run["status"], run["steps"]) == ("step_limit", 3)
        saved = len(messages)
        res = inproc(srv, "--resume", run_dir.name[:10])
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "Resumed and finished."
        assert len(srv.requests[3].messages) == saved  # the whole history was sent again
    run, messages = load_run(run_dir)
    assert (run["status"], run["steps"], run["invocations"]) == ("finished", 4, 2)
    assert "resuming run" in res.stderr
    # a finished run resumes only with a new instruction
    again = inproc(srv, "--resume", "last")
    assert again.returncode == 1
    assert again.stderr.strip().endswith("give a TASK to continue it with a new instruction")


def test_follow_up_task_on_a_finished_run(zw, inproc) -> None:
    with FakeChatServer([final("first"), final("second")]) as srv:
        assert inproc(srv, "one").returncode == 0
        res = inproc(srv, "--resume", "last", "now the follow-up")
        assert res.returncode == 0 and res.stdout.strip() == "second"
        assert srv.requests[1].messages[-1] == {"role": "user", "content": "now the follow-up"}
        assert srv.requests[1].messages[-2] == {"role": "assistant", "content": "first"}


def test_crash_mid_tool_call_then_resume_answers_the_lost_call(zw, tmp_path) -> None:
    marker, pidfile = tmp_path / "started", tmp_path / "bash.pid"
    script: list[Any] = [
        reply(call("bash", command=f"echo $$ > {pidfile}; touch {marker}; sleep 300")),
        final("Recovered after the crash."),
    ]
    with FakeChatServer(script) as srv:
        env = {**zw.env, **env_for(srv)}
        proc = subprocess.Popen(
            [str(ZWARM_BIN), "orchestrate", "--quiet", "verify things"],
            env=env,
            cwd=zw.cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(marker.exists, message="the bash tool to start")
        finally:
            proc.kill()
            proc.wait()
            wait_until(pidfile.exists, message="the bash pid file")
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)
        (run_dir,) = runs(zw)
        run, messages = load_run(run_dir)
        assert run["status"] == "running"  # it never got to record an end
        assert messages[-1]["role"] == "assistant" and messages[-1]["tool_calls"]
        res = orchestrate(zw, srv, "--resume", run_dir.name)
        assert res.returncode == 0, res.stderr
        ((name, lost),) = srv.requests[1].last_results()
    assert name == "bash" and lost["ok"] is False and "interrupted" in lost["error"]
    run, _ = load_run(run_dir)
    assert run["status"] == "finished" and run["summary"] == "Recovered after the crash."


def test_token_budget_stops_before_the_next_call(zw, inproc) -> None:
    script = [reply(call("list_sessions"), usage=(80, 10)) for _ in range(5)]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "spend", "--max-tokens", "150", "--json")
    assert res.returncode == 3 and len(srv.requests) == 2
    run = json.loads(res.stdout)
    assert (run["status"], run["total_tokens"]) == ("budget", 180)
    assert run["stop_reason"] == "token budget reached (180 of 150 tokens)"


def test_cost_budget_counts_the_agents(zw, inproc) -> None:
    write_config(
        zw, '[codex.prices]\n"gpt-5" = { input = 10000.0, cached_input = 0.0, output = 0.0 }\n'
    )
    script = [
        reply(call("delegate", task="costly", model="gpt-5")),
        lambda req: reply(call("wait", session_ids=delegated(req))),
        reply(call("list_sessions")),
    ]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "spend money", "--max-cost", "0.5", "--json")
    assert res.returncode == 3, res.stderr
    run = json.loads(res.stdout)
    # 60 uncached input tokens at $10000/M = $0.60 for the agent; the orchestrator has no price
    assert run["status"] == "budget"
    assert run["stop_reason"] == "cost budget reached ($0.6000 of $0.5)"
    assert run["cost_usd"] is None and len(srv.requests) == 2


def test_finishing_with_sessions_running_is_nudged_once(zw, inproc) -> None:
    script: list[Any] = [
        reply(call("delegate", task="slow")),
        final("Done (too early)."),
        lambda req: reply(call("end_session", session_id=delegated(req)[0])),
        final("Ended the slow session; done."),
    ]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "go", FAKE_HANG="1")
        nudge = srv.requests[2].messages[-1]
    assert res.returncode == 0 and res.stdout.strip() == "Ended the slow session; done."
    assert nudge["role"] == "user" and "still running" in nudge["content"]
    assert zw.json("ls")[0]["status"] == "killed"


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["x"], {"ZWARM_ORCH_MODEL": ""}, "no orchestrator model: pass --model"),
        (["x"], {"ZWARM_ORCH_BASE_URL": ""}, "no API key: set OPENAI_API_KEY"),
        ([], {}, "give a TASK, or --resume RUN"),
        (["--resume", "2099"], {}, "no run matches '2099'"),
        (["--resume", "../etc"], {}, "invalid run id '../etc'"),
        (["x", "--max-steps", "0"], {}, "Invalid value for '--max-steps'"),
    ],
)
def test_bad_input_is_one_line(zw, inproc, args, env, message) -> None:
    with FakeChatServer([]) as srv:
        res = inproc(srv, *args, **env)
    assert res.returncode in (1, 2), res
    assert message in res.stderr and "Traceback" not in res.stderr
    assert res.stdout == ""


def test_endpoint_error_is_one_line_and_recorded(zw, inproc) -> None:
    with FakeChatServer([ChatReply(status=400, error="model 'x' does not exist")]) as srv:
        res = inproc(srv, "anything")
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith(f"Error: the model request to {srv.base_url} failed")
    assert "does not exist" in lines[-1] and "Traceback" not in res.stderr
    (run_dir,) = runs(zw)
    run, _ = load_run(run_dir)
    assert run["status"] == "error" and "does not exist" in run["stop_reason"]


def test_model_and_key_come_from_config_and_env(zw, inproc) -> None:
    write_config(zw, '[orchestrator]\nmodel = "cfg-model"\napi_key_env = "MY_KEY"\n')
    with FakeChatServer([final("ok")]) as srv:
        res = inproc(srv, "hi", ZWARM_ORCH_MODEL="", MY_KEY="sk-test-123")
        assert res.returncode == 0, res.stderr
        assert srv.requests[0].body["model"] == "cfg-model"
        assert srv.requests[0].headers["authorization"] == "Bearer sk-test-123"
    assert len(runs(zw)) == 1
    assert files_containing(zw.state_dir, "sk-test-123") == []  # the run store included


def test_ctrl_c_saves_the_run_and_says_how_to_resume(zw, tmp_path) -> None:
    marker, pidfile = tmp_path / "started", tmp_path / "bash.pid"
    script = [reply(call("bash", command=f"echo $$ > {pidfile}; touch {marker}; sleep 300"))]
    with FakeChatServer(script) as srv:
        proc = subprocess.Popen(
            [str(ZWARM_BIN), "orchestrate", "verify things"],
            env={**zw.env, **env_for(srv)},
            cwd=zw.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(marker.exists, message="the bash tool to start")
        proc.send_signal(signal.SIGINT)
        _, errs = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in errs
    (run_dir,) = runs(zw)
    assert f"interrupted; continue with: zwarm orchestrate --resume {run_dir.name}" in errs
    run, _ = load_run(run_dir)
    assert run["status"] == "interrupted" and run["stop_reason"] == "interrupted by the user"
    bash_pid = int(pidfile.read_text())
    wait_until(
        lambda: not os.path.exists(f"/proc/{bash_pid}") or _zombie(bash_pid),
        message="the bash command to be killed with the run",
    )


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True
