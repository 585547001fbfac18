#!/usr/bin/env python3
"""Figure: ``zwarm trajectory --json`` against a bare ``json.loads`` loop (issue 16).

    <python> bench/fig_traj.py [--quick] [--reps R]

Run it with the Python of a wheel install of zwarm (the editable finder doubles start-up):
the subject is the ``zwarm`` next to that Python, the floor ``<python> -c`` a loop of
``json.loads`` over the same turn log's lines. Both are whole processes, measured in paired
rounds (rotating order after a warm-up); a ratio is the median of the per-round ratios. Peak
RSS of both comes from ``/usr/bin/time -f %M``.

Sizes: codex turn logs of 1, 20 and 200 MB (``gen.ensure_big_turn``), and a claude one of
200 MB (the same design, so the same target); ``--quick``: 1 and 20 MB, claude 20 MB.
The logs are generated once under ``bench/.cache/fig-traj/`` (a stamp records the generator
version) and kept; nothing else is left behind (outputs go to /dev/null or a temporary file).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import (  # noqa: E402
    CACHE,
    FLOOR_LOADS,
    PY,
    TIME,
    ZWARM,
    BenchError,
    Case,
    base_env,
    fmt_mb,
    measure,
    paired_ratio,
    spread,
    workdir,
)

ROOT = CACHE / "fig-traj"
CLAUDE_VERSION = "1"


def ensure_claude_turn(cache: Path, target_mb: int) -> tuple[Path, str]:
    """A state dir with one finished claude session whose one turn log is ~target_mb MB:
    realistic turns from ``gen.claude_turn`` back to back, tool ids made unique."""
    import gen

    from zwarm.model import Status
    from zwarm.store import Store

    state = cache / f"state-claude-{target_mb}mb"
    stamp = cache / f".complete-claude-{target_mb}"
    sid_file = state / "bench-sid"
    version = f"{gen.GEN_VERSION}.{CLAUDE_VERSION}"
    if stamp.exists() and stamp.read_text() == version and sid_file.exists():
        return state, sid_file.read_text()
    if state.exists():
        shutil.rmtree(state)
    store = Store(state)
    store.ensure()
    rng = random.Random(8)
    g = gen.make_session(rng, time.time(), adapter="claude", turns=1, steps=(5, 5))
    s = g.session
    s.turns[0].status = Status.COMPLETED
    s.refresh()
    (store.session_dir(s.id) / "turns").mkdir(parents=True, mode=0o700)
    gen.write_private(store.turn_path(s.id, 1, "prompt"), s.task.encode())
    gen.write_private(store.turn_path(s.id, 1, "stderr"), b"")
    model, sid = s.model or "claude-sonnet-4-5", s.agent_session_id or s.id
    limit, size, block = target_mb * 1_000_000, 0, 0
    with open(store.turn_path(s.id, 1), "wb") as f:
        while size < limit - 4096:
            lines = gen.claude_turn(rng, sid, model, Status.KILLED, 400).lines
            for ln in lines[1 if block else 0 :]:
                ln2 = ln.replace(b'"toolu_', b'"toolu_%d_' % block)
                f.write(ln2)
                size += len(ln2)
            block += 1
        f.writelines(gen.claude_turn(rng, sid, model, Status.COMPLETED, 1).lines[-2:])
    gen.save_meta(store, s)
    sid_file.write_text(s.id)
    stamp.write_text(version)
    return state, s.id


def _log_of(state: Path, sid: str) -> Path:
    from zwarm.store import Store

    return Store(state).turn_path(sid, 1)


def _check_array(state: Path, sid: str, env: dict[str, str], cwd: Path) -> None:
    """The command prints one JSON array (its ends checked; parsed whole if small)."""
    import json

    from run import run_cmd

    with tempfile.TemporaryFile() as out:
        run_cmd([ZWARM, "--state-dir", str(state), "trajectory", sid, "--json"],
                cwd=cwd, env=env, stdout=out)  # fmt: skip
        size = out.seek(0, os.SEEK_END)
        out.seek(0)
        if size < 50_000_000:
            if not isinstance(json.loads(out.read()), list):
                raise BenchError("trajectory --json did not print a JSON array")
            return
        head = out.read(1)
        out.seek(-2, os.SEEK_END)
        if head != b"[" or out.read() != b"]\n":
            raise BenchError("trajectory --json did not print a JSON array")


def _one(label: str, state: Path, sid: str, reps: int, target: float) -> list[dict[str, Any]]:
    from run import run_cmd

    env, cwd = base_env(), workdir()
    log = _log_of(state, sid)
    with open(log, "rb") as f:
        lines = sum(1 for _ in f)
    _check_array(state, sid, env, cwd)
    argv = [ZWARM, "--state-dir", str(state), "trajectory", sid, "--json"]
    cases: list[Case] = [
        ("floor", lambda: run_cmd([PY, "-c", FLOOR_LOADS, str(log)], cwd=cwd, env=env, rss=True),
         None),
        ("traj", lambda: run_cmd(argv, cwd=cwd, env=env, rss=True), None),
    ]  # fmt: skip
    res = measure(cases, reps)
    r = paired_ratio(res["traj"], res["floor"])
    what = f"trajectory --json, {label} {log.stat().st_size / 1e6:.0f} MB / {lines:,} lines"
    rows = [_row(what, spread(res["traj"]), f"json.loads loop {spread(res['floor'])}", r, target)]
    peak = max(s.rss_kb for s in res["traj"].values())
    floor_peak = max(s.rss_kb for s in res["floor"].values())
    if peak:
        rows.append({
            "what": "  peak RSS of that (max over runs)", "value": fmt_mb(peak),
            "reference": f"json.loads loop {fmt_mb(floor_peak)}", "ratio": "",
            "target": "< 50 MB", "result": "PASS" if peak < 50 * 1024 else "MISS",
        })  # fmt: skip
    return rows


def _row(what: str, value: str, ref: str, ratio: float, target: float) -> dict[str, Any]:
    return {
        "what": what,
        "value": value,
        "reference": ref,
        "ratio": f"{ratio:.2f}× floor",
        "target": f"≤ {target:g}× floor",
        "result": "PASS" if ratio <= target else "MISS",
    }


def figure(quick: bool, reps: int | None = None) -> list[dict[str, Any]]:
    """The figure's rows: codex at each size, then claude (see the module docstring)."""
    import gen

    ROOT.mkdir(parents=True, exist_ok=True)
    sizes = (1, 20) if quick else (1, 20, 200)
    n = reps or (3 if quick else 7)
    rows: list[dict[str, Any]] = []
    for mb in sizes:
        state, sid = gen.ensure_big_turn(ROOT, mb, lambda m: print(m, file=sys.stderr))
        rows += _one("codex", state, sid, n, 1.0 if mb >= 200 else 1.5)
    mb = 20 if quick else 200
    state, sid = ensure_claude_turn(ROOT, mb)
    rows += _one("claude", state, sid, n, 1.0 if mb >= 200 else 1.5)
    if not os.access(TIME, os.X_OK):
        rows.append({"what": "  peak RSS", "value": "—", "reference": f"{TIME} missing",
                     "ratio": "", "target": "< 50 MB", "result": "info"})  # fmt: skip
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int)
    a = p.parse_args()
    print(f"python {PY}; load average {os.getloadavg()[0]:.2f} at start", file=sys.stderr)
    rows = figure(a.quick, a.reps)
    print(f"load average {os.getloadavg()[0]:.2f} at end", file=sys.stderr)
    keys = ("what", "value", "reference", "ratio", "target", "result")
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
