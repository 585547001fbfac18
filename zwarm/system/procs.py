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
- stopping is signal first, wait once: every SIGTERM of a stop (of all the sessions of
  ``kill_sessions``) is sent before waiting for any exit, and the exits are waited for
  together, as pidfds in one poll where the kernel has them (a signal through a pidfd
  reaches that very process, never a successor with its pid), else by identity once per
  round; what outlives the grace gets SIGKILL;
- the /proc scans for markers and descendants are shared by concurrent callers, one of each
  per stop however many sessions it stops, but never stale: each caller gets a scan that
  began after it asked. They read with os-level calls, and a process's environment costs one
  read (its uid and state are looked up only when it carries a marker).
"""

from __future__ import annotations

import _thread
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Generic, Self, TypeVar

from zwarm.system import boot
from zwarm.system.boot import ProcRef

if TYPE_CHECKING:
    import threading

MARKER = "ZWARM_SESSION_ID"  # in the agent's environment (and so its descendants')
SUPERVISOR_MARKER = "ZWARM_SUPERVISOR_OF"  # in the supervisor's
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_LINUX = boot.LINUX
# signal, threading and select are imported where used: a command that only reads (trajectory,
# show, ls) imports this module through the engine and never signals nor waits (~2 ms)
_PIDFD = hasattr(os, "pidfd_open")  # Linux 5.3; implies signal.pidfd_send_signal (5.1)
POLL_S = 0.02  # a round, for processes waited for without a pidfd
KILLED_WAIT_S = 1.0  # after SIGKILL: how long a stop waits for the processes to be gone


def _boot_facts() -> tuple[str, float]:
    return boot.facts()


def boot_id() -> str:
    return _boot_facts()[0]


def pid_namespace() -> int:
    """This process's pid namespace (the inode of ``/proc/self/ns/pid``; 0 if unknown): a pid
    means a process only in the namespace it was read in."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _read(path: str) -> bytes | None:
    """A whole /proc file in os-level calls (no buffered file object), None if unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 65536)
        if len(data) == 65536:  # a large environment
            data += b"".join(iter(lambda: os.read(fd, 65536), b""))
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat_fields(pid: int) -> list[bytes] | None:
    data = _read(f"/proc/{pid}/stat")
    if not data or b")" not in data:
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
    if ref is None or ref.boot_id != boot_id() or not 0 < ref.pid < 2**31:
        return False
    if not _LINUX:
        return start_ticks(ref.pid) == ref.start_ticks
    fields = _stat_fields(ref.pid)  # one read: start ticks and state
    return fields is not None and int(fields[19]) == ref.start_ticks and not _dead(fields)


def _dead(fields: list[bytes]) -> bool:
    return fields[0] in (b"Z", b"X")


def has_marker(pid: int, sid: str, name: str = MARKER) -> bool:
    """Whether ``pid`` was started with ``<name>=<sid>`` in its environment."""
    if not _LINUX:
        return True  # no /proc: identity (pid + start time) is all there is to check
    env = _read(f"/proc/{pid}/environ")
    if env is None:
        return False
    want = f"{name}={sid}".encode()
    return env.startswith(want + b"\0") or (b"\0" + want + b"\0") in env or env == want


def marked(sid: str) -> list[ProcRef]:
    """Every live process of this user that carries ``sid``'s marker, as a scan of /proc
    begun after this call was made finds them (a scan is shared by the calls waiting for it:
    concurrent kills make a few scans, not one each)."""
    if not _LINUX:
        return []
    return list(_MARKED.fresh().get(sid, ()))


def marked_ids() -> set[str]:
    """The session ids whose marker some live process of this user carries (one scan, shared
    as ``marked``'s)."""
    return set(_MARKED.fresh()) if _LINUX else set()


def _scan() -> dict[str, list[ProcRef]]:
    """One pass over /proc: the live processes of this user by the session marker they carry.
    Most processes carry none and cost one read of their environment; only a marked one is
    asked its owner and state."""
    me, uid = os.getpid(), os.geteuid()
    found: dict[str, list[ProcRef]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        env = _read(f"/proc/{name}/environ")
        if not env or _WANT not in env:
            continue
        sids = _markers(env)
        ref = _own_live(int(name), uid) if sids else None
        if ref is not None:
            for sid in sids:
                found.setdefault(sid, []).append(ref)
    return found


_WANT = MARKER.encode() + b"="


def _markers(env: bytes) -> set[str]:
    n = len(_WANT)
    return {e[n:].decode("ascii", "replace") for e in env.split(b"\0") if e[:n] == _WANT}


def _own_live(pid: int, uid: int) -> ProcRef | None:
    """``pid``'s identity if it is a live (not zombie) process of user ``uid``."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return None
    except OSError:
        return None
    fields = _stat_fields(pid)
    if fields is None or _dead(fields):
        return None
    return ProcRef(pid, int(fields[19]), boot_id())


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
        self._making = _thread.allocate_lock()  # guards making the condition (see _cond)
        self._condition: threading.Condition | None = None
        self._started = self._done = 0
        self._running = False
        self._result: dict[K, list[ProcRef]] = {}

    def _cond(self) -> threading.Condition:
        """The one condition of every caller, made when first asked for: a module-level scan
        made at import would load threading into every reading command (``_thread`` is built
        in). Threads that ask together get the same one."""
        with self._making:
            if self._condition is None:
                import threading

                self._condition = threading.Condition()
            return self._condition

    def fresh(self) -> dict[K, list[ProcRef]]:
        cond = self._cond()
        with cond:
            target = self._started + 1  # the next scan to begin, after this call
            while self._done < target:
                if self._running:
                    cond.wait()
                    continue
                self._started += 1
                self._running = True
                try:
                    cond.release()
                    try:
                        result = self._scan()
                    finally:
                        cond.acquire()
                    self._result, self._done = result, self._started
                finally:
                    self._running = False
                    cond.notify_all()
            return self._result


_MARKED = _SharedScan(_scan)
_TREES = _SharedScan(_tree)


def descendants(ref: ProcRef) -> list[ProcRef]:
    """Identities of every live descendant of ``ref`` (empty if ``ref`` is not alive)."""
    if not is_alive(ref):
        return []
    return _descendants(ref, _TREES.fresh() if _LINUX else None)


def _descendants(ref: ProcRef, kids: dict[int, list[ProcRef]] | None) -> list[ProcRef]:
    """``ref``'s descendants from a pass over /proc (``kids``), else from psutil."""
    if kids is not None:
        return _below(ref.pid, kids)
    import psutil

    try:
        found = psutil.Process(ref.pid).children(recursive=True)
    except psutil.Error:
        return []
    return [r for r in (identify(k.pid) for k in found) if r is not None]


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


PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphans below us are re-parented to us


def become_subreaper() -> bool:
    """Have the orphans of this process's descendants re-parented to it instead of init
    (Linux), so what an agent left (setsid, a double fork) stays below its keeper."""
    if not _LINUX:
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def kill_session(agent: ProcRef | None, sid: str, grace: float = 3.0) -> bool:
    """Stop everything of session ``sid``: the agent's group and tree if ``agent`` is verified
    (identity and marker), and every process carrying the marker. True if anything was."""
    return bool(kill_sessions([(agent, sid)], grace))


def kill_sessions(items: Sequence[tuple[ProcRef | None, str]], grace: float = 3.0) -> list[str]:
    """``kill_session`` for many sessions at once (``kill --all``): one marker scan and at
    most one tree pass for all of them, every SIGTERM sent before any exit is waited for,
    one wait for all (SIGKILL for what outlives ``grace``). The ids that had anything."""
    marks = _MARKED.fresh() if _LINUX and items else {}
    leaders: dict[str, list[ProcRef]] = {}
    for a, sid in items:
        if a is not None and _found(a, sid, marks):
            leaders.setdefault(sid, []).append(a)
    kids = _TREES.fresh() if _LINUX and leaders else None
    targets: dict[int, ProcRef] = {}
    hit: list[str] = []
    for sid in dict.fromkeys(sid for _, sid in items):
        mine = [*marks.get(sid, ())]
        for leader in leaders.get(sid, ()):
            mine += [leader, *_descendants(leader, kids)]
        mine = [r for r in mine if r.pid != os.getpid()]
        if mine:
            hit.append(sid)
            targets.update((r.pid, r) for r in mine)
    if targets:
        _stop([a for group in leaders.values() for a in group], list(targets.values()), grace)
    return hit


def _found(agent: ProcRef, sid: str, marks: dict[str, list[ProcRef]]) -> bool:
    """``agent`` verified: found carrying ``sid``'s marker by the scan (live, same identity)."""
    return agent in marks.get(sid, ()) if _LINUX else verified(agent, sid)


def stop_marked(refs: list[ProcRef], sid: str, grace: float = 3.0) -> bool:
    """Stop those of ``refs`` that are alive and carry session ``sid``'s marker (a caller's
    own descendants, found without a scan of /proc). True if any was."""
    targets = [r for r in refs if r.pid != os.getpid() and verified(r, sid)]
    if targets:
        _stop([], targets, grace)
    return bool(targets)


def verified(ref: ProcRef, sid: str, name: str = MARKER) -> bool:
    """``ref`` is alive, is the process it was, and carries session ``sid``'s marker."""
    return is_alive(ref) and has_marker(ref.pid, sid, name)


def terminate_all(
    items: Sequence[tuple[ProcRef, str | None]], name: str = MARKER, grace: float = 3.0
) -> list[ProcRef]:
    """Stop verified processes (SIGTERM, then SIGKILL), signalled together and waited for
    together; those that were alive (and carried session ``sid``'s marker ``name``, where a
    session id is given)."""
    refs = [r for r, sid in items if is_alive(r) and (sid is None or has_marker(r.pid, sid, name))]
    if refs:
        _stop([], refs, grace)
    return refs


def wait_all_gone(refs: Sequence[ProcRef], timeout: float) -> list[ProcRef]:
    """Wait until none of ``refs`` is alive, or ``timeout``: those still alive then."""
    with _Exits(refs) as exits:
        return exits.wait(timeout)


def _stop(leaders: Sequence[ProcRef], targets: Sequence[ProcRef], grace: float) -> None:
    """SIGTERM every target and each live leader's group, wait for all at once (up to
    ``grace``), then SIGKILL what is left and wait (briefly) for it to go."""
    import signal

    with _Exits(targets) as exits:
        exits.send(signal.SIGTERM, leaders)
        if exits.wait(grace):
            exits.send(signal.SIGKILL, leaders)
            exits.wait(KILLED_WAIT_S)


class _Exits:
    """Live processes to signal and wait for, together. Each is held as a pidfd where the
    kernel has them (opened, then its identity checked: the pidfd is that process), so a
    signal reaches that very process and its exit wakes one poll for all; the others (no
    pidfds, or none left) are checked by identity once per round."""

    def __init__(self, refs: Iterable[ProcRef]) -> None:
        self._live: dict[int, tuple[ProcRef, int | None]] = {}
        for r in refs:
            if r.pid in self._live:
                continue
            fd = _pidfd(r)
            if is_alive(r):
                self._live[r.pid] = (r, fd)
            elif fd is not None:
                os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self._drop(list(self._live))

    def send(self, sig: int, leaders: Sequence[ProcRef] = ()) -> None:
        """``sig`` to each live leader's process group, then to each process still held."""
        for g in leaders:
            if g.pid in self._live and is_alive(g):  # its group id is still its own
                try:
                    os.killpg(g.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        for ref, fd in self._live.values():
            _send(ref, fd, sig)

    def wait(self, timeout: float) -> list[ProcRef]:
        """Wait until every held process has exited, or ``timeout``: those still running."""
        import select

        deadline = time.monotonic() + timeout
        poller = select.poll()
        by_fd = {fd: pid for pid, (_, fd) in self._live.items() if fd is not None}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        while True:
            self._drop([p for p, (r, fd) in self._live.items() if fd is None and not is_alive(r)])
            left = deadline - time.monotonic()
            if not self._live or left <= 0:
                return [r for r, _ in self._live.values()]
            if len(by_fd) < len(self._live):
                left = min(left, POLL_S)
            ready = poller.poll(max(1, round(left * 1000)))
            for fd, _ in ready:
                poller.unregister(fd)
            self._drop([by_fd.pop(fd) for fd, _ in ready])

    def _drop(self, pids: list[int]) -> None:
        for pid in pids:
            _, fd = self._live.pop(pid)
            if fd is not None:
                os.close(fd)


def _pidfd(ref: ProcRef) -> int | None:
    """A pidfd for ``ref.pid`` (to be checked against ``ref``), None where there is none: no
    pidfds here, the process gone, or no descriptor left (it is then waited for by polls)."""
    if not _PIDFD:
        return None
    try:
        return os.pidfd_open(ref.pid)
    except OSError:
        return None


def _send(ref: ProcRef, fd: int | None, sig: int) -> None:
    import signal

    try:
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        elif is_alive(ref):
            os.kill(ref.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
