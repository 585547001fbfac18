"""Process identity and termination.

Owns every signal zwarm sends. Must stay true:
- a process is identified by (pid, start time in clock ticks since boot, boot id), all read
  from the kernel: a stepped wall clock changes none of them, and a pid whose start ticks or
  boot differ is an unrelated process (PIDs are reused) and is never signalled;
- a process is signalled on behalf of a session only if, besides its identity, it carries the
  session's marker (``ZWARM_SESSION_ID=<id>`` in its initial environment, which zwarm sets for
  the supervisor and the agent, and which descendants inherit): a record that names another
  process, even with its true start time, can never get it signalled;
- killing a session's processes kills the agent's process group, every descendant, and every
  process carrying the marker (which also finds an agent whose supervisor died before
  recording it, and children that left the group with ``setsid``);
- the /proc scans for markers and descendants are shared by concurrent callers (``kill
  --all``) but never stale: each caller gets a scan that began after it asked.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from zwarm.model import ProcRef
from zwarm.runtime import boot

MARKER = "ZWARM_SESSION_ID"  # in the agent's environment (and so its descendants')
SUPERVISOR_MARKER = "ZWARM_SUPERVISOR_OF"  # in the supervisor's
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_LINUX = boot.LINUX


def _boot_facts() -> tuple[str, float]:
    return boot.facts()


def boot_id() -> str:
    return _boot_facts()[0]


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return None
    # the command name may contain spaces and parens: fields start after the last ')'
    return data[data.rindex(b")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no such pid."""
    if not 0 < pid < 2**31:
        return None
    if _LINUX:
        fields = _stat_fields(pid)
        return int(fields[19]) if fields else None
    import psutil

    try:
        return int(psutil.Process(pid).create_time() * 100)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def identify(pid: int) -> ProcRef | None:
    ticks = start_ticks(pid)
    return ProcRef(pid, ticks, boot_id()) if ticks is not None else None


def legacy_ticks(create_time: float) -> tuple[int, str] | None:
    """(start ticks, boot id) for a version-1 record's epoch ``create_time`` (this boot)."""
    return boot.legacy_ticks(create_time, _CLK_TCK)


def is_alive(ref: ProcRef | None) -> bool:
    """True only if ``ref.pid`` is running and is the same process (same start, same boot)."""
    if ref is None or ref.boot_id != boot_id():
        return False
    if start_ticks(ref.pid) != ref.start_ticks:
        return False
    return not _is_zombie(ref.pid)


def _is_zombie(pid: int) -> bool:
    if not _LINUX:
        return False
    fields = _stat_fields(pid)
    return fields is None or fields[0] in (b"Z", b"X")


def has_marker(pid: int, sid: str, name: str = MARKER) -> bool:
    """Whether ``pid`` was started with ``<name>=<sid>`` in its environment."""
    if not _LINUX:
        return True  # no /proc: identity (pid + start time) is all there is to check
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    want = f"{name}={sid}".encode()
    return env.startswith(want + b"\0") or (b"\0" + want + b"\0") in env or env == want


def marked(sid: str) -> list[ProcRef]:
    """Every live process of this user that carries ``sid``'s marker, as a scan of /proc
    begun after this call was made finds them (a scan is shared by the calls waiting for it:
    ``kill --all`` stops 200 sessions with a few scans, not 200)."""
    if not _LINUX:
        return []
    return list(_MARKED.fresh().get(sid, ()))


def _scan() -> dict[str, list[ProcRef]]:
    """One pass over /proc: the live processes of this user by the session marker they carry
    (the environment is read first: most processes carry none and cost one read)."""
    me, uid = os.getpid(), os.geteuid()
    want = MARKER.encode() + b"="
    n = len(want)
    found: dict[str, list[ProcRef]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        sids = {e[n:].decode("ascii", "replace") for e in env.split(b"\0") if e[:n] == want}
        ref = identify(pid) if sids else None
        if ref is not None and not _is_zombie(pid):
            for sid in sids:
                found.setdefault(sid, []).append(ref)
    return found


def _tree() -> dict[int, list[ProcRef]]:
    """One pass over /proc: every process's identity, by its parent's pid."""
    kids: dict[int, list[ProcRef]] = {}
    bid = boot_id()
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat_fields(int(name))) is not None:
            kids.setdefault(int(fields[1]), []).append(ProcRef(int(name), int(fields[19]), bid))
    return kids


K = TypeVar("K")


class _SharedScan(Generic[K]):
    """Scans of /proc shared by concurrent callers, never stale: a caller gets the result of
    a scan that began after it asked (one running when it asked may have missed a process
    started just before), and one scan runs at a time."""

    def __init__(self, scan: Callable[[], dict[K, list[ProcRef]]]) -> None:
        self._scan = scan
        self._cond = threading.Condition()
        self._started = self._done = 0
        self._running = False
        self._result: dict[K, list[ProcRef]] = {}

    def fresh(self) -> dict[K, list[ProcRef]]:
        with self._cond:
            target = self._started + 1  # the next scan to begin, after this call
            while self._done < target:
                if self._running:
                    self._cond.wait()
                    continue
                self._started += 1
                self._running = True
                try:
                    self._cond.release()
                    try:
                        result = self._scan()
                    finally:
                        self._cond.acquire()
                    self._result, self._done = result, self._started
                finally:
                    self._running = False
                    self._cond.notify_all()
            return self._result


_MARKED = _SharedScan(_scan)
_TREES = _SharedScan(_tree)


def descendants(ref: ProcRef) -> list[ProcRef]:
    """Identities of every live descendant of ``ref`` (empty if ``ref`` is not alive)."""
    if not is_alive(ref):
        return []
    if _LINUX:  # one shared pass over /proc (psutil makes one per call)
        return _below(ref.pid, _TREES.fresh())
    import psutil

    try:
        kids = psutil.Process(ref.pid).children(recursive=True)
    except psutil.Error:
        return []
    return [r for r in (identify(k.pid) for k in kids) if r is not None]


def _below(pid: int, kids: dict[int, list[ProcRef]]) -> list[ProcRef]:
    """Every process under ``pid`` in ``kids`` (parent pid -> children), each once."""
    out: list[ProcRef] = []
    todo, seen = [pid], {pid}
    while todo:
        for r in kids.get(todo.pop(), ()):
            if r.pid not in seen:
                seen.add(r.pid)
                out.append(r)
                todo.append(r.pid)
    return out


def kill_session(agent: ProcRef | None, sid: str, grace: float = 3.0) -> bool:
    """Stop everything of session ``sid``: the agent's group and tree if ``agent`` is verified
    (identity and marker), and every process carrying the marker. True if anything was."""
    leader = agent if agent is not None and verified(agent, sid) else None
    targets = {r.pid: r for r in marked(sid)}
    if leader is not None:
        targets.update((r.pid, r) for r in (leader, *descendants(leader)))
    targets = {p: r for p, r in targets.items() if p != os.getpid()}
    if not targets:
        return False
    _stop(leader.pid if leader else None, list(targets.values()), grace)
    return True


def verified(ref: ProcRef, sid: str, name: str = MARKER) -> bool:
    """``ref`` is alive, is the process it was, and carries session ``sid``'s marker."""
    return is_alive(ref) and has_marker(ref.pid, sid, name)


def kill_tree(agent: ProcRef, grace: float = 3.0) -> bool:
    """Terminate ``agent``'s process group and every descendant, if ``agent`` is alive and is
    the same process. For the supervisor's own child only (it knows the pid is its child);
    on behalf of a session record use ``kill_session``."""
    if not is_alive(agent):
        return False
    _stop(agent.pid, [agent, *descendants(agent)], grace)
    return True


def _stop(pgid: int | None, targets: list[ProcRef], grace: float) -> None:
    _signal_all(pgid, targets, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(is_alive(t) for t in targets):
        time.sleep(0.02)
    left = [t for t in targets if is_alive(t)]
    if left:
        _signal_all(pgid, left, signal.SIGKILL)


def _signal_all(pgid: int | None, targets: list[ProcRef], sig: int) -> None:
    if pgid is not None and any(t.pid == pgid and is_alive(t) for t in targets):
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


def terminate(ref: ProcRef, sid: str | None = None, name: str = MARKER, grace: float = 3.0) -> bool:
    """Stop one verified process (SIGTERM, then SIGKILL). True if it was alive. With ``sid``,
    only if it carries that session's marker ``name``."""
    if not is_alive(ref) or (sid is not None and not has_marker(ref.pid, sid, name)):
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
