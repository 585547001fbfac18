#!/usr/bin/env python3
"""``zwarm kill --all`` over 200 running sessions (issue 16: under 2 s, every process gone).

    <venv>/bin/python bench/fig_kill.py [--quick]

Each round spawns 200 sessions (quick: 30) through the API, each running a trivial fake agent
that stays up (a shell that starts a ``sleep`` and waits: a process tree, like a real agent),
waits until every agent and its child run, then times the whole ``zwarm kill --all`` process
(fork to exit, ``os.wait4``; its own CPU from the same call), paired in the same round with
the floor ``python -c "import click"`` (the order alternating by round). When the command has
returned it is checked, with a /proc scan of this file's own (not zwarm's): no process carries
any of the sessions' markers (agents, their children, supervisors), every session is
``killed``, and every turn has the agent's end recorded by its supervisor (nothing lost).
3 rounds (quick: 2) after a warm-up round of 5 sessions; medians, with min-max. Run it with a
wheel install's Python (the editable finder doubles interpreter start-up). Every process and
temp dir it made is removed, also on error.

Exposes ``figure(quick) -> list[dict]`` for bench/run.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PY = sys.executable
ZWARM = str(Path(PY).parent / "zwarm")
TARGET_S = 2.0
MARKERS = (b"ZWARM_SESSION_ID=", b"ZWARM_SUPERVISOR_OF=")
AGENT = """#!/bin/sh
# fake agent for fig_kill: drains the prompt, then a child that outlives it unless killed
cat > /dev/null
sleep 100000 &
wait
"""


class KillBenchError(Exception):
    pass


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- processes
def _marked(sids: set[str]) -> dict[str, list[int]]:
    """Live processes carrying a marker of one of ``sids``: session id -> pids."""
    found: dict[str, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except (OSError, IndexError):
            continue
        for entry in env.split(b"\0"):
            for m in MARKERS:
                sid = entry[len(m) :].decode("ascii", "replace") if entry.startswith(m) else ""
                if sid in sids:
                    found.setdefault(sid, []).append(int(name))
    return found


def _sweep(root: Path) -> int:
    """SIGKILL every process of every session under ``root`` (cleanup); how many."""
    sids = {p.name for p in root.glob("state-*/sessions/*") if p.is_dir()}
    pids = [pid for found in _marked(sids).values() for pid in found] if sids else []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(pids)


# --------------------------------------------------------------------------- one round
def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZWARM_", "PYTHON", "XDG_"))}
    home = root / "home"  # the trust file and launch pins of this run only
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"))
    env.update(XDG_STATE_HOME=str(home / "state"), XDG_DATA_HOME=str(home / "data"))
    return env


def _spawn(root: Path, name: str, n: int, env: dict[str, str]) -> tuple[Path, list[str]]:
    """A state dir with ``n`` running sessions, every agent and its child up."""
    from zwarm.api import Zwarm
    from zwarm.env import Env
    from zwarm.trust_plan import trust_config

    state = root / name
    state.mkdir()
    (state / "config.toml").write_text(f'[codex]\ncommand = ["{root / "agent.sh"}"]\n')
    trust_config(state / "config.toml", environ=env)
    api = Zwarm(env=Env(state_dir=state, cwd=root / "work", environ=env))
    ids = [api.spawn(f"task {i}", adapter="codex").id for i in range(n)]
    deadline = time.monotonic() + 60 + n
    while True:
        found = _marked(set(ids))
        if all(len(found.get(sid, ())) >= 2 for sid in ids):  # the shell and its sleep
            return state, ids
        if time.monotonic() > deadline:
            raise KillBenchError(f"{n - len(found)} of {n} agents never started")
        time.sleep(0.1)


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """Wall time (fork to exit), own CPU and stdout of a whole process; it must exit 0."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            tail = err.read()[-800:].decode("utf-8", "replace")
            raise KillBenchError(f"{' '.join(argv[:6])} exited {p.returncode}: {tail}")
        return wall, ru.ru_utime + ru.ru_stime, out.read()


def _check(state: Path, ids: list[str], out: bytes) -> None:
    """After ``kill --all`` returned: all listed, nothing left running, all recorded."""
    import json

    listed = {r["id"] for r in json.loads(out)}
    if listed != set(ids):
        raise KillBenchError(f"kill --all listed {len(listed)} of {len(ids)} sessions")
    left = _marked(set(ids))
    if left:
        n = sum(len(v) for v in left.values())
        raise KillBenchError(f"{n} processes of {len(left)} sessions outlived kill --all")
    for sid in ids:
        m = json.loads((state / "sessions" / sid / "meta.json").read_bytes())
        turn = m["turns"][-1]
        if m["status"] != "killed" or turn.get("signal") is None:
            raise KillBenchError(f"session {sid}: {m['status']}, agent's end not recorded")


def _round(root: Path, name: str, n: int, env: dict[str, str], floor_first: bool) -> Any:
    state, ids = _spawn(root, name, n, env)
    floor = [PY, "-c", "import click"]
    kill = [ZWARM, "--state-dir", str(state), "kill", "--all", "--json"]
    f = _run(floor, env) if floor_first else None
    wall, cpu, out = _run(kill, env)
    f = f or _run(floor, env)
    _check(state, ids, out)
    return wall, cpu, f[0]


# --------------------------------------------------------------------------- the figure
def _fmt(v: list[float]) -> str:
    def t(s: float) -> str:
        return f"{s:.2f} s" if s >= 1 else f"{s * 1000:.0f} ms"

    return f"{t(statistics.median(v))} ({t(min(v))}–{t(max(v))})"


def _measure(root: Path, n: int, rounds: int) -> list[dict[str, Any]]:
    env = _env(root)
    (root / "home").mkdir()
    (root / "work").mkdir()
    agent = root / "agent.sh"
    agent.write_text(AGENT)
    agent.chmod(0o755)
    load0 = os.getloadavg()[0]
    log(f"[kill] warm-up round (5 sessions); load {load0:.2f}")
    _round(root, "state-warm", 5, env, True)
    walls, cpus, floors = [], [], []
    for r in range(rounds):
        log(f"[kill] round {r + 1}/{rounds}: {n} sessions")
        wall, cpu, floor = _round(root, f"state-{r}", n, env, r % 2 == 0)
        walls.append(wall)
        cpus.append(cpu)
        floors.append(floor)
        log(f"[kill]   kill --all {wall:.2f} s (its CPU {cpu:.2f} s), import click {floor:.3f} s")
    ratio = statistics.median(w / f for w, f in zip(walls, floors, strict=True))
    load = f"load avg {load0:.1f} → {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores"
    floor_s = f"import click {_fmt(floors)}"
    return [
        {
            "what": f"zwarm kill --all over {n} running sessions: returns, every process gone",
            "value": _fmt(walls),
            "reference": floor_s,
            "ratio": f"{ratio:.1f}× floor",
            "target": f"< {TARGET_S:g} s",
            "result": "PASS" if statistics.median(walls) < TARGET_S else "MISS",
        },
        {
            "what": f"zwarm kill --all over {n}: the command's own CPU (user + sys)",
            "value": _fmt(cpus),
            "reference": load,
            "ratio": "",
            "target": "",
            "result": "info",
        },
    ]


def figure(quick: bool) -> list[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="zwarm-bench-kill-"))
    try:
        return _measure(root, 30 if quick else 200, 2 if quick else 3)
    finally:
        swept = _sweep(root)
        if swept:
            log(f"[kill] cleanup: {swept} leftover processes killed")
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        rows = figure("--quick" in args)
    except KillBenchError as e:
        log(f"fig_kill: {e}")
        return 1
    keys = ("what", "value", "reference", "ratio", "target", "result")
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
