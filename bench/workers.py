"""Subprocess workers for ``bench/run.py`` (each prints one JSON object on stdout).

    python bench/workers.py fig6 MODE N EVENTS WORKDIR     MODE = alone | zwarm
    python bench/workers.py spawner STATE_DIR N WORKDIR    (used by fig6 zwarm)
    python bench/workers.py followup STATE_DIR SID REPS

They run in their own processes so that the bench's own interpreter state (and, for fig6, the
child-subreaper setting) never leaks into the other figures.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
STREAM_AGENT = HERE / "agents" / "stream_agent.py"
PR_SET_CHILD_SUBREAPER = 36
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- fig 6


def _verify(path: Path, n: int) -> str | None:
    """None if ``path`` holds exactly the n lines the stream agent writes, in order."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the with below; open errors reported
    except OSError as e:
        return f"{path.name}: {e}"
    with f:
        i = -1
        for i, line in enumerate(f):
            if not line.endswith(b"\n"):
                return f"{path}: line {i} is cut"
            if i == 0:
                ok = line.startswith(b'{"type":"thread.started"')
            elif i == n - 1:
                ok = line.startswith(b'{"type":"turn.completed"')
            else:
                ok = (b'"id":"item_%d"' % i) in line[:60]
            if not ok:
                return f"{path}: line {i} out of sequence: {line[:80]!r}"
    if i + 1 != n:
        return f"{path}: {i + 1} lines, expected {n}"
    return None


def _write_config(state: Path, events: int) -> None:
    state.mkdir(parents=True, exist_ok=True)
    (state / "config.toml").write_text(
        "[codex]\n"
        f"command = [{json.dumps(PY)}, {json.dumps(str(STREAM_AGENT))}]\n"
        "[codex.env]\n"
        f'BENCH_EVENTS = "{events}"\n'
    )
    from zwarm.trust import trust_config

    trust_config(state / "config.toml")  # the bench's own agent command: trusted as written


def fig6_alone(n: int, events: int, work: Path) -> dict:
    """The agents alone: n stream agents started directly, output to files."""
    out_dir = work / "alone"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    prompt = out_dir / "prompt"
    prompt.write_bytes(b"stream as fast as you can\n")
    env = dict(os.environ, BENCH_EVENTS=str(events))
    import subprocess

    t0 = time.perf_counter()
    procs = []
    for k in range(n):
        with open(prompt, "rb") as stdin:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            fd = os.open(out_dir / f"agent_{k}.jsonl", flags, 0o600)
            try:
                procs.append(
                    subprocess.Popen(
                        [PY, str(STREAM_AGENT)],
                        stdin=stdin,
                        stdout=fd,
                        stderr=subprocess.DEVNULL,
                        env=env,
                        start_new_session=True,
                        close_fds=True,
                    )
                )
            finally:
                os.close(fd)
    cpu = 0.0
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        cpu += ru.ru_utime + ru.ru_stime
    wall = time.perf_counter() - t0
    problems = [v for k in range(n) if (v := _verify(out_dir / f"agent_{k}.jsonl", events))]
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"wall_s": wall, "agent_cpu_s": cpu, "problems": problems}


def proc_status_kb(pid: int, key: bytes) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _schedstat_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def proc_stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name: [0] the state (``Z`` for a
    zombie), [1] the ppid, [11]/[12] utime/stime, [13]/[14] cutime/cstime (clock ticks)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2 :].split()
    except (OSError, ValueError):
        return None


def smaps_kb(pid: int) -> tuple[int, int] | None:
    """(private, Pss) of a live process, kB, from ``/proc/PID/smaps_rollup``: private is
    Private_Clean + Private_Dirty (its USS: what it adds to the machine, pages it shares
    copy-on-write with a fork server not counted); None for a zombie or a gone process."""
    private = pss = 0
    seen = False
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith((b"Private_Clean:", b"Private_Dirty:")):
                    private += int(line.split()[1])
                    seen = True
                elif line.startswith(b"Pss:"):
                    pss = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return (private, pss) if seen else None


class Mem:
    """Peaks of one process's memory, sampled while it lives: VmHWM, private (USS), Pss."""

    __slots__ = ("hwm", "private", "pss", "samples")

    def __init__(self) -> None:
        self.hwm = self.private = self.pss = self.samples = 0

    def sample(self, pid: int) -> None:
        hwm = proc_status_kb(pid, b"VmHWM:")
        sm = smaps_kb(pid)
        if hwm is None or sm is None:
            return  # exited (a zombie has no memory to report) or gone
        self.hwm, self.samples = max(self.hwm, hwm), self.samples + 1
        self.private, self.pss = max(self.private, sm[0]), max(self.pss, sm[1])


def zombie_cpu(pid: int) -> tuple[float, float] | None:
    """(own, children's) CPU seconds of ``pid`` if it is a zombie, else None: own exactly from
    ``/proc/PID/schedstat``, its waited-for children's (its agent) from cutime + cstime."""
    f = proc_stat(pid)
    if f is None or f[0] != b"Z":
        return None
    own = _schedstat_s(pid)
    if own is None:
        return None
    return own, (int(f[13]) + int(f[14])) / CLK_TCK


def forkservers(state: Path) -> list[int]:
    """Pids of the fork servers of ``state`` (``python -I -m zwarm.runtime.forkserver
    [--detach] STATE NAME``) running now (its forked supervisors show as supervisors)."""
    want = str(state).encode()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if b"zwarm.runtime.forkserver" in args and want in args:
                out.append(int(name))
    return out


def _stat_self_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


def fig6_zwarm(n: int, events: int, work: Path) -> dict:
    """n sessions spawned through zwarm's API; supervisors measured from /proc as they exit.

    This process becomes a child subreaper. The first supervisor of the state dir is a new
    interpreter (``python -I -m zwarm.runtime.supervisor``), as is any started before the
    state dir's fork server answers; the spawner exits without reaping them, so they are
    re-parented to us: each is seen as a zombie (``waitid(WNOWAIT)``), its own CPU read
    exactly from ``/proc/PID/schedstat`` before it is reaped, and ``wait4`` gives its CPU
    plus its waited-for agent's; the difference is the agent's CPU. The others are forked by
    the fork server (re-parented to us too), so they are the server's children, not ours:
    each is looked at every 10 ms until it is a zombie (the server keeps it one for at least
    1 s), then its own CPU is read from its schedstat and its agent's from its cutime +
    cstime (clock ticks). Memory is sampled while a supervisor lives (on first sight, then
    every 50 ms; a zombie has none to report): ``VmHWM`` from status (RSS, counting the pages
    a forked one shares with the server) and private (Private_Clean + Private_Dirty) and Pss
    from smaps_rollup; a supervisor that lives less than that may go unsampled (counted, not
    guessed). The server's own CPU over the storm is added to the supervisors' total (and
    reported on its own); at the end the server is killed and reaped.
    """
    import signal
    import subprocess

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return {"error": "prctl(PR_SET_CHILD_SUBREAPER) failed"}
    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    _write_config(state, events)
    cwd = work / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    t0 = time.perf_counter()
    spawner = subprocess.Popen(
        [PY, __file__, "spawner", str(state), str(n), str(cwd)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    sup: dict[int, str] = {}  # supervisor pid -> session id
    lock = threading.Lock()
    spawn_out: list[dict] = []

    def read_spawner() -> None:
        assert spawner.stdout is not None
        for raw in spawner.stdout:
            d = json.loads(raw)
            spawn_out.append(d)
            if "pid" in d:
                with lock:
                    sup[d["pid"]] = d["sid"]

    reader = threading.Thread(target=read_spawner, daemon=True)
    reader.start()
    mem: dict[int, Mem] = {}
    parent: dict[int, int] = {}  # supervisor pid -> its parent when first seen
    forked: set[int] = set()  # children of the fork server, not ours
    own_cpu: dict[int, float] = {}
    total_cpu: dict[int, float] = {}
    done_at: dict[int, float] = {}
    lost: set[int] = set()  # supervisors gone before measured (reaped unseen): not measured
    names: dict[int, str] = {}
    others: list[str] = []
    spawner_rc = None
    next_sample = next_look = 0.0
    deadline = time.monotonic() + 1800
    servers: set[int] = set()
    try:
        while True:
            now = time.monotonic()
            with lock:
                live = [p for p in sup if p not in done_at and p not in lost]
            for p in live:
                if p not in parent:
                    f = proc_stat(p)
                    parent[p] = int(f[1]) if f is not None else 0
                    if parent[p] not in (me, spawner.pid, 0):
                        forked.add(p)
                        servers.add(parent[p])
                m = mem.setdefault(p, Mem())
                if now >= next_sample or not m.samples:
                    m.sample(p)
            if now >= next_sample:
                next_sample = now + 0.05
            if now >= next_look:  # the forked ones: a zombie yet? (kept one >= 1 s)
                for p in live:
                    if p in forked:
                        z = zombie_cpu(p)
                        if z is not None:
                            done_at[p] = time.perf_counter()
                            own_cpu[p], total_cpu[p] = z[0], z[0] + z[1]
                        elif not os.path.exists(f"/proc/{p}"):
                            lost.add(p)
                next_look = now + 0.01
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT | os.WNOHANG)
            except ChildProcessError:
                info = None
            if info is None:
                with lock:
                    # every supervisor measured (what else was re-parented to us is reaped
                    # too), or gone without being seen (a problem, never waited for)
                    waiting = [p for p in sup if p not in done_at and p not in lost]
                lost.update(p for p in waiting if not os.path.exists(f"/proc/{p}"))
                finished = spawner_rc is not None and sup and set(waiting) <= lost
                if finished or (spawner_rc is not None and not sup):
                    break
                if now > deadline:
                    return {"error": "timed out waiting for supervisors", "done": len(done_at)}
                time.sleep(0.005)
                continue
            pid = info.si_pid
            if pid == spawner.pid:
                reader.join()
                _, status, _ = os.wait4(pid, 0)
                spawner.returncode = spawner_rc = os.waitstatus_to_exitcode(status)
                continue
            names[pid] = _comm(pid)  # a zombie keeps its name (its cmdline is gone)
            done_at[pid] = time.perf_counter()
            own = _schedstat_s(pid)
            own_cpu[pid] = own if own is not None else (_stat_self_s(pid) or 0.0)
            _, status, ru = os.wait4(pid, 0)
            total_cpu[pid] = ru.ru_utime + ru.ru_stime
        # the servers' CPU over the storm (they started with it) and memory, then they go;
        # other children of ours that exited: a server that lost the race to listen, etc.
        others = [f"{names[p]} {p}" for p in total_cpu if p not in sup]
        others_cpu = sum(total_cpu[p] for p in total_cpu if p not in sup)
        servers.update(forkservers(state))
        server_cpu, server_mem = others_cpu, Mem()
        for s in servers:
            server_mem.sample(s)
            server_cpu += _schedstat_s(s) or 0.0
    finally:
        for s in set(servers) | set(forkservers(state)):
            try:
                os.kill(s, signal.SIGKILL)
                os.waitpid(s, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    ends = [done_at[p] for p in sup if p in done_at]
    wall = (max(ends) if ends else time.perf_counter()) - t0
    spawn_cpu = next((d["cpu_s"] for d in spawn_out if "cpu_s" in d), None)
    problems = []
    statuses: dict[str, int] = {}
    if spawner_rc != 0:
        problems.append(f"spawner exited {spawner_rc}")
    for sid in sup.values():
        p = _verify(state / "sessions" / sid / "turns" / "turn_1.jsonl", events)
        if p:
            problems.append(p)
        try:
            st = json.loads((state / "sessions" / sid / "meta.json").read_bytes())["status"]
        except (OSError, ValueError, KeyError):
            st = "unreadable"
        statuses[st] = statuses.get(st, 0) + 1
    if statuses.get("completed", 0) != n:
        problems.append(f"session statuses: {statuses}")
    if len(sup) != n:
        problems.append(f"{len(sup)} sessions spawned, expected {n}")
    if lost:
        problems.append(f"{len(lost)} supervisors were gone before measured (reaped unseen)")
    mine = [p for p in sup if p in total_cpu]  # the supervisors (not other re-parented ones)
    own_total = sum(own_cpu[p] for p in mine)
    agent_cpu = sum(total_cpu[p] - own_cpu[p] for p in mine)
    sampled = [mem[p] for p in sup if p in mem and mem[p].samples]
    shutil.rmtree(state, ignore_errors=True)
    return {
        "wall_s": wall,
        "sup_cpu_s": own_total + server_cpu,  # the fork server's work is the supervisors'
        "sup_own_cpu_s": own_total,
        "server_cpu_s": server_cpu,
        "agent_cpu_s": agent_cpu,
        "spawner_cpu_s": spawn_cpu,
        "sup_rss_kb": sorted(m.hwm for m in sampled),
        "sup_private_kb": sorted(m.private for m in sampled),
        "sup_pss_kb": sorted(m.pss for m in sampled),
        # a supervisor that lived less than one sampling interval has no memory sample
        "sup_rss_unsampled": len(sup) - len(sampled),
        "forked": len(forked & set(mine)),
        "execd": len(set(mine) - forked),
        "servers": len(servers),
        "server_hwm_kb": server_mem.hwm,
        "server_private_kb": server_mem.private,
        "others": others[:10],  # other children that exited: servers that lost the race
        "raced": sum(1 for o in others if o.startswith("python")),
        "statuses": statuses,
        "problems": problems,
    }


def _comm(pid: int) -> str:
    """A process's name from /proc/PID/stat (a zombie keeps it; its cmdline is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.index(b"(") + 1 : data.rindex(b")")].decode(errors="replace")
    except (OSError, ValueError):
        return "?"


def spawner(state: Path, n: int, cwd: Path) -> None:
    """Spawn n sessions through ``zwarm.api.Zwarm``; print each supervisor's pid at once."""
    import resource

    import zwarm.launchers.local as local
    from zwarm.api import Zwarm

    keep: list[object] = []
    local._reap_later = keep.append  # leave reaping to the bench (the subreaper above us)
    api = Zwarm(state)
    for _ in range(n):
        s = api.spawn("stream 20,000 events", adapter="codex", cwd=cwd)
        ref = s.turns[0].supervisor
        print(json.dumps({"sid": s.id, "pid": ref.pid if ref else None}), flush=True)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"cpu_s": ru.ru_utime + ru.ru_stime}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: nothing may reap the supervisors but the bench


# --------------------------------------------------------------------------- fig 7


def followup(state: Path, sid: str, reps: int) -> dict:
    """Time the summary-mode follow-up build for one session (what ``inject`` does under the
    lock: load meta.json, then ``BaseSessionManager._followup_prompt``), in three cases:
    ``cold`` no digest cached (all 100 turn logs parsed), ``latest`` every digest cached but the
    latest turn's (the usual case: each inject digests the one turn that ended since the last),
    ``cached`` every digest cached."""
    from zwarm.api import Zwarm

    api = Zwarm(state)
    store = api.store
    msg = "Now add tests for the edge cases you mentioned."
    turns_dir = store.session_dir(sid) / "turns"

    def clear_digests(only_latest: bool) -> None:
        paths = sorted(
            turns_dir.glob("*.digest.json"), key=lambda p: int(p.name.split("_")[1].split(".")[0])
        )
        for p in paths[-1:] if only_latest else paths:
            p.unlink()

    def build() -> tuple[float, int]:
        t0 = time.perf_counter()
        s = store.load(sid)
        prompt = api.manager(s.adapter)._followup_prompt(s, msg)
        return time.perf_counter() - t0, len(prompt)

    out: dict[str, list[float]] = {"cold_s": [], "latest_s": [], "cached_s": []}
    clear_digests(False)
    build()  # warm-up (imports, page cache), then one cached build
    build()
    size = 0
    for _ in range(reps):
        clear_digests(False)
        t, size = build()
        out["cold_s"].append(t)
        clear_digests(True)
        out["latest_s"].append(build()[0])
        out["cached_s"].append(build()[0])
    s = store.load(sid)
    log_bytes = sum(store.turn_path(sid, t.n).stat().st_size for t in s.turns)
    return {**out, "prompt_chars": size, "turns": len(s.turns), "log_bytes": log_bytes}


def main(argv: list[str]) -> int:
    cmd = argv[0]
    if cmd == "fig6":
        mode, n, events, work = argv[1], int(argv[2]), int(argv[3]), Path(argv[4])
        res = fig6_alone(n, events, work) if mode == "alone" else fig6_zwarm(n, events, work)
    elif cmd == "spawner":
        spawner(Path(argv[1]), int(argv[2]), Path(argv[3]))
        return 0
    elif cmd == "followup":
        res = followup(Path(argv[1]), argv[2], int(argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
