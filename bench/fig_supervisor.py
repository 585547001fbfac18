"""Figure: what a supervisor costs per turn of a real codex agent (issue 16).

    python bench/fig_supervisor.py [--quick]       prints the rows

One session, N turns (quick: fewer) of the real, pinned ``codex`` CLI against the fake
OpenAI Responses server (``tests/fakes/llm.py``, on 127.0.0.1), each reply a short text:
the first turn started by ``Zwarm.spawn``, the next ones by ``Zwarm.inject`` once the
previous turn's supervisor has exited (what ``zwarm inject --wait`` does, turn by turn).

How it measures (in a worker process that is a child subreaper, as ``workers.py`` fig 6):
each turn is started by a short-lived driver process that exits at once without reaping the
detached supervisor, which is then re-parented to the worker. The worker samples the
supervisor's ``VmHWM`` from ``/proc/PID/status`` every 5 ms while it lives, reads its own CPU
from ``/proc/PID/schedstat`` while it is a zombie, then ``wait4`` gives its CPU plus its
waited-for agent's (codex: the node shim and its native child): the difference is the codex
tree's CPU, plus any process the turn left behind that was re-parented to the worker. Two
floors are measured once per turn, alternating with the turns, each its own ``VmHWM`` and
CPU: a bare ``python -I -c pass`` of the same interpreter, and the same importing only what
any Python supervisor of a zwarm turn needs (msgspec, pathlib, subprocess, json, tomllib).

Targets: supervisor peak RSS at most 10 MB; supervisor CPU at most 25% of the codex turn's
CPU (median of per-turn ratios). Without codex (``.ci/install-agents``), one SKIP row.
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
    """SIGKILL every process of ours whose command line or working directory is under tmp."""
    import signal

    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
            cwd = os.readlink(f"/proc/{name}/cwd")
            if str(tmp).encode() in cmd or cwd.startswith(str(tmp)):
                os.kill(int(name), signal.SIGKILL)
        except OSError:
            continue


def _write_config(state: Path, codex: str, env: dict[str, str], over: dict[str, Any]) -> None:
    import tomli_w

    from tests.fakes.llm import nested
    from zwarm.trust import trust_config

    table = {"command": [codex], "env": env, "extra_args": ["--disable", "plugins"]}
    doc = {"defaults": {"adapter": "codex"}, "codex": {**table, "config": nested(over)}}
    state.mkdir(parents=True)
    (state / "config.toml").write_text(tomli_w.dumps(doc))
    trust_config(state / "config.toml")


def _rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    if res.get("problems"):
        why = "; ".join(res["problems"])
        return [_row("supervisor per codex turn", "FAILED", why, "", "", "MISS")]
    turns, med = res["turns"], statistics.median
    sup, agent = [t["sup_cpu_s"] for t in turns], [t["agent_cpu_s"] for t in turns]
    peak = max(t["sup_hwm_kb"] for t in turns)
    ratio = med(s / a for s, a in zip(sup, agent, strict=True) if a > 0)
    bare_kb, bare_s = med(f["hwm_kb"] for f in res["floor"]), med(f["cpu_s"] for f in res["floor"])
    need_kb, need_s = (
        med(f["hwm_kb"] for f in res["needed"]),
        med(f["cpu_s"] for f in res["needed"]),
    )
    n = len(turns)
    return [
        _row(
            f"supervisor peak RSS (VmHWM), max of {n} turns",
            _mb(peak),
            f"python -I -c pass: {_mb(bare_kb)}",
            f"{peak / bare_kb:.2f}x",
            "<= 10 MB",
            "PASS" if peak <= RSS_TARGET_KB else "MISS",
        ),
        _row(
            "supervisor CPU / codex turn CPU (median of turns)",
            f"{ratio:.1%}",
            f"codex tree {_ms(med(agent))}/turn",
            f"supervisor {_ms(med(sup))}/turn",
            "<= 25%",
            "PASS" if ratio <= CPU_TARGET else "MISS",
        ),
        _row(
            "floor: python -I importing only msgspec, pathlib, subprocess, json, tomllib",
            f"{_mb(need_kb)}, {_ms(need_s)}",
            f"python -I -c pass: {_ms(bare_s)}",
            f"supervisor {med(sup) / need_s:.2f}x its CPU",
            "",
            "info",
        ),
    ]


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
    """Run ``turns`` turns of one session as a child subreaper; measure each supervisor."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return {"turns": [], "floor": [], "problems": ["prctl(PR_SET_CHILD_SUBREAPER) failed"]}
    out: dict[str, Any] = {"turns": [], "floor": [], "needed": [], "problems": []}
    sid = ""
    for k in range(turns + 1):
        d = _drive(state, cwd, sid, k, k < turns)
        if d["before"] != ([k, "completed"] if k else None):  # the turn before: measured, ended
            out["problems"].append(f"turn {k} ended as {d['before']}, expected completed")
        if k < turns:
            out["floor"].append(_floor(STATUS))
            out["needed"].append(_floor(NEEDED + STATUS))
            sid = d["sid"]
            out["turns"].append(_turn(d["pid"]))
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
    import zwarm.runtime.local as local
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


def _turn(pid: int) -> dict[str, float]:
    """Wait for supervisor ``pid`` to exit (reaping strays too); its VmHWM, its own CPU, and
    the CPU of what it waited for (its agent) plus what was re-parented to us meanwhile."""
    from workers import proc_status_kb  # bench/ is on the path: run.py's or ours

    hwm, strays, deadline = 0, 0.0, time.monotonic() + TURN_DEADLINE_S
    while True:
        hwm = max(hwm, proc_status_kb(pid, b"VmHWM:") or 0)
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        if info is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"supervisor {pid} still running after {TURN_DEADLINE_S}s")
            time.sleep(SAMPLE_S)
            continue
        if info.si_pid != pid:
            _, _, ru = os.wait4(info.si_pid, 0)
            strays += ru.ru_utime + ru.ru_stime
            continue
        own = _schedstat_s(pid)
        _, _, ru = os.wait4(pid, 0)
        total = ru.ru_utime + ru.ru_stime
        return {"sup_hwm_kb": hwm, "sup_cpu_s": own, "agent_cpu_s": total - own + strays}


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
