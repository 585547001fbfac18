"""Running sessions: detached turns, queued injects, logs --follow, wait exit codes, kill of
a whole process tree, --timeout, and rm of running sessions."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import ZWARM_BIN, follow_until_released, wait_until

SAMPLE = {"codex": "codex_simple", "claude": "claude_simple"}


def _running_agent(zw, sid: str) -> dict:
    """meta.json's current turn, once its agent process is recorded."""
    return wait_until(lambda: zw.meta(sid)["turns"][-1].get("agent"), message="agent recorded")


def _group_alive(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in process group ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            data = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    from zwarm.system import procs

    ref = procs.identify(pid)
    return ref is not None and procs.is_alive(ref)


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_inject_while_running_is_queued_and_runs_next_in_order(zw, adapter: str) -> None:
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, **zw.replay(SAMPLE[adapter]))
    sid = zw.spawn("first task", "--adapter", adapter, env_extra=env)  # returns: turn held
    assert zw.meta(sid)["status"] == "running"

    assert zw.run("inject", sid, "second", check=True).stdout.strip() == f"{sid} queued (turn 2)"
    assert zw.run("inject", sid, "third", check=True).stdout.strip() == f"{sid} queued (turn 3)"
    row = zw.json("ls")[0]
    assert (row["status"], row["queued"], row["turns"]) == ("running", ["second", "third"], 1)
    assert "+2q" in zw.run("ls", check=True).stdout
    shown = zw.json("show", sid)
    assert shown["queued"] == ["second", "third"]
    assert "queued: second" in zw.run("show", sid, check=True).stdout

    w = zw.run("wait", sid, "--timeout", "0.3")
    assert w.returncode == 124 and f"{sid} running" in w.stdout

    hold.unlink()
    assert zw.wait(sid).returncode == 0
    d = zw.json("show", sid)
    assert [t["message"] for t in d["turns_detail"]] == ["first task", "second", "third"]
    assert [t["status"] for t in d["turns_detail"]] == ["completed"] * 3
    assert d["queued"] == []
    prompts = [zw.recorded(n)[1].decode() for n in (1, 2, 3)]
    assert prompts[0] == "first task"
    assert prompts[1].rstrip().endswith("second") and "first task" in prompts[1]
    assert prompts[2].rstrip().endswith("third") and "second" in prompts[2].split("## New")[0]


def test_two_racing_injects_while_running_both_run(zw) -> None:
    hold = zw.tmp / "hold"
    hold.touch()
    sid = zw.spawn("base", env_extra=zw.gated(hold, **zw.replay("codex_simple")))
    procs = [
        subprocess.Popen(
            [str(ZWARM_BIN), "inject", sid, f"racer {k}"],
            env=zw.env,
            cwd=zw.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (1, 2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    queued = zw.json("ls")[0]["queued"]
    assert sorted(queued) == ["racer 1", "racer 2"]
    hold.unlink()
    assert zw.wait(sid).returncode == 0
    msgs = [t["message"] for t in zw.json("show", sid)["turns_detail"]]
    assert msgs == ["base", *queued]  # both ran, in the order they were queued


def test_logs_follow_ends_when_turn_ends(zw) -> None:
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_LINE_DELAY="0.05", **zw.replay("codex_toolcall"))
    sid = zw.spawn("go", env_extra=env)
    out = follow_until_released(zw, sid, hold.unlink)
    assert zw.meta(sid)["status"] == "completed"
    assert out == zw.turn_file(sid, 1).read_bytes()
    assert out == zw.sample_bytes("codex_toolcall")


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_kill_long_running_process_tree(zw, adapter: str) -> None:
    env = {**zw.replay(SAMPLE[adapter]), "FAKE_CHILDREN": "1"}
    sid = zw.spawn("run forever", "--adapter", adapter, env_extra=env)
    agent = _running_agent(zw, sid)
    supervisor = zw.meta(sid)["turns"][-1]["supervisor"]
    pgid = agent["pid"]
    # the fake's process tree: itself, a shell and two sleeps, all in the agent's group
    wait_until(lambda: len(_group_alive(pgid)) >= 4, message="the agent's process tree")
    zw.run("inject", sid, "never runs", check=True)

    res = zw.run("kill", sid, check=True)
    assert res.stdout.strip() == f"{sid} killed (dropped 1 queued)"
    wait_until(lambda: not _group_alive(pgid), message="no process left in the agent's group")
    wait_until(lambda: not _alive(supervisor["pid"]), message="supervisor gone")
    r = zw.json("ls")[0]
    assert (r["status"], r["queued"], r["turns"]) == ("killed", [], 1)
    assert r["error"] == "killed by user"
    assert zw.wait(sid).returncode == 1
    # the output so far is kept
    assert zw.turn_file(sid, 1).read_bytes() == zw.sample_bytes(SAMPLE[adapter])
    again = zw.run("kill", sid)
    assert again.returncode == 1 and "not running" in again.stderr


def test_kill_all(zw) -> None:
    env = {**zw.replay("codex_simple"), "FAKE_HANG": "1"}
    a = zw.spawn("a", env_extra=env)
    b = zw.spawn("b", env_extra=env)
    done = zw.spawn("c", env_extra=zw.replay("codex_simple"))
    assert zw.wait(done).returncode == 0
    for sid in (a, b):
        _running_agent(zw, sid)
    killed = zw.json("kill", "--all")
    assert sorted(k["id"] for k in killed) == sorted([a, b])
    statuses = {r["id"]: r["status"] for r in zw.json("ls")}
    assert statuses == {a: "killed", b: "killed", done: "completed"}
    assert zw.json("kill", "--all") == []


def test_timeout_kills_a_hanging_turn(zw) -> None:
    env = {**zw.replay("codex_simple"), "FAKE_HANG": "1"}
    sid = zw.spawn("hang", "--timeout", "1", env_extra=env)
    pgid = _running_agent(zw, sid)["pid"]
    assert zw.wait(sid).returncode == 1
    t = zw.json("show", sid)["turns_detail"][0]
    assert t["status"] == "failed"
    assert t["error"].startswith("timeout")
    assert t["timeout"] == 1.0
    wait_until(lambda: not _group_alive(pgid), message="the timed-out agent's group gone")


def test_wait_exit_codes(zw) -> None:
    ok = zw.spawn("ok", env_extra=zw.replay("codex_simple"))
    bad = zw.spawn("bad", env_extra={**zw.replay("codex_error"), "FAKE_EXIT": "1"})
    assert zw.wait(ok).returncode == 0
    res = zw.wait(ok, bad)
    assert res.returncode == 1
    assert sorted(res.stdout.split("\n")[:2]) == sorted([f"{ok} completed", f"{bad} failed"])
    hang = zw.spawn("hang", env_extra={**zw.replay("codex_simple"), "FAKE_HANG": "1"})
    res = zw.run("wait", ok, hang, "--timeout", "0.5", "--json")
    assert res.returncode == 124
    import json

    data = json.loads(res.stdout)
    assert data["timed_out"] is True and data["statuses"][hang] == "running"
    res = zw.run("wait", ok, hang, "--any", "--timeout", "30")
    assert res.returncode == 0
    res = zw.run("wait", ok, hang, "--timeout", "0.5")
    assert res.returncode == 124
    assert sorted(res.stdout.splitlines()) == sorted([f"{ok} completed", f"{hang} running"])
    # issue 30.15: a timeout says what still runs, and how to stop it
    assert res.stderr.splitlines() == [
        "timed out after 0.5 s",
        f"{hang} is still running; `zwarm kill {hang}` stops it",
    ]
    assert zw.run("wait", hang, "--timeout", "0").returncode == 124  # a look, no waiting
    for bad in ("nan", "-1"):  # never a wait that cannot end, never a traceback
        res = zw.run("wait", hang, "--timeout", bad)
        assert res.returncode == 1 and res.stderr.startswith("Error: --timeout must be"), res


def test_rm_running_needs_force_and_finished_keeps_running(zw) -> None:
    env = {**zw.replay("codex_simple"), "FAKE_HANG": "1"}
    running = zw.spawn("hang", "--name", "busy", env_extra=env)
    pgid = _running_agent(zw, running)["pid"]
    done = zw.spawn("ok", env_extra=zw.replay("codex_simple"))
    failed = zw.spawn("bad", env_extra={**zw.replay("codex_error"), "FAKE_EXIT": "1"})
    zw.wait(done, failed)

    res = zw.run("rm", "busy")
    assert res.returncode == 1
    assert "running" in res.stderr and "--force" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert zw.session_dir(running).is_dir()

    removed = zw.json("rm", "--finished")
    assert sorted(removed) == sorted([done, failed])
    assert [r["id"] for r in zw.json("ls")] == [running]

    assert zw.run("rm", "busy", "--force", check=True).stdout.strip() == f"{running} removed"
    assert zw.json("ls") == []
    wait_until(lambda: not _group_alive(pgid), message="the removed session's agent gone")
    # the name is free again
    sid = zw.spawn("again", "--name", "busy", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0


def test_supervisor_lost_is_reconciled(zw) -> None:
    """A running session whose supervisor died (killed -9) is reconciled to failed on read,
    and its orphaned agent is terminated."""
    import signal

    sid = zw.spawn("hang", env_extra={**zw.replay("codex_simple"), "FAKE_HANG": "1"})
    agent = _running_agent(zw, sid)
    sup = zw.meta(sid)["turns"][-1]["supervisor"]
    os.kill(sup["pid"], signal.SIGKILL)
    wait_until(lambda: not _alive(sup["pid"]), message="supervisor dead")
    r = zw.json("ls")[0]
    assert r["status"] == "failed"
    assert "supervisor lost" in r["error"]
    assert zw.meta(sid)["status"] == "failed"  # written back, not only displayed
    wait_until(lambda: not _group_alive(agent["pid"]), message="orphaned agent terminated")
