"""Process identity and termination.

Owns every signal zwarm sends. Must stay true:
- a process is identified by (pid, create_time), never by pid alone: a pid whose create time
  differs is an unrelated process (PIDs are reused) and is never signalled;
- ``create_time`` equals ``psutil.Process(pid).create_time()`` (on Linux it is computed the
  same way from /proc, without importing psutil, because spawn is on a start-up path);
- killing a session's agent kills its whole process group and any descendants that left it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from zwarm.models import ProcRef

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_boot_time: float | None = None


def _linux_boot_time() -> float:
    global _boot_time
    if _boot_time is None:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime"):
                    _boot_time = float(line.split()[1])
                    break
            else:  # pragma: no cover - every Linux has btime
                raise OSError("no btime in /proc/stat")
    return _boot_time


def create_time(pid: int) -> float | None:
    """The process's start time (epoch seconds, as psutil reports it), or None if no such pid."""
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return None
        # the command name may contain spaces and parens: fields start after the last ')'
        fields = data[data.rindex(b")") + 2 :].split()
        return float(fields[19]) / _CLK_TCK + _linux_boot_time()
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def identify(pid: int) -> ProcRef | None:
    ct = create_time(pid)
    return ProcRef(pid, ct) if ct is not None else None


def is_alive(ref: ProcRef | None) -> bool:
    """True only if ``ref.pid`` is running and is the same process (same create time)."""
    if ref is None:
        return False
    ct = create_time(ref.pid)
    if ct is None or abs(ct - ref.create_time) > 0.05:
        return False
    return not _is_zombie(ref.pid)


def _is_zombie(pid: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True
    return data[data.rindex(b")") + 2 : data.rindex(b")") + 3] in (b"Z", b"X")


def group_members(pgid: int, not_before: float) -> list[int]:
    """Live pids in process group ``pgid`` that started no earlier than ``not_before``."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "create_time"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["create_time"] >= not_before - 0.05:
                found.append(p.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def descendants(ref: ProcRef) -> list[ProcRef]:
    """Identities of every live descendant of ``ref`` (empty if ``ref`` is not alive)."""
    if not is_alive(ref):
        return []
    import psutil

    try:
        kids = psutil.Process(ref.pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for k in kids:
        try:
            out.append(ProcRef(k.pid, float(k.create_time())))
        except psutil.Error:
            continue
    return out


def kill_tree(agent: ProcRef, grace: float = 3.0) -> bool:
    """Terminate the agent's process group and every descendant; True if anything was signalled.

    SIGTERM first, then SIGKILL after ``grace`` seconds for whatever is left. Processes are
    signalled only when their identity checks out.
    """
    targets = [agent, *descendants(agent)] if is_alive(agent) else []
    pgid_ok = bool(targets)
    if not pgid_ok:
        # the leader is gone; members of its group that started after it may remain
        targets = [r for r in (identify(p) for p in _orphans(agent)) if r is not None]
    if not targets:
        return False
    _signal_all(agent.pid if pgid_ok else None, targets, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(is_alive(t) for t in targets):
        time.sleep(0.02)
    left = [t for t in targets if is_alive(t)]
    if left:
        _signal_all(agent.pid if pgid_ok else None, left, signal.SIGKILL)
    return True


def _orphans(agent: ProcRef) -> list[int]:
    """Members left in the dead agent's group. None if its pid now names another process:
    a pid is never reused while a group with that id has members, so that group is new."""
    if _pid_reused(agent):
        return []
    try:
        found = group_members(agent.pid, agent.create_time)
    except Exception:  # psutil missing pieces on exotic platforms
        return []
    return [] if _pid_reused(agent) else found


def _pid_reused(agent: ProcRef) -> bool:
    ct = create_time(agent.pid)
    return ct is not None and abs(ct - agent.create_time) > 0.05


def _signal_all(pgid: int | None, targets: list[ProcRef], sig: int) -> None:
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for t in targets:
        if is_alive(t):
            try:
                os.kill(t.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def terminate(ref: ProcRef, grace: float = 3.0) -> bool:
    """Stop one verified process (SIGTERM, then SIGKILL). True if it was alive."""
    if not is_alive(ref):
        return False
    try:
        os.kill(ref.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not is_alive(ref):
            return True
        time.sleep(0.02)
    if is_alive(ref):
        try:
            os.kill(ref.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return True


def wait_gone(ref: ProcRef, timeout: float) -> bool:
    """Wait until ``ref`` is no longer alive; True if it went within ``timeout``."""
    deadline = time.monotonic() + timeout
    while is_alive(ref):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
