"""Running a command zwarm does not trust: the checks that decide between agents' work
(best-of attempts, the merge queue) and the orchestrator's bash tool.

Owns ``run_tree`` (one command, bounded: its own session and process group, a time limit, its
output drained as it comes with only a head and a tail kept, and everything it started killed
when it ends: ``kill_everything``), ``holds`` (whether the sandbox holds here: the
preflight, cached a while), ``confine`` (the sandbox policy of such a command, for checks and
the bash tool alike), and the checks: ``check_plan`` (whether checks run in zwarm's sandbox
here, unsandboxed by the user's trusted opt-in, or not at all: ``ChecksRefused``),
``run_checks`` and ``CheckResult``. Must stay true:
- a check's command is the user's (``[checks]``/``--check``, config values that execute, read
  through trust by its caller) and runs as ``["/bin/sh", "-c", command]`` in its directory, a
  worktree an agent wrote (its ``conftest.py`` runs): never unsandboxed unless the trusted
  config says ``[checks] unsandboxed = true``; where the sandbox holds (``[sandbox] mode`` is
  ``bwrap`` and the preflight passes) it runs in it, under a ``Policy`` made here from the
  caller's arguments and the trusted config, never from a file the agent wrote: its directory
  writable, the repository's git metadata read-only, no network, the state dir, zwarm's
  per-user files and the home hidden, nothing else of the machine visible but ``/usr``,
  ``/etc``, the ``PATH`` directories outside the home and ``[sandbox] read_only``;
- a command leaves nothing running. When it exits, at its time limit and on Ctrl-C, everything
  it started is frozen (SIGSTOP, so nothing forks meanwhile) then killed: its process group;
  every process of this user whose environment carries the run's token (``TOKEN_VAR``, random
  per run), which finds children that left the group and the session (``setsid``); with
  ``adopt``, every process orphaned while it ran (this process is a child subreaper during the
  run: only where nothing else of this process starts children meanwhile); and the
  descendants of all of these. A sandboxed command is in its own pid namespace besides: when
  it ends, the kernel ends everything in it. A process is signalled only while its pid and
  start time match what was found (``system.procs``), never by a bare pid;
- its output (stdout and stderr merged, in order) is drained as it comes and only a head and a
  tail are kept in memory (``Output``); the bytes dropped in between are counted. A command
  printing GiBs costs neither memory nor disk.
A process started on the command's behalf by a daemon that was already running (``at``, a tmux
server) is not found; an unsandboxed check can do whatever the user can.
"""

import contextlib
import os
import secrets
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from zwarm.errors import ChecksRefused, UntrustedConfig
from zwarm.system import procs
from zwarm.system.boot import ProcRef

if TYPE_CHECKING:
    from zwarm.config import Config
    from zwarm.sandbox import Policy

__all__ = ["CheckResult", "ChecksRefused", "check_plan", "run_checks", "run_tree"]

CHUNK = 65536
TOKEN_VAR = "ZWARM_RUN_TOKEN"
FREEZE_ROUNDS = 50  # scans for new processes before killing what was found (a bound for forks)
FINAL_DRAIN_S = 1.0  # reading what is left in the pipe once everything is killed
# the variables a command gets when its caller gives no environment (and the bash tool's)
ENV_ALLOW = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ", "TMPDIR")
TAIL_CHARS = 8000  # a check's output kept, from its end (CheckResult.output_tail)
_TAIL_BYTES = 4 * TAIL_CHARS


def allowed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted variables of ``environ`` (``ENV_ALLOW`` and ``LC_*``): no API key nor
    anything else of zwarm's environment."""
    env = {k: v for k, v in environ.items() if k in ENV_ALLOW or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    return env


# ---------------------------------------------------------------------------- checks
class CheckResult(msgspec.Struct, frozen=True):
    """One check as it ran: its command, exit code (None when killed at its time limit or
    when it could not start), time, whether it timed out, the tail of its output (stdout and
    stderr, merged), and whether it ran in zwarm's sandbox."""

    command: str
    exit_code: int | None
    duration_s: float
    timed_out: bool
    output_tail: str
    sandboxed: bool
    output_cut_bytes: int = 0  # output dropped before what output_tail holds

    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def holds(mode: str) -> str:
    """Whether zwarm's sandbox holds here under ``mode`` (``[sandbox] mode``): "" if it does,
    else why not, in words. A pass the preflight remembered for this machine
    (``check.holds_here``, the one cache) is used, else the probes run."""
    from zwarm.sandbox import OFF

    if mode == OFF:
        return f'the sandbox is off ([sandbox] mode = "{OFF}")'
    from zwarm.sandbox import check

    report = check.holds_here()
    if report is None or report.holds:
        return ""
    return f"sandbox {mode} cannot hold on this machine ({check.refusal(report)})"


def check_plan(config: "Config", repo: Path) -> bool:
    """How checks run for ``repo`` here: True in zwarm's sandbox (``[sandbox] mode`` is
    ``bwrap`` and the preflight holds), False unsandboxed by the user's opt-in (the trusted
    ``[checks] unsandboxed = true``); ``ChecksRefused`` when neither, saying how to opt in."""
    why = holds(str(config.get("sandbox", "mode")))
    if not why:
        return True
    where = config.path or "the state dir's config.toml"
    try:
        if config.get("checks", "unsandboxed") is True:
            return False
    except UntrustedConfig as e:
        raise ChecksRefused(
            f"checks run code the agents wrote and {why}; the opt-in to unsandboxed checks is "
            f"not trusted: {e}"
        ) from None
    raise ChecksRefused(
        f"checks run code the agents wrote and {why}: nothing ran; turn the sandbox on "
        f'([sandbox] mode = "bwrap"; see zwarm sandbox check) or opt in to unsandboxed checks '
        f"for {repo} with [checks] unsandboxed = true in {where}, then run zwarm trust"
    )


def run_checks(
    commands: Sequence[str],
    cwd: Path,
    *,
    config: "Config",
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    repo: Path | None = None,
) -> list[CheckResult]:
    """Run each of ``commands`` (``sh -c``) in ``cwd``, one after the other, each killed with
    everything it started after ``timeout_s``: in zwarm's sandbox, or unsandboxed by the user's
    opt-in (``check_plan``: ``ChecksRefused`` before anything runs otherwise). ``env`` is the
    checks' environment (default: the allowlisted variables of zwarm's, ``allowed_env``);
    ``repo`` the repository whose git metadata the sandbox shows read-only (default ``cwd``)."""
    repo = cwd if repo is None else repo
    sandboxed = check_plan(config, repo)
    base = allowed_env(os.environ) if env is None else dict(env)
    policy = None
    if sandboxed:
        hidden = [cwd / ".zwarm", repo / ".zwarm"]
        if config.path is not None:
            hidden.append(Path(config.path).parent)
        policy = confine(
            cwd,
            cwd,
            writable=True,
            repos=[repo, cwd],
            hidden=hidden,
            read_only=[str(p) for p in config.table("sandbox")["read_only"]],
            env=base,
        )
    return [_check(c, cwd, policy, base, timeout_s) for c in commands]


def _check(
    command: str, cwd: Path, policy: "Policy | None", env: dict[str, str], timeout_s: float
) -> CheckResult:
    from zwarm import text

    argv = ["/bin/sh", "-c", command]
    if policy is not None:
        from zwarm.sandbox import bwrap

        argv = bwrap.command(argv, policy, None)
    token = secrets.token_hex(16)
    out = Output(head_max=0, tail_max=_TAIL_BYTES)
    started = time.monotonic()
    try:
        # unsandboxed, orphans are adopted only where no other thread can start children
        adopt = policy is None and threading.active_count() == 1
        ran = run_tree(argv, str(cwd), {**env, TOKEN_VAR: token}, timeout_s, out, token, adopt)
    except OSError as e:
        why = f"cannot run it in {cwd}: {e.strerror or e}"
        return CheckResult(
            command, None, round(time.monotonic() - started, 3), False, why, policy is not None
        )
    tail = text.elide(out.text(), TAIL_CHARS, head=0, sep="\n").removeprefix("\n")
    return CheckResult(
        command,
        ran.code,
        round(ran.duration_s, 3),
        ran.timed_out,
        tail,
        policy is not None,
        out.dropped,
    )


def confine(
    cwd: Path,
    tree: Path,
    *,
    writable: bool,
    repos: Sequence[Path],
    hidden: Sequence[Path],
    read_only: Sequence[str],
    env: Mapping[str, str],
) -> "Policy":
    """The policy of a command zwarm does not trust, run in ``cwd`` (inside ``tree``): ``tree``
    writable (else read-only), the git metadata of ``repos`` read-only, ``read_only`` (the
    trusted ``[sandbox] read_only``, more roots) and the ``PATH`` directories of ``env``
    outside the home readable; nothing of ``hidden`` (the state dir), zwarm's per-user files
    nor the home (a private one) visible; no network. Every path comes from the caller and
    the trusted config, never from a file the command's directory holds."""
    from zwarm import sandbox

    real = os.path.realpath(tree)
    home = os.path.realpath(env.get("HOME") or os.environ.get("HOME") or "/")
    private = [*sandbox.private_dirs(os.environ), *sandbox.private_dirs(env)]
    gone = [os.path.realpath(str(p)) for p in [*private, *hidden]]
    ro: list[str] = [] if writable else [real]
    for r in repos:
        d = sandbox.git_dir(str(r))
        if d is not None and os.path.realpath(d) not in ro:
            ro.append(os.path.realpath(d))
    ro += [str(p) for p in read_only if str(p) not in ro]
    ro += [d for d in _path_dirs(env.get("PATH") or os.defpath, [home, *gone]) if d not in ro]
    return sandbox.Policy(
        cwd=os.path.realpath(cwd),
        tree=real,
        read_only=tuple(ro),
        hidden=tuple(dict.fromkeys(gone)),
        home=home,
    )


def _path_dirs(path: str, private: Sequence[str]) -> list[str]:
    """The directories of ``path`` a check needs read, outside ``/usr``, ``/etc`` and
    ``private`` (the home, the hidden paths): each, and the virtual environment it is the
    ``bin`` of (its ``lib``)."""
    out: list[str] = []
    for d in path.split(os.pathsep):
        if not os.path.isabs(d) or not os.path.isdir(d):
            continue
        real = os.path.realpath(d)
        venv = os.path.dirname(real)
        found = venv if os.path.isfile(os.path.join(venv, "pyvenv.cfg")) else real
        if found in ("/", *out) or _under(found, ("/usr", "/etc", "/bin", "/sbin", *private)):
            continue
        out.append(found)
    return out


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots if r != "/")


# ---------------------------------------------------------------------------- running
@dataclass
class Output:
    """A byte stream's head and tail, at most ``head_max + tail_max`` bytes; the middle is
    counted and dropped."""

    head_max: int = 6000
    tail_max: int = 4000
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
        if not self.head:
            return self.tail.decode("utf-8", "replace")
        cut = f"\n[... {self.dropped} bytes of output cut ...]\n"
        return self.head.decode("utf-8", "replace") + cut + self.tail.decode("utf-8", "replace")


class Ran(NamedTuple):
    """How a command run by ``run_tree`` ended: its exit code (None: killed at its time
    limit), whether it timed out, its time, and how many processes it left running (killed)."""

    code: int | None
    timed_out: bool
    duration_s: float
    left: int


def run_tree(
    argv: list[str],
    cwd: str,
    env: Mapping[str, str],
    timeout: float,
    out: Output,
    token: str,
    adopt: bool,
) -> Ran:
    """Run ``argv`` in ``cwd`` with ``env`` (which must carry ``TOKEN_VAR=token``), stdin
    closed, its output into ``out``; kill it at ``timeout`` seconds, and, whenever it ends,
    everything it started (``kill_everything``; with ``adopt``, also the processes orphaned
    while it ran: only where this process starts no other child meanwhile). ``OSError`` if it
    cannot start."""
    started = time.monotonic()
    proc: subprocess.Popen[bytes] | None = None
    timed_out, left = True, 0
    with _subreaper(adopt):
        before = _own_children() if adopt else None
        try:
            proc = _start(argv, cwd, dict(env))
            timed_out = not _pump(proc, out, started + timeout)
        finally:  # also on Ctrl-C, even one that lands inside Popen (found by its token then)
            left = kill_everything(proc.pid if proc else None, token, before)
            if proc is not None:
                _finish(proc, out)
    assert proc is not None and proc.returncode is not None
    code = None if timed_out else proc.returncode
    return Ran(code, timed_out, time.monotonic() - started, left)


def _start(argv: list[str], cwd: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        close_fds=True,
    )


def _finish(proc: subprocess.Popen[bytes], out: Output) -> None:
    """Read what the killed command left in the pipe, close it, reap the command."""
    assert proc.stdout is not None
    _drain(proc.stdout.fileno(), out, FINAL_DRAIN_S)
    proc.stdout.close()
    proc.wait()


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


def kill_everything(leader: int | None, token: str, before: list[ProcRef] | None) -> int:
    """Freeze then kill the command's group, the processes carrying ``token``, and, unless
    ``before`` is None, this process's children that are not in ``before`` (its children when
    the command started: the others are orphans it adopted, or the command itself when
    ``leader`` is unknown), and all their descendants. ``leader`` (the command) must not have
    been reaped yet. Returns how many processes other than the command were killed."""
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
    if before is not None:
        adopted = [p.ref for p in frozen.values() if p.ppid == os.getpid() and p.ref not in before]
        _reap_adopted(adopted, leader)
    return len([pid for pid in frozen if pid != leader])


def _started_by(leader: int | None, token: str, before: list[ProcRef] | None) -> list[_Proc]:
    """Every live process of this user that the command started, as far as can be told."""
    table = _process_table()
    me = os.getpid()
    found = {
        p.ref.pid: p
        for p in table.values()
        if (leader is not None and p.pgid == leader)
        or (before is not None and p.ppid == me and p.ref not in before and p.ref.pid != leader)
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
def _subreaper(adopt: bool) -> Iterator[None]:
    """With ``adopt``, make this process a child subreaper for the block (Linux): orphans of
    the command become its children instead of init's, so they can be found without the
    token."""
    from zwarm.system.prctl import PR_GET_CHILD_SUBREAPER, PR_SET_CHILD_SUBREAPER, prctl, prctl_get

    was = prctl_get(PR_GET_CHILD_SUBREAPER) if adopt else None
    if was is None or was or not prctl(PR_SET_CHILD_SUBREAPER, 1):
        yield  # not asked, not Linux, or already one (by whoever set it, who also unsets it)
        return
    try:
        yield
    finally:
        prctl(PR_SET_CHILD_SUBREAPER, 0)
