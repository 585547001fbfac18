"""Process identity (pid + create time) and killing whole process trees."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest

from tests.support import wait_until
from zwarm.system import boot, procs
from zwarm.system.boot import ProcRef

pytestmark = pytest.mark.subprocess  # real processes to find, signal and wait for


def _start(script: str, new_session: bool = True) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["/bin/sh", "-c", script],
        start_new_session=new_session,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


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


def test_identity_is_kernel_start_ticks_and_boot_id() -> None:
    me = os.getpid()
    ref = procs.identify(me)
    assert ref is not None and ref.pid == me and procs.is_alive(ref)
    with open(f"/proc/{me}/stat", "rb") as f:
        data = f.read()
    assert ref.start_ticks == int(data[data.rindex(b")") + 2 :].split()[19])
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert ref.boot_id == f.read().strip()


def test_wrong_start_or_boot_is_another_process() -> None:
    ref = procs.identify(os.getpid())
    assert ref is not None
    assert not procs.is_alive(ProcRef(ref.pid, ref.start_ticks - 1, ref.boot_id))
    assert not procs.is_alive(ProcRef(ref.pid, ref.start_ticks, "0" * 32))
    assert not procs.is_alive(None)


def test_a_stepped_wall_clock_changes_no_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: start times were epoch seconds computed from the boot time, which a
    wall-clock step moves, so every live session was reported lost after a step."""
    ref = procs.identify(os.getpid())
    assert ref is not None
    bid, btime = procs._boot_facts()
    monkeypatch.setattr(boot, "_boot", (bid, btime + 3600.0))  # the clock stepped an hour
    monkeypatch.setattr(time, "time", lambda: 0.0)
    assert procs.is_alive(ref) and procs.identify(os.getpid()) == ref


def test_dead_and_zombie_are_not_alive() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    ref = procs.identify(p.pid)
    assert ref is not None
    wait_until(lambda: psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE, message="zombie")
    assert not procs.is_alive(ref)  # a zombie counts as dead
    p.wait()
    assert not procs.is_alive(ref)
    assert procs.start_ticks(p.pid) is None or not procs.is_alive(ref)


def test_kill_session_kills_group_and_descendants(cleanup) -> None:
    # the group leader starts two sleeps, and one grandchild that leaves the group (setsid)
    p = _marked("sleep 300 & sleep 301 & setsid sleep 302 & wait", SID)
    cleanup.append(p)
    leader = procs.identify(p.pid)
    assert leader is not None
    kids = _children_refs(p.pid, 3)
    assert procs.kill_session(leader, SID, grace=5.0)
    p.wait(timeout=30)
    wait_until(lambda: _all_gone(kids), message="the whole tree to die")


def test_terminate_never_signals_a_reused_pid(cleanup) -> None:
    p = _start("sleep 300")
    cleanup.append(p)
    real = procs.identify(p.pid)
    assert real is not None
    stale = ProcRef(p.pid, real.start_ticks - 50, real.boot_id)  # same pid, another process
    assert procs.terminate_all([(stale, None)], grace=0.5) == []
    time.sleep(0.2)
    assert p.poll() is None and procs.is_alive(real)


def _marked(script: str, sid: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, procs.MARKER: sid}
    return subprocess.Popen(
        ["/bin/sh", "-c", script],
        start_new_session=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# this worker's own ids (xdist runs other tests of this module at the same time, in other
# workers: a fixed id let one test's kill_session find another's marked processes)
_RUN = secrets.token_hex(2)
SID = f"0f0f0f0f-{_RUN}-4000-8000-00000000abcd"


def test_kill_session_finds_marked_orphans_after_the_leader_died(cleanup) -> None:
    """Members of a dead agent's group, and a child that left it with setsid, are found by
    the session marker (also: an agent whose supervisor died before recording it)."""
    p = _marked("sleep 300 & setsid sleep 301 & exit 0", SID)
    cleanup.append(p)
    wait_until(lambda: len(procs.marked(SID)) >= 2 or None, message="marked children")
    wait_until(lambda: p.poll() is not None, message="leader exit")
    members = procs.marked(SID)
    assert procs.kill_session(None, SID, grace=5.0)
    wait_until(lambda: _all_gone(members), message="orphans to die")
    assert procs.marked(SID) == []


def test_kill_session_never_signals_an_unmarked_process_even_with_its_true_identity(
    cleanup,
) -> None:
    """Regression: a meta.json naming any process with its real start time (readable from
    /proc by anyone) got it SIGTERMed and SIGKILLed, with its whole group."""
    victim = _start("sleep 300")
    cleanup.append(victim)
    ref = procs.identify(victim.pid)
    assert ref is not None and procs.is_alive(ref)
    assert procs.kill_session(ref, SID, grace=0.5) is False
    assert procs.terminate_all([(ref, SID)], grace=0.5) == []
    time.sleep(0.2)
    assert victim.poll() is None and procs.is_alive(ref)
    other = _marked("sleep 300", f"0f0f0f0f-{_RUN}-4000-8000-00000000ffff")  # another session's
    cleanup.append(other)
    oref = wait_until(lambda: procs.identify(other.pid), message="other")
    assert procs.kill_session(oref, SID, grace=0.5) is False
    assert other.poll() is None


def test_terminate_escalates_to_sigkill(cleanup) -> None:
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time, sys\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\ntime.sleep(300)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    cleanup.append(p)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    ref = procs.identify(p.pid)
    assert ref is not None
    assert procs.terminate_all([(ref, None)], grace=0.5) == [ref]
    assert p.wait(timeout=30) == -signal.SIGKILL
    assert procs.terminate_all([(ref, None)]) == []  # already gone


def test_wait_all_gone(cleanup) -> None:
    p = _start("sleep 300")
    cleanup.append(p)
    ref = procs.identify(p.pid)
    assert ref is not None
    assert procs.wait_all_gone([ref], 0.1) == [ref]
    p.kill()
    assert procs.wait_all_gone([ref], 30.0) == []


# ------------------------------------------------------------------ shared /proc scans
def test_marked_is_found_by_the_one_scan_and_only_for_its_session(cleanup) -> None:
    """``marked`` reads each process's environment once: a process carrying the marker is
    found for its session, never for another (nor for a session id it merely contains)."""
    p = _marked("sleep 300", SID)
    cleanup.append(p)
    ref = wait_until(lambda: procs.identify(p.pid), message="marked sleep")
    wait_until(lambda: ref in procs.marked(SID) or None, message="found by its marker")
    assert ref not in procs.marked(SID[:-1] + "e")
    assert ref in procs._scan()[SID]


def test_concurrent_callers_share_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (kill --all took 7.6 s over 200 sessions): each kill scanned /proc; 32
    callers at once now share a few scans."""
    import threading

    calls = []

    def slow_scan() -> dict[str, list[ProcRef]]:
        calls.append(1)
        time.sleep(0.2)
        return {SID: []}

    monkeypatch.setattr(procs, "_MARKED", procs._SharedScan(slow_scan))
    threads = [threading.Thread(target=procs.marked, args=(SID,)) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= len(calls) <= 3, len(calls)


def test_threads_asking_first_together_share_one_condition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scan's condition is made at its first use (not at import: reading commands never
    load threading); threads that ask for it at the same instant all get the same one, even
    when making one is slow (a check-then-set would hand out several)."""
    import threading

    real = threading.Condition
    barrier = threading.Barrier(16)  # made with the real Condition
    shared: procs._SharedScan[str] = procs._SharedScan(dict)
    got: list[object] = []

    def slow_condition(*lock: threading.Lock) -> threading.Condition:
        if not lock:  # the scan's (threads' own events pass a lock)
            time.sleep(0.005)
        return real(*lock)

    monkeypatch.setattr(threading, "Condition", slow_condition)

    def ask() -> None:
        barrier.wait(10)
        got.append(shared._cond())

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 16 and len({id(c) for c in got}) == 1
    assert shared._cond() is got[0]


def test_a_caller_never_gets_a_scan_begun_before_it_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scan running when a caller asks may have missed a process started just before:
    the caller waits for the next scan, which begins after it asked."""
    import threading

    began = threading.Event()
    release = threading.Event()
    n = [0]
    ref = ProcRef(1, 1, "b")

    def scan() -> dict[str, list[ProcRef]]:
        n[0] += 1
        mine = n[0]
        if mine == 1:
            began.set()
            release.wait(10)
        return {SID: [ProcRef(ref.pid, mine, "b")]}

    monkeypatch.setattr(procs, "_MARKED", procs._SharedScan(scan))
    first: list[list[ProcRef]] = []
    t = threading.Thread(target=lambda: first.append(procs.marked(SID)))
    t.start()
    assert began.wait(10)
    late: list[list[ProcRef]] = []
    t2 = threading.Thread(target=lambda: late.append(procs.marked(SID)))
    t2.start()
    time.sleep(0.1)  # t2 now waits for scan 1 to end
    release.set()
    t.join(10)
    t2.join(10)
    assert [r.start_ticks for r in first[0]] == [1]
    assert [r.start_ticks for r in late[0]] == [2]  # a scan begun after it asked


def test_descendants_from_one_pass_match_psutil(cleanup) -> None:
    """``descendants`` walks a shared parent map of /proc (one pass serves every concurrent
    kill) and finds what psutil finds, grandchildren included, each once."""
    p = _start("sh -c 'sleep 300 & sleep 301 & wait' & sleep 302 & wait")
    cleanup.append(p)
    ref = wait_until(lambda: procs.identify(p.pid), message="leader")
    _children_refs(p.pid, 4)
    want = {k.pid for k in psutil.Process(p.pid).children(recursive=True)}
    got = procs.descendants(ref)
    assert {r.pid for r in got} == want and len(got) == len(want)
    assert all(procs.is_alive(r) for r in got)
    assert procs._below(1, {1: [ref], ref.pid: [ProcRef(1, 1, "b")]}) == [ref]  # a loop ends


# ------------------------------------------------------------------ stopping many at once
def _sids(n: int) -> list[str]:
    return [f"0f0f0f0f-{_RUN}-4000-8000-{i:012x}" for i in range(n)]


def _marked_groups(cleanup, sids: list[str], script: str, each: int) -> list[tuple[ProcRef, str]]:
    """One marked process group per session (a shell and its children): (leader, session id)
    once every group has its ``each`` marked members."""
    started = [_marked(script, sid) for sid in sids]
    cleanup.extend(started)
    for sid in sids:
        wait_until(lambda sid=sid: len(procs.marked(sid)) >= each or None, message="members")
    refs = [procs.identify(p.pid) for p in started]
    assert all(r is not None for r in refs)
    return [(r, sid) for r, sid in zip(refs, sids, strict=True) if r is not None]


def _members(items: list[tuple[ProcRef, str]]) -> list[ProcRef]:
    return [r for _, sid in items for r in procs.marked(sid)]


@pytest.mark.perf
def test_kill_sessions_scans_once_and_signals_all_before_waiting(
    cleanup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (kill --all took 8 s over 200 sessions): each session's kill scanned /proc
    and waited for its own processes before the next was signalled. Now one marker scan and
    one tree pass serve every session, and every SIGTERM is sent before any exit is waited
    for."""
    items = _marked_groups(cleanup, _sids(6), "sleep 300 & sleep 301 & wait", 3)
    members = _members(items)
    scans: list[str] = []
    events: list[int | str] = []
    send, wait = procs._send, procs._Exits.wait

    def counted(kind: str, scan: Any) -> Any:
        return procs._SharedScan(lambda: scans.append(kind) or scan())

    def sent(ref: ProcRef, fd: int | None, sig: int) -> None:
        events.append(sig)
        send(ref, fd, sig)

    def waited(self: Any, timeout: float) -> list[ProcRef]:
        events.append("wait")
        return wait(self, timeout)

    monkeypatch.setattr(procs, "_MARKED", counted("marked", procs._scan))
    monkeypatch.setattr(procs, "_TREES", counted("tree", procs._tree))
    monkeypatch.setattr(procs, "_send", sent)
    monkeypatch.setattr(procs._Exits, "wait", waited)
    assert procs.kill_sessions(items, grace=30.0) == [sid for _, sid in items]
    assert sorted(scans) == ["marked", "tree"]
    assert (
        events[: events.index("wait")] == [signal.SIGTERM] * len(members) == [signal.SIGTERM] * 18
    )
    assert _all_gone(members)


def test_kill_sessions_escalates_all_together(cleanup) -> None:
    """Groups that ignore SIGTERM all get SIGKILL after one shared grace, and every member,
    the leaders included, is gone when the call returns."""
    items = _marked_groups(cleanup, _sids(4), "trap '' TERM; sleep 300 & sleep 301 & wait", 3)
    members = _members(items)
    assert len(procs.kill_sessions(items, grace=0.5)) == 4
    assert _all_gone(members)
    for p in cleanup:
        assert p.wait(timeout=30) == -signal.SIGKILL


@pytest.mark.perf
def test_waiting_on_pidfds_reads_no_proc_while_idle(
    cleanup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel has pidfds, waiting for exits is one poll: no /proc read per round."""
    if not procs._PIDFD:
        pytest.skip("no pidfds here")
    p = _start("sleep 300")
    cleanup.append(p)
    ref = wait_until(lambda: procs.identify(p.pid), message="sleep")
    reads: list[str] = []
    real = procs._read
    with procs._Exits([ref]) as exits:
        monkeypatch.setattr(procs, "_read", lambda path: reads.append(path) or real(path))
        assert [r.pid for r in exits.wait(0.3)] == [p.pid]
    assert reads == []
    p.kill()
    assert procs.wait_all_gone([ref], 30.0) == []


def test_stopping_without_pidfds_polls_by_identity(
    cleanup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No pidfds (an old kernel, no descriptor left): the same stop, by identity each round."""
    monkeypatch.setattr(procs, "_PIDFD", False)
    items = _marked_groups(cleanup, _sids(3), "trap '' TERM; sleep 300 & wait", 2)
    members = _members(items)
    assert len(procs.kill_sessions(items, grace=0.3)) == 3
    assert _all_gone(members)
    me = procs.identify(os.getpid())
    assert me is not None and procs.wait_all_gone([me], 0.05) == [me]
