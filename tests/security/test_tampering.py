"""Security issue: an agent (or anyone) that rewrites the state dir must not change what
zwarm executes or signals, nor make a read command hang, crash or lie.

Each test plants what a sandboxed agent can write (meta.json fields, links, modules, FIFOs,
an index) and checks zwarm ignores or refuses it. Each failed on the code before the fix.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZWARM_BIN, wait_status, wait_until
from tests.support.faults import Victim, agent_ref, edit_meta, one_error_line, spawn, supervisor_ref
from zwarm.system import procs

pytestmark = pytest.mark.usefixtures("strays")


def _done(zw: Any, sid: str) -> dict[str, Any]:
    return wait_status(zw, sid, "completed", "failed", "killed")


def test_bypass_planted_in_meta_json_is_not_believed(zw: Any) -> None:
    """Regression: ``"bypass": true`` written into meta.json made the next turn run with
    the agent's sandbox off (and ``ls`` showed no danger)."""
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)

    def plant(m: dict[str, Any]) -> None:
        m["bypass"], m["dangerous"] = True, False

    edit_meta(zw, sid, plant)
    zw.run("inject", sid, "more", env_extra=zw.replay("codex_simple"), check=True)
    _done(zw, sid)
    argv, _ = zw.recorded()
    assert "--dangerously-bypass-approvals-and-sandbox" not in argv["argv"]
    assert "workspace-write" in argv["argv"]


def test_a_changed_working_directory_is_refused(zw: Any) -> None:
    """Regression: the agent could point its own session's cwd at ``/``, making ``/`` the
    writable root of its next sandboxed turn."""
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)
    calls = zw.calls()
    edit_meta(zw, sid, lambda m: m.update(cwd="/"))
    zw.run("inject", sid, "more", env_extra=zw.replay("codex_simple"))
    m = _done(zw, sid)
    assert m["status"] == "failed" and m["turns"][-1]["reason"] == "start_failed"
    assert "launch record" in m["error"]
    assert zw.calls() == calls  # the agent never ran


def test_a_session_without_a_launch_record_never_runs(zw: Any) -> None:
    """A session planted in a cloned repository's .zwarm/ (no pin of the user's) is shown,
    but continuing it runs nothing."""
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)
    home = Path(zw.env.get("XDG_STATE_HOME") or Path(zw.env["HOME"]) / ".local" / "state")
    (home / "zwarm" / "pins" / f"{sid}.json").unlink()
    calls = zw.calls()
    zw.run("inject", sid, "more", env_extra=zw.replay("codex_simple"))
    m = _done(zw, sid)
    assert m["turns"][-1]["reason"] == "start_failed" and zw.calls() == calls


def test_a_module_planted_in_the_state_dir_is_never_imported(zw: Any) -> None:
    """Regression: the supervisor ran as ``python -m`` with its cwd in the session dir, so a
    ``zwarm/`` package planted there was imported instead of zwarm."""
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)
    marker = zw.tmp / "pwned"
    for where in (zw.session_dir(sid), zw.cwd):
        pkg = where / "zwarm"
        (pkg / "runtime").mkdir(parents=True)
        code = f"open({str(marker)!r}, 'w').write('imported')\n"
        (pkg / "__init__.py").write_text(code)
        (pkg / "runtime" / "__init__.py").write_text(code)
        (pkg / "runtime" / "supervisor.py").write_text(code)
    zw.run("inject", sid, "more", env_extra=zw.replay("codex_simple"), check=True)
    assert _done(zw, sid)["status"] == "completed"
    assert not marker.exists()


def test_links_planted_as_the_next_turn_files_are_not_written_through(zw: Any) -> None:
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)
    victims = {}
    for ext in ("jsonl", "stderr", "prompt"):
        v = zw.tmp / f"victim.{ext}"
        v.write_text("precious")
        (zw.session_dir(sid) / "turns" / f"turn_2.{ext}").symlink_to(v)
        victims[ext] = v
    zw.run("inject", sid, "more", env_extra=zw.replay("codex_simple"), check=True)
    assert _done(zw, sid)["status"] == "completed"
    assert all(v.read_text() == "precious" for v in victims.values())
    assert not (zw.session_dir(sid) / "turns" / "turn_2.jsonl").is_symlink()


def test_nan_start_time_kills_nothing(zw: Any, strays: list[Any]) -> None:
    """Regression: ``"create_time": NaN`` passed the identity check (every comparison with
    NaN is false), so a read-only ``ls`` SIGTERMed and SIGKILLed the named pid's tree."""
    victim = Victim(zw.tmp / "victims", strays)
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)
    path = zw.session_dir(sid) / "meta.json"
    m = json.loads(path.read_bytes())
    m["schema_version"] = 1
    m["status"] = "running"
    m["turns"][0].update(status="running", ended_at=None)
    for key in ("supervisor", "agent"):
        m["turns"][0][key] = {"pid": victim.pid, "create_time": float("nan")}
    path.write_text(json.dumps(m, allow_nan=True))
    rows = zw.json("ls")
    assert rows[0]["status"] == "damaged" and "not valid JSON" in rows[0]["error"]
    for cmd in (["show", sid], ["wait", sid, "--timeout", "1"], ["kill", "--all"]):
        zw.run(*cmd)
    victim.assert_untouched()


def test_an_agent_its_supervisor_never_recorded_is_found_and_stopped(zw: Any) -> None:
    """Regression: a supervisor that died between starting the agent and recording it left
    an agent nobody could kill, and ``inject`` started a second one beside it."""
    sid = spawn(zw, "task", env=zw.replay("codex_simple", FAKE_HANG="1"))
    agent = agent_ref(zw, sid)
    sup = supervisor_ref(zw, sid)
    os.kill(sup[0], signal.SIGKILL)
    edit_meta(zw, sid, lambda m: m["turns"][0].update(agent=None))
    assert procs.is_alive(procs.identify(agent[0]))
    zw.run("inject", sid, "again", env_extra=zw.replay("codex_simple"), check=True)
    wait_until(lambda: procs.identify(agent[0]) is None or not _alive_pid(agent), message="gone")
    m = _done(zw, sid)
    assert "orphaned agent was terminated" in m["turns"][0]["error"]
    assert m["turns"][1]["status"] == "completed"


def _alive_pid(ref: tuple[int, float]) -> bool:
    from tests.support.faults import alive

    return alive(ref)


def test_a_forged_index_cannot_hide_a_running_session(zw: Any) -> None:
    """Regression: a forged ``index.json`` row (its key computed from a stat) showed a
    running, dangerous session as completed. The listing index is gone: every row comes from
    meta.json through the one schema."""
    sid = spawn(zw, "task", "--dangerous", env=zw.replay("codex_simple", FAKE_HANG="1"))
    agent_ref(zw, sid)
    st = os.stat(zw.session_dir(sid) / "meta.json")
    key = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    forged = {"id": sid, "status": "completed", "dangerous": False}
    doc = {"format": 1, "zwarm": "0.1.0", "entries": {sid: [key, forged]}}
    (zw.state_dir / "index.json").write_text(json.dumps(doc))
    row = zw.json("ls")[0]
    assert row["status"] == "running" and row["dangerous"] is True
    zw.run("kill", sid, check=True)


def test_an_invalid_config_does_not_stop_listing_or_killing(zw: Any) -> None:
    """Regression: a typo in config.toml made every running session "damaged" in ``ls``, so
    ``kill --all`` killed nothing."""
    sid = spawn(zw, "task", env=zw.replay("codex_simple", FAKE_HANG="1"))
    agent = agent_ref(zw, sid)
    (zw.state_dir / "config.toml").write_text("[codex]\nsandbox = 'nope'\n")
    assert zw.json("ls")[0]["status"] == "running"
    killed = zw.json("kill", "--all")
    assert [r["id"] for r in killed] == [sid]
    wait_until(lambda: not _alive_pid(agent), message="agent gone")


def test_wait_flag_answers_for_its_own_turn(zw: Any) -> None:
    """Regression: ``inject --wait`` waited for the whole session and exited by its last
    turn, so ``inject X fix --wait && deploy`` deployed after the fix failed."""
    release = zw.tmp / "release"
    env = zw.replay("codex_simple", FAKE_WAIT_FILE=str(release), FAKE_FAIL_ON="BREAK")
    sid = spawn(zw, "task", env=env)
    agent_ref(zw, sid)
    waiter = subprocess.Popen(
        [sys.executable, "-m", "zwarm", "inject", sid, "please BREAK", "--wait", "--json"],
        env={**zw.env, **env},
        cwd=zw.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(lambda: len(zw.meta(sid)["queue"]) == 1, message="turn 2 queued")
    zw.run("inject", sid, "then this", "--context", "native", env_extra=env, check=True)
    release.touch()
    out, err = waiter.communicate(timeout=120)
    assert waiter.returncode == 1, (out, err)
    r = json.loads(out)
    assert (r["turn"], r["status"]) == (2, "failed")
    assert _done(zw, sid)["status"] == "completed" and len(zw.meta(sid)["turns"]) == 3


def test_a_prompt_given_with_wait_leaves_every_argv(zw: Any) -> None:
    """docs/threat-model.md promises prompts never appear in any argv; ``spawn "..." --wait``
    kept the prompt in its own argv for the whole turn. It now re-executes itself without it."""
    canary = "CANARY-7f1d0c9e-in-argv"
    release = zw.tmp / "release"
    env = zw.replay("codex_simple", FAKE_WAIT_FILE=str(release))
    proc = subprocess.Popen(
        [sys.executable, "-m", "zwarm", "spawn", canary, "--wait"],
        env={**zw.env, **env},
        cwd=zw.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_until(lambda: zw.calls() == 1, message="the agent started")
    wait_until(lambda: not _in_some_argv(canary), message="the canary out of every argv")
    release.touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    assert canary.encode() not in out


def _in_some_argv(text: str) -> bool:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                pass
    return False


def test_logs_streams_in_bounded_memory(zw: Any) -> None:
    """Regression: ``logs`` read the whole turn log into memory."""
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)
    log = zw.session_dir(sid) / "turns" / "turn_1.jsonl"
    line = b'{"type":"item.completed","item":{"type":"agent_message","text":"' + b"x" * 4000
    with open(log, "ab") as f:
        for _ in range(16):
            f.write((line + b'"}}\n') * 1024)  # 64 MiB in all
    code = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(p.returncode)\n"
    )
    exe = Path(sys.executable).parent / "zwarm"
    res = zw.python(code, str(exe), "logs", sid)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) < 48 * 1024, f"peak RSS {res.stdout} KiB"


def test_a_working_directory_that_is_not_utf8_is_one_line(zw: Any) -> None:
    bad = os.path.join(os.fsencode(zw.tmp), b"dir-\xff")
    os.mkdir(bad)
    res = zw.run("spawn", "task", "-C", os.fsdecode(bad), env_extra=zw.replay("codex_simple"))
    one_error_line(res, "not valid UTF-8")


def test_no_free_inodes_and_few_fds_give_one_line(zw: Any) -> None:
    """Regression: no free inodes and ``ulimit -n 6`` gave tracebacks."""
    mnt = zw.tmp / "ino"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,nr_inodes=14,mode=0755", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        assert os.environ.get("CI") != "true", f"CI must be able to mount a tmpfs: {res.stderr}"
        import pytest

        pytest.skip(f"cannot mount a small tmpfs here: {res.stderr.strip()}")
    try:
        state = str(mnt / ".zwarm")
        runs = [
            zw.run("--state-dir", state, "spawn", f"t{i}", env_extra=zw.replay("codex_simple"))
            for i in range(4)
        ]
        failed = [r for r in runs if r.returncode != 0]
        assert failed, "14 inodes should not hold four sessions"
        for r in failed:
            one_error_line(r, "No space left")
        assert zw.run("--state-dir", state, "ls").returncode == 0
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)
    for args in (["ls"], ["show", sid], ["trajectory", sid], ["logs", sid]):
        r = subprocess.run(
            ["/bin/sh", "-c", 'ulimit -n 6; exec "$@"', "sh", str(_zwarm()), *args],
            env=zw.env,
            cwd=zw.cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "Traceback" not in r.stderr, r.stderr
        assert r.returncode == 0 or len(r.stderr.strip().splitlines()) == 1, r.stderr


def _zwarm() -> Path:
    return ZWARM_BIN


def test_rm_decides_under_the_lock_so_a_restarted_session_survives(zw: Any) -> None:
    """Regression: ``rm`` checked the status before taking the lock, so it could delete a
    session that ``inject`` had just restarted (here: the check sees it finished, as it was a
    moment before the inject)."""
    import pytest

    from zwarm.errors import SessionStateError

    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)
    api = zw.api(env_extra=zw.replay("codex_simple", FAKE_HANG="1"))
    stale = api.get(sid)
    api.inject(sid, "again")  # running again
    agent_ref(zw, sid)
    api.get = lambda ref: stale  # what rm saw before the inject
    with pytest.raises(SessionStateError, match="running"):
        api.rm([sid])
    assert zw.session_dir(sid).exists() and zw.meta(sid)["status"] == "running"
    zw.run("kill", sid, check=True)


def test_rm_empties_the_trash_and_never_follows_a_link_there(zw: Any) -> None:
    """Issue 29: what an ``rm`` killed half-way left in ``trash/`` is deleted by the next rm
    (a removal in progress is renamed there whole); a link in it is removed, never followed;
    a ``trash`` that is itself a link is refused with one line, nothing deleted."""
    env = zw.replay("codex_simple")
    a, b = spawn(zw, "a", env=env), spawn(zw, "b", env=env)
    _done(zw, a)
    _done(zw, b)
    victim = zw.tmp / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    trash = zw.state_dir / "trash"
    trash.mkdir()
    left = trash / "0c2b8f7e-0000-4000-8000-000000000000.1a2b3c4d"  # a killed rm's
    (left / "turns").mkdir(parents=True)
    (left / "turns" / "turn_1.jsonl").write_bytes(b"x" * 100000)
    (trash / "planted").symlink_to(victim)
    zw.run("rm", a, check=True)
    assert list(trash.iterdir()) == []
    assert (victim / "precious").read_text() == "keep me"
    trash.rmdir()
    trash.symlink_to(victim)
    res = zw.run("rm", b)
    one_error_line(res, "trash")
    assert sorted(p.name for p in victim.iterdir()) == ["precious"]
    assert zw.session_dir(b).is_dir()


def test_a_model_that_is_an_option_never_reaches_an_agents_argv(zw: Any) -> None:
    """Regression: a model name went to argv as ``--model VALUE`` unchecked, from a spawn's
    ``-m`` (the ``delegate`` tool's ``model``, HTTP), an untrusted config's free ``model`` key
    or an agent's rewrite of ``requested_model`` in meta.json: gemini (yargs) reads
    ``--model --yolo`` as an empty model and ``--yolo``, turning its approvals off."""
    bad = "--dangerously-bypass-approvals-and-sandbox"
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, sid)
    calls = zw.calls()
    one_error_line(zw.run("spawn", "task", f"--model={bad}"), "model")
    config = zw.state_dir / "config.toml"
    config.write_text(f'[defaults]\nmodel = "{bad}"\n')  # untrusted: model is a free key
    config.chmod(0o600)
    one_error_line(zw.run("spawn", "task"), "model")
    config.unlink()
    assert zw.calls() == calls

    edit_meta(zw, sid, lambda m: m.update(requested_model=bad))
    zw.run("inject", sid, "more", env_extra=zw.replay("codex_simple"))
    m = _done(zw, sid)
    assert m["turns"][-1]["reason"] == "start_failed" and "model" in m["error"]
    assert zw.calls() == calls  # the agent never ran


def _zwarm3(sid: str, cwd: str) -> dict[str, Any]:
    """A zwarm 3.x meta.json (schema 0) for ``sid``, recorded completed."""
    return {
        "id": sid,
        "task": "t",
        "status": "completed",
        "working_dir": cwd,
        "created_at": "2025-01-01T00:00:00",
        "updated_at": "2025-01-01T00:00:00",
        "pid": None,
        "exit_code": 0,
        "model": None,
        "turn": 1,
        "messages": [],
        "token_usage": {},
        "error": None,
        "source": "user",
        "adapter": "codex",
    }


def test_an_agent_that_rewrites_its_record_as_ended_is_still_killed(zw: Any) -> None:
    """Regression: a running agent that rewrote its meta.json as completed (as today's record
    or as a zwarm 3.x one) made ``kill`` refuse ("not running"), ``kill --all`` skip it and
    ``rm`` delete the session while the agent ran on, out of the user's reach. The
    session's marker, which the agent cannot put on a process it did not start, decides."""

    def forge_v1(sid: str) -> None:
        def plant(m: dict[str, Any]) -> None:
            m["turns"][-1].update(status="completed", ended_at=m["turns"][-1]["started_at"])

        edit_meta(zw, sid, plant)

    def forge_3x(sid: str) -> None:
        path = zw.session_dir(sid) / "meta.json"
        path.write_text(json.dumps(_zwarm3(sid, zw.meta(sid)["cwd"])))

    for forge in (forge_v1, forge_3x):
        for command in (["kill", "{sid}"], ["kill", "--all"], ["rm", "{sid}"]):
            sid = spawn(zw, "task", env=zw.replay("codex_simple", FAKE_HANG="1"))
            pid = agent_ref(zw, sid)[0]
            forge(sid)
            zw.run(*[a.format(sid=sid) for a in command], check=True)
            wait_until(lambda pid=pid: _dead_or_zombie(pid), message=f"{command}: agent stopped")
    assert not zw.session_dir(sid).exists()  # rm removed it, its agent stopped first
    done = spawn(zw, "task", env=zw.replay("codex_simple"))
    _done(zw, done)
    one_error_line(zw.run("kill", done), "not running")  # nothing carries its marker


def _dead_or_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return True


def test_named_pipes_in_place_of_its_turn_files_never_hold_a_turn(zw: Any) -> None:
    """Regression: an agent that replaced its own turn's log, prompt and digest cache by
    named pipes (``mkfifo``) held its supervisor forever (the turn's end opened the log to
    read its outcome, blocking), and so every command that reconciles the session; a
    follow-up with ``--context summary`` opened the prompt and the digest the same way."""
    turns = '"$ZWARM_DIR/sessions/$ZWARM_SESSION_ID/turns"'
    plant = "; ".join(
        f"rm -f {turns}/turn_1.{ext}; mkfifo {turns}/turn_1.{ext}"
        for ext in ("jsonl", "prompt", "digest.json")
    )
    sid = spawn(zw, "task", env=zw.replay("codex_simple", FAKE_SHELL=plant))
    m = wait_status(zw, sid, "completed", "failed", timeout=60)
    assert m["turns"][0]["status"] in ("completed", "failed")
    assert (zw.session_dir(sid) / "turns" / "turn_1.prompt").is_fifo()  # (the plant held)
    res = zw.run(
        "inject",
        sid,
        "more",
        "--context",
        "summary",
        env_extra=zw.replay("codex_simple"),
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    m = wait_status(zw, sid, "completed", "failed", timeout=60)
    assert len(m["turns"]) == 2 and m["turns"][1]["status"] == "completed"
    zw.run("show", sid, timeout=60, check=True)
    zw.run("ls", timeout=60, check=True)
