"""zwarm's slurm launcher against a real single-node Slurm, through zwarm's own commands.

Each turn is one batch job whose supervisor runs on the node (this machine). What is shown:
turns and follow-ups run as jobs and record real outcomes; a pending job shows ``queued
(slurm: ...)`` and is killed; a running job is killed with nothing of it left; a job hitting
its Slurm time limit and one ``scancel``-ed from outside are reconciled with a typed reason;
``--after`` becomes Slurm's own dependency; a stopped controller never hangs ``zwarm ls``;
twenty sessions at once, listed with one ``squeue``. The agents are the fake agent
(tests/fakes/bin), configured through ``[slurm] env``; the real CLIs are in
test_real_slurm.py.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support import ZW, wait_until
from tests.support.slurm import final_state, job_of, job_state, marked, sl_config, status

LONG = 150.0  # Slurm checks time limits every 30 s: a 1-minute limit ends within ~95 s


def test_turns_and_follow_ups_run_as_jobs(sl: ZW) -> None:
    secret = "zw-secret-8f3a1c"
    env = sl.replay("codex_resume_turn1", ZW_TEST_SECRET=secret)
    sid = sl.spawn("first task, in the job's prompt file only", env_extra=env)
    assert sl.wait(sid).returncode == 0
    sl.run("inject", sid, "second message", env_extra=env, check=True)
    wait_until(lambda: status(sl, sid)() and len(sl.meta(sid)["turns"]) == 2, message="turn 2")
    assert sl.wait(sid).returncode == 0
    m = sl.meta(sid)
    assert [t["status"] for t in m["turns"]] == ["completed", "completed"]
    assert [t["launcher"] for t in m["turns"]] == ["slurm", "slurm"]
    first, second = job_of(sl, sid, 1), job_of(sl, sid, 2)
    assert first != second  # one job per turn
    assert final_state(first) == final_state(second) == "COMPLETED"
    # the agent ran in the job, with the exported variable; nothing kept its value
    _, prompt = sl.recorded()
    assert prompt.endswith(b"second message")
    env_seen = sl.record / "env1.json"
    assert secret in env_seen.read_text() and "SLURM_JOB_ID" in env_seen.read_text()
    script = subprocess.run(
        ["scontrol", "write", "batch_script", first, "-"], capture_output=True, text=True
    ).stdout
    assert "zwarm.runtime.supervisor" in script and "--turn 1" in script
    assert "first task" not in script and secret not in script
    for root in (sl.state_dir, sl.tmp / "xdg-state"):
        for path in root.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path
    shown = sl.run("show", sid, check=True).stdout
    assert f"slurm job {first}" in shown and f"slurm job {second}" in shown


def test_pending_job_is_shown_queued_and_killed(sl: ZW) -> None:
    sl_config(sl, extra_args=["--begin=now+3600"])  # held by Slurm for an hour
    sid = sl.spawn("never starts", env_extra=sl.replay("codex_simple"))
    job = job_of(sl, sid)
    with sl.api().store.transaction(sid) as s:  # waiting long past the local start grace
        s.turns[0].started_at = "2000-01-01T00:00:00+00:00"

    def listed() -> dict[str, Any] | None:  # (retried: another test may pause slurmctld)
        row: dict[str, Any] = {r["id"]: r for r in sl.json("ls")}[sid]
        return row if row["launcher_state"]["state"] else None

    row = wait_until(listed, message="slurm's answer")
    assert row["status"] == "running" and row["launcher"] == "slurm"  # it holds its slot
    assert row["launcher_state"]["state"] == "PENDING"
    assert row["launcher_state"]["handle"] == {"job": job}
    assert row["shown_status"] == "queued (slurm: BeginTime)"
    wait_until(lambda: "queued (slurm: BeginTime)" in sl.run("ls").stdout, message="ls queued")
    # show, ls --tree and show --json say it too, never "running" (regression: show did)
    shown = wait_until(lambda: _said_queued(sl, sid, "BeginTime"), message="show queued")
    assert "running" not in shown, shown
    subprocess.run(["scontrol", "hold", job], check=True, timeout=30)
    held = wait_until(lambda: job_state(job)[1].startswith("JobHeld") and job_state(job)[1])
    wait_until(lambda: _said_queued(sl, sid, held), message=f"shown held ({held})")
    assert sl.run("kill", sid).returncode == 0
    assert sl.meta(sid)["status"] == "killed"
    wait_until(lambda: job_state(job)[0] == "CANCELLED", message="job cancelled")
    assert sl.calls() == 0  # the agent never ran


def test_kill_cancels_only_the_job_zwarm_submitted(sl: ZW) -> None:
    """Regression (security): ``kill`` ran ``scancel`` on whatever job id meta.json named, so
    an agent that rewrote it had another of the user's jobs cancelled. The decoy is such a job
    (same user; running unless the shared node is full); each session's meta.json is
    rewritten to name it, as its agent can. The second session's handle record is forged too
    (which an agent cannot do): Slurm's own report of the job (its name, not the session's)
    still refuses it."""
    decoy = _submit(sl, "--job-name=the-users|own-job", "--time=15", "--wrap=sleep 600")
    own_forged = ""
    try:
        alive = ("RUNNING", "PENDING")  # pending while the (shared) node is full
        wait_until(lambda: job_state(decoy)[0] in alive, message="the decoy in Slurm's queue")
        env = sl.replay("codex_simple", FAKE_HANG="1")
        sid, forged = sl.spawn("hang", env_extra=env), sl.spawn("hang too", env_extra=env)
        own, own_forged = job_of(sl, sid), job_of(sl, forged)
        _rewrite_job(sl, sid, decoy)
        res = sl.run("kill", sid)
        assert job_state(decoy)[0] in alive  # left alone
        assert res.returncode != 0
        said = res.stderr.strip()
        assert said.startswith("Error:") and len(said.splitlines()) == 1, said
        assert f"slurm job {own} cancelled" in said, said
        assert f"named slurm job {decoy}" in said and "left alone" in said, said
        assert sl.meta(sid)["status"] == "killed"
        wait_until(lambda: job_state(own)[0] == "CANCELLED", message="its own job cancelled")

        _rewrite_job(sl, forged, decoy)
        record = sl.tmp / "xdg-state" / "zwarm" / "pins" / f"{forged}.handles.json"
        data = json.loads(record.read_text())
        data["turns"]["1"]["job"] = decoy
        record.write_text(json.dumps(data))
        res = sl.run("kill", forged)
        assert res.returncode != 0
        said = res.stderr.strip()
        assert f"Slurm reports job {decoy} as not its own" in said, said
        assert "'the-users|own-job'" in said and "not cancelled" in said, said
        assert job_state(decoy)[0] in alive  # left alone again
    finally:
        for job in (decoy, own_forged):
            if job:
                subprocess.run(["scancel", job], timeout=30)


def _submit(zw: ZW, *args: str) -> str:
    r = subprocess.run(
        ["sbatch", "--parsable", f"--output={zw.tmp}/decoy.out", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=zw.tmp,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


def _rewrite_job(zw: ZW, sid: str, job: str) -> None:
    """Name ``job`` as the current turn's in ``sid``'s meta.json, as its agent could."""
    path = zw.session_dir(sid) / "meta.json"
    with zw.api().store.lock(sid):
        m = json.loads(path.read_bytes())
        m["turns"][-1]["handle"]["job"] = job
        path.write_text(json.dumps(m))


def _said_queued(zw: ZW, sid: str, why: str) -> str | None:
    """``show``'s text if ``show``, ``show --json`` and ``ls --tree`` all say the session is
    ``queued (slurm: <why>)`` (retried: another test may pause slurmctld)."""
    want = f"queued (slurm: {why})"
    shown = zw.run("show", sid).stdout
    lines = shown.splitlines()
    head = lines[0] if lines else ""
    rule = next((ln for ln in lines if "turn 1" in ln), "")
    d = zw.json("show", sid)
    tree = zw.run("ls", "--tree").stdout
    ok = want in head and want in rule and "queued for" in shown and want in tree
    return shown if ok and d["shown_status"] == want else None


def test_running_job_is_killed_with_nothing_left(sl: ZW) -> None:
    env = sl.replay("codex_simple", FAKE_HANG="1", FAKE_CHILDREN="2")  # a tree, one setsid
    sid = sl.spawn("hang", env_extra=env)
    wait_until(lambda: sl.meta(sid)["turns"][0].get("agent"), message="agent started")
    wait_until(lambda: len(marked(sid)) >= 4, message="the agent's tree")
    assert sl.run("kill", sid).returncode == 0
    m = sl.meta(sid)
    assert m["status"] == "killed" and m["turns"][0]["reason"] == "killed"
    wait_until(lambda: not marked(sid), timeout=30, message="no process of it left")
    wait_until(lambda: job_state(job_of(sl, sid))[0] == "CANCELLED", message="job cancelled")
    assert sl.meta(sid)["status"] == "killed"  # the job's end changed nothing


def test_time_limit_is_reconciled(sl: ZW) -> None:
    sl_config(sl, time="1")  # one minute: Slurm's smallest limit
    sid = sl.spawn("hang past the limit", env_extra=sl.replay("codex_simple", FAKE_HANG="1"))
    row = wait_until(status(sl, sid), timeout=LONG, message="the time limit")
    assert row["status"] == "failed" and row["reason"] == "slurm_timeout", row
    assert "TIMEOUT" in row["error"] and job_of(sl, sid) in row["error"]
    assert "failed (slurm timeout)" in sl.run("ls").stdout
    wait_until(lambda: not marked(sid), message="no process of it left")


def test_scancel_from_outside_is_reconciled(sl: ZW) -> None:
    sid = sl.spawn("hang", env_extra=sl.replay("codex_simple", FAKE_HANG="1"))
    wait_until(lambda: sl.meta(sid)["turns"][0].get("agent"), message="agent started")
    subprocess.run(["scancel", job_of(sl, sid)], check=True, timeout=30)
    row = wait_until(status(sl, sid), message="reconciled")
    assert row["status"] == "failed" and row["reason"] == "slurm_cancelled", row
    assert "CANCELLED" in row["error"]
    wait_until(lambda: not marked(sid), message="no process of it left")


def test_a_job_named_in_meta_json_never_keeps_an_ended_turn_running(sl: ZW) -> None:
    """Regression (security): listings asked Slurm about the job meta.json names, so an agent
    that named another of the user's jobs there kept its turn ``running`` after its own job
    ended (holding its slot, every ``wait`` on it hanging) for as long as that job ran. Its
    state is now the recorded job's: the turn is reconciled as in the test above."""
    # the decoy waits an hour in Slurm's queue (alive, and no CPU of the shared node taken)
    decoy = _submit(sl, "--job-name=the-users-own-job", "--begin=now+3600", "--wrap=sleep 600")
    try:
        alive = ("RUNNING", "PENDING")
        wait_until(lambda: job_state(decoy)[0] in alive, message="the decoy in Slurm's queue")
        sid = sl.spawn("hang", env_extra=sl.replay("codex_simple", FAKE_HANG="1"))
        own = job_of(sl, sid)  # running, or pending while the shared node is full: either way
        wait_until(lambda: job_state(own)[0] in alive, message="its job in Slurm's queue")
        _rewrite_job(sl, sid, decoy)
        subprocess.run(["scancel", own], check=True, timeout=30)
        row = wait_until(status(sl, sid), message="reconciled")
        assert row["status"] == "failed" and row["reason"] == "slurm_cancelled", row
        assert f"slurm job {own}" in row["error"] and decoy not in row["error"], row
        assert job_state(decoy)[0] in alive  # left alone
        wait_until(lambda: not marked(sid), message="no process of it left")
    finally:
        subprocess.run(["scancel", decoy], timeout=30)


def test_after_becomes_a_slurm_dependency(sl: ZW) -> None:
    hold = sl.tmp / "hold"
    hold.touch()
    a = sl.spawn("first", env_extra=sl.gated(hold, **sl.replay("codex_simple")))
    b = sl.spawn("second", "--after", a, env_extra=sl.replay("codex_simple"))
    c = sl.spawn("third", "--after", b, env_extra=sl.replay("codex_simple"))
    ja, jb, jc = job_of(sl, a), job_of(sl, b), job_of(sl, c)
    assert job_state(jb)[2].startswith(f"afterok:{ja}")
    assert job_state(jc)[2].startswith(f"afterok:{jb}")
    wait_until(lambda: "queued (slurm: Dependency)" in sl.run("ls").stdout, message="ls")
    # a failing dependency: Slurm never starts its dependent, zwarm says why
    bad = sl.spawn("fails", env_extra=sl.gated(hold, **sl.replay("codex_error", FAKE_EXIT="1")))
    after_bad = sl.spawn("never", "--after", bad, env_extra=sl.replay("codex_simple"))
    assert job_state(job_of(sl, after_bad))[2].startswith(f"afterok:{job_of(sl, bad)}")
    hold.unlink()
    for sid in (a, b, c):
        assert sl.wait(sid, timeout=90).returncode == 0
    # its job may start after those (the node is shared): its end, not a quiet node, first
    assert wait_until(status(sl, bad), message="the failing one")["status"] == "failed"
    ran = _agent_runs(sl)  # each agent started after the one before it had ended
    ended = [sl.api().get(s).turns[0].ended_at or "" for s in (a, b)]
    assert ran["second"] > _epoch(ended[0]) and ran["third"] > _epoch(ended[1])
    assert sorted(ran) == ["fails", "first", "second", "third"]  # never the one after "fails"
    row = wait_until(status(sl, after_bad), message="dependency reconciled")
    assert row["status"] == "failed" and row["reason"] == "dependency_failed", row


def test_stopped_controller_never_hangs_ls(sl: ZW) -> None:
    sid = sl.spawn("hang", env_extra=sl.replay("codex_simple", FAKE_HANG="1"))
    wait_until(lambda: sl.meta(sid)["turns"][0].get("agent"), message="agent started")
    pid = int(subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True).stdout.split()[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        res = sl.run("ls")
        took = time.monotonic() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert res.returncode == 0, res.stderr
    assert "unknown (slurm unreachable)" in res.stdout
    assert took < 12, f"ls took {took:.1f} s with the controller stopped"
    assert sl.meta(sid)["status"] == "running"  # unknown is never reconciled
    wait_until(lambda: "unknown" not in sl.run("ls").stdout, message="slurm answers again")
    assert sl.run("kill", sid).returncode == 0


def test_twenty_sessions_one_query_per_listing(sl: ZW) -> None:
    hold = sl.tmp / "hold"
    hold.touch()
    env = sl.gated(hold, **sl.replay("codex_simple"))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda i: sl.spawn(f"task {i}", env_extra=env), range(20)))
    assert len(set(ids)) == 20 and len({job_of(sl, s) for s in ids}) == 20
    shim = _counting("squeue", sl.tmp)
    calls = shim.parent / "calls"
    listing = sl.run("ls", "--json", env_extra={"PATH": f"{shim.parent}:{sl.env['PATH']}"})
    assert listing.returncode == 0
    assert len(calls.read_text().splitlines()) == 1  # one squeue for 20 running sessions
    hold.unlink()
    assert sl.wait(*ids, timeout=180).returncode == 0
    calls.write_text("")
    sl.run("ls", env_extra={"PATH": f"{shim.parent}:{sl.env['PATH']}"}, check=True)
    assert calls.read_text() == ""  # finished sessions: Slurm is not asked


def _agent_runs(zw: ZW) -> dict[str, float]:
    """When the fake agent started, by prompt."""
    runs = {}
    for n in range(1, zw.calls() + 1):
        argv, prompt = zw.recorded(n)
        runs[prompt.decode()] = argv["time"]
    return runs


def _epoch(iso: str) -> float:
    from zwarm.env import parse_iso

    return parse_iso(iso)


def _counting(name: str, tmp: Path) -> Path:
    """A ``name`` on PATH that notes each call, then runs the real one."""
    real = subprocess.run(["which", name], capture_output=True, text=True).stdout.strip()
    d = tmp / "shim"
    d.mkdir(exist_ok=True)
    (d / "calls").write_text("")
    shim = d / name
    shim.write_text(f'#!/bin/sh\necho "$*" >> {d / "calls"}\nexec {real} "$@"\n')
    shim.chmod(0o755)
    return shim


def test_hooks_run_inside_the_job(sl: ZW) -> None:
    out = sl.tmp / "hooked.json"
    text = (sl.state_dir / "config.toml").read_text()
    sl.write_config(text + f'\n[hooks]\non_finish = "env > {out}.env; cat > {out}"\n')
    sid = sl.spawn("hooked", env_extra=sl.replay("codex_simple"))
    assert sl.wait(sid).returncode == 0
    wait_until(out.exists, message="the hook's output")
    assert f'"id": "{sid}"' in out.read_text() or f'"id":"{sid}"' in out.read_text()
    env = Path(f"{out}.env").read_text()
    assert f"ZWARM_HOOK_SESSION={sid}" in env and "SLURM_JOB_ID=" in env  # ran in the job


def test_timeout_is_the_supervisors_timer_and_the_jobs_limit(sl: ZW) -> None:
    env = sl.replay("codex_simple", FAKE_HANG="1")
    sid = sl.spawn("hang", "--timeout", "3", env_extra=env)
    limit = subprocess.run(
        ["squeue", "--noheader", "--states=all", f"--jobs={job_of(sl, sid)}", "--format=%l"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    assert limit == "3:00"  # 3 s + 2 min to record the turn, in Slurm's minutes
    row = wait_until(status(sl, sid), message="the supervisor's timeout")
    assert row["status"] == "failed" and row["reason"] == "timeout", row
    wait_until(lambda: not marked(sid), message="no process of it left")


def test_a_spawn_option_sets_that_sessions_jobs_only(sl: ZW) -> None:
    """``--launcher-option`` sets a free ``[slurm]`` key for one session's jobs (kept in its
    launch pin, over the trusted table); a key that decides what runs is refused."""
    sl_config(sl, time="30", extra_args=["--begin=now+3600"])  # held: its limit can be read

    def limit(job: str) -> str:
        r = subprocess.run(
            ["squeue", "--noheader", "--states=all", f"--jobs={job}", "--format=%l"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return r.stdout.strip()

    env = sl.replay("codex_simple")
    mine = sl.spawn("t", "--launcher-option", "time=7", env_extra=env)
    other = sl.spawn("t", env_extra=env)
    try:
        assert wait_until(lambda: limit(job_of(sl, mine)), message="squeue") == "7:00"
        assert wait_until(lambda: limit(job_of(sl, other)), message="squeue") == "30:00"
    finally:
        sl.run("kill", mine, other)
    res = sl.run("spawn", "t", "--launcher-option", "account=someone-else", env_extra=env)
    assert res.returncode != 0 and "takes no option 'account'" in res.stderr, res.stderr
