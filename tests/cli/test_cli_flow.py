"""The whole CLI life cycle for both adapters, with fake agents as real subprocesses:
spawn -> wait -> ls -> show -> trajectory -> inject (summary) -> logs -> rm."""

from __future__ import annotations

import json

import pytest

from tests.support import ZWARM_BIN

SESSION_KEYS = {
    "id",
    "name",
    "adapter",
    "model",
    "status",
    "task",
    "cwd",
    "created_at",
    "updated_at",
    "turns",
    "usage",
    "cost_usd",
    "cost_source",
    "agent_session_id",
    "last_message",
    "error",
    "queued",
}
USAGE_KEYS = {
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "total_tokens",
}
TASK = "Create out.txt containing hello, then show it."
FINAL = "Done: wrote hello to out.txt."
SAMPLE = {"codex": "codex_toolcall", "claude": "claude_toolcall"}
AGENT_ID = {
    "codex": "01a1ffe6-40d4-7d42-8089-790d2ae1459f",
    "claude": "bc2faf4c-5aa4-44a0-a2d5-e4724d65e58d",
}


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_full_flow(zw, adapter: str) -> None:
    replay = zw.replay(SAMPLE[adapter])
    sid = zw.spawn(TASK, "--adapter", adapter, "--name", f"job-{adapter}", env_extra=replay)

    # wait: exit 0, one line per session
    w = zw.wait(sid)
    assert (w.returncode, w.stdout.strip()) == (0, f"{sid} completed"), w.stderr

    # the agent got the prompt on stdin, never in argv, and no --model (none configured)
    rec, prompt = zw.recorded(1)
    assert prompt == TASK.encode()
    assert TASK not in " ".join(rec["argv"])
    assert "--model" not in rec["argv"]
    assert rec["cwd"] == str(zw.cwd)

    # ls --json: the stable keys
    rows = zw.json("ls")
    assert len(rows) == 1
    r = rows[0]
    assert set(r) >= SESSION_KEYS
    assert set(r["usage"]) == USAGE_KEYS
    assert (r["id"], r["name"], r["adapter"], r["status"], r["task"], r["turns"]) == (
        sid,
        f"job-{adapter}",
        adapter,
        "completed",
        TASK,
        1,
    )
    assert r["cwd"] == str(zw.cwd)
    assert r["usage"]["total_tokens"] == r["usage"]["input_tokens"] + r["usage"]["output_tokens"]
    assert r["usage"]["output_tokens"] == 30
    assert r["agent_session_id"] == AGENT_ID[adapter]
    assert r["last_message"] == FINAL
    assert r["error"] is None and r["queued"] == []
    if adapter == "claude":
        assert r["model"] == "claude-opus-5-5"  # from the init line
        assert (r["cost_usd"], r["cost_source"]) == (pytest.approx(0.00248), "reported")
    else:
        assert r["model"] is None
        assert (r["cost_usd"], r["cost_source"]) == (None, "unknown")  # unknown, not zero
    assert r["created_at"] <= r["updated_at"]

    # ls table
    table = zw.run("ls", check=True).stdout
    assert "STATUS" in table.splitlines()[0]
    line = table.splitlines()[1]
    for cell in (sid[:8], f"job-{adapter}", "completed", adapter, TASK[:20]):
        assert cell in line
    assert zw.json("ls", "--status", "running") == []
    assert [x["id"] for x in zw.json("ls", "--status", "completed")] == [sid]

    # show, by name and by prefix
    d = zw.json("show", f"job-{adapter}")
    assert zw.json("show", sid[:6])["id"] == sid
    assert set(d) >= SESSION_KEYS
    (t1,) = d["turns_detail"]
    assert (t1["n"], t1["status"], t1["message"], t1["exit_code"]) == (1, "completed", TASK, 0)
    assert t1["final_message"] == FINAL and t1["error"] is None
    assert t1["started_at"] <= t1["ended_at"]
    assert set(t1["usage"]) == USAGE_KEYS
    human = zw.run("show", sid, check=True).stdout
    assert FINAL in human and "completed" in human and TASK in human

    # trajectory: every step numbered; a command with its exit code
    steps = zw.json("trajectory", sid)
    assert [s["index"] for s in steps] == list(range(len(steps)))
    assert all(s["turn"] == 1 and "kind" in s for s in steps)
    kinds = [s["kind"] for s in steps]
    assert "message" in kinds and ("command" in kinds or "tool_call" in kinds)
    assert steps[-1]["kind"] == "message" and steps[-1]["text"] == FINAL
    text = zw.run("trajectory", sid, check=True).stdout
    assert "echo hello > out.txt" in text and FINAL in text

    # inject (summary mode): the follow-up prompt carries the history and the new message
    res = zw.run("inject", sid, "Now append world to out.txt.", env_extra=replay, check=True)
    assert res.stdout.startswith(f"{sid} started")
    assert zw.wait(sid).returncode == 0
    rec2, prompt2 = zw.recorded(2)
    p2 = prompt2.decode()
    assert TASK in p2 and FINAL in p2
    assert "echo hello > out.txt" in p2 and "exit 0" in p2
    assert p2.rstrip().endswith("Now append world to out.txt.")
    assert "resume" not in rec2["argv"] and "--resume" not in rec2["argv"]
    assert not any("append world" in a for a in rec2["argv"])
    d = zw.json("show", sid)
    assert [t["n"] for t in d["turns_detail"]] == [1, 2]
    assert d["turns_detail"][1]["context"] == "summary"
    assert d["turns"] == 2
    assert (zw.turn_file(sid, 2, "prompt").read_bytes()) == prompt2
    steps = zw.json("trajectory", sid)
    assert {s["turn"] for s in steps} == {1, 2}
    assert [s["index"] for s in steps] == list(range(len(steps)))
    assert all(s["turn"] == 2 for s in zw.json("trajectory", sid, "--turn", "2"))

    # logs: raw bytes, identical to the turn files
    assert zw.run_bytes("logs", sid).stdout == zw.turn_file(sid, 2).read_bytes()
    one = zw.run_bytes("logs", sid, "--turn", "1")
    assert one.returncode == 0 and one.stdout == zw.turn_file(sid, 1).read_bytes()
    assert one.stdout == zw.sample_bytes(SAMPLE[adapter])
    bad = zw.run("logs", sid, "--turn", "3")
    assert bad.returncode == 1 and "no turn 3" in bad.stderr

    # rm
    out = zw.run("rm", f"job-{adapter}", check=True).stdout
    assert out.strip() == f"{sid} removed"
    assert zw.json("ls") == []
    assert not zw.session_dir(sid).exists()
    assert zw.run("show", sid).returncode == 1


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_spawn_wait_flag_and_json(zw, adapter: str) -> None:
    replay = zw.replay(SAMPLE[adapter])
    res = zw.run("spawn", TASK, "--adapter", adapter, "--wait", "--json", env_extra=replay)
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    assert r["status"] == "completed" and r["last_message"] == FINAL
    res = zw.run("inject", r["id"], "again", "--wait", env_extra=replay)
    assert res.returncode == 0 and FINAL in res.stdout


def test_claude_init_model_is_the_session_model(zw) -> None:
    """With --model sonnet, the model claude's init line reports is what the session shows."""
    src = zw.sample_bytes("claude_simple").decode("utf-8")
    init, rest = src.split("\n", 1)
    doc = json.loads(init)
    assert doc["subtype"] == "init"
    doc["model"] = "claude-sonnet-4-5-20250929"
    replay = zw.tmp / "claude_init_model.jsonl"
    line = json.dumps(doc, separators=(",", ":"))  # compact, as claude writes it
    replay.write_text(line + "\n" + rest, encoding="utf-8")
    sid = zw.spawn("hi", "--model", "sonnet", env_extra={"FAKE_REPLAY": str(replay)})
    assert zw.wait(sid).returncode == 0
    rec, _ = zw.recorded()
    assert rec["argv"][rec["argv"].index("--model") + 1] == "sonnet"
    assert rec["argv"][0].endswith("claude")  # routed by the alias
    d = zw.json("show", sid)
    assert d["model"] == "claude-sonnet-4-5-20250929"
    assert d["requested_model"] == "sonnet"
    assert zw.json("ls")[0]["model"] == "claude-sonnet-4-5-20250929"


def test_codex_model_flag_and_estimated_cost(zw) -> None:
    sid = zw.spawn("hi", "--model", "gpt-5", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    rec, _ = zw.recorded()
    assert rec["argv"][rec["argv"].index("--model") + 1] == "gpt-5"
    r = zw.json("ls")[0]
    assert (r["adapter"], r["model"], r["cost_source"]) == ("codex", "gpt-5", "estimated")
    # codex_simple: 100 input (40 cached), 9 output at gpt-5 prices
    assert r["cost_usd"] == pytest.approx((60 * 1.25 + 40 * 0.125 + 9 * 10) / 1e6)
    assert "~$" in zw.run("ls", check=True).stdout  # shown as an estimate


def test_racing_injects_both_run_in_order(zw) -> None:
    """Two injects at once into a finished session: one starts the turn, the other queues."""
    import subprocess

    replay = zw.replay("codex_simple")
    sid = zw.spawn("task zero", env_extra=replay)
    assert zw.wait(sid).returncode == 0
    env = {**zw.env, **replay}
    procs = [
        subprocess.Popen(
            [str(ZWARM_BIN), "inject", sid, msg],
            env=env,
            cwd=zw.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for msg in ("message A", "message B")
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    states = sorted(o[0].split()[1] for o in outs)
    assert states in (["queued", "started"], ["started", "started"]), outs
    assert zw.wait(sid).returncode == 0
    d = zw.json("show", sid)
    msgs = [t["message"] for t in d["turns_detail"]]
    assert msgs[0] == "task zero" and sorted(msgs[1:]) == ["message A", "message B"]
    assert [t["status"] for t in d["turns_detail"]] == ["completed"] * 3
    # the agent really ran them in that order, each knowing about the one before
    assert zw.calls() == 3
    second, third = msgs[1], msgs[2]
    p3 = zw.recorded(3)[1].decode()
    assert p3.rstrip().endswith(third) and second in p3
    assert zw.recorded(2)[1].decode().rstrip().endswith(second)
