"""The built-in orchestrator's ``bash`` tool: run a verification command, bounded.

Owns running one command for the orchestrator LLM (``zwarm orchestrate`` only; MCP clients have
their own shells). Must stay true:
- the command runs as ``["/bin/bash", "-c", command]`` (never ``shell=True``), in a directory
  confined by ``tools.confine_cwd`` (default: where zwarm runs), with stdin closed, in its own
  session and process group;
- its environment is an allowlist (``ENV_ALLOW`` and ``LC_*``) plus ``ZWARM_BASH_TOKEN``, a
  random marker unique to the call: no API key nor anything else of zwarm's environment
  reaches it;
- a command leaves nothing running. When it exits, at its time limit and on Ctrl-C, everything
  it started is frozen (SIGSTOP, so nothing forks meanwhile) then killed: its process group;
  every process of this user whose environment carries the call's token, which finds children
  that left the group and the session (``setsid``); on Linux every process orphaned while it
  ran (this process is a child subreaper during the call, so orphans become its children,
  token or not); and the descendants of all of these. A process is signalled only while its
  pid and start time match what was found (``system.procs``), never by a bare pid;
- its output (stdout and stderr merged, in order) is drained as it comes and only a head and a
  tail are kept in memory (``OUTPUT_HEAD`` + ``OUTPUT_TAIL`` bytes); the bytes dropped in
  between are counted and said. A command printing GiBs costs neither memory nor disk;
- this is a working-directory and time confinement, not a sandbox: the system prompt asks for
  read-only commands, and nothing here can enforce that. A process started on the command's
  behalf by a daemon that was already running (``at``, a tmux server) is not found.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from zwarm.orchestrator import guard
from zwarm.orchestrator.tools import Result, Tool, Toolbox, ToolError, object_schema
from zwarm.system import procs
from zwarm.system.boot import ProcRef

OUTPUT_HEAD = 6000
OUTPUT_TAIL = 4000
CHUNK = 65536
ENV_ALLOW = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ", "TMPDIR")
TOKEN_VAR = "ZWARM_BASH_TOKEN"
FREEZE_ROUNDS = 50  # scans for new processes before killing what was found (a bound for forks)
FINAL_DRAIN_S = 1.0  # reading what is left in the pipe once everything is killed


def bash_env(environ: Mapping[str, str], token: str) -> dict[str, str]:
    """The command's environment: the allowlisted variables of ``environ`` and the token."""
    env = {k: v for k, v in environ.items() if k in ENV_ALLOW or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    env[TOKEN_VAR] = token
    return env


@dataclass
class Output:
    """A byte stream's head and tail, at most ``head_max + tail_max`` bytes; the middle is
    counted and dropped."""

    head_max: int = OUTPUT_HEAD
    tail_max: int = OUTPUT_TAIL
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            extra = len(self.tail) - self.tail_max
            if extra > 0:
                del self.tail[:extra]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        if not self.dropped:
            return (self.head + self.tail).decode("utf-8", "replace")
        cut = f"\n[... {self.dropped} bytes of output cut ...]\n"
        return self.head.decode("utf-8", "replace") + cut + self.tail.decode("utf-8", "replace")


def run_bash(command: str, cwd: str, timeout: float, environ: Mapping[str, str]) -> Result:
    """Run ``command`` with bash; its exit code, bounded output, and whether it timed out.

    ``environ`` is zwarm's environment, of which only the allowlisted variables are passed.
    """
    started = time.monotonic()
    token = secrets.token_hex(16)
    out = Output()
    proc: subprocess.Popen[bytes] | None = None
    timed_out, left = True, 0
    with _subreaper():
        before = _own_children()
        try:
            proc = _start(command, cwd, bash_env(environ, token))
            timed_out = not _pump(proc, out, started + timeout)
        finally:  # also on Ctrl-C, even one that lands inside Popen (found by its token then)
            left = kill_everything(proc.pid if proc else None, token, before)
            if proc is not None:
                _finish(proc, out)
    assert proc is not None and proc.returncode is not None
    return _result(proc.returncode, timed_out, timeout, started, out, left)


def _start(command: str, cwd: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            ["/bin/bash", "-c", command],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        raise ToolError(f"cannot run bash in {cwd}: {e.strerror or e}") from None


def _finish(proc: subprocess.Popen[bytes], out: Output) -> None:
    """Read what the killed command left in the pipe, close it, reap the command."""
    assert proc.stdout is not None
    _drain(proc.stdout.fileno(), out, FINAL_DRAIN_S)
    proc.stdout.close()
    proc.wait()


def _result(
    code: int, timed_out: bool, timeout: float, started: float, out: Output, left: int
) -> Result:
    result: Result = {
        "exit_code": None if timed_out else code,
        "timed_out": timed_out,
        "duration_s": round(time.monotonic() - started, 2),
        "output": out.text(),
    }
    if out.dropped:
        result["output_cut_bytes"] = out.dropped
    notes = []
    if timed_out:
        notes.append(f"killed after {timeout:g} s")
    if left:
        result["killed_leftovers"] = left
        notes.append(f"{left} process(es) it left running were killed")
    if notes:
        result["note"] = "; ".join(notes)
    return result


# ---------------------------------------------------------------------------- output
def _pump(proc: subprocess.Popen[bytes], out: Output, deadline: float) -> bool:
    """Drain the output until the command exits (True) or ``deadline`` passes (False).

    The command is never reaped here: its pid stays its process group's id until
    ``kill_everything`` has used it.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        reading = True
        while not _exited(proc):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not reading:
                time.sleep(min(left, 0.05))
            elif sel.select(min(left, 0.05)) and not _read(fd, out):
                sel.unregister(fd)
                reading = False
    return True


def _drain(fd: int, out: Output, seconds: float) -> None:
    """Read what is left in the pipe, until end of file or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if sel.select(left) and not _read(fd, out):
                return


def _read(fd: int, out: Output) -> bool:
    try:
        data = os.read(fd, CHUNK)
    except OSError:
        return False
    out.feed(data)
    return bool(data)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the command has exited, without reaping it (Linux ``waitid`` + ``WNOWAIT``)."""
    if hasattr(os, "waitid") and hasattr(os, "WNOWAIT"):
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, proc.pid, flags) is not None
        except ChildProcessError:
            return True
    return proc.poll() is not None  # pragma: no cover - platforms without waitid


# ---------------------------------------------------------------------------- killing
@dataclass(frozen=True)
class _Proc:
    ref: ProcRef
    ppid: int
    pgid: int


def kill_everything(leader: int | None, token: str, before: list[ProcRef]) -> int:
    """Freeze then kill the command's group, the processes carrying ``token``, this process's
    children that are not in ``before`` (its children when the command started: the others
    are orphans it adopted, or the command itself when ``leader`` is unknown) and all their
    descendants. ``leader`` (the command) must not have been reaped yet. Returns how many
    processes other than the command were killed. (A child this process started meanwhile
    from another thread would be taken for an orphan: the loop runs one tool at a time.)"""
    _signal_group(leader, signal.SIGSTOP)
    frozen: dict[int, _Proc] = {}
    for _ in range(FREEZE_ROUNDS):
        new = [p for p in _started_by(leader, token, before) if p.ref.pid not in frozen]
        if not new:
            break
        for p in new:
            _signal(p.ref, signal.SIGSTOP)
            frozen[p.ref.pid] = p
    _signal_group(leader, signal.SIGKILL)
    for p in frozen.values():
        _signal(p.ref, signal.SIGKILL)
    adopted = [p.ref for p in frozen.values() if p.ppid == os.getpid() and p.ref not in before]
    _reap_adopted(adopted, leader)
    return len([pid for pid in frozen if pid != leader])


def _started_by(leader: int | None, token: str, before: list[ProcRef]) -> list[_Proc]:
    """Every live process of this user that the command started, as far as can be told."""
    table = _process_table()
    me = os.getpid()
    found = {
        p.ref.pid: p
        for p in table.values()
        if (leader is not None and p.pgid == leader)
        or (p.ppid == me and p.ref not in before and p.ref.pid != leader)
        or _carries(p.ref.pid, token)
    }
    grew = True
    while grew:  # add descendants of what was found
        grew = False
        for p in table.values():
            if p.ref.pid not in found and p.ppid in found:
                found[p.ref.pid] = p
                grew = True
    found.pop(me, None)
    return list(found.values())


def _process_table() -> dict[int, _Proc]:
    """Live (not zombie) processes of this user, from /proc; empty where there is none."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    uid = os.getuid()
    table = {}
    for name in names:
        if name.isdigit():
            p = _read_proc(int(name), uid)
            if p is not None:
                table[p.ref.pid] = p
    return table


def _read_proc(pid: int, uid: int) -> _Proc | None:
    ref = procs.identify(pid)  # first: what is read next belongs to this process or a later one
    try:
        if ref is None or os.stat(f"/proc/{pid}").st_uid != uid:
            return None
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return _Proc(ref, int(fields[1]), int(fields[2]))


def _carries(pid: int, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    return f"{TOKEN_VAR}={token}".encode() in env.split(b"\0")


def _own_children() -> list[ProcRef]:
    me = os.getpid()
    return [p.ref for p in _process_table().values() if p.ppid == me]


def _signal(ref: ProcRef, sig: int) -> None:
    if procs.is_alive(ref):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(ref.pid, sig)


def _signal_group(pgid: int | None, sig: int) -> None:
    if pgid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _reap_adopted(refs: list[ProcRef], leader: int | None, seconds: float = 2.0) -> None:
    """Collect the exit status of killed orphans this process adopted (else they stay
    zombies as long as it runs). Never the command itself: ``Popen`` reaps it."""
    deadline = time.monotonic() + seconds
    pending = [r.pid for r in refs if r.pid != leader]
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                pending.remove(pid)
        if pending:
            time.sleep(0.01)


@contextlib.contextmanager
def _subreaper() -> Iterator[None]:
    """Make this process a child subreaper for the block (Linux): orphans of the command
    become its children instead of init's, so they can be found without the token."""
    was = guard.prctl_get(guard.PR_GET_CHILD_SUBREAPER)
    if was is None or was or not guard.prctl(guard.PR_SET_CHILD_SUBREAPER, 1):
        yield  # not Linux, or already one (by whoever set it, who then also unsets it)
        return
    try:
        yield
    finally:
        guard.prctl(guard.PR_SET_CHILD_SUBREAPER, 0)


# ---------------------------------------------------------------------------- the tool
def _bash(tb: Toolbox, a: dict[str, Any]) -> Result:
    cwd = tb.confine(a.get("cwd"))
    cap = float(tb.api.setting("orchestrator", "bash_timeout_s")) or 60.0
    timeout = min(float(a.get("timeout_s", cap)), cap)
    return {"cwd": str(cwd), **run_bash(a["command"], str(cwd), timeout, tb.api.env.environ)}


BASH_TOOL = Tool(
    "bash",
    "Run a shell command (bash) to verify the agents' work yourself: run the tests, read "
    "files, git diff/status, grep. Use it for read-only checks; delegate any change to an "
    "agent. Runs in the working directory (or cwd, which must be inside the allowed roots), "
    "with a time limit and a minimal environment (PATH, HOME, locale; no API keys). A "
    "command leaves nothing running: anything it started in the background is killed when "
    "it returns. Long output is shortened to its head and tail.",
    object_schema(
        {
            "command": {"type": "string", "minLength": 1, "description": "The bash command."},
            "cwd": {
                "type": "string",
                "description": "Directory to run in (default: the working directory).",
            },
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Kill it after this many seconds (capped by the configuration).",
            },
        },
        ["command"],
    ),
    _bash,
)
