"""The queue: caps (state dir, agent, group, the day's spend), priority then FIFO order,
dependencies, killing a queued session, and no queued session ever stranded, with fake agents."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import ZW, ZWARM_BIN, wait_status, wait_until
from tests.support.fleet import configure, counts, held_scheduler_lock, spawn_at_once, tally

pytestmark = pytest.mark.usefixtures("strays")

CAP1 = "[limits]\nmax_running = 1\n"


def _prompts(zw: ZW) -> list[str]:
    """The prompts the fake agents got, in the order they started."""
    return [zw.recorded(k)[1].decode() for k in range(1, zw.calls() + 1)]


def test_over_the_cap_sessions_queue_and_start_by_priority_then_first_come(zw: ZW) -> None:
    configure(zw, CAP1)
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_REPLAY=zw.sample("codex_simple"))
    a = zw.spawn("task A", env_extra=env)
    b = zw.spawn("task B", env_extra=env)
    c = zw.spawn("task C", "--priority", "5", env_extra=env)
    d = zw.spawn("task D", env_extra=env)
    rows = {r["id"]: r for r in zw.json("ls", env_extra=env)}
    assert rows[a]["status"] == "running"
    assert [rows[x]["queue_position"] for x in (c, b, d)] == [1, 2, 3]
    assert rows[b]["wait"] == "waiting for a slot: 1 running ([limits] max_running = 1)"
    table = zw.run("ls", env_extra=env, check=True).stdout
    assert "queued #1" in table and "queued #3" in table
    hold.unlink()
    assert zw.run("wait", a, b, c, d, "--timeout", "60", env_extra=env).returncode == 0
    assert _prompts(zw) == ["task A", "task C", "task B", "task D"]


@pytest.mark.slow
def test_thirty_spawns_at_once_never_run_more_than_three(zw: ZW) -> None:
    configure(zw, "[limits]\nmax_running = 3\n")
    env, state = tally(zw, FAKE_REPLAY=zw.sample("codex_simple"), FAKE_SLEEP="0.3")
    full = {**zw.env, **env}
    ids = spawn_at_once(zw, full, 30)
    most_listed = 0

    def all_done() -> bool:
        nonlocal most_listed
        rows = zw.json("ls", env_extra=env)
        most_listed = max(most_listed, sum(r["status"] == "running" for r in rows))
        return len(rows) == 30 and all(r["status"] == "completed" for r in rows)

    wait_until(all_done, timeout=240, interval=0.2, message="all 30 sessions completed")
    got = counts(state)
    assert got["runs"] == 30 and got["most"] <= 3, got
    assert most_listed <= 3
    assert sorted(ids) == sorted(r["id"] for r in zw.json("ls"))


def test_killing_a_queued_session_takes_it_out_of_the_queue(zw: ZW) -> None:
    configure(zw, CAP1)
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_REPLAY=zw.sample("codex_simple"))
    a = zw.spawn("task A", env_extra=env)
    b = zw.spawn("task B", env_extra=env)
    assert zw.meta(b)["status"] == "queued"
    killed = zw.json("kill", b)
    assert killed[0]["status"] == "killed"
    m = zw.meta(b)
    assert m["turns"][0]["reason"] == "killed" and not m["turns"][0]["started"]
    assert "while queued" in m["error"]
    hold.unlink()
    assert zw.run("wait", a, "--timeout", "60", env_extra=env).returncode == 0
    zw.run("ls", env_extra=env, check=True)
    assert zw.calls() == 1 and _prompts(zw) == ["task A"]
    assert zw.meta(b)["status"] == "killed"


def test_a_supervisor_killed_before_its_pass_strands_nothing(zw: ZW) -> None:
    """The worst moment: A's turn is recorded completed (its slot is free) and its supervisor
    waits for the scheduler lock to start B; it is SIGKILLed there. The next zwarm command
    (here ``ls``) starts B."""
    configure(zw, CAP1)
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_REPLAY=zw.sample("codex_simple"))
    a = zw.spawn("task A", env_extra=env)
    b = zw.spawn("task B", env_extra=env)
    sup = zw.meta(a)["turns"][0]["supervisor"]["pid"]
    with held_scheduler_lock(zw):
        hold.unlink()
        wait_status(zw, a, "completed")
        time.sleep(0.3)  # it is now blocked on the lock (nothing else is left for it to do)
        os.kill(sup, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{sup}").exists() or _zombie(sup), message="gone")
    assert zw.meta(b)["status"] == "queued"  # nobody started it
    zw.run("ls", env_extra=env, check=True)  # the next command
    assert wait_status(zw, b, "completed")["turns"][0]["started"]


def test_or_the_next_supervisor_to_end_a_turn_starts_it(zw: ZW) -> None:
    """The same worst moment, and no command at all: C's supervisor, ending C's turn, runs
    the pass A's could not, and starts B."""
    configure(zw, "[limits]\nmax_running = 2\n")
    hold_a, hold_c = zw.tmp / "hold-a", zw.tmp / "hold-c"
    hold_a.touch()
    hold_c.touch()
    env_a = zw.gated(hold_a, FAKE_REPLAY=zw.sample("codex_simple"))
    env_c = zw.gated(hold_c, FAKE_REPLAY=zw.sample("codex_simple"))
    a = zw.spawn("task A", env_extra=env_a)
    c = zw.spawn("task C", env_extra=env_c)
    b = zw.spawn("task B", env_extra=env_c)
    assert zw.meta(b)["status"] == "queued"
    sup = zw.meta(a)["turns"][0]["supervisor"]["pid"]
    with held_scheduler_lock(zw):
        hold_a.unlink()
        wait_status(zw, a, "completed")
        time.sleep(0.3)
        os.kill(sup, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{sup}").exists() or _zombie(sup), message="gone")
    assert zw.meta(b)["status"] == "queued"
    hold_c.unlink()  # C ends; its supervisor's pass starts B (no zwarm command runs)
    wait_status(zw, c, "completed")
    assert wait_status(zw, b, "completed")["turns"][0]["started"]


def test_a_supervisor_whose_starter_died_never_runs_a_queued_turn(zw: ZW) -> None:
    """A pass that dies after starting B's supervisor but before recording the start leaves
    B queued: that supervisor must run nothing (else B would run over the cap, unrecorded)."""
    import sys

    configure(zw, CAP1)
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_REPLAY=zw.sample("codex_simple"))
    a = zw.spawn("task A", env_extra=env)
    b = zw.spawn("task B", env_extra=env)
    orphan = subprocess.run(
        [sys.executable, "-I", "-m", "zwarm.runtime.supervisor", str(zw.state_dir), b],
        env={**zw.env, **env},
        capture_output=True,
        timeout=60,
    )
    assert orphan.returncode == 0, orphan.stderr
    m = zw.meta(b)
    assert m["status"] == "queued" and m["turns"][0].get("supervisor") is None
    hold.unlink()
    wait_status(zw, b, "completed")
    assert zw.meta(a)["status"] == "completed" and _prompts(zw) == ["task A", "task B"]


def test_spawns_killed_at_random_moments_strand_nothing(zw: ZW) -> None:
    """Spawn processes SIGKILLed anywhere (before, while or after creating their queued
    session, in the middle of a pass): every session that exists ends up run, never more than
    the cap at once, after one ``zwarm ls``."""
    configure(zw, "[limits]\nmax_running = 2\n")
    env, state = tally(zw, FAKE_REPLAY=zw.sample("codex_simple"), FAKE_SLEEP="0.2")
    full = {**zw.env, **env}
    rng = random.Random(1414)
    for i in range(12):
        p = subprocess.Popen(
            [str(ZWARM_BIN), "spawn", f"task {i}"],
            env=full,
            cwd=zw.cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.05, 2.0))  # before, while or after it made its session
        p.send_signal(signal.SIGKILL)
        p.wait()
    zw.run("ls", env_extra=env, check=True)

    def settled() -> bool:
        rows = zw.json("ls", env_extra=env)
        return all(r["status"] in ("completed", "failed") for r in rows)

    wait_until(settled, timeout=120, interval=0.2, message="every session run")
    rows = zw.json("ls")
    assert rows and all(r["status"] == "completed" for r in rows), rows
    assert counts(state)["most"] <= 2


def test_a_chain_stops_where_a_dependency_fails(zw: ZW) -> None:
    """A -> B -> C with B failing: C ends failed (dependency_failed), never started; D, which
    runs --after-any B, starts whatever B's outcome."""
    zw.state_dir.mkdir()
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_REPLAY=zw.sample("codex_simple"), FAKE_FAIL_ON="FAILME")
    a = zw.spawn("task A", env_extra=env)
    b = zw.spawn("task B FAILME", "--after", a, env_extra=env)
    c = zw.spawn("task C", "--after", b, env_extra=env)
    d = zw.spawn("task D", "--after", b, "--after-any", env_extra=env)
    rows = {r["id"]: r for r in zw.json("ls", env_extra=env)}
    assert rows[b]["status"] == "queued" and rows[b]["waiting_for"] == [a]
    assert rows[c]["waiting_for"] == [b] and rows[c]["after"] == [b]
    assert f"after {a[:8]}" in zw.run("ls", env_extra=env, check=True).stdout
    hold.unlink()
    wait_status(zw, c, "failed")
    wait_status(zw, d, "completed")
    m = zw.meta(c)
    assert m["reason"] == "dependency_failed" and not m["turns"][0]["started"]
    assert b in m["error"] and "failed" in m["error"]
    assert zw.meta(b)["status"] == "failed"
    assert "task C" not in _prompts(zw) and "task D" in _prompts(zw)
    assert zw.run("trajectory", c).returncode == 0  # no log, and none missing


def test_after_names_existing_sessions_only(zw: ZW) -> None:
    res = zw.run("spawn", "x", "--after", "nosuch")
    assert res.returncode == 1 and "nosuch" in res.stderr and "Traceback" not in res.stderr
    res = zw.run("spawn", "x", "--after-any")
    assert res.returncode == 1 and "--after-any needs --after" in res.stderr


def test_an_agents_cap_leaves_the_other_agents_free(zw: ZW) -> None:
    """Every command here runs with the same environment: a queued session's agent gets the
    environment of the zwarm process that starts it (see docs/fleet.md)."""
    configure(zw, "[claude]\nmax_running = 1\n")
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_REPLAY=zw.sample("claude_simple"))
    a = zw.spawn("claude one", "--adapter", "claude", env_extra=env)
    b = zw.spawn("claude two", "--adapter", "claude", env_extra=env)
    c = zw.spawn("codex free", "--adapter", "codex", env_extra=env)
    rows = {r["id"]: r for r in zw.json("ls", env_extra=env)}
    assert [rows[x]["status"] for x in (a, b, c)] == ["running", "queued", "running"]
    assert rows[b]["wait"] == "waiting for a slot: 1 claude running ([claude] max_running = 1)"
    hold.unlink()
    res = zw.run("wait", a, b, "--timeout", "60", env_extra=env)
    assert res.returncode == 0, [zw.meta(x)["error"] for x in (a, b)]


def test_a_groups_cap_holds_only_its_own_sessions(zw: ZW) -> None:
    configure(zw, "[groups.web]\nmax_running = 1\nmax_tokens = 5000\n")
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_REPLAY=zw.sample("codex_simple"))
    a = zw.spawn("web one", "--group", "web", env_extra=env)
    b = zw.spawn("web two", "--group", "web", env_extra=env)
    c = zw.spawn("no group", env_extra=env)
    rows = {r["id"]: r for r in zw.json("ls", env_extra=env)}
    assert [rows[x]["status"] for x in (a, b, c)] == ["running", "queued", "running"]
    assert rows[b]["wait"] == "waiting for a slot: 1 of group web running (max_running = 1)"
    assert (rows[a]["group"], rows[a]["max_tokens"], rows[c]["max_tokens"]) == ("web", 5000, None)
    hold.unlink()
    res = zw.run("wait", a, b, c, "--timeout", "60", env_extra=env)
    assert res.returncode == 0, [zw.meta(x)["error"] for x in (a, b, c)]


def test_the_days_spend_queues_new_sessions_until_tomorrow(zw: ZW, midday: str) -> None:
    """claude_simple costs $0.000638; with max_cost_per_day $0.0005 the next session waits,
    and starts on a command run the next day (the clock injected into the API). Days are
    local: run where it is midday, so that no day begins before "still today"."""
    from zwarm.env import Env

    configure(zw, "[limits]\nmax_cost_per_day = 0.0005\n")
    env = {"FAKE_REPLAY": zw.sample("claude_simple")}
    a = zw.spawn("first", "--adapter", "claude", env_extra=env)
    assert zw.wait(a).returncode == 0
    b = zw.spawn("second", "--adapter", "claude", env_extra=env)
    m = zw.meta(b)
    assert m["status"] == "queued" and "waiting for tomorrow" in m["turns"][0]["wait"]
    assert "$0.0006 reached [limits] max_cost_per_day $0.0005" in m["turns"][0]["wait"]
    zw.run("ls", env_extra=env, check=True)
    assert zw.meta(b)["status"] == "queued"  # still today
    tomorrow = time.time() + 86400
    api = zw.api(env)
    api.env = Env(
        state_dir=zw.state_dir, environ={**zw.env, **env}, cwd=zw.cwd, clock=lambda: tomorrow
    )
    api.tick(force=True)
    wait_status(zw, b, "completed")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_spawn_after_a_failed_session_says_so_at_once(zw: ZW) -> None:
    """Issue 30.8: ``spawn --after X`` with X already failed or killed prints the new id (for
    scripts) and says on stderr, as an error (exit 1), that it will never run, naming X and
    how it ended once ("killed", not "killed, killed"); ``--after-any`` starts it (exit 0)."""
    env = {"FAKE_REPLAY": zw.sample("codex_simple"), "FAKE_FAIL_ON": "FAILME"}
    failed = zw.spawn("task FAILME", env_extra=env)
    wait_status(zw, failed, "failed")
    hung = zw.spawn("hang", env_extra={**env, "FAKE_HANG": "1"})
    zw.run("kill", hung, check=True)
    for dep, ended in ((failed, "failed, agent_error"), (hung, "killed")):
        for extra in ((), ("--json",)):
            res = zw.run("spawn", "next", "--after", dep, *extra, env_extra=env)
            assert res.returncode == 1, (res.stdout, res.stderr)
            sid = json.loads(res.stdout)["id"] if extra else res.stdout.strip()
            assert zw.meta(sid)["status"] == "failed"
            assert res.stderr == (
                f"Error: session {sid} will not run: dependency failed: session {dep} "
                f"ended {ended}\n"
            )
    res = zw.run("spawn", "next", "--after", hung, "--after-any", env_extra=env)
    assert res.returncode == 0 and res.stderr == "", res.stderr


def test_a_queued_spawn_says_its_place_on_stderr(zw: ZW) -> None:
    """Issue 30.15: a spawn that queues prints its id on stdout (for scripts) and on stderr
    its place and what it waits for."""
    configure(zw, CAP1)
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_REPLAY=zw.sample("codex_simple"))
    a = zw.spawn("task A", env_extra=env)
    res = zw.run("spawn", "task B", env_extra=env, check=True)
    b = res.stdout.strip()
    assert len(b) == 36 and res.stdout == b + "\n"
    assert res.stderr == "queued #1: waiting for a slot: 1 running ([limits] max_running = 1)\n"
    res = zw.run("spawn", "task C", "--after", a, env_extra=env, check=True)
    assert res.stderr == f"queued #2: waiting for {a[:8]}\n"
    hold.unlink()
    assert zw.run("wait", "--all", "--timeout", "60", env_extra=env).returncode == 0


def test_a_spawn_says_who_holds_the_scheduler_lock_and_gives_up_in_time(zw: ZW) -> None:
    """Issue 29: while another process holds the scheduler lock, a spawn that must take it
    says on stderr, after about a second, which process it waits for (from /proc/locks), and
    gives up with one line after ZWARM_LOCK_WAIT_S (default 60 s), creating nothing; with the
    lock released in time it goes on."""
    configure(zw, CAP1)
    env = {"FAKE_REPLAY": zw.sample("codex_simple"), "ZWARM_LOCK_WAIT_S": "3"}
    me = f"waiting for the scheduler lock held by pid {os.getpid()} ("
    with held_scheduler_lock(zw):
        res = zw.run("spawn", "task", env_extra=env, timeout=40)  # it waited forever
        assert res.returncode == 1 and res.stdout == "", res
        lines = res.stderr.splitlines()
        assert len(lines) == 2 and lines[0].startswith(f"warning: {me}"), res.stderr
        assert "pytest" in lines[0] or "python" in lines[0], lines[0]
        assert lines[1].startswith("Error: the scheduler lock is still held after 3 s (by pid ")
        assert "nothing was started" in lines[1] and "ZWARM_LOCK_WAIT_S" in lines[1]
        assert zw.json("ls", env_extra=env) == []
        slow = subprocess.Popen(
            [str(ZWARM_BIN), "spawn", "late task"],
            env={**zw.env, **env, "ZWARM_LOCK_WAIT_S": "60"},
            cwd=zw.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        notes = slow.stderr
        assert notes is not None
        first = notes.readline().decode()  # said while it still waits
        assert first.startswith(f"warning: {me}"), first
    out, err = slow.communicate(timeout=60)
    assert slow.returncode == 0 and err == b"", err
    sid = out.decode().strip()
    assert wait_status(zw, sid, "completed")


def test_a_session_that_never_ran_costs_nothing(zw: ZW) -> None:
    """Issue 30.2 (a new user's eye): a session that ended before any turn started (``--after``
    a failed session; killed while queued) showed ``cost ? (estimated)`` in ``show``, ``?`` in
    ``ls`` and ``"cost_usd": null`` with ``"cost_complete": true``: nothing ran, so nothing
    was billed, on a priced model or not (an unpriced one: ``$0.0000``, not ``$0.0000
    (unknown)`` and a hint how to price it)."""
    env = {"FAKE_REPLAY": zw.sample("codex_simple"), "FAKE_FAIL_ON": "FAILME"}
    failed = zw.spawn("task FAILME", env_extra=env)
    wait_status(zw, failed, "failed")
    never = []
    for model in ("gpt-6-sol", "not-a-priced-model"):
        res = zw.run("spawn", "next", "-m", model, "--adapter", "codex", "--after", failed,
                     env_extra=env)  # fmt: skip
        assert res.returncode == 1, res.stderr
        never.append(res.stdout.strip())
    configure(zw, CAP1)
    hold = zw.tmp / "hold"
    hold.touch()
    running = zw.spawn("hold the slot", env_extra=zw.gated(hold, **env))
    queued = zw.spawn("queued", env_extra=env)
    assert zw.meta(queued)["status"] == "queued"
    zw.run("kill", queued, check=True)
    never.append(queued)
    for sid in never:
        d = zw.json("show", sid)
        assert (d["cost_usd"], d["cost_complete"]) == (0.0, True), d
        shown = zw.run("show", sid, check=True).stdout
        assert "cost ?" not in shown and "(unknown)" not in shown, shown
        assert "no price for" not in shown  # nothing to price: no hint how to
    rows = {r["id"]: r for r in zw.json("ls")}
    assert all(rows[sid]["cost_usd"] == 0.0 for sid in never)
    hold.unlink()
    wait_status(zw, running, "completed")


def test_an_undeclared_group_is_refused_naming_the_declared_ones(zw: ZW) -> None:
    """A typo in ``--group`` would mean no cap: it is refused, one line naming the declared
    groups, and no session is made (the same through the tools' ``delegate``)."""
    from zwarm.orchestrator.tools import Toolbox

    configure(zw, "[groups.web]\nmax_running = 1\n[groups.backend]\nmax_running = 2\n")
    res = zw.run("spawn", "task", "--group", "wbe")
    assert res.returncode != 0 and not res.stdout, res
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("Error: "), res.stderr
    assert "'wbe' is not declared (declared groups: backend, web)" in res.stderr, res.stderr
    got = Toolbox(zw.api(), source="bot").dispatch("delegate", {"task": "t", "group": "wbe"})
    assert not got["ok"] and "declared groups: backend, web" in got["error"], got
    assert zw.json("ls") == []
