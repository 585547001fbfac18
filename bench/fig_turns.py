#!/usr/bin/env python3
"""Figure: what a turn costs as a session grows (issue 16: flat per-turn costs).

    python bench/fig_turns.py [--quick] [--reps R]

Two rows, each a ratio measured in paired rounds (alternating order) in one run:

- **A session's 300th turn vs its 2nd.** Two sessions with a trivial fake codex agent
  (``agents/ts_agent.sh``): one at turn 1, one with 299 finished turns of ~5 KB text each
  (written through ``Store.transaction``, so the history file holds them as a real session's
  would). Each round runs ``zwarm inject SID msg --context native --wait`` on both, in a
  worker that is the child subreaper of what it starts: the detached supervisor is re-parented
  to it and reaped, so the CPU of the whole turn (the command, the supervisor and its agent,
  the same trivial agent in both) is exact (with ``ZWARM_FORKSERVER=0``: every supervisor a
  new interpreter, as figure 11's first turn). Target: the 300th costs no more than the 2nd.
- **inject with 1,000 queued messages vs none.** Two running sessions whose agent sleeps
  (``agents/sleep_agent.sh``): one with an empty queue, one with 1,000 queued messages; each
  round times ``zwarm inject SID msg`` (queued behind the running turn) on both, then puts the
  queues back. Target: at most 1.2x.

Everything lives in ``bench/.cache/state-turns`` and is killed and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

PY = sys.executable
ZWARM = str(Path(PY).parent / "zwarm")
CACHE = HERE / ".cache"
TS_AGENT = HERE / "agents" / "ts_agent.sh"
SLEEP_AGENT = HERE / "agents" / "sleep_agent.sh"
PR_SET_CHILD_SUBREAPER = 36
TEXT = 5000  # characters of final message per generated turn


def _env(state: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["ZWARM_DIR"] = str(state)
    # every turn's supervisor a new interpreter, re-parented to the worker, so the whole
    # turn's CPU is exact by wait4 (a forked one is the fork server's child): what grows with
    # the session is the same either way; figure 11 measures forked supervisors
    env["ZWARM_FORKSERVER"] = "0"
    return env


def _cwd() -> Path:
    """Where the sessions run: outside any git repository (a repository would add its
    per-turn snapshots to what is measured)."""
    d = Path(tempfile.gettempdir()) / "zwarm-bench-turns-cwd"
    d.mkdir(exist_ok=True)
    return d


def _zwarm(state: Path, *args: str) -> str:
    out = subprocess.run(
        [ZWARM, *args], env=_env(state), cwd=_cwd(), capture_output=True, timeout=300
    )
    if out.returncode != 0:
        raise RuntimeError(f"zwarm {' '.join(args)}: {out.stderr.decode()[-800:]}")
    return out.stdout.decode().strip()


def setup(state: Path) -> None:
    from zwarm.trust_plan import trust_config

    if state.exists():
        _zwarm_quiet(state, "kill", "--all")
        shutil.rmtree(state)
    state.mkdir(parents=True)
    (state / "config.toml").write_text(
        f"[codex]\ncommand = [{json.dumps(str(TS_AGENT))}]\n"
        '[codex.env]\nBENCH_TS_FILE = "/dev/null"\n'
        f"[claude]\ncommand = [{json.dumps(str(SLEEP_AGENT))}]\n"
    )
    trust_config(state / "config.toml", environ=_env(state))


def _zwarm_quiet(state: Path, *args: str) -> None:
    subprocess.run([ZWARM, *args], env=_env(state), cwd=_cwd(), capture_output=True, timeout=300)


def grow(state: Path, sid: str, turns: int) -> None:
    """Give ``sid`` finished turns up to ``turns`` (as its supervisor would have recorded
    them), each with ~5 KB of final message and usage, through the store's transactions."""
    from zwarm.model import Status, Turn, Usage
    from zwarm.store import Store

    store = Store(state)
    s = store.load(sid, history=False)
    for n in range(s.count + 1, turns + 1):
        with store.transaction(sid, history=False) as s:
            t = Turn(n, Status.COMPLETED, f"step {n}", "native", s.created_at)
            t.ended_at, t.usage, t.cost_usd = s.created_at, Usage(1000, 400, 90, 0), 0.001
            t.final_message = (f"turn {n} " + "lorem ipsum " * (TEXT // 12))[:TEXT]
            t.agent_session_id = s.agent_session_id
            s.turns.append(t)


def turn_cpu(state: Path, sid: str) -> dict[str, float]:
    """One ``inject --wait`` turn in a subreaper worker: its wall time and the CPU of the
    command, the supervisor and the agent."""
    out = subprocess.run(
        [PY, __file__, "--worker", str(state), sid], capture_output=True, timeout=300
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.decode()[-800:])
    return json.loads(out.stdout)


def worker(state: Path, sid: str) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [ZWARM, "inject", sid, "next", "--context", "native", "--wait"],
        env=_env(state),
        cwd=_cwd(),
        stdout=subprocess.DEVNULL,
    )
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    cmd = ru.ru_utime + ru.ru_stime
    sup = 0.0
    while True:  # the detached supervisor (and anything it left): re-parented to us
        try:
            _, _, ru = os.wait4(-1, 0)
        except ChildProcessError:
            break
        sup += ru.ru_utime + ru.ru_stime
    print(json.dumps({"wall": wall, "cmd": cmd, "sup": sup, "status": status}))


def inject_wall(state: Path, sid: str) -> float:
    t0 = time.perf_counter()
    _zwarm(state, "inject", sid, "queued message")
    return time.perf_counter() - t0


def set_queue(state: Path, sid: str, n: int) -> None:
    from zwarm.model import QueuedMessage
    from zwarm.store import Store

    with Store(state).transaction(sid, history=False) as s:
        q = QueuedMessage("queued message " * 8, "summary", s.created_at)
        s.queue[:] = [q] * n


def _paired(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def _ms(v: list[float]) -> str:
    return f"{statistics.median(v) * 1000:.0f} ms ({min(v) * 1000:.0f}–{max(v) * 1000:.0f})"


def figure(quick: bool, reps: int | None = None) -> list[dict[str, Any]]:
    reps = reps or (3 if quick else 9)
    big = 60 if quick else 300
    state = CACHE / "state-turns"
    setup(state)
    rows: list[dict[str, Any]] = []
    try:
        rows += _flat_turns(state, big, reps)
        rows += _queued_inject(state, 100 if quick else 1000, reps)
    finally:
        _zwarm_quiet(state, "kill", "--all")
        shutil.rmtree(state, ignore_errors=True)
    return rows


def _flat_turns(state: Path, big: int, reps: int) -> list[dict[str, Any]]:
    small_sid = _zwarm(state, "spawn", "task", "--adapter", "codex", "--wait", "--json")
    small = json.loads(small_sid)["id"]
    large = json.loads(_zwarm(state, "spawn", "task", "--adapter", "codex", "--wait", "--json"))
    grow(state, large["id"], big - 1)
    res: dict[str, list[dict[str, float]]] = {"small": [], "large": []}
    turn_cpu(state, small), turn_cpu(state, large["id"])  # warm-up (also: turn 2 and 300)
    for r in range(reps):
        order = [("small", small), ("large", large["id"])]
        for key, sid in order if r % 2 == 0 else order[::-1]:
            res[key].append(turn_cpu(state, sid))
    sup = _paired([x["sup"] for x in res["large"]], [x["sup"] for x in res["small"]])
    whole = _paired([x["wall"] for x in res["large"]], [x["wall"] for x in res["small"]])
    meta = (state / "sessions" / large["id"] / "meta.json").stat().st_size
    return [
        {
            "what": f"turn {big}+ vs turn 2+: supervisor + agent CPU per turn",
            "value": _ms([x["sup"] for x in res["large"]]),
            "reference": f"turn 2+ {_ms([x['sup'] for x in res['small']])}",
            "ratio": f"{sup:.2f}×",
            "target": "≤ 1.0× (flat)",
            "result": "PASS" if sup <= 1.05 else "MISS",
        },
        {
            "what": f"turn {big}+ vs turn 2+: inject --wait, whole turn (wall)",
            "value": _ms([x["wall"] for x in res["large"]]),
            "reference": f"turn 2+ {_ms([x['wall'] for x in res['small']])}",
            "ratio": f"{whole:.2f}×",
            "target": "",
            "result": f"info (meta.json {meta / 1024:.0f} KB at turn {big + reps + 1})",
        },
    ]


def _queued_inject(state: Path, queued: int, reps: int) -> list[dict[str, Any]]:
    none = json.loads(_zwarm(state, "spawn", "wait", "--adapter", "claude", "--json"))["id"]
    full = json.loads(_zwarm(state, "spawn", "wait", "--adapter", "claude", "--json"))["id"]
    set_queue(state, full, queued)
    res: dict[str, list[float]] = {"none": [], "full": []}
    for r in range(reps + 1):
        order = [("none", none), ("full", full)]
        for key, sid in order if r % 2 == 0 else order[::-1]:
            took = inject_wall(state, sid)
            if r:  # round 0: warm-up
                res[key].append(took)
        set_queue(state, none, 0)
        set_queue(state, full, queued)
    ratio = _paired(res["full"], res["none"])
    return [
        {
            "what": f"inject into a running session with {queued:,} queued messages",
            "value": _ms(res["full"]),
            "reference": f"none queued {_ms(res['none'])}",
            "ratio": f"{ratio:.2f}×",
            "target": "≤ 1.2×",
            "result": "PASS" if ratio <= 1.2 else "MISS",
        }
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int)
    ap.add_argument("--worker", nargs=2)
    a = ap.parse_args()
    if a.worker:
        worker(Path(a.worker[0]), a.worker[1])
        return 0
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    keys = ("what", "value", "reference", "ratio", "target", "result")
    for r in figure(a.quick, a.reps):
        print(" | ".join(str(r[k]) for k in keys))
    return 0


if __name__ == "__main__":
    # the bench trusts the configs it writes in a trust file of its own, never the user's
    os.environ["XDG_CONFIG_HOME"] = str(HERE / ".cache" / "config")  # its own trust file
    sys.exit(main())
