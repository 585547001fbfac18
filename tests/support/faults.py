"""Helpers for the fault suite: process identities, victims, snapshots, meta.json surgery.

Every wait here is on a condition with a generous deadline, never on elapsed time. Processes
started here are registered with the ``strays`` fixture (tests/conftest.py), which kills them
at teardown whatever the test's outcome. A session's dir and meta.json are the ``ZW`` world's
(``zw.session_dir``, ``zw.meta``); ``wait_until`` and ``wait_status`` are tests.support's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from tests.support import wait_until

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


# ----------------------------------------------------------------------------- state dir
@contextlib.contextmanager
def session_lock(zw: Any, sid: str) -> Iterator[None]:
    """Hold the session's flock, exactly as zwarm does, to edit meta.json safely."""
    fd = os.open(zw.session_dir(sid) / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def edit_meta(zw: Any, sid: str, fn: Callable[[dict[str, Any]], None]) -> None:
    with session_lock(zw, sid):
        m = zw.meta(sid)
        fn(m)
        write_meta(zw, sid, m)


def write_meta(zw: Any, sid: str, m: dict[str, Any]) -> None:
    path = zw.session_dir(sid) / "meta.json"
    tmp = path.with_name(".meta.test.tmp")
    tmp.write_text(json.dumps(m))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def spawn(zw: Any, task: str, *args: str, env: dict[str, str] | None = None) -> str:
    res = zw.run("spawn", task, *args, env_extra=env, check=True)
    sid = res.stdout.strip()
    assert UUID.match(sid), res.stdout
    return sid


def agent_ref(zw: Any, sid: str, turn: int = -1) -> tuple[int, float]:
    """Wait until the turn's agent is recorded; its (pid, psutil create_time), checked against
    the recorded start ticks (create_time -1.0 if that process is already gone)."""
    a = wait_until(
        lambda: zw.meta(sid)["turns"][turn].get("agent"), message=f"agent of {sid} recorded"
    )
    return _psutil_ref(a)


def supervisor_ref(zw: Any, sid: str, turn: int = -1) -> tuple[int, float]:
    s = wait_until(
        lambda: zw.meta(sid)["turns"][turn].get("supervisor"),
        message=f"supervisor of {sid} recorded",
    )
    return _psutil_ref(s)


def _psutil_ref(rec: dict[str, Any]) -> tuple[int, float]:
    from zwarm.system import procs

    pid = rec["pid"]
    ref = identity(pid)
    if ref is None or procs.start_ticks(pid) != rec["start_ticks"]:
        return pid, -1.0
    return ref


def turn_lines(zw: Any, sid: str, n: int = 1) -> list[bytes]:
    try:
        return (zw.session_dir(sid) / "turns" / f"turn_{n}.jsonl").read_bytes().splitlines(True)
    except FileNotFoundError:
        return []


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``root``: (mode, bytes or None for dirs). Compares content, not times."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath) / d
            out[str(p.relative_to(root))] = (p.lstat().st_mode, None)
        for f in filenames:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = (p.lstat().st_mode, p.read_bytes())
    return out


def one_error_line(res: Any, *needles: str, code: int = 1) -> str:
    """Assert a clean failure: exit ``code``, exactly one stderr line, no traceback."""
    err = res.stderr.strip()
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    assert len(err.splitlines()) == 1, f"not one line: {res.stderr!r}"
    for n in needles:
        assert n in err, f"{n!r} not in {err!r}"
    return err


# ----------------------------------------------------------------------------- processes
def identity(pid: int) -> tuple[int, float] | None:
    try:
        return pid, psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def alive(ref: tuple[int, float]) -> bool:
    """Same process still running (zombies count as gone)."""
    try:
        p = psutil.Process(ref[0])
        return abs(p.create_time() - ref[1]) < 0.05 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree(pid: int) -> list[tuple[int, float]]:
    """Identities of ``pid``, its descendants, and every member of its process group."""
    refs: dict[int, float] = {}
    try:
        p = psutil.Process(pid)
        refs[pid] = p.create_time()
        for c in p.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                refs[c.pid] = c.create_time()
    except psutil.Error:
        pass
    for q in psutil.process_iter(["pid", "create_time"]):
        with contextlib.suppress(ProcessLookupError, PermissionError, psutil.Error):
            if os.getpgid(q.pid) == pid:
                refs[q.pid] = q.info["create_time"]
    return sorted(refs.items())


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


VICTIM = r"""
import os, signal, sys, time
log = sys.argv[1]
def note(sig, frame):
    with open(log, "a") as f:
        f.write(f"{sig}\n")
for s in signal.valid_signals():
    if s in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
        continue
    try:
        signal.signal(s, note)
    except (OSError, ValueError):
        pass
open(log + ".ready", "w").close()
while True:
    time.sleep(0.5)
"""


class Victim:
    """An unrelated process (its own group leader) that logs every signal it receives."""

    def __init__(self, tmp: Path, strays: list[subprocess.Popen[bytes]]) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.log = tmp / f"victim-{len(strays)}-{time.monotonic_ns()}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", VICTIM, str(self.log)], start_new_session=True, cwd=tmp
        )
        strays.append(self.proc)
        wait_until(lambda: Path(str(self.log) + ".ready").exists(), message="victim ready")
        ref = identity(self.proc.pid)
        assert ref is not None
        self.pid, self.create_time = ref

    def signals(self) -> list[str]:
        try:
            return self.log.read_text().split()
        except FileNotFoundError:
            return []

    def assert_untouched(self) -> None:
        assert self.proc.poll() is None, f"victim {self.pid} died (rc {self.proc.returncode})"
        assert alive((self.pid, self.create_time))
        assert self.signals() == [], f"victim {self.pid} was signalled: {self.signals()}"


def kill_group_and_tree(pid: int) -> None:
    for p, _ in tree(pid):
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
