#!/usr/bin/env python3
"""zwarm's benchmark suite: figures measured against their floors and against zwarm 3.10.6.

    /work/main/.venv/bin/python bench/run.py [--quick] [--only N[,N...]] [--reps R]

Prints a table (and writes it as Markdown to bench/.cache/last-run.md, raw samples to
bench/.cache/last-run.json). Every figure is measured several times after a warm-up, each
round running the subject and its floor back to back in rotating order; the table shows
medians with min-max, and ratios as the median of the per-round ratios (paired, so a noisy
neighbour that slows one round slows both sides of that ratio). See bench/README.md.

Not part of the test suite. Generated state dirs are cached under bench/.cache/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

PY = sys.executable
ZWARM = str(Path(PY).parent / "zwarm")
OLD_VENV = CACHE / "old-venv"
OLD_ZWARM = OLD_VENV / "bin" / "zwarm"
OLD_VERSION = "3.10.6"
TS_AGENT = HERE / "agents" / "ts_agent.sh"

FLOOR_META = (  # the floor: a process that imports click, reads and parses every meta.json
    "import json, os, sys\n"
    "import click\n"
    "d = sys.argv[1]\n"
    "for name in os.listdir(d):\n"
    "    with open(os.path.join(d, name, 'meta.json'), 'rb') as f:\n"
    "        json.loads(f.read())\n"
)
FLOOR_LOADS = (
    "import json, sys\n"
    "loads = json.loads\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    for line in f:\n"
    "        loads(line)\n"
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


# --------------------------------------------------------------------------- measuring


@dataclass
class Sample:
    wall: float
    rss_kb: int = 0
    cpu: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


TIME = "/usr/bin/time"


def run_cmd(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdout: Any = subprocess.DEVNULL,
    rss: bool = False,
) -> Sample:
    """Run a whole process; wall time from just before fork to its exit, its CPU (rusage).

    With ``rss``, the process runs under ``/usr/bin/time -f %M`` to get its own peak RSS: the
    ``ru_maxrss`` that ``wait4`` reports for a child of this (larger) Python process includes
    the parent's RSS at fork time, so it cannot be used for that."""
    rss_file = None
    if rss and os.access(TIME, os.X_OK):
        fd, rss_file = tempfile.mkstemp(prefix="bench-rss-")
        os.close(fd)
        argv = [TIME, "-f", "%M", "-o", rss_file, *argv]
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=err
        )
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            tail = err.read()[-1500:].decode("utf-8", "replace")
            raise BenchError(f"{' '.join(argv[:8])} ... exited {p.returncode}: {tail}")
    peak = 0
    if rss_file is not None:
        try:
            peak = int(Path(rss_file).read_text().split()[-1])
        finally:
            os.unlink(rss_file)
    return Sample(wall, peak, ru.ru_utime + ru.ru_stime)


Case = tuple[str, Callable[[], Sample], int | None]  # key, run one sample, max reps (None: all)


def measure(cases: list[Case], reps: int, warmup: int = 1) -> dict[str, dict[int, Sample]]:
    """Warm up each case, then ``reps`` rounds; each round runs every case once, back to back,
    in an order rotated per round. Returns key -> {round: sample}."""
    for _ in range(warmup):
        for _key, fn, _ in cases:
            fn()
    out: dict[str, dict[int, Sample]] = {k: {} for k, _, _ in cases}
    for r in range(reps):
        k = r % len(cases)
        for key, fn, limit in cases[k:] + cases[:k]:
            if limit is None or len(out[key]) < limit:
                out[key][r] = fn()
    return out


def med(samples: dict[int, Sample], attr: str = "wall") -> float:
    return statistics.median(_vals(samples, attr))


def _vals(samples: dict[int, Sample], attr: str) -> list[float]:
    return [s.extra[attr] if attr in s.extra else getattr(s, attr) for s in samples.values()]


def spread(samples: dict[int, Sample], attr: str = "wall", unit: str = "time") -> str:
    v = _vals(samples, attr)
    f = fmt_time if unit == "time" else fmt_mb
    return f"{f(statistics.median(v))} ({f(min(v))}–{f(max(v))})"


def paired_ratio(a: dict[int, Sample], b: dict[int, Sample], attr: str = "wall") -> float:
    """Median over rounds of a/b, using only rounds where both were measured."""
    rounds = sorted(set(a) & set(b))
    if not rounds:
        return med(a, attr) / med(b, attr)
    return statistics.median(getattr(a[r], attr) / getattr(b[r], attr) for r in rounds)


def fmt_time(s: float) -> str:
    if s >= 10:
        return f"{s:.1f} s"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 0.01:
        return f"{s * 1000:.0f} ms"
    return f"{s * 1000:.1f} ms"


def fmt_mb(kb: float) -> str:
    return f"{kb / 1024:.1f} MB"


# --------------------------------------------------------------------------- results


@dataclass
class Row:
    fig: str
    what: str
    value: str
    reference: str = ""
    ratio: str = ""
    target: str = ""
    result: str = ""  # PASS | MISS | info | SKIP


ROWS: list[Row] = []
NOTES: list[str] = []
RAW: dict[str, Any] = {}


def check(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def raw(key: str, samples: dict[str, dict[int, Sample]]) -> None:
    RAW[key] = {k: [vars(s) for s in v.values()] for k, v in samples.items()}


# --------------------------------------------------------------------------- setup helpers


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("ZWARM_DIR", None)
    env["PYTHONDONTWRITEBYTECODE"] = "0"
    env["XDG_CACHE_HOME"] = str(CACHE / "xdg-cache")  # the listing's row cache: the bench's own
    return env


def workdir() -> Path:
    d = CACHE / "cwd"
    d.mkdir(parents=True, exist_ok=True)
    return d


def empty_state() -> Path:
    from zwarm.store import Store

    d = CACHE / "state-empty"
    if d.exists():
        shutil.rmtree(d)
    Store(d).ensure()
    return d


def ensure_old(install: bool) -> tuple[Path | None, str]:
    """zwarm 3.10.6's CLI in its own venv under bench/.cache/old-venv, installed if needed."""
    stamp = OLD_VENV / ".bench-installed"
    if stamp.exists() and OLD_ZWARM.exists():
        return OLD_ZWARM, f"zwarm {OLD_VERSION} from {OLD_VENV}"
    if not install:
        return None, (
            f"zwarm {OLD_VERSION} is not installed under {OLD_VENV} "
            "(run once without --quick to install it)"
        )
    log(f"  installing zwarm {OLD_VERSION} into {OLD_VENV} (once; ~300 MB) ...")
    wheels = CACHE / "old-wheels"
    try:
        if OLD_VENV.exists():
            shutil.rmtree(OLD_VENV)
        subprocess.run([PY, "-m", "venv", str(OLD_VENV)], check=True, capture_output=True)
        pip = str(OLD_VENV / "bin" / "pip")
        subprocess.run(
            [
                pip,
                "download",
                "--no-deps",
                "--python-version",
                "3.13",
                "--only-binary=:all:",
                f"zwarm=={OLD_VERSION}",
                "-d",
                str(wheels),
            ],
            check=True,
            capture_output=True,
        )
        wheel = next(wheels.glob(f"zwarm-{OLD_VERSION}-*.whl"))
        subprocess.run(
            [pip, "install", "--ignore-requires-python", str(wheel)],
            check=True,
            capture_output=True,
        )
        run_cmd([str(OLD_ZWARM), "--help"])
    except (subprocess.CalledProcessError, StopIteration, BenchError, OSError) as e:
        detail = getattr(e, "stderr", b"") or b""
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        return None, f"could not install zwarm {OLD_VERSION}: {e} {detail[-300:]}".strip()
    stamp.write_text(OLD_VERSION)
    return OLD_ZWARM, f"zwarm {OLD_VERSION} from {OLD_VENV}"


# --------------------------------------------------------------------------- figures


def fig1(cfg: argparse.Namespace) -> None:
    log("[1] start-up: --help and ls on an empty state dir vs python -c 'import click'")
    env, cwd, empty = base_env(), workdir(), empty_state()

    def cmd(argv: list[str]) -> Callable[[], Sample]:
        return lambda: run_cmd(argv, cwd=cwd, env=env)

    cases: list[Case] = [
        ("floor", cmd([PY, "-c", "import click"]), None),
        ("help", cmd([ZWARM, "--help"]), None),
        ("ls_json", cmd([ZWARM, "--state-dir", str(empty), "ls", "--json"]), None),
        ("ls", cmd([ZWARM, "--state-dir", str(empty), "ls"]), None),
    ]
    if cfg.old:
        cases.append(("old_help", cmd([str(cfg.old), "--help"]), 3 if not cfg.quick else 2))
    res = measure(cases, cfg.reps)
    raw("fig1", res)
    fl = res["floor"]
    ref = f"import click {spread(fl)}"
    for key, what in (
        ("help", "zwarm --help"),
        ("ls_json", "zwarm ls --json, empty state dir"),
        ("ls", "zwarm ls, empty state dir"),
    ):
        r = paired_ratio(res[key], fl)
        ROWS.append(
            Row(
                "1", what, spread(res[key]), ref, f"{r:.2f}× floor", "≤ 1.5× floor", check(r <= 1.5)
            )
        )
    if "old_help" in res:
        r = paired_ratio(res["old_help"], res["help"])
        ROWS.append(
            Row(
                "1",
                f"zwarm {OLD_VERSION} --help",
                spread(res["old_help"]),
                f"zwarm --help {spread(res['help'])}",
                f"{r:.0f}× slower",
                "",
                "info",
            )
        )


def fig2_3(cfg: argparse.Namespace) -> None:
    import gen

    sizes = [100, 1000] if cfg.quick else [100, 1000, 10000, 50000]  # the growth curve
    log(
        f"[2,3] listing {', '.join(f'{n:,}' for n in sizes)} finished + {cfg.running} running "
        "sessions vs reading every meta.json" + (f"; and zwarm {OLD_VERSION}" if cfg.old else "")
    )
    env, cwd = base_env(), workdir()
    trees = {
        n: gen.ensure_tree(CACHE, n, log) if n <= 1000 else gen.ensure_clone_tree(CACHE, n, log)
        for n in sizes
    }
    overlay = gen.RunningOverlay(CACHE, cfg.running, ("codex", "claude"))
    try:
        for i, n in enumerate(sizes):
            new, old = trees[n]
            overlay.add_to(new, old, seed=5000 + i)
            _listing(cfg, n, new, old if n <= 1000 else None, env, cwd)
    finally:
        overlay.close()


def _check_listing(new: Path, n: int, running: int, env: dict[str, str], cwd: Path) -> None:
    with tempfile.TemporaryFile() as out:
        run_cmd([ZWARM, "--state-dir", str(new), "ls", "--json"], cwd=cwd, env=env, stdout=out)
        out.seek(0)
        rows = json.loads(out.read())
    st: dict[str, int] = {}
    for r in rows:
        st[r["status"]] = st.get(r["status"], 0) + 1
    if len(rows) != n + running or st.get("running", 0) != running or st.get("damaged"):
        raise BenchError(
            f"zwarm ls --json over the {n}-session tree listed {len(rows)} rows, "
            f"statuses {st}; expected {n + running} with {running} running"
        )


def _cache_files(new: Path, env: dict[str, str]) -> list[Path]:
    """The listing's row cache of the state dir ``new``, as ``zwarm`` run with ``env`` finds it
    (whatever code made it: ``rowcache.code_tag`` is the installed zwarm's, not this tree's)."""
    from zwarm.store import rowcache

    return rowcache.siblings(rowcache.location(env, os.stat(new / "sessions")))


def _warm_cache(new: Path, n: int, ls_json: list[str], env: dict[str, str], cwd: Path) -> None:
    """Make the listing cache warm: every finished session's row cached (a session's files
    are cached once they are RACY_S old), and check that it is."""
    from zwarm.store import rowcache

    time.sleep(rowcache.RACY_S + 0.1)
    run_cmd(ls_json, cwd=cwd, env=env)
    lines = sum(p.read_bytes().count(b"\n") for p in _cache_files(new, env))
    if lines < n:
        raise BenchError(f"the listing cache of the {n}-session tree holds {lines} rows")


def _listing(
    cfg: argparse.Namespace, n: int, new: Path, old: Path | None, env: dict[str, str], cwd: Path
) -> None:
    """``ls --json`` warm, young (every meta.json written just now) and with one session
    changed just before, the table, and 3.10.6, against the read-meta floor."""
    _check_listing(new, n, cfg.running, env, cwd)
    metas = sorted((new / "sessions").glob("*/meta.json"))

    def cmd(argv: list[str]) -> Callable[[], Sample]:
        return lambda: run_cmd(argv, cwd=cwd, env=env)

    ls_json = [ZWARM, "--state-dir", str(new), "ls", "--json"]

    def young(argv: list[str]) -> Callable[[], Sample]:
        """``argv`` run right after every meta.json was written (touched): all sessions
        finished in the last 2 s, as while agents run. The floor is measured the same way:
        the touch leaves inodes for the kernel to write back, which costs both sides."""

        def run() -> Sample:
            now = time.time()
            for m in metas:
                os.utime(m, (now, now))
            return run_cmd(argv, cwd=cwd, env=env)

        return run

    def one_changed() -> Sample:  # one session's meta.json rewritten, as a turn's end does
        m = metas[len(metas) // 2]
        tmp = m.with_name(".bench.tmp")
        tmp.write_bytes(m.read_bytes())
        os.replace(tmp, m)
        return run_cmd(ls_json, cwd=cwd, env=env)

    def cold() -> Sample:  # no listing cache: every meta.json read, the cache written anew
        for p in _cache_files(new, env):
            p.unlink(missing_ok=True)
        return run_cmd(ls_json, cwd=cwd, env=env)

    floor = [PY, "-c", FLOOR_META, str(new / "sessions")]
    cases: list[Case] = [
        ("floor", cmd(floor), None),
        ("ls_json", cmd(ls_json), None),
        ("ls_cold", cold, None),
        ("ls_one", one_changed, None),
        ("ls", cmd([ZWARM, "--state-dir", str(new), "ls"]), None),
    ]
    if cfg.old and old is not None:
        limit = 2 if cfg.quick else 5
        cases.append(("old", cmd([str(cfg.old), "sessions", "--dir", str(old)]), limit))
    _warm_cache(new, n, ls_json, env, cwd)
    res = measure(cases, cfg.reps)
    # young last: it leaves every meta.json just written (so no warm listing for 2 s after it)
    res.update(
        measure([("floor_young", young(floor), None), ("ls_young", young(ls_json), None)], cfg.reps)
    )
    _check_listing(new, n, cfg.running, env, cwd)  # nothing was reconciled away meanwhile
    raw(f"fig2_{n}", res)
    _listing_rows(cfg, n, res)


def _listing_rows(cfg: argparse.Namespace, n: int, res: dict[str, dict[int, Sample]]) -> None:
    fl = res["floor"]
    label = f"{n:,} (+{cfg.running} running)"
    ref = f"read-meta floor {spread(fl)}"
    sized = n >= 1000  # the target's sizes; --quick's 100 is start-up bound, for information
    warm_max, cold_max = (1.3, 1.3) if n <= 1000 else (1.3, 1.5)
    young_ref = f"the floor, also young {spread(res['floor_young'])}"
    for key, base, what, limit, rf in [
        ("ls_json", "floor", f"zwarm ls --json, {label}: warm", warm_max, ref),
        ("ls_cold", "floor", "  cold: no listing cache", cold_max, ref),
        ("ls_young", "floor_young", "  young: all finished in the last 2 s", cold_max, young_ref),
    ]:
        r = paired_ratio(res[key], res[base])
        ok = check(r <= limit) if sized else "info"
        tgt = f"≤ {limit}× floor" if sized else ""
        ROWS.append(Row("2", what, spread(res[key]), rf, f"{r:.2f}× floor", tgt, ok))
    r = paired_ratio(res["ls_one"], res["ls_json"])
    ROWS.append(
        Row(
            "2",
            "  one session changed just before",
            spread(res["ls_one"]),
            f"warm {spread(res['ls_json'])}",
            f"{r:.2f}× warm",
            "≤ 1.1× warm" if sized else "",
            check(r <= 1.1) if sized else "info",
        )
    )
    r = paired_ratio(res["ls"], fl)
    ROWS.append(
        Row(
            "2", f"zwarm ls (table), {label}", spread(res["ls"]), ref, f"{r:.2f}× floor", "", "info"
        )
    )
    if "old" in res:
        r = paired_ratio(res["old"], res["ls_json"])
        target = "≥ 25× faster" if n == 1000 else ""
        ROWS.append(
            Row(
                "3",
                f"zwarm {OLD_VERSION} sessions, {label}",
                spread(res["old"]),
                f"zwarm ls --json {spread(res['ls_json'])}",
                f"zwarm {r:.0f}× faster",
                target,
                check(r >= 25) if target else "info",
            )
        )
    elif n == sizes_first(cfg):
        ROWS.append(Row("3", f"zwarm {OLD_VERSION} sessions", "—", "", "", "≥ 25× faster", "SKIP"))


def sizes_first(cfg: argparse.Namespace) -> int:
    return 100 if cfg.quick else 1000


def fig4(cfg: argparse.Namespace) -> None:
    log("[4] spawn latency with a trivial fake agent vs python -c 'import click'")
    env, cwd = base_env(), workdir()
    state = CACHE / "state-spawn"
    if state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True)
    ts_file = CACHE / "spawn-agent-started.txt"
    ts_file.write_text("")
    (state / "config.toml").write_text(
        f"[codex]\ncommand = [{json.dumps(str(TS_AGENT))}]\n"
        f"[codex.env]\nBENCH_TS_FILE = {json.dumps(str(ts_file))}\n"
    )
    from zwarm.trust_plan import trust_config

    trust_config(state / "config.toml", environ=env)  # the bench's own agent: trusted as written

    def agent_starts() -> list[float]:
        return [float(x) for x in ts_file.read_text().split()]

    def spawn() -> Sample:
        before = len(agent_starts())
        with tempfile.TemporaryFile() as out:
            t_wall = time.time()
            s = run_cmd(
                [
                    ZWARM,
                    "--state-dir",
                    str(state),
                    "spawn",
                    "say ok",
                    "--adapter",
                    "codex",
                    "-C",
                    str(cwd),
                ],
                cwd=cwd,
                env=env,
                stdout=out,
            )
            out.seek(0)
            sid = out.read().decode().strip()
        deadline = time.monotonic() + 20
        while len(agent_starts()) <= before:
            if time.monotonic() > deadline:
                raise BenchError("the fake agent never started (see supervisor.log)")
            time.sleep(0.002)
        started = agent_starts()[before] - t_wall
        _wait_finished(state, sid)
        return Sample(s.wall, s.rss_kb, s.cpu, {"agent_started": started})

    cases: list[Case] = [
        ("floor", lambda: run_cmd([PY, "-c", "import click"], cwd=cwd, env=env), None),
        ("spawn", spawn, None),
    ]
    res = measure(cases, cfg.reps)
    raw("fig4", res)
    fl = res["floor"]
    r = paired_ratio(res["spawn"], fl)
    ROWS.append(
        Row(
            "4",
            "zwarm spawn: invocation → command returns",
            spread(res["spawn"]),
            f"import click {spread(fl)}",
            f"{r:.2f}× floor",
            "≤ 2× floor",
            check(r <= 2),
        )
    )
    started = {k: Sample(v.extra["agent_started"]) for k, v in res["spawn"].items()}
    r2 = paired_ratio(started, fl)
    ROWS.append(
        Row(
            "4",
            "zwarm spawn: invocation → agent process running",
            spread(started),
            f"import click {spread(fl)}",
            f"{r2:.2f}× floor",
            "",
            "info",
        )
    )


def _wait_finished(state: Path, sid: str) -> None:
    meta = state / "sessions" / sid / "meta.json"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            m = json.loads(meta.read_bytes())
        except (OSError, ValueError):
            m = {}
        if m.get("status") not in (None, "running"):
            sup = (m["turns"][-1].get("supervisor") or {}).get("pid")
            while sup and os.path.exists(f"/proc/{sup}") and time.monotonic() < deadline:
                try:
                    stat = Path(f"/proc/{sup}/stat").read_bytes()
                    if stat.split(b")")[-1].split()[0] == b"Z":
                        break
                except OSError:
                    break
                time.sleep(0.005)
            if m.get("status") != "completed":
                raise BenchError(f"spawned session {sid} ended {m.get('status')}: {m.get('error')}")
            return
        time.sleep(0.005)
    raise BenchError(f"spawned session {sid} did not finish in 30 s")


def fig6(cfg: argparse.Namespace) -> None:
    n, events = (5, 2000) if cfg.quick else (50, 20000)
    rounds = 1 if cfg.quick else 3
    log(
        f"[6] {n} concurrent sessions × {events:,} events, through zwarm vs the agents alone "
        f"({rounds} round{'s' if rounds > 1 else ''})"
    )
    work = CACHE / "fig6"

    def worker(mode: str, n_: int, ev: int) -> dict[str, Any]:
        r = subprocess.run(
            [PY, str(HERE / "workers.py"), "fig6", mode, str(n_), str(ev), str(work)],
            capture_output=True,
            env=base_env(),
        )
        if r.returncode != 0:
            raise BenchError(f"fig6 {mode} worker failed: {r.stderr.decode()[-1500:]}")
        d = json.loads(r.stdout)
        if "error" in d:
            raise BenchError(f"fig6 {mode}: {d['error']}")
        return d

    worker("alone", min(n, 5), 1000)  # warm-up
    worker("zwarm", min(n, 5), 1000)
    alone: dict[int, Sample] = {}
    zw: dict[int, Sample] = {}
    problems: list[str] = []
    rss: list[int] = []
    private: list[int] = []
    pss: list[int] = []
    unsampled = forked = execd = servers = raced = 0
    server_cpu: list[float] = []
    server_hwm: list[int] = []
    for r in range(rounds):
        order = ("alone", "zwarm") if r % 2 == 0 else ("zwarm", "alone")
        for mode in order:
            d = worker(mode, n, events)
            problems += d["problems"]
            if mode == "alone":
                alone[r] = Sample(d["wall_s"], 0, d["agent_cpu_s"])
            else:
                rss += d["sup_rss_kb"]
                private += d["sup_private_kb"]
                pss += d["sup_pss_kb"]
                unsampled += d["sup_rss_unsampled"]
                forked, execd = forked + d["forked"], execd + d["execd"]
                servers, raced = servers + d["servers"], raced + d["raced"]
                server_cpu.append(d["server_cpu_s"])
                server_hwm.append(d["server_hwm_kb"])
                zw[r] = Sample(
                    d["wall_s"],
                    max(d["sup_rss_kb"] or [0]),
                    d["sup_cpu_s"],
                    {
                        "agent_cpu": d["agent_cpu_s"],
                        "spawner_cpu": d["spawner_cpu_s"],
                        "server_cpu": d["server_cpu_s"],
                        "sup_own_cpu": d["sup_own_cpu_s"],
                        "forked": d["forked"],
                        "execd": d["execd"],
                        "servers": d["servers"],
                        "raced": d["raced"],
                        "cpu_share": d["sup_cpu_s"] / d["agent_cpu_s"],
                    },
                )
    RAW["fig6"] = {
        "alone": [vars(s) for s in alone.values()],
        "zwarm": [vars(s) for s in zw.values()],
        "problems": problems[:50],
    }
    total = n * events * rounds
    ROWS.append(
        Row(
            "6",
            f"{n} sessions × {events:,} events: lines lost or out of order",
            f"{len(problems)} problems in {total:,} lines",
            "every turn file checked",
            "",
            "0 lost",
            check(not problems),
        )
    )
    for p in problems[:5]:
        NOTES.append(f"fig 6: {p}")
    r_wall = paired_ratio(zw, alone)
    ROWS.append(
        Row(
            "6",
            "  wall time, spawn → last session finished",
            spread(zw),
            f"agents alone {spread(alone)}",
            f"{r_wall:.2f}× alone",
            "",
            "info",
        )
    )
    rss_med = statistics.median(rss) if rss else 0
    ROWS.append(
        Row(
            "6",
            "  supervisor peak RSS (VmHWM) per session",
            f"{fmt_mb(rss_med)} ({fmt_mb(min(rss or [0]))}–{fmt_mb(max(rss or [0]))})",
            f"{len(rss)} of {len(rss) + unsampled} supervisors sampled",
            f"{forked} forked (RSS incl. pages shared with the server), {execd} new interpreters",
            "≤ 15 MB",
            check(bool(rss) and max(rss) <= 15 * 1024),
        )
    )
    pmed = statistics.median(private) if private else 0
    ROWS.append(
        Row(
            "6",
            "  supervisor private memory (Private_Clean+Private_Dirty) per session",
            f"{fmt_mb(pmed)} (max {fmt_mb(max(private or [0]))})",
            f"Pss {fmt_mb(statistics.median(pss) if pss else 0)} (max {fmt_mb(max(pss or [0]))})",
            "",
            "",
            "info",
        )
    )
    ROWS.append(
        Row(
            "6",
            "  fork server(s): CPU over the storm (in the supervisor CPU below), VmHWM",
            f"{fmt_time(statistics.median(server_cpu))}, {fmt_mb(max(server_hwm or [0]))}",
            f"{servers} server(s) in {rounds} round(s), + {raced} started that lost the race",
            "",
            "",
            "info",
        )
    )
    share = statistics.median(s.extra["cpu_share"] for s in zw.values())
    per = {k: Sample(v.cpu / n) for k, v in zw.items()}
    agent_per = {k: Sample(v.extra["agent_cpu"] / n) for k, v in zw.items()}
    ROWS.append(
        Row(
            "6",
            "  supervisor CPU per session (fork server's share incl.) / its agent's CPU",
            f"{spread(per)} / {spread(agent_per)}",
            f"fork server {fmt_time(statistics.median(server_cpu) / n)}/session",
            f"{share * 100:.0f}% of agents",
            "< 10%",
            check(share < 0.10),
        )
    )


def fig7(cfg: argparse.Namespace) -> None:
    import gen

    log("[7] summary-context follow-up for a session with 100 turns")
    state = CACHE / "state-followup"
    sid = gen.make_many_turns(state, 100)
    reps = 5 if cfg.quick else 15
    r = subprocess.run(
        [PY, str(HERE / "workers.py"), "followup", str(state), sid, str(reps)],
        capture_output=True,
        env=base_env(),
    )
    if r.returncode != 0:
        raise BenchError(f"followup worker failed: {r.stderr.decode()[-1500:]}")
    d = json.loads(r.stdout)
    RAW["fig7"] = d

    def s(key: str) -> dict[int, Sample]:
        return {i: Sample(v) for i, v in enumerate(d[key])}

    info = f"{d['turns']} turns, {d['log_bytes'] / 1e6:.1f} MB of logs"
    ROWS.append(
        Row(
            "7",
            "follow-up prompt, all digests cached",
            spread(s("cached_s")),
            info,
            "",
            "< 50 ms",
            check(med(s("cached_s")) < 0.05),
        )
    )
    ROWS.append(
        Row(
            "7",
            "  latest turn not yet digested (the usual inject)",
            spread(s("latest_s")),
            "",
            "",
            "< 50 ms",
            check(med(s("latest_s")) < 0.05),
        )
    )
    ROWS.append(
        Row(
            "7",
            "  first build, no digest cached (all 100 logs parsed)",
            spread(s("cold_s")),
            f"prompt {d['prompt_chars']:,} chars",
            "",
            "",
            "info",
        )
    )


# figures in modules of their own (bench/fig_*.py): ``figure(quick) -> rows``
MODULE_FIGURES = {
    5: "fig_traj",  # trajectory --json over 1 MB, 20 MB, 200 MB logs vs json.loads; RSS
    8: "fig_turns",  # a session's 300th turn vs its 2nd; inject with 1,000 queued
    9: "fig_kill",  # kill --all over 200 running sessions
    10: "fig_idle",  # idle CPU of wait / logs -f / trajectory -f / top
    11: "fig_supervisor",  # the supervisor's RSS and CPU per turn vs a real codex turn
}


def module_figure(n: int) -> Callable[[argparse.Namespace], None]:
    def run(cfg: argparse.Namespace) -> None:
        import importlib

        log(f"[{n}] {MODULE_FIGURES[n]}")
        try:
            rows = importlib.import_module(MODULE_FIGURES[n]).figure(cfg.quick)
        except Exception as e:  # a figure that could not be measured is a MISS row, said why
            raise BenchError(f"{MODULE_FIGURES[n]}: {type(e).__name__}: {e}") from e
        for r in rows:
            ROWS.append(Row(str(n), r["what"], r["value"], r["reference"], r["ratio"],
                            r["target"], r["result"]))  # fmt: skip

    return run


FIGURES: dict[int, Callable[[argparse.Namespace], None]] = {
    1: fig1,
    2: fig2_3,
    3: fig2_3,
    4: fig4,
    6: fig6,
    7: fig7,
    **{n: module_figure(n) for n in MODULE_FIGURES},
}


# --------------------------------------------------------------------------- report


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GB"
    except OSError:
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem} RAM, Linux {platform.release()}, "
        f"Python {platform.python_version()}; load average at start {load}"
    )


def table(rows: list[Row], markdown: bool) -> str:
    head = (
        "#",
        "figure",
        "measured: median (min–max)",
        "reference (same run)",
        "ratio",
        "target",
        "result",
    )
    cells = [head] + [
        (r.fig, r.what, r.value, r.reference, r.ratio, r.target, r.result) for r in rows
    ]
    if markdown:
        esc = [[c.replace("|", "\\|") for c in row] for row in cells]
        lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in esc[1:]]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    out = []
    for k, row in enumerate(cells):
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, a smoke check (< 1 min)")
    ap.add_argument("--only", default="", help="comma-separated figure numbers (1-11)")
    ap.add_argument("--reps", type=int, default=0, help="rounds per figure (default 7; quick 3)")
    cfg = ap.parse_args(argv)
    cfg.reps = cfg.reps or (3 if cfg.quick else 7)
    cfg.running = 10 if cfg.quick else 50
    only = sorted({int(x) for x in cfg.only.split(",") if x.strip()}) or sorted(FIGURES)
    CACHE.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    info = machine()
    log(f"zwarm bench{' (quick)' if cfg.quick else ''}: {info}")
    cfg.old, old_msg = (None, "")
    if 3 in only or 1 in only:
        cfg.old, old_msg = ensure_old(install=not cfg.quick)
        if cfg.old is None:
            NOTES.append(f"zwarm {OLD_VERSION} column skipped: {old_msg}")
            log(f"  {NOTES[-1]}")
    done: set[Callable[[argparse.Namespace], None]] = set()
    failed = 0
    for n in only:
        fn = FIGURES[n]
        if fn in done:
            continue
        done.add(fn)
        try:
            fn(cfg)
        except BenchError as e:
            failed += 1
            ROWS.append(Row(str(n), f"figure {n} failed", "—", "", "", "", "MISS"))
            NOTES.append(f"figure {n} failed: {e}")
            log(f"  figure {n} FAILED: {e}")
    elapsed = time.perf_counter() - t0
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = table(ROWS, markdown=False)
    print()
    print(f"zwarm bench{' --quick' if cfg.quick else ''}: {info}")
    print(
        f"rounds per figure: {cfg.reps} after a warm-up; ratios are medians of per-round "
        f"ratios; wall time {elapsed:.0f} s; load average at end {load}"
    )
    print()
    print(text)
    for note in NOTES:
        print(f"note: {note}")
    md = table(ROWS, markdown=True)
    (CACHE / "last-run.md").write_text(
        f"Machine: {info}. Rounds: {cfg.reps} after a warm-up{' (quick)' if cfg.quick else ''}; "
        f"total {elapsed:.0f} s; load average at end {load}.\n\n{md}\n"
        + "".join(f"\n- {n}" for n in NOTES)
        + "\n"
    )
    (CACHE / "last-run.json").write_text(
        json.dumps(
            {
                "machine": info,
                "quick": cfg.quick,
                "reps": cfg.reps,
                "rows": [vars(r) for r in ROWS],
                "notes": NOTES,
                "raw": RAW,
            },
            indent=1,
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    # the bench trusts the configs it writes in a trust file of its own, never the user's
    os.environ["XDG_CONFIG_HOME"] = str(HERE / ".cache" / "config")  # its own trust file
    sys.exit(main())
