"""Process identity (pid + create time) and killing whole process trees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import wait_until

from zwarm import procs
from zwarm.models import ProcRef


def _start(script: str, new_session: bool = True) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["/bin/sh", "-c", script], start_new_session=new_session,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _children_refs(pid: int, want: int) -> list[ProcRef]:
    def found() -> list[ProcRef] | None:
        try:
            kids = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return None
        refs = [r for r in (procs.identify(k.pid) for k in kids) if r is not None]
        return refs if len(refs) >= want else None

    return wait_until(found, message=f"{want} children of {pid}")


def _all_gone(refs: list[ProcRef]) -> bool:
    return not any(procs.is_alive(r) for r in refs)


@pytest.fixture
def cleanup():
    """Process groups started by a test (each with start_new_session): killed afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.kill()
        p.wait()


def test_create_time_matches_psutil() -> None:
    me = os.getpid()
    assert procs.create_time(me) == pytest.approx(psutil.Process(me).create_time(), abs=0.02)
    ref = procs.identify(me)
    assert ref is not None and ref.pid == me and procs.is_alive(ref)


def test_wrong_create_time_is_another_process() -> None:
    ref = procs.identify(os.getpid())
    assert ref is not None
    assert not procs.is_alive(ProcRef(ref.pid, ref.create_time - 100.0))
    assert not procs.is_alive(None)


def test_dead_and_zombie_are_not_alive() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    ref = procs.identify(p.pid)
    assert ref is not None
    wait_until(lambda: psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE, message="zombie")
    assert not procs.is_alive(ref)  # a zombie counts as dead
    p.wait()
    assert not procs.is_alive(ref)
    assert procs.create_time(p.pid) is None or not procs.is_alive(ref)


def test_kill_tree_kills_group_and_descendants(cleanup) -> None:
    # the group leader starts two sleeps, and one grandchild that leaves the group (setsid)
    p = _start("sleep 300 & sleep 301 & setsid sleep 302 & wait")
    cleanup.append(p)
    leader = procs.identify(p.pid)
    assert leader is not None
    kids = _children_refs(p.pid, 3)
    assert procs.kill_tree(leader, grace=5.0)
    p.wait(timeout=30)
    wait_until(lambda: _all_gone(kids), message="the whole tree to die")


def test_kill_tree_never_signals_a_reused_pid(cleanup) -> None:
    p = _start("sleep 300")
    cleanup.append(p)
    real = procs.identify(p.pid)
    assert real is not None
    stale = ProcRef(p.pid, real.create_time - 50.0)  # same pid, different process
    assert procs.kill_tree(stale, grace=0.5) is False
    time.sleep(0.2)
    assert p.poll() is None and procs.is_alive(real)


def test_kill_tree_finds_group_members_after_leader_died(cleanup) -> None:
    p = _start("sleep 300 & sleep 301 & exit 0")
    cleanup.append(p)
    leader = procs.identify(p.pid)
    assert leader is not None
    members = wait_until(
        lambda: [procs.identify(x) for x in procs.group_members(p.pid, leader.create_time)
                 if x != p.pid] or None,
        message="group members",
    )
    wait_until(lambda: p.poll() is not None, message="leader exit")  # reaped: pid gone
    assert not procs.is_alive(leader)
    assert procs.kill_tree(leader, grace=5.0)
    wait_until(lambda: _all_gone([m for m in members if m]), message="orphans to die")


def test_terminate_escalates_to_sigkill(cleanup) -> None:
    p = subprocess.Popen([sys.executable, "-c",
                          "import signal, time, sys\n"
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                          "print('ready', flush=True)\ntime.sleep(300)"],
                         stdout=subprocess.PIPE, start_new_session=True)
    cleanup.append(p)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    ref = procs.identify(p.pid)
    assert ref is not None
    assert procs.terminate(ref, grace=0.5)
    assert p.wait(timeout=30) == -signal.SIGKILL
    assert procs.terminate(ref) is False  # already gone


def test_wait_gone(cleanup) -> None:
    p = _start("sleep 300")
    cleanup.append(p)
    ref = procs.identify(p.pid)
    assert ref is not None
    assert procs.wait_gone(ref, 0.1) is False
    p.kill()
    assert procs.wait_gone(ref, 30.0) is True
