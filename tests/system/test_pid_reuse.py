"""Issue 5, fault 4: PID reuse.

A session's recorded supervisor/agent pid now belongs to an unrelated live process (a
"victim": its own process-group leader that logs every signal it gets). It must never be
treated as running, and ``ls``/``show``/``wait``/``kill``/``rm``/reconcile must never signal
it -- not by pid, not by process group.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Any

import pytest

from tests.support import ZWARM_BIN, wait_until
from tests.support.faults import Victim, agent_ref, alive, edit_meta, spawn, supervisor_ref
from zwarm.runtime import supervisor
from zwarm.system import procs
from zwarm.system.boot import ProcRef

pytestmark = pytest.mark.usefixtures("strays")

# How the recorded identity differs from the victim's, in clock ticks: a pid recycled long
# after the old process started (the usual case), the same pid with a start time off by a
# little, or the victim's exact identity (a forged record: /proc tells anyone its start time;
# the session marker is what keeps it safe).
SKEWS = {"older": -0.5, "slightly-off": +150, "exact": 0}  # "older": half its start ticks


def forged(victim: Victim, skew: str) -> dict[str, Any]:
    ref = procs.identify(victim.pid)
    assert ref is not None
    d = SKEWS[skew]
    ticks = ref.start_ticks // 2 if d < 0 else ref.start_ticks + int(d)
    return {"pid": victim.pid, "start_ticks": ticks, "boot_id": ref.boot_id}


@pytest.mark.parametrize("skew", list(SKEWS), ids=list(SKEWS))
@pytest.mark.parametrize("which", ["both", "supervisor", "agent"])
def test_lost_session_with_reused_pids(zw: Any, strays: list[Any], skew: str, which: str) -> None:
    """Supervisor dead, its pid (and/or the agent's) reused: reconcile, never signal."""
    victim = Victim(zw.tmp / "victims", strays)
    sid = spawn(zw, "task", env=zw.replay("codex_simple", FAKE_HANG="1"))
    agent_ref(zw, sid)
    # the real processes die (as if long ago), then their pids show up on the victim
    zw.run("kill", sid, check=True)

    def reuse(m: dict[str, Any]) -> None:
        t = m["turns"][0]
        fake = forged(victim, skew)
        dead = {"pid": 4_194_303, "start_ticks": 1, "boot_id": ""}  # nothing has this
        t["supervisor"] = fake if which in ("both", "supervisor") else dead
        t["agent"] = fake if which in ("both", "agent") else dead
        t.update(status="running", error=None, ended_at=None)
        m.update(status="running", error=None)

    edit_meta(zw, sid, reuse)
    rows = zw.json("ls")
    assert rows[0]["status"] == "failed", rows[0]
    assert rows[0]["error"].startswith("supervisor lost")
    assert "orphaned agent" not in rows[0]["error"]  # the victim was not taken for the agent
    victim.assert_untouched()
    assert zw.run("wait", sid, "--timeout", "10").returncode == 1
    res = zw.run("kill", sid)
    assert res.returncode == 1 and "not running" in res.stderr
    victim.assert_untouched()
    zw.run("rm", "--force", sid, check=True)
    assert not zw.session_dir(sid).exists()
    victim.assert_untouched()


@pytest.mark.parametrize("skew", list(SKEWS), ids=list(SKEWS))
@pytest.mark.parametrize("command", ["kill", "rm --force"])
def test_live_supervisor_reused_agent_pid(
    zw: Any, strays: list[Any], skew: str, command: str
) -> None:
    """The supervisor is real, but the recorded agent pid now names the victim (the agent
    was reaped and its pid recycled just before a ``kill``): the victim, a group leader
    whose group id equals the recorded pid, must not be signalled by pid or by group."""
    victim = Victim(zw.tmp / "victims", strays)
    release = zw.tmp / "release"
    env = zw.replay("codex_simple", FAKE_WAIT_FILE=str(release))
    sid = spawn(zw, "task", env=env)
    real_agent = agent_ref(zw, sid)
    sup = supervisor_ref(zw, sid)

    def reuse(m: dict[str, Any]) -> None:
        m["turns"][0]["agent"] = forged(victim, skew)

    edit_meta(zw, sid, reuse)
    proc = zw_popen(zw, *command.split(), sid)
    try:
        # kill records "killed", signals the recorded agent tree, then waits for the
        # supervisor; let the real agent finish so the supervisor can record and exit
        # the real agent carries the session marker, so it may be stopped at once (and, for
        # rm --force, the session removed) before its turn file is released
        wait_until(lambda: _killed_or_gone(zw, sid), message="killed (or removed)")
        release.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out, err)
    victim.assert_untouched()
    wait_until(lambda: not alive(sup), message="supervisor exit")
    wait_until(lambda: not alive(real_agent), message="real agent exit")
    if command == "kill":
        assert zw.meta(sid)["status"] == "killed"
    else:
        assert not zw.session_dir(sid).exists()


def _killed_or_gone(zw: Any, sid: str) -> bool:
    try:
        return bool(zw.meta(sid)["status"] == "killed")
    except FileNotFoundError:
        return True


def zw_popen(zw: Any, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(ZWARM_BIN), *args],
        env=zw.env,
        cwd=zw.cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("skew", list(SKEWS), ids=list(SKEWS))
def test_stopping_never_signals_a_reused_pid(zw: Any, strays: list[Any], skew: str) -> None:
    """procs.kill_session / terminate_all, and the supervisor's timeout path, given a stale
    identity."""
    victim = Victim(zw.tmp / "victims", strays)
    stale = ProcRef(**forged(victim, skew))
    sid = "0f0f0f0f-0000-4000-8000-00000000beef"
    if skew != "exact":
        assert not procs.is_alive(stale)
        assert procs.terminate_all([(stale, None)], grace=0.2) == []
        assert procs.wait_all_gone([stale], 0.1) == []
    assert procs.kill_session(stale, sid, grace=0.2) is False
    assert procs.terminate_all([(stale, sid)], grace=0.2) == []
    supervisor._expire(stale, sid, threading.Event())  # the timeout timer fires on it
    victim.assert_untouched()
