"""States you can trust: budgets (a claude turn stopped mid-stream, codex checked at the end),
the stall watchdog, parking on usage and rate limits (resumed at the reset time, by the clock
or by backoff), ``zwarm resume``, ``zwarm retry``; with fake agents replaying the real CLIs'
output (the shared samples)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support import ZW, parked_note, wait_status, wait_until
from tests.support.fleet import configure, jsonl

pytestmark = pytest.mark.usefixtures("strays")

SID = "11111111-2222-4333-8444-555555555555"
WAIT = '[limits]\non_usage_limit = "wait"\n'


def _claude_stream(zw: ZW, messages: int) -> str:
    """A claude run whose every model call reports 1,050 tokens, then a successful result."""
    init = {"type": "system", "subtype": "init", "session_id": SID, "model": "claude-x"}
    calls = [
        {
            "type": "assistant",
            "message": {
                "id": f"msg_{i}",
                "model": "claude-x",
                "content": [{"type": "text", "text": f"step {i}"}],
                "usage": {"input_tokens": 1000, "output_tokens": 50},
            },
        }
        for i in range(messages)
    ]
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "all done",
        "session_id": SID,
        "total_cost_usd": 0.01,
        "usage": {"input_tokens": 1000 * messages, "output_tokens": 50 * messages},
    }
    return jsonl(zw.tmp / "claude_stream.jsonl", init, *calls, result)


def _proc_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


# ---------------------------------------------------------------------- budgets
def test_a_budget_stops_a_claude_turn_mid_stream(zw: ZW) -> None:
    env = {"FAKE_REPLAY": _claude_stream(zw, 6), "FAKE_LINE_DELAY": "1.0"}
    sid = zw.spawn("build it", "--adapter", "claude", "--max-tokens", "1500", env_extra=env)
    wait_until(lambda: zw.meta(sid)["turns"][0].get("agent"), message="agent started")
    zw.run("inject", sid, "and then this", env_extra=env, check=True)  # queued behind it
    m = wait_status(zw, sid, "failed")
    t = m["turns"][0]
    assert m["reason"] == "budget_exceeded" and "2,100 tokens" in m["error"]
    assert "stopped while it streamed" in m["error"]
    log = zw.turn_file(sid, 1).read_text()
    assert '"step 1"' in log and '"result"' not in log  # stopped long before its end
    assert t["usage"]["total_tokens"] >= 2100  # what it had used when stopped
    assert len(m["turns"]) == 1 and m["queue"] == []  # the queued follow-up never started
    res = zw.run("inject", sid, "one more", env_extra=env)
    assert res.returncode == 1 and "budget exceeded" in res.stderr
    row = zw.json("show", sid)
    assert row["max_tokens"] == 1500 and "failed (budget)" in zw.run("ls").stdout


def test_a_cost_budget_stops_claude_mid_stream_when_its_model_is_priced(zw: ZW) -> None:
    """Claude reports its cost only at the end; with [claude.prices] pricing the model its
    messages name, each message's usage is priced as it streams ($1.05 a message here)."""
    prices = (
        '[claude.prices]\n"claude-x" = { input = 1000.0, cached_input = 0.0, output = 1000.0 }\n'
    )
    configure(zw, prices)
    env = {"FAKE_REPLAY": _claude_stream(zw, 6), "FAKE_LINE_DELAY": "1.0"}
    sid = zw.spawn("build it", "--adapter", "claude", "--max-cost", "1.5", env_extra=env)
    m = wait_status(zw, sid, "failed")
    assert m["reason"] == "budget_exceeded" and "$2.1000 spent" in m["error"], m["error"]
    assert '"result"' not in zw.turn_file(sid, 1).read_text()


def test_codex_is_held_to_its_budget_when_the_turn_ends(zw: ZW) -> None:
    """Codex reports usage only at the end of a turn (codex_simple: 109 tokens)."""
    configure(zw, "[limits]\nmax_tokens = 100\n")
    sid = zw.spawn("hi", env_extra=zw.replay("codex_simple"))
    m = wait_status(zw, sid, "failed")
    assert m["reason"] == "budget_exceeded" and m["max_tokens"] == 100
    assert "109 tokens" in m["error"] and "the turn had completed" in m["error"]
    assert m["last_message"]  # what the agent answered is kept


# ---------------------------------------------------------------------- stalls
def test_a_silent_agent_is_stalled_then_running_again(zw: ZW) -> None:
    go = zw.tmp / "go"
    env = zw.replay("codex_toolcall", FAKE_WAIT_FILE=str(go), FAKE_LINE_DELAY="0.3")
    sid = zw.spawn("work", "--stall", "1", env_extra=env)
    m = wait_status(zw, sid, "stalled")
    assert m["turns"][0]["quiet_since"]
    row = zw.json("ls", env_extra=env)[0]
    assert row["status"] == "stalled" and row["quiet_since"]
    assert "stalled" in zw.run("ls", env_extra=env).stdout
    go.touch()  # it writes again, a line every 0.3 s
    wait_status(zw, sid, "running", "completed")
    assert wait_status(zw, sid, "completed")["turns"][0]["quiet_since"] is None


def test_on_stall_kill_stops_a_silent_agent(zw: ZW) -> None:
    configure(zw, '[limits]\nstall_s = 1\non_stall = "kill"\n')
    sid = zw.spawn("work", env_extra=zw.replay("codex_simple", FAKE_HANG="1"))
    m = wait_status(zw, sid, "failed")
    assert m["reason"] == "stalled" and "on_stall = kill" in m["error"]
    agent = m["turns"][0]["agent"]["pid"]
    wait_until(lambda: _proc_gone(agent), message="the stalled agent gone")


# ---------------------------------------------------------------------- parking
def _usage_limited(zw: ZW, reset: float) -> str:
    """The real claude's usage-limit output (OAuth), its reset moved to ``reset``."""
    text = Path(zw.sample("limits_claude_usage_limit")).read_text()
    out = zw.tmp / "usage_limit.jsonl"
    out.write_text(text.replace("1795447801", str(int(reset))))
    return str(out)


def test_a_usage_limit_parks_until_the_reset_time_and_resume_runs_it_now(zw: ZW) -> None:
    configure(zw, WAIT)
    reset = int(time.time()) + 3600
    env = {"FAKE_REPLAY": _usage_limited(zw, reset)}
    sid = zw.spawn("the task", "--adapter", "claude", env_extra=env)
    m = wait_status(zw, sid, "parked")
    t = m["turns"][0]
    assert m["reason"] == "usage_limit" and t["parked_until"]
    assert abs(_epoch(t["parked_until"]) - reset) < 1
    out, want = parked_note(t["parked_until"], lambda: zw.run("ls", env_extra=env).stdout)
    assert any(w in out for w in want), (want, out)  # "until Sat 00:41" on another day
    ok = {"FAKE_REPLAY": zw.sample("claude_simple")}
    out = zw.run("resume", sid, env_extra=ok, check=True).stdout
    assert "resumed (turn 2" in out
    m = wait_status(zw, sid, "completed")
    first, second = m["turns"]
    assert first["status"] == "failed" and first["reason"] == "usage_limit"
    assert "resumed by the user as turn 2" in first["error"]
    assert second["retry_of"] == 1 and second["context"] == "native"
    argv, prompt = zw.recorded()
    assert prompt == b"the task" and argv["argv"][argv["argv"].index("--resume") + 1]
    sup = t["supervisor"]["pid"]
    wait_until(lambda: _proc_gone(sup), message="the parked turn's supervisor gone")


def test_a_parked_session_resumes_at_its_reset_time(zw: ZW) -> None:
    """The clock is injected into the API: one pass a minute before the reset leaves the
    session parked, one a second after resumes it (natively, with the same prompt)."""
    from zwarm.env import Env

    configure(zw, WAIT)
    reset = int(time.time()) + 3600
    sid = zw.spawn(
        "the task", "--adapter", "claude", env_extra={"FAKE_REPLAY": _usage_limited(zw, reset)}
    )
    wait_status(zw, sid, "parked")
    ok = {**zw.env, "FAKE_REPLAY": zw.sample("claude_simple")}
    api = zw.api()
    api.env = Env(state_dir=zw.state_dir, environ=ok, cwd=zw.cwd, clock=lambda: reset - 60.0)
    api.tick(force=True)
    assert zw.meta(sid)["status"] == "parked"
    api.env = Env(state_dir=zw.state_dir, environ=ok, cwd=zw.cwd, clock=lambda: reset + 1.0)
    api.tick(force=True)
    m = wait_status(zw, sid, "completed")
    assert len(m["turns"]) == 2 and m["auto_resumes"] == 1
    assert "resumed by zwarm as turn 2" in m["turns"][0]["error"]


def test_a_rate_limit_backs_off_resumes_by_itself_and_gives_up(zw: ZW) -> None:
    """No zwarm command runs: the parked turn's supervisor wakes at its time; after
    max_auto_resumes the turn ends failed, rate_limited."""
    configure(zw, WAIT + "resume_backoff_s = 0.5\nmax_auto_resumes = 2\n")
    sid = zw.spawn("go", env_extra=zw.replay("limits_codex_rate_limited"))
    m = wait_until(
        lambda: (lambda m: m if m["status"] == "failed" else None)(zw.meta(sid)),
        timeout=90,
        message="given up",
    )
    assert [t["status"] for t in m["turns"]] == ["failed", "failed", "failed"]
    assert m["reason"] == "rate_limited" and m["auto_resumes"] == 2
    assert [t.get("retry_of") for t in m["turns"]] == [None, 1, 1]
    argv, prompt = zw.recorded(3)
    assert prompt == b"go" and "resume" in argv["argv"]  # natively, the thread it had


def test_killing_a_parked_session_cancels_it(zw: ZW) -> None:
    configure(zw, WAIT)
    env = {"FAKE_REPLAY": _usage_limited(zw, time.time() + 3600)}
    sid = zw.spawn("t", "--adapter", "claude", env_extra=env)
    sup = wait_status(zw, sid, "parked")["turns"][0]["supervisor"]["pid"]
    zw.run("kill", sid, check=True)
    m = zw.meta(sid)
    assert m["status"] == "killed" and "while parked" in m["error"]
    wait_until(lambda: _proc_gone(sup), message="its waiting supervisor gone")
    res = zw.run("resume", sid)
    assert res.returncode == 1 and "is not parked (killed)" in res.stderr


# ---------------------------------------------------------------------- retry
def test_retry_runs_the_turn_of_a_dead_supervisor_again(zw: ZW) -> None:
    hang = zw.replay("codex_simple", FAKE_HANG="1")  # prints its thread id, then hangs
    sid = zw.spawn("the task", env_extra=hang)
    wait_until(lambda: zw.calls() == 1 and zw.meta(sid)["turns"][0].get("agent"), message="agent")
    os.kill(zw.meta(sid)["turns"][0]["supervisor"]["pid"], signal.SIGKILL)
    m = zw.json("show", sid)
    assert m["status"] == "failed" and m["reason"] == "supervisor_lost"
    res = zw.run("retry", sid, "--json", env_extra=zw.replay("codex_simple"), check=True)
    assert json.loads(res.stdout)["turns"] == 2
    m = wait_status(zw, sid, "completed")
    assert m["turns"][1]["retry_of"] == 1 and m["turns"][1]["context"] == "native"
    argv, prompt = zw.recorded(2)
    thread = argv["argv"][argv["argv"].index("resume") + 1]
    assert prompt == b"the task" and thread == m["turns"][0]["agent_session_id"]
    res = zw.run("retry", sid)
    assert res.returncode == 1 and "is not failed or killed (completed)" in res.stderr
    res = zw.run("resume", sid)
    assert res.returncode == 1 and "not parked" in res.stderr and "Traceback" not in res.stderr


def _epoch(iso: str) -> float:
    from zwarm.env import parse_iso

    return parse_iso(iso)


def test_spawn_wait_follows_a_parked_turn_to_its_resumed_end(zw: ZW) -> None:
    """Regression: ``spawn --wait`` ended (exit 1, "failed") when a parked turn was resumed,
    while the session went on; it now waits for the run that ends last."""
    import subprocess

    from tests.support import ZWARM_BIN

    configure(zw, WAIT)
    replay = Path(_usage_limited(zw, time.time() + 8))
    env = {**zw.env, "FAKE_REPLAY": str(replay)}
    waiting = subprocess.Popen(
        [str(ZWARM_BIN), "spawn", "the task", "--adapter", "claude", "--wait", "--json"],
        env=env,
        cwd=zw.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def made() -> str | None:
        try:
            return next((n for n in os.listdir(zw.state_dir / "sessions") if len(n) == 36), None)
        except OSError:
            return None

    sid = wait_until(made, message="the session made")
    wait_status(zw, sid, "parked")
    replay.write_text(Path(zw.sample("claude_simple")).read_text())  # the next run succeeds
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    shown = json.loads(out)
    assert (shown["status"], shown["turn"]) == ("completed", 2)
