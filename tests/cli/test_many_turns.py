"""A session with many turns, run by one real supervisor: finished turns move to the history
file (``zwarm.store.history``) while it runs, and every command still sees every turn."""

from __future__ import annotations

import json

import pytest

TURNS = 14


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_a_supervisor_running_many_queued_turns_archives_them_and_loses_nothing(
    zw, adapter: str
) -> None:
    gate = zw.tmp / "go"
    sample = {"codex": "codex_toolcall", "claude": "claude_toolcall"}[adapter]
    env = zw.replay(sample, FAKE_WAIT_FILE=str(gate))
    sid = zw.spawn("the task", "--adapter", adapter, env_extra=env)
    for i in range(2, TURNS + 1):  # queued behind turn 1, run one after another
        zw.run("inject", sid, f"step {i}", env_extra=env, check=True)
    gate.touch()
    assert zw.wait(sid).returncode == 0
    meta = zw.meta(sid)
    assert meta["archive"]["turns"] >= 8 and len(meta["turns"]) < TURNS
    assert (zw.session_dir(sid) / "history.jsonl").is_file()
    shown = zw.json("show", sid)
    detail = shown["turns_detail"]
    assert [t["n"] for t in detail] == list(range(1, TURNS + 1))
    assert all(t["status"] == "completed" for t in detail)
    assert [t["message"] for t in detail[1:]] == [f"step {i}" for i in range(2, TURNS + 1)]
    (r,) = zw.json("ls")
    assert r["turns"] == TURNS and r["status"] == "completed"
    total = sum(t["usage"]["total_tokens"] for t in detail)
    assert r["usage"]["total_tokens"] == shown["usage"]["total_tokens"] == total > 0
    steps = zw.json("trajectory", sid, "--turn", "3")
    assert steps and all(s["turn"] == 3 for s in steps)
    _, prompt = zw.recorded()  # the last follow-up's summary names every earlier turn
    assert f"## Earlier turns ({TURNS - 1})" in prompt.decode()
    res = zw.run("inject", sid, "one more", "--wait", env_extra=env)
    assert res.returncode == 0, res.stderr
    assert zw.json("ls")[0]["turns"] == TURNS + 1
    assert json.loads(zw.run("show", sid, "--json", check=True).stdout)["turns"] == TURNS + 1
