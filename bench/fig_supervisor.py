"""Figure: what a supervisor costs per turn of a real codex agent (issue 16).

    python bench/fig_supervisor.py [--quick]       prints the rows

One session, N turns (quick: fewer) of the real, pinned ``codex`` CLI against the fake
OpenAI Responses server (``tests/fakes/llm.py``, on 127.0.0.1), each reply a short text:
the first turn started by ``Zwarm.spawn``, the next ones by ``Zwarm.inject`` once the
previous turn's supervisor has exited (what ``zwarm inject --wait`` does, turn by turn).

How it measures (in a worker process that is a child subreaper, as ``workers.py`` fig 6):
each turn is started by a short-lived driver process that exits at once without reaping what
it started. The first turn's supervisor is a new interpreter (``python -I -m
zwarm.runtime.supervisor``), re-parented to the worker; that turn also starts the state dir's
fork server (``zwarm.runtime.forkserver``, re-parented to the worker too), and the next turns'
supervisors are forked children of that server. Each supervisor's memory is sampled every
5 ms while it lives: ``VmHWM`` (``/proc/PID/status``: RSS as the kernel counts it, for a
forked one including the pages it still shares with the server), and the peaks of its private
memory (Private_Clean + Private_Dirty in ``/proc/PID/smaps_rollup``: what the turn adds to the
machine) and its Pss. Once it is a zombie (the server keeps its children zombies for at least
1 s; the worker keeps the exec'd one until it reaps it) its own CPU is read exactly from
``/proc/PID/schedstat`` and its agent's (codex: the node shim and its native child, which it
waited for) from its ``cutime + cstime`` (or ``wait4`` for the exec'd one), plus any process
the turn left behind that was re-parented to the worker. The server's own CPU during a forked
turn (its schedstat before the driver starts until the supervisor is a zombie: the request,
the fork) is added to that turn's supervisor CPU; its one-time start (imports) and its memory
are info rows, as is the first (exec'd) turn. At the end the server is killed and reaped. Two
floors are measured once per turn, alternating with the turns, each its own ``VmHWM`` and
CPU: a bare ``python -I -c pass`` of the same interpreter, and the same importing only what
any Python supervisor of a zwarm turn needs (msgspec, pathlib, subprocess, json, tomllib).

Targets, over the forked turns (all turns with ``ZWARM_FORKSERVER=0``): a supervisor's private
memory at most 10 MB; supervisor CPU (the server's per turn included) at most 25% of the codex
turn's CPU (median of per-turn ratios). Without codex (``.ci/install-agents``), one SKIP row.
Everything it makes (state dir, fake server, processes) is removed or stopped at the end.
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
PR_SET_CHILD_SUBREAPER = 36
RSS_TARGET_KB = 10 * 1024
CPU_TARGET = 0.25
SAMPLE_S = 0.005
TURN_DEADLINE_S = 120.0
STATUS = "import sys; sys.stdout.write(open('/proc/self/status').read())"
# what any Python supervisor of a zwarm turn imports at the least: the model's msgspec, paths,
# starting a process, JSON, config.toml and locks (the standard library's share of the floor)
NEEDED = "import msgspec, pathlib, subprocess, json, tomllib, threading, fcntl; "


def figure(quick: bool) -> list[dict[str, Any]]:
    sys.path.append(str(ROOT))
    from tests.fakes.llm import binary

    codex = binary("codex")
    if codex is None:
        why = "codex not installed (run .ci/install-agents)"
        return [_row("supervisor per codex turn", "SKIP", why, "", "", "info")]
    turns = 4 if quick else 12
    with tempfile.TemporaryDirectory(prefix="bench-sup-") as tmp:
        res = _run(Path(tmp), codex, turns)
    return _rows(res)


def _run(tmp: Path, codex: str, turns: int) -> dict[str, Any]:
    from tests.fakes.llm import FakeResponsesServer, Reply, Usage, codex_setup, text

    script = [Reply([text("ok")], Usage(input=100, cached=40, output=9))] * turns
    with FakeResponsesServer(script) as srv:
        state, cwd = tmp / "state", tmp / "work"
        cwd.mkdir()
        _write_config(state, codex, *codex_setup(srv.base_url, tmp))
        argv = [PY, __file__, "--worker", str(state), str(cwd), str(turns)]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=turns * 200)
        finally:
            _kill_strays(tmp)  # nothing is left when all went well; after a failure, all goes
    if out.returncode != 0:
        raise RuntimeError(f"supervisor figure worker failed: {out.stderr[-2000:]}")
    res: dict[str, Any] = json.loads(out.stdout)
    return res


def _kill_strays(tmp: Path) -> None:
    """SIGKILL every process of ours whose command line or working directory is under tmp
    (a few rounds: a process may start another while it is being killed)."""
    for _ in range(5):
        if not _kill_round(tmp):
            return
        time.sleep(0.1)


def _kill_round(tmp: Path) -> int:
    import signal

    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
            cwd = os.readlink(f"/proc/{name}/cwd")
            if str(tmp).encode() in cmd or cwd.startswith(str(tmp)):
                os.kill(int(name), signal.SIGKILL)
                killed += 1
        except OSError:
            continue
    return killed


def _write_config(state: Path, codex: str, env: dict[str, str], over: dict[str, Any]) -> None:
    import tomli_w

    from tests.fakes.llm import nested
    from zwarm.trust_plan import trust_config

    table = {"command": [codex], "env": env, "extra_args": ["--disable", "plugins"]}
    doc = {"defaults": {"adapter": "codex"}, "codex": {**table, "config": nested(over)}}
    state.mkdir(parents=True)
    (state / "config.toml").write_text(tomli_w.dumps(doc))
    trust_config(state / "config.toml")


def _rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    if res.get("problems"):
        why = "; ".join(res["problems"])
        return [_row("supervisor per codex turn", "FAILED", why, "", "", "MISS")]
    med = statistics.median
    first, forked = res["turns"][0], [t for t in res["turns"] if t["forked"]]
    turns = forked or res["turns"]  # ZWARM_FORKSERVER=0: every turn a new interpreter
    kind = "forked turns" if forked else "turns (no fork server)"
    sup = [t["sup_cpu_s"] + t["server_cpu_s"] for t in turns]
    agent = [t["agent_cpu_s"] for t in turns]
    srv_turn = med(t["server_cpu_s"] for t in turns)
    private, hwm = max(t["sup_private_kb"] for t in turns), max(t["sup_hwm_kb"] for t in turns)
    pss = max(t["sup_pss_kb"] for t in turns)
    ratio = med(s / a for s, a in zip(sup, agent, strict=True) if a > 0)
    bare_kb, bare_s = med(f["hwm_kb"] for f in res["floor"]), med(f["cpu_s"] for f in res["floor"])
    need_kb, need_s = (
        med(f["hwm_kb"] for f in res["needed"]),
        med(f["cpu_s"] for f in res["needed"]),
    )
    n, srv = len(turns), res.get("server", {})
    rows = [
        _row(
            f"supervisor private memory (USS: Private_Clean+Private_Dirty), max of {n} {kind}",
            _mb(private),
            f"python -I -c pass: {_mb(bare_kb)} RSS",
            f"{private / bare_kb:.2f}x",
            "<= 10 MB",
            "PASS" if private <= RSS_TARGET_KB else "MISS",
        ),
        _row(
            f"  its RSS (VmHWM{', incl. pages shared with the server' if forked else ''})"
            f" / Pss, max of {n}",
            f"{_mb(hwm)} / {_mb(pss)}",
            f"python -I -c pass: {_mb(bare_kb)}",
            f"{hwm / bare_kb:.2f}x",
            "",
            "info",
        ),
        _row(
            f"supervisor CPU / codex turn CPU (median of {n} {kind}"
            + (", server's per turn incl.)" if forked else ")"),
            f"{ratio:.1%}",
            f"codex tree {_ms(med(agent))}/turn",
            f"supervisor {_ms(med(sup))}/turn (server {_ms(srv_turn)})",
            "<= 25%",
            "PASS" if ratio <= CPU_TARGET else "MISS",
        ),
    ]
    later = res["turns"][1:]
    exits, log = srv.get("exits") or [], (srv.get("log") or "").strip().splitlines()
    why = "; ".join(exits[:3] + log[-2:])
    rows.append(
        _row(
            f"  turns 2..{len(res['turns'])} forked by the state dir's fork server",
            f"{sum(t['forked'] for t in later)} of {len(later)}",
            f"servers: {srv.get('started', 0)}; Python processes that exited meanwhile"
            f" (a detached server's starter, one that lost the race, a server): {len(exits)}",
            why[:300],
            "",
            "info",
        )
    )
    if forked and srv.get("cpu_s") is not None:
        rows.append(
            _row(
                "  fork server (one per state dir and environment): RSS, VmHWM, private; start",
                f"{_mb(srv.get('rss_kb', 0))}, {_mb(srv.get('hwm_kb', 0))}, "
                f"{_mb(srv.get('private_kb', 0))}",
                f"start CPU {_ms(srv.get('start_cpu_s') or 0)} (once)",
                f"{_ms(srv.get('cpu_s') or 0)} CPU in all",
                "",
                "info",
            )
        )
    if forked and not first["forked"]:
        a = first["agent_cpu_s"]
        rows.append(
            _row(
                "  first turn of a state dir: a new interpreter (VmHWM, private; CPU ratio)",
                f"{_mb(first['sup_hwm_kb'])}, {_mb(first['sup_private_kb'])}; "
                + (f"{first['sup_cpu_s'] / a:.1%}" if a > 0 else "?"),
                f"codex tree {_ms(a)}",
                f"supervisor {_ms(first['sup_cpu_s'])}",
                "",
                "info",
            )
        )
    rows.append(
        _row(
            "floor: python -I importing only msgspec, pathlib, subprocess, json, tomllib",
            f"{_mb(need_kb)}, {_ms(need_s)}",
            f"python -I -c pass: {_ms(bare_s)}",
            f"supervisor {med(sup) / need_s:.2f}x its CPU",
            "",
            "info",
        )
    )
    return rows


def _row(what: str, value: str, ref: str, ratio: str, target: str, result: str) -> dict[str, Any]:
    return {
        "what": what,
        "value": value,
        "reference": ref,
        "ratio": ratio,
        "target": target,
        "result": result,
    }


def _mb(kb: float) -> str:
    return f"{kb / 1024:.1f} MB"


def _ms(s: float) -> str:
    return f"{s * 1000:.0f} ms"


# --------------------------------------------------------------------------- the worker


def worker(state: Path, cwd: Path, turns: int) -> dict[str, Any]:
    """Run ``turns`` turns of one session as a child subreaper; measure each supervisor, and
    the state dir's fork server (its CPU during a forked turn is added to that turn's)."""
    import signal

    from workers import Mem, forkservers, proc_stat, proc_status_kb, smaps_kb

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return {"turns": [], "floor": [], "problems": ["prctl(PR_SET_CHILD_SUBREAPER) failed"]}
    out: dict[str, Any] = {"turns": [], "floor": [], "needed": [], "problems": [], "server": {}}
    servers: list[int] = []  # every server seen, in order; exits: those that exited meanwhile
    exits: list[str] = []
    sid, server = "", 0

    def live(pid: int) -> bool:
        f = proc_stat(pid) if pid else None
        return f is not None and f[0] != b"Z"

    try:
        for k in range(turns + 1):
            if server and not live(server):
                server = 0
            srv_before = _schedstat_s(server) if server else 0.0
            d = _drive(state, cwd, sid, k, k < turns)
            if d["before"] != ([k, "completed"] if k else None):  # the turn before: ended
                out["problems"].append(f"turn {k} ended as {d['before']}, expected completed")
            if k == turns:
                break
            out["floor"].append(_floor(STATUS))
            out["needed"].append(_floor(NEEDED + STATUS))
            sid = d["sid"]
            t = _turn(d["pid"], servers, exits)
            t["n"] = k + 1
            after = _schedstat_s(server) if server and live(server) else None
            ok = t["forked"] and server and t["ppid"] == server and after is not None
            t["server_cpu_s"] = after - srv_before if ok and after is not None else 0.0
            if t["forked"] and t["ppid"] != server:
                out["problems"].append(f"turn {k + 1} forked by {t['ppid']}, not {server}")
            out["turns"].append(t)
            if not server or not live(server):  # a turn without a server started one: find it
                found = [p for p in forkservers(state) if live(p)]
                server = found[0] if len(found) == 1 else 0
                if server and server not in servers:
                    servers.append(server)
                    if len(servers) == 1:
                        out["server"]["start_cpu_s"] = _schedstat_s(server)  # imports etc.
        if server and live(server):
            mem = Mem()
            mem.sample(server)
            out["server"].update(
                hwm_kb=mem.hwm,
                rss_kb=proc_status_kb(server, b"VmRSS:") or 0,
                private_kb=(smaps_kb(server) or (0, 0))[0],
                cpu_s=_schedstat_s(server),
            )
    finally:
        for pid in forkservers(state):  # ours, re-parented to us: killed and reaped here
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    out["server"].update(started=len(servers), exits=exits)
    try:  # why a server refused or exited, if it did (its stderr)
        out["server"]["log"] = (state / "forkserver.log").read_text()[-500:]
    except OSError:
        out["server"]["log"] = ""
    return out


def _floor(code: str) -> dict[str, float]:
    """A bare ``python -I -c CODE``: its own VmHWM (printed by itself) and CPU."""
    p = subprocess.Popen([PY, "-I", "-c", code], stdout=subprocess.PIPE)
    assert p.stdout is not None
    status = p.stdout.read().decode()
    _, _, ru = os.wait4(p.pid, 0)
    hwm = next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmHWM:"))
    return {"hwm_kb": hwm, "cpu_s": ru.ru_utime + ru.ru_stime}


def _drive(state: Path, cwd: Path, sid: str, k: int, start: bool) -> dict[str, Any]:
    """From a driver process: [n, status] of the session's last turn (``before``), then, with
    ``start``, turn k+1 started (spawn, then inject): the session id and its supervisor's pid.
    The driver exits without reaping the supervisor, which is re-parented to us."""
    prompt = f"turn {k + 1}: say ok" if start else ""
    argv = [PY, __file__, "--drive", str(state), str(cwd), sid or "-", prompt]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=TURN_DEADLINE_S)
    if p.returncode != 0:
        raise RuntimeError(f"driver failed: {p.stderr[-2000:]}")
    d: dict[str, Any] = json.loads(p.stdout)
    return d


def drive(state: Path, cwd: Path, sid: str, prompt: str) -> None:
    import zwarm.launchers.local as local
    from zwarm.api import Zwarm

    keep: list[object] = []
    local._reap_later = keep.append  # leave reaping to the subreaper above us
    api = Zwarm(state)
    t = api.get(sid).current if sid != "-" else None
    out: dict[str, Any] = {"before": [t.n, t.status.value] if t is not None else None}
    if prompt:
        s = (
            api.spawn(prompt, adapter="codex", cwd=cwd)
            if sid == "-"
            else api.inject(sid, prompt)[0]
        )
        ref = s.turns[-1].supervisor
        out.update(sid=s.id, pid=ref.pid if ref else None)
    print(json.dumps(out), flush=True)
    os._exit(0)  # no teardown: nothing may reap the supervisor but the worker


def _turn(pid: int, servers: list[int], exits: list[str]) -> dict[str, Any]:
    """Follow supervisor ``pid`` until it is a zombie (reaping what is re-parented to us
    meanwhile): its memory sampled every 5 ms while it lives (VmHWM; private and Pss from
    smaps_rollup), its own CPU from its zombie's schedstat, its agent's (what it waited for)
    from its zombie's cutime + cstime, or, if it is our child (an exec'd supervisor), from
    ``wait4``; plus the CPU of strays re-parented to us meanwhile. A supervisor forked by the
    fork server is the server's child: the server keeps it a zombie for at least 1 s. A fork
    server that exits meanwhile (re-parented to us) is reaped and noted in ``exits``."""
    from workers import Mem, proc_stat, zombie_cpu  # bench/ is on the path: run.py's or ours

    mem, strays, deadline = Mem(), 0.0, time.monotonic() + TURN_DEADLINE_S
    first = proc_stat(pid)
    ppid = int(first[1]) if first is not None else 0
    me = os.getpid()
    while True:
        z = zombie_cpu(pid)
        if z is not None:
            break
        if not os.path.exists(f"/proc/{pid}"):
            raise RuntimeError(f"supervisor {pid} (parent {ppid}) gone before seen as a zombie")
        mem.sample(pid)
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        if info is not None and info.si_pid != pid:
            other = info.si_pid
            comm = _comm(other)  # a zombie keeps its name (its cmdline is gone)
            _, status, ru = os.wait4(other, 0)
            if other in servers or comm.startswith("python"):  # a server (or one that lost
                exits.append(f"{comm} {other} exited ({status}) during turn {pid}")  # the race)
            else:
                strays += ru.ru_utime + ru.ru_stime
            continue
        if time.monotonic() > deadline:
            raise RuntimeError(f"supervisor {pid} still running after {TURN_DEADLINE_S}s")
        time.sleep(SAMPLE_S)
    own, agent = z
    if ppid == me:  # an exec'd supervisor, re-parented to us: wait4 is exact (µs)
        _, _, ru = os.wait4(pid, 0)
        agent = ru.ru_utime + ru.ru_stime - own
    return {
        "forked": ppid != me,
        "ppid": ppid,
        "sup_hwm_kb": mem.hwm,
        "sup_private_kb": mem.private,
        "sup_pss_kb": mem.pss,
        "samples": mem.samples,
        "sup_cpu_s": own,
        "agent_cpu_s": agent + strays,
    }


def _comm(pid: int) -> str:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
        return data[data.index(b"(") + 1 : data.rindex(b")")].decode(errors="replace")
    except (OSError, ValueError):
        return "?"


def _schedstat_s(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat", "rb") as f:
        return int(f.read().split()[0]) / 1e9


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        print(json.dumps(worker(Path(argv[1]), Path(argv[2]), int(argv[3]))))
        return 0
    if argv[:1] == ["--drive"]:
        drive(Path(argv[1]), Path(argv[2]), argv[3], argv[4])
        return 0
    quick = "--quick" in argv
    for row in figure(quick):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    # the bench trusts the configs it writes in a trust file of its own, never the user's
    os.environ["XDG_CONFIG_HOME"] = str(HERE / ".cache" / "config")  # its own trust file
    sys.exit(main(sys.argv[1:]))
