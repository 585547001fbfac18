"""A sandboxed turn's resource limits: ``[sandbox] memory``, ``cpus``, ``pids``.

Owns ``Limits`` (what the trusted config asks of one agent's turns: ``zwarm.sandbox.
limits_for``), how each limit is applied on this machine (``methods``: a cgroup v2 child of
the supervisor's own cgroup where its controller is delegated there, else a cgroup v1 child in
the controller's hierarchy, else an rlimit: ``RLIMIT_AS`` for memory, ``RLIMIT_NPROC`` for
pids, nothing for cpus), the turn's cgroup (``Group``: ``make``, ``release``) and ``sweep``,
which removes the cgroups a killed supervisor left. Must stay true:
- a limit is applied as promised or said not to be: ``Applied.line`` names each limit and how
  it holds, or why it does not, and is recorded on the turn (``show``); nothing is dropped
  silently, and a turn whose cgroup cannot be joined does not run (its outer shell exits);
- only the supervisor, outside the sandbox, makes, writes and removes the cgroup (the sandbox
  has no ``/sys``); the agent joins it before it runs (``shell``: the outer shell of
  ``bwrap.command`` writes its own pid), so everything it starts is in it;
- a turn's cgroup is named ``zwarm-<supervisor pid>-<its start ticks>-<its pid namespace>-
  <random>``; its supervisor removes it when the turn ends (killing what is left in it
  first), and ``sweep`` removes only directories of that name, owned by this uid, made in
  this pid namespace (a pid means nothing in another: a container sharing the hierarchy),
  whose supervisor is gone; one named as before the namespace was named is only removed if
  it is empty, never killed in;
- the method is chosen from the machine only; the one override, ``ZWARM_SANDBOX_LIMITS=rlimit``
  (forcing the rlimit fallback, for tests), is read from the supervisor's own environment,
  never from a file, is not passed on to the agent (``engine.finishing``), and is said like
  any method (the line names rlimit).
"""

import contextlib
import os
import re
import shlex
import signal
import stat
import time
from collections.abc import Iterator
from typing import NamedTuple

import msgspec

FORCE_VAR = "ZWARM_SANDBOX_LIMITS"  # "rlimit": the fallback, whatever the machine has (tests)
PREFIX = "zwarm-"
CONTROLLERS = {"memory": "memory", "cpus": "cpu", "pids": "pids"}  # limit -> controller
CPU_PERIOD_US = 100_000
RELEASE_WAIT_S = 5.0  # longest a turn's end waits for its cgroup to empty
_NAME = re.compile(r"^zwarm-([0-9]{1,10})-([0-9]{1,20})-(?:([0-9]{1,20})-)?[0-9a-f]{8}\Z")


class Limits(NamedTuple):
    """One turn's limits: ``memory`` bytes, ``cpus`` (a fraction of CPUs), ``pids`` (tasks);
    0 is none."""

    memory: int = 0
    cpus: float = 0.0
    pids: int = 0

    def wanted(self) -> dict[str, float]:
        return {k: v for k, v in self._asdict().items() if v}


class Group(msgspec.Struct, frozen=True):
    """A turn's cgroup as its supervisor made it: one directory per hierarchy (v1: one per
    controller; v2: one), and the file that counts its out-of-memory kills ("" if none)."""

    dirs: tuple[str, ...]
    oom_file: str = ""


class Applied(NamedTuple):
    """How a turn's limits are applied: its cgroup (None if none), the rlimits its outer
    shell sets (``(name, value)``: ``as``/``nproc``), and the line that says it all."""

    group: Group | None
    rlimits: tuple[tuple[str, int], ...]
    line: str


def shown(key: str, value: float) -> str:
    """A limit as config.toml writes it: ``memory 2G``, ``cpus 1.5``, ``pids 256``."""
    if key == "memory":
        for unit, size in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
            if value >= size and value % size == 0:
                return f"memory {int(value) // size}{unit}"
        return f"memory {int(value)}"
    return f"{key} {value:g}"


# ------------------------------------------------------------------ what the machine offers
def methods(environ: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """For each limit (memory, cpus, pids): (how it is applied here, its directory or why it
    cannot be). How: ``cgroup v2``, ``cgroup v1``, ``rlimit``, or "" (not available)."""
    env = os.environ if environ is None else environ
    forced = env.get(FORCE_VAR) == "rlimit"
    v2, v1 = ({}, {}) if forced else (_v2_dirs(), _v1_dirs())
    out: dict[str, tuple[str, str]] = {}
    for key, ctrl in CONTROLLERS.items():
        if ctrl in v2:
            out[key] = ("cgroup v2", v2[ctrl])
        elif ctrl in v1:
            out[key] = ("cgroup v1", v1[ctrl])
        elif key == "memory":
            out[key] = ("rlimit", "RLIMIT_AS")
        elif key == "pids" and os.geteuid() != 0:
            out[key] = ("rlimit", "RLIMIT_NPROC")
        else:
            why = "forced to rlimits" if forced else f"no writable {ctrl} cgroup"
            if key == "pids":
                why += ", and RLIMIT_NPROC does not bind root"
            out[key] = ("", why)
    return out


def summary(how: dict[str, tuple[str, str]] | None = None) -> str:
    """What ``zwarm sandbox check`` says of the limits: how each would be applied here."""
    parts = []
    for key, (how_, where) in (methods() if how is None else how).items():
        parts.append(f"{key} via {how_}" if how_ else f"{key} not available ({where})")
    return ", ".join(parts)


def _v1_dirs() -> dict[str, str]:
    """controller -> this process's own cgroup directory in the v1 hierarchy that has it,
    where a child can be made (writable by us)."""
    mounts: dict[str, tuple[str, str]] = {}
    for root, point, fstype, opts in _mountinfo():
        if fstype == "cgroup":
            for opt in opts.split(","):
                if opt in CONTROLLERS.values():
                    mounts[opt] = (point, root)
    out: dict[str, str] = {}
    for ids, ctrls, path in _own_cgroups():
        if ids == "0":
            continue
        for ctrl in ctrls.split(","):
            if ctrl in mounts:
                d = _inside(*mounts[ctrl], path)
                if d is not None and os.access(d, os.W_OK):
                    out[ctrl] = d
    return out


def _v2_dirs() -> dict[str, str]:
    """controller -> this process's own cgroup v2 directory, for each controller it enables
    for its children (``cgroup.subtree_control``) where a child can be made."""
    point = next((p for r, p, fs, _ in _mountinfo() if fs == "cgroup2" and r == "/"), None)
    path = next((p for ids, _, p in _own_cgroups() if ids == "0"), None)
    if point is None or path is None:
        return {}
    d = _inside(point, "/", path)
    if d is None or not os.access(d, os.W_OK):
        return {}
    try:
        with open(os.path.join(d, "cgroup.subtree_control")) as f:
            enabled = f.read().split()
    except OSError:
        return {}
    return {c: d for c in CONTROLLERS.values() if c in enabled}


def _mountinfo() -> Iterator[tuple[str, str, str, str]]:
    """(root, mount point, fs type, super options) of each mount of this process."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        left, _, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if len(a) >= 5 and len(b) >= 3:
            yield _unescape(a[3]), _unescape(a[4]), b[0], b[2]


def _own_cgroups() -> list[tuple[str, str, str]]:
    """(hierarchy id, controllers, path) of each line of ``/proc/self/cgroup``."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
    return out


def _inside(point: str, root: str, path: str) -> str | None:
    """The directory of cgroup ``path`` in a hierarchy mounted at ``point`` from ``root``."""
    root = root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    rel = path[len(root) :].lstrip("/")
    d = os.path.join(point, rel) if rel else point
    return d if os.path.isdir(d) and not os.path.islink(d) else None


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


# ------------------------------------------------------------------ a turn's cgroup
def make(limits: Limits, environ: dict[str, str] | None = None) -> Applied:
    """Apply ``limits`` for a turn about to start (by its supervisor, outside the sandbox):
    its cgroup made and written where the machine allows, the rlimits otherwise, and the line
    saying how each holds. ``OSError`` if a cgroup that should be made cannot be (the turn
    then does not start; what was made is removed)."""
    wanted = limits.wanted()
    if not wanted:
        return Applied(None, (), "")
    how = methods(environ)
    sweep(how)
    parts: list[str] = []
    rlimits: list[tuple[str, int]] = []
    files: dict[str, list[tuple[str, str]]] = {}  # cgroup parent dir -> (file, value)
    oom = ("", "")  # (the parent dir of the memory cgroup, the file counting its OOM kills)
    for key, value in wanted.items():
        method, where = how[key]
        text = shown(key, value)
        if method.startswith("cgroup"):
            parts.append(f"{text} via {method}")
            files.setdefault(where, []).extend(_files(key, value, method))
            if key == "memory":
                oom = (where, "memory.events" if method == "cgroup v2" else "memory.oom_control")
        elif method == "rlimit":
            parts.append(f"{text} via rlimit ({where})")
            rlimits.append(("as" if key == "memory" else "nproc", int(value)))
        else:
            parts.append(f"{text} NOT applied ({where})")
    name = f"{PREFIX}{os.getpid()}-{_ticks()}-{_pid_ns()}-{os.urandom(4).hex()}"
    made: list[str] = []
    oom_file = ""
    try:
        for parent, writes in files.items():
            d = os.path.join(parent, name)
            os.mkdir(d, 0o755)
            made.append(d)
            for fname, text in writes:
                _write(os.path.join(d, fname), text)
            if parent == oom[0]:
                oom_file = os.path.join(d, oom[1])
                if oom[1] == "memory.oom_control":  # v1: swap counts too, where it is kept
                    with contextlib.suppress(OSError):
                        _write(os.path.join(d, "memory.memsw.limit_in_bytes"), str(limits.memory))
    except OSError:
        for d in made:
            with contextlib.suppress(OSError):
                os.rmdir(d)
        raise
    group = Group(tuple(made), oom_file) if made else None
    return Applied(group, tuple(rlimits), ", ".join(parts))


def _files(key: str, value: float, method: str) -> list[tuple[str, str]]:
    """The cgroup files (and values) that set limit ``key`` under ``method``."""
    v2 = method == "cgroup v2"
    if key == "memory":
        return (
            [("memory.max", str(int(value)))]
            if v2
            else [("memory.limit_in_bytes", str(int(value)))]
        )
    if key == "cpus":
        quota = max(1000, int(value * CPU_PERIOD_US))
        if v2:
            return [("cpu.max", f"{quota} {CPU_PERIOD_US}")]
        return [("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", str(quota))]
    return [("pids.max", str(int(value)))]


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def shell(applied: Applied) -> list[str]:
    """The outer shell's first lines (``bwrap.command``'s ``prefix``): join the turn's cgroup
    (or exit 125, so the turn never runs outside it) and set its rlimits."""
    lines = []
    for d in applied.group.dirs if applied.group is not None else ():
        procs = shlex.quote(os.path.join(d, "cgroup.procs"))
        lines.append(
            f"{{ echo $$ > {procs}; }} 2>/dev/null || "
            "{ echo 'zwarm: could not join the turn cgroup' >&2; exit 125; }"
        )
    for name, value in applied.rlimits:
        # RLIMIT_AS in KiB: -v in every sh; RLIMIT_NPROC: bash's -u, dash's -p
        sets = f"ulimit -v {value // 1024}" if name == "as" else f"ulimit -u {value}"
        sets += "" if name == "as" else f" 2>/dev/null || ulimit -p {value}"
        lines.append(
            f"{{ {sets}; }} 2>/dev/null || "
            f"{{ echo 'zwarm: could not set RLIMIT_{name.upper()}' >&2; exit 125; }}"
        )
    return lines


def release(group: Group | None) -> int:
    """End a turn's cgroup (its supervisor, once the agent is gone): kill what is still in
    it, remove it. The number of processes the kernel killed for want of memory in it."""
    if group is None:
        return 0
    ooms = oom_kills(group)
    for d in group.dirs:
        _remove(d)
    return ooms


def oom_kills(group: Group) -> int:
    """How many processes the kernel killed in ``group`` for its memory limit."""
    if not group.oom_file:
        return 0
    try:
        with open(group.oom_file) as f:
            text = f.read()
    except OSError:
        return 0
    m = re.search(r"^oom_kill ([0-9]+)$", text, re.MULTILINE)
    return int(m.group(1)) if m else 0


def _remove(d: str, kill: bool = True) -> bool:
    """Kill every process in cgroup ``d`` and remove it (waiting, bounded, for it to empty;
    without ``kill``: only if it is empty). Whether it is gone."""
    deadline = time.monotonic() + RELEASE_WAIT_S
    while True:
        pids = _procs(d)
        if pids is None:
            return True  # gone already
        if pids and not kill:
            return False
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.rmdir(d)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
        time.sleep(0.005)


def _procs(d: str) -> list[int] | None:
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return []


def sweep(how: dict[str, tuple[str, str]] | None = None) -> list[str]:
    """Remove the turn cgroups whose supervisor is gone (SIGKILLed before its turn ended):
    under this process's own cgroup of each hierarchy, only directories named as ``make``
    names them, owned by this uid, made in this pid namespace, whose supervisor (pid and
    start ticks) no longer runs (one whose name has no namespace: only if it is empty).
    The directories removed."""
    from zwarm.system import procs
    from zwarm.system.boot import ProcRef

    how = methods() if how is None else how
    parents = {where for method, where in how.values() if method.startswith("cgroup")}
    uid, boot, ns = os.geteuid(), procs.boot_id(), str(_pid_ns())
    gone = []
    for parent in parents:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            m = _NAME.match(name)
            d = os.path.join(parent, name)
            if m is None:
                continue
            try:
                st = os.lstat(d)
            except OSError:
                continue
            if st.st_uid != uid or not stat.S_ISDIR(st.st_mode):
                continue
            if m.group(3) is not None and m.group(3) != ns:
                continue  # another pid namespace's: its pid names another process here
            ref = ProcRef(int(m.group(1)), int(m.group(2)), boot)
            if not procs.is_alive(ref) and _remove(d, kill=m.group(3) is not None):
                gone.append(d)
    return gone


def _pid_ns() -> int:
    from zwarm.system import procs

    return procs.pid_namespace()


def _ticks() -> int:
    from zwarm.system import procs

    return procs.start_ticks(os.getpid()) or 0
