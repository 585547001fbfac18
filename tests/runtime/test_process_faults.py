"""Issue 5, faults 2, 3, 5 and 8: processes dying under zwarm, and zwarm killing process trees.

2. the supervisor SIGKILLed mid-turn -> the next read marks the turn failed "supervisor lost",
   terminates the orphaned agent (identity-checked), and keeps the turn file byte for byte;
3. the agent SIGKILLed, or exiting without a terminal event -> failed, with exit code/signal;
5. "reboot": every process gone while sessions are marked running -> all reconcile on the
   next command and nothing is left claiming to run; queued messages are not lost;
8. ``zwarm kill`` of an agent with children and grandchildren (some ignoring SIGTERM, one
   that left the process group) -> none survive; also with the real codex CLI when installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support import ROOT, SAMPLES, wait_status, wait_until
from tests.support.faults import (
    agent_ref,
    alive,
    cmdline,
    edit_meta,
    spawn,
    supervisor_ref,
    tree,
    turn_lines,
)
from zwarm.system import procs
from zwarm.system.boot import ProcRef

pytestmark = pytest.mark.usefixtures("strays")


# ------------------------------------------------------------------ 2. supervisor SIGKILLed
@pytest.mark.parametrize(
    ("adapter", "sample", "hang_after", "reported"),
    [
        ("codex", "codex_toolcall", 3, None),
        ("claude", "claude_toolcall", 3, None),
        # the agent already wrote its terminal event, then the supervisor died before recording
        ("codex", "codex_simple", 4, "completed"),
    ],
)
def test_supervisor_sigkilled_mid_turn(
    zw: Any, adapter: str, sample: str, hang_after: int, reported: str | None
) -> None:
    sid = spawn(
        zw, "do the thing", "--adapter", adapter, env=zw.replay(sample, FAKE_HANG=str(hang_after))
    )
    expected = (SAMPLES / f"{sample}.jsonl").read_bytes().splitlines(True)[:hang_after]
    wait_until(lambda: turn_lines(zw, sid) == expected, message="agent output on disk")
    agent, sup = agent_ref(zw, sid), supervisor_ref(zw, sid)
    assert alive(agent) and alive(sup)
    log = zw.session_dir(sid) / "turns" / "turn_1.jsonl"
    before = log.read_bytes()

    os.kill(sup[0], signal.SIGKILL)
    wait_until(lambda: not alive(sup), message="supervisor gone")
    assert alive(agent), "the agent runs in its own session: it outlives its supervisor"
    assert zw.meta(sid)["status"] == "running"  # nobody recorded anything yet

    shown = zw.json("show", sid)
    assert shown["status"] == "failed"
    assert "supervisor lost" in shown["error"]
    assert "orphaned agent was terminated" in shown["error"]
    wait_until(lambda: not alive(agent), message="orphaned agent terminated")
    # reconciled on disk, not only in the reply; the turn file keeps every line written
    m = zw.meta(sid)
    assert m["status"] == "failed" and m["turns"][0]["error"] == shown["error"]
    assert m["turns"][0]["ended_at"]
    assert log.read_bytes() == before
    if reported:
        assert f"the agent reported {reported}" in shown["error"]
        assert shown["last_message"] and shown["usage"]["total_tokens"] > 0
    # every other read agrees and keeps working
    rows = zw.json("ls")
    assert [(r["id"], r["status"]) for r in rows] == [(sid, "failed")]
    steps = zw.json("trajectory", sid)
    assert steps and all(s["turn"] == 1 for s in steps)
    assert zw.run_bytes("logs", sid).stdout == before


# ------------------------------------------------------------------ 3. agent dies
def _cut_sample(tmp: Path, name: str, keep: int, cut_last: bool) -> str:
    lines = (SAMPLES / f"{name}.jsonl").read_bytes().splitlines(True)[:keep]
    if cut_last:
        lines[-1] = lines[-1][: len(lines[-1]) // 2]  # no newline, JSON cut mid-object
    p = tmp / f"{name}-{keep}-{cut_last}.jsonl"
    p.write_bytes(b"".join(lines))
    return str(p)


@pytest.mark.parametrize(
    ("case", "adapter"),
    [
        ("sigkill", "codex"),
        ("sigkill", "claude"),
        ("sigterm", "codex"),
        ("exit0_no_result", "codex"),
        ("exit3_no_result", "claude"),
        ("cut_last_line", "codex"),
    ],
)
def test_agent_dies(zw: Any, case: str, adapter: str) -> None:
    sample = f"{adapter}_simple"
    env: dict[str, str]
    if case.startswith("sig"):
        env = zw.replay(sample, FAKE_HANG="2")
    elif case == "cut_last_line":
        env = {"FAKE_REPLAY": _cut_sample(zw.tmp, sample, 4, cut_last=True)}
    else:
        env = {
            "FAKE_REPLAY": _cut_sample(zw.tmp, sample, 2, cut_last=False),
            "FAKE_EXIT": case[4],
            "FAKE_STDERR": "fatal: the model went away",
        }
    sid = spawn(zw, "task", "--adapter", adapter, env=env)
    if case.startswith("sig"):
        agent = agent_ref(zw, sid)
        wait_until(lambda: len(turn_lines(zw, sid)) == 2, message="two lines written")
        sig = signal.SIGKILL if case == "sigkill" else signal.SIGTERM
        assert alive(agent)
        os.kill(agent[0], sig)
    m = wait_status(zw, sid, "failed", "completed", "killed")
    t = m["turns"][0]
    assert m["status"] == "failed", t
    assert "no turn result in its output" in t["error"]
    if case.startswith("sig"):
        sig = 9 if case == "sigkill" else 15
        assert (t["signal"], t["exit_code"]) == (sig, None)
        assert t["error"].startswith(f"agent killed by signal {sig}")
    else:
        code = 3 if case == "exit3_no_result" else 0
        assert (t["exit_code"], t["signal"]) == (code, None)
        assert t["error"].startswith(f"agent exited with code {code}")
        if case != "cut_last_line":
            assert "fatal: the model went away" in t["error"]
    # the CLI shows it the same way, and the (partial) trajectory still reads
    shown = zw.json("show", sid)
    assert shown["status"] == "failed" and shown["error"] == t["error"]
    assert zw.run("trajectory", sid, "--json").returncode == 0
    # the supervisor is gone too: nothing is left running for a finished turn
    sup = ProcRef(**t["supervisor"])
    wait_until(lambda: not procs.is_alive(sup), message="supervisor exit")


# ------------------------------------------------------------------ 5. reboot
def test_reboot_everything_reconciles(zw: Any) -> None:
    hang = {"FAKE_HANG": "1"}
    a = spawn(zw, "codex hangs", "--adapter", "codex", env=zw.replay("codex_simple", **hang))
    b = spawn(zw, "claude hangs", "--adapter", "claude", env=zw.replay("claude_simple", **hang))
    c = spawn(zw, "with a tree", env=zw.replay("codex_simple", FAKE_CHILDREN="1"))
    d = spawn(zw, "with a queue", env=zw.replay("codex_simple", **hang))
    zw.run("inject", d, "queued before the crash", check=True)
    e = spawn(zw, "never started", env=zw.replay("codex_simple", **hang))
    f = spawn(zw, "pids from before", env=zw.replay("codex_simple", **hang))
    ids = [a, b, c, d, e, f]
    wait_until(lambda: len(tree(agent_ref(zw, c)[0])) >= 4, message="tree of c")
    doomed: list[tuple[int, float]] = []
    for sid in ids:
        doomed.append(supervisor_ref(zw, sid))
        doomed += tree(agent_ref(zw, sid)[0])
    # power loss: everything dies at once, nobody records anything
    for pid, _ in doomed:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(alive(r) for r in doomed), message="all processes gone")
    # e: crashed before its supervisor was recorded, long ago; f: recorded pids that cannot
    # exist now (above pid_max) -- after a reboot the old numbers mean nothing
    old = "2020-01-01T00:00:00.000+00:00"

    def never_started(m: dict[str, Any]) -> None:
        m["turns"][0].update(supervisor=None, agent=None, started_at=old)

    def impossible_pids(m: dict[str, Any]) -> None:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
        m["turns"][0]["supervisor"] = {"pid": pid_max + 7, "start_ticks": 1, "boot_id": ""}
        m["turns"][0]["agent"] = {"pid": pid_max + 8, "start_ticks": 1, "boot_id": ""}

    edit_meta(zw, e, never_started)
    edit_meta(zw, f, impossible_pids)
    assert all(zw.meta(s)["status"] == "running" for s in ids)

    rows = {r["id"]: r for r in zw.json("ls")}  # the next command, whatever it is
    assert set(rows) == set(ids)
    for sid in ids:
        assert rows[sid]["status"] == "failed", rows[sid]
        want = "supervisor never started" if sid == e else "supervisor lost"
        assert rows[sid]["error"].startswith(want), rows[sid]["error"]
        assert zw.meta(sid)["status"] == "failed"  # on disk: nothing claims to run
    assert rows[d]["queued"] == ["queued before the crash"]  # shown, not lost
    assert zw.json("ls", "--status", "running") == []
    res = zw.run("wait", *ids, "--timeout", "30")
    assert res.returncode == 1, res  # all finished (failed), no 124 timeout
    # the queued message still runs, before the new one, in order
    res = zw.run("inject", d, "after the reboot", env_extra=zw.replay("codex_simple"), check=True)
    assert res.stdout.strip() == f"{d} queued (turn 3)"  # behind the one left queued
    m = wait_until(
        lambda: (lambda m: m if m["status"] == "completed" and not m["queue"] else None)(
            zw.meta(d)
        ),
        message="queue drained",
    )
    assert [t["message"] for t in m["turns"][1:]] == ["queued before the crash", "after the reboot"]


# ------------------------------------------------------------------ 8. kill a process tree
@pytest.mark.parametrize("ignore_term", [False, True], ids=["plain", "ignores-SIGTERM"])
def test_kill_whole_process_tree(zw: Any, ignore_term: bool) -> None:
    env = zw.replay("codex_simple", FAKE_CHILDREN="2", FAKE_IGNORE_TERM="1" if ignore_term else "0")
    sid = spawn(zw, "build a tree", env=env)
    agent = agent_ref(zw, sid)

    def grown() -> list[tuple[int, float]] | None:
        t = tree(agent[0])
        sleeps = [p for p, _ in t if cmdline(p).startswith(b"sleep\x00")]
        return t if len(sleeps) == 3 and len(t) >= 6 else None

    family = wait_until(grown, message="agent -> sh -> sh -> sleep, sleep, setsid sleep")
    left_group = [p for p, _ in family if os.getpgid(p) != agent[0]]
    assert left_group, "the setsid sleep must have left the agent's group"
    sup = supervisor_ref(zw, sid)
    res = zw.run("kill", sid)
    assert res.returncode == 0 and res.stdout.strip() == f"{sid} killed", res
    everyone = [*family, sup]
    wait_until(lambda: not any(alive(r) for r in everyone), message="whole tree gone")
    m = zw.meta(sid)
    assert m["status"] == "killed" and m["turns"][0]["error"] == "killed by user"


def _load_llm_fakes() -> Any:
    spec = importlib.util.spec_from_file_location("zwarm_faults_llm", ROOT / "tests/fakes/llm.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while it is executing
    spec.loader.exec_module(mod)
    return mod


def test_kill_real_codex_tree(zw: Any) -> None:
    """The real codex is a node wrapper around a native binary: kill must take both."""
    llm = _load_llm_fakes()
    codex = llm.binary("codex")
    if codex is None or not Path(codex).exists():
        if os.environ.get("CI") == "true":
            pytest.fail("the real codex CLI is not installed (.ci/install-agents)")
        pytest.skip("the real codex CLI is not installed (.ci/install-agents)")
    import tomli_w

    with llm.FakeResponsesServer([llm.hang()]) as srv:
        env, overrides = llm.codex_setup(srv.base_url, zw.tmp)
        provider = overrides["model_providers.mock"]
        config = {
            "codex": {
                "command": [codex],
                "extra_args": list(llm.CODEX_EXTRA_ARGS),
                "env": env,
                "config": {
                    "model_provider": "mock",
                    "model": overrides["model"],
                    "model_providers": {"mock": provider},
                    "analytics": {"enabled": False},
                },
            }
        }
        zw.state_dir.mkdir(mode=0o700)
        zw.write_config(tomli_w.dumps(config))
        sid = spawn(zw, "say hi", "--adapter", "codex")
        srv.wait_for_requests(1, timeout=90)  # the native binary is up and talking
        agent = agent_ref(zw, sid)
        family = tree(agent[0])
        assert len(family) >= 2, f"expected a native child under the node wrapper: {family}"
        res = zw.run("kill", sid)
        assert res.returncode == 0, res
        wait_until(lambda: not any(alive(r) for r in family), message="codex tree gone")
        assert zw.meta(sid)["status"] == "killed"


def test_kill_is_idempotent_and_clear(zw: Any) -> None:
    """Killing a finished session is a clear error and changes nothing on disk."""
    sid = spawn(zw, "quick", env=zw.replay("codex_simple"))
    wait_status(zw, sid, "completed")
    before = (zw.session_dir(sid) / "meta.json").read_bytes()
    res = zw.run("kill", sid)
    assert res.returncode == 1 and "not running (completed)" in res.stderr, res
    assert (zw.session_dir(sid) / "meta.json").read_bytes() == before
    assert json.loads(before)["status"] == "completed"


def test_timeout_kills_the_agent_tree(zw: Any) -> None:
    """--timeout: the supervisor's timer kills the tree it identified when the agent started."""
    sid = spawn(zw, "too slow", "--timeout", "1", env=zw.replay("codex_simple", FAKE_CHILDREN="1"))
    agent = agent_ref(zw, sid)
    family = wait_until(
        lambda: (lambda t: t if len(t) >= 4 else None)(tree(agent[0])),
        message="agent -> sh -> two sleeps",
    )
    m = wait_status(zw, sid, "failed", "completed", "killed")
    assert m["status"] == "failed" and m["turns"][0]["error"] == "timeout: killed after 1 s"
    wait_until(lambda: not any(alive(r) for r in family), message="tree gone after timeout")


def test_kill_racing_the_start(zw: Any) -> None:
    """kill right after spawn, while the supervisor may not have started the agent yet: the
    session ends killed and no agent (nor its children) is left, whichever side wins."""
    env = zw.replay("codex_simple", FAKE_CHILDREN="1")
    ids = []
    for _ in range(6):
        sid = spawn(zw, "race", env=env)
        zw.run("kill", sid, check=True)
        ids.append(sid)
    for sid in ids:
        m = zw.meta(sid)
        assert m["status"] == "killed", m
        sup = m["turns"][0]["supervisor"]
        wait_until(lambda sup=sup: not procs.is_alive(ProcRef(**sup)), message="supervisor exit")
    started = [json.loads(p.read_text())["pid"] for p in zw.record.glob("argv*.json")]
    for pid in started:
        wait_until(lambda pid=pid: not tree(pid), message=f"agent {pid} and its tree gone")
    assert not [p for p in psutil.process_iter(["cwd"]) if p.info["cwd"] == str(zw.cwd)]


def test_no_zwarm_fd_leaks_into_the_agent(zw: Any) -> None:
    """The agent holds only its three turn files (never the session lock or meta.json), and
    the lock is free while a turn runs: inject and kill do not wait for the agent."""
    sid = spawn(zw, "task", env=zw.replay("codex_simple", FAKE_HANG="1"))
    agent, sup = agent_ref(zw, sid), supervisor_ref(zw, sid)
    wait_until(lambda: turn_lines(zw, sid), message="agent output")
    state = str(zw.state_dir)

    def open_in_state(pid: int) -> list[str]:
        out = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(state):
                    out.append(target[len(state) + 1 :].split("/", 2)[-1])
        return sorted(out)

    assert open_in_state(agent[0]) == [
        "turns/turn_1.jsonl",
        "turns/turn_1.prompt",
        "turns/turn_1.stderr",
    ]
    assert open_in_state(sup[0]) == ["supervisor.log"]
    res = zw.run("inject", sid, "next", timeout=30)
    assert res.returncode == 0 and "queued (turn 2)" in res.stdout, res
    zw.run("kill", sid, check=True)
