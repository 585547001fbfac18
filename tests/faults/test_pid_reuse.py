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

from zwarm import procs, supervisor
from zwarm.models import ProcRef

from ._helpers import (
    ROOT,
    Victim,
    agent_ref,
    edit_meta,
    meta,
    sdir,
    spawn,
    supervisor_ref,
    wait_status,
    wait_until,
)

# How the recorded identity differs from the victim's: a pid recycled long after the old
# process started (the usual case), or the same pid with a create time off by a little.
SKEWS = {"older": -3600.0, "slightly-off": +1.5}


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
        fake = {"pid": victim.pid, "create_time": victim.create_time + SKEWS[skew]}
        dead = {"pid": 999_999_999, "create_time": 1.0}  # a pid that cannot exist
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
    assert not sdir(zw, sid).exists()
    victim.assert_untouched()


@pytest.mark.parametrize("skew", list(SKEWS), ids=list(SKEWS))
@pytest.mark.parametrize("command", ["kill", "rm --force"])
def test_live_supervisor_reused_agent_pid(zw: Any, strays: list[Any], skew: str,
                                          command: str) -> None:
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
        m["turns"][0]["agent"] = {"pid": victim.pid,
                                  "create_time": victim.create_time + SKEWS[skew]}

    edit_meta(zw, sid, reuse)
    proc = zw_popen(zw, *command.split(), sid)
    try:
        # kill records "killed", signals the recorded agent tree, then waits for the
        # supervisor; let the real agent finish so the supervisor can record and exit
        wait_status(zw, sid, "killed")
        release.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out, err)
    victim.assert_untouched()
    wait_until(lambda: not procs.is_alive(ProcRef(*sup)), message="supervisor exit")
    wait_until(lambda: not procs.is_alive(ProcRef(*real_agent)), message="real agent exit")
    if command == "kill":
        assert meta(zw, sid)["status"] == "killed"
    else:
        assert not sdir(zw, sid).exists()


def zw_popen(zw: Any, *args: str) -> subprocess.Popen[str]:
    exe = ROOT / ".venv" / "bin" / "zwarm"
    return subprocess.Popen([str(exe), *args], env=zw.env, cwd=zw.cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("skew", list(SKEWS), ids=list(SKEWS))
def test_kill_tree_never_signals_a_reused_pid(zw: Any, strays: list[Any], skew: str) -> None:
    """procs.kill_tree / terminate, and the supervisor's timeout path, given a stale identity."""
    victim = Victim(zw.tmp / "victims", strays)
    stale = ProcRef(victim.pid, victim.create_time + SKEWS[skew])
    assert not procs.is_alive(stale)
    assert procs.kill_tree(stale, grace=0.2) is False
    assert procs.terminate(stale, grace=0.2) is False
    assert procs.wait_gone(stale, 0.1) is True
    supervisor._expire(stale, threading.Event())  # the timeout timer fires on a stale agent
    victim.assert_untouched()
