#!/usr/bin/env python3
"""Idle CPU of the commands that wait (issue 16: "waiting costs nothing").

    <venv>/bin/python bench/fig_idle.py [--quick]

Starts 50 sessions (quick: 10) whose fake agent (``agents/idle_agent.sh``) prints the start of
a turn and then sleeps, writing nothing; then runs, all at once, (a) ``zwarm wait`` on every
one of them, (b) ``zwarm logs -f`` and (c) ``zwarm trajectory -f`` on one, (d) ``zwarm top``
on a pseudo-terminal, and a reference: a Python loop that stats one meta.json every 0.5 s (the
cheapest poll a waiter could do). After a settling time (start-up excluded) each process's CPU
(user + system, every thread, from ``/proc/PID/task/*/schedstat``, in ns) is read at the start
and the end of a 10 s window; the window is repeated (3 rounds, quick 1) and the median is
reported as % of one core, against the target < 0.5%. Then ``zwarm kill --all`` ends the
sessions and ``wait`` must return within a few seconds, saying they were killed (it is woken by
the change, not by a timer). Every process and temp dir it made is removed, also on error.

Exposes ``figure(quick) -> list[dict]`` for bench/run.py.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PY = sys.executable
ZWARM = str(Path(PY).parent / "zwarm")
AGENT = HERE / "agents" / "idle_agent.sh"
TARGET_PCT = 0.5
WINDOW_S = 10.0
SETTLE_S = 3.0
REF_LOOP = (
    "import os, sys, time\n"
    "while True:\n"
    "    try:\n"
    "        os.stat(sys.argv[1])\n"
    "    except OSError:\n"
    "        pass\n"
    "    time.sleep(0.5)\n"
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cpu_ns(pid: int) -> int:
    """CPU time (ns) of every thread of ``pid`` so far (0 if it is gone)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


class Fleet:
    """A state dir with ``n`` running sessions whose agents sleep."""

    def __init__(self, n: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="zwarm-bench-idle-"))
        self.state = self.root / "state"
        self.cwd = self.root / "cwd"
        self.cwd.mkdir()
        self.state.mkdir()
        self.env = {k: v for k, v in os.environ.items() if k != "ZWARM_DIR"}
        self.env["BENCH_IDLE_S"] = "900"
        self.n = n
        self.ids: list[str] = []

    def zwarm(self, *args: str) -> list[str]:
        return [ZWARM, "--state-dir", str(self.state), *args]

    def start(self) -> None:
        cfg = self.state / "config.toml"
        cfg.write_text(f"[codex]\ncommand = [{json.dumps(str(AGENT))}]\n")
        self._trust(cfg)
        for i in range(self.n):
            out = subprocess.run(
                self.zwarm("spawn", f"idle {i}", "--adapter", "codex", "-C", str(self.cwd)),
                env=self.env,
                cwd=self.cwd,
                capture_output=True,
                check=True,
            )
            self.ids.append(out.stdout.decode().split()[0])
        self._until_running()

    def _trust(self, cfg: Path) -> None:
        sys.path.insert(0, str(HERE.parent))
        from zwarm.trust_plan import trust_config

        trust_config(cfg, environ=self.env)  # the bench's own agent: trusted as written

    def _until_running(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = 0
            for sid in self.ids:
                log_ = self.state / "sessions" / sid / "turns" / "turn_1.jsonl"
                try:
                    started += b"turn.started" in log_.read_bytes()
                except OSError:
                    pass
            if started == len(self.ids):
                return
            time.sleep(0.2)
        raise RuntimeError(f"only some of {len(self.ids)} fake agents started")

    def stop(self) -> None:
        subprocess.run(
            self.zwarm("kill", "--all"), env=self.env, capture_output=True, check=False, timeout=120
        )

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class Subject:
    """One process whose idle CPU is measured (on a pseudo-terminal when ``tty``)."""

    def __init__(
        self, key: str, what: str, argv: list[str], env: dict[str, str], tty: bool = False
    ) -> None:
        self.key, self.what, self.argv = key, what, argv
        self.master: int | None = None
        if tty:
            self.master, slave = pty.openpty()
            _winsize(slave, 40, 160)
            self.proc = subprocess.Popen(
                argv, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
            )
            os.close(slave)
            threading.Thread(target=self._drain, daemon=True).start()
        else:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        self.samples: list[float] = []

    def _drain(self) -> None:
        assert self.master is not None
        while True:
            try:
                if not os.read(self.master, 65536):
                    return
            except OSError:
                return

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.master is not None:
            os.close(self.master)
            self.master = None


def _winsize(fd: int, rows: int, cols: int) -> None:
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def subjects(fleet: Fleet) -> list[Subject]:
    one = fleet.ids[0]
    env = fleet.env
    meta = str(fleet.state / "sessions" / one / "meta.json")
    return [
        Subject(
            "wait", f"zwarm wait on {fleet.n} idle sessions", fleet.zwarm("wait", *fleet.ids), env
        ),
        Subject("logs", "zwarm logs -f (idle session)", fleet.zwarm("logs", "-f", one), env),
        Subject(
            "traj", "zwarm trajectory -f (idle session)", fleet.zwarm("trajectory", "-f", one), env
        ),
        Subject(
            "top",
            f"zwarm top ({fleet.n} idle sessions, on a pty)",
            fleet.zwarm("top"),
            env,
            tty=True,
        ),
        Subject(
            "wait_tty",
            f"zwarm wait on {fleet.n} idle sessions, on a pty (progress shown)",
            fleet.zwarm("wait", *fleet.ids),
            env,
            tty=True,
        ),
        Subject("ref", "reference: stat one file every 0.5 s", [PY, "-c", REF_LOOP, meta], env),
    ]


def measure(subs: list[Subject], rounds: int) -> None:
    time.sleep(SETTLE_S)
    for r in range(rounds):
        before = {s.key: cpu_ns(s.proc.pid) for s in subs}
        t0 = time.monotonic()
        time.sleep(WINDOW_S)
        spent = time.monotonic() - t0
        for s in subs:
            if not s.alive():
                err = s.proc.stderr.read().decode(errors="replace") if s.proc.stderr else ""
                raise RuntimeError(f"{s.what} exited early ({s.proc.returncode}): {err[-500:]}")
            s.samples.append((cpu_ns(s.proc.pid) - before[s.key]) / 1e9 / spent * 100)
        log(f"  round {r + 1}: " + ", ".join(f"{s.key} {s.samples[-1]:.3f}%" for s in subs))


def wait_returns(fleet: Fleet, waiter: Subject) -> tuple[float, float]:
    """Kill every session: how long ``kill --all`` took, and how long after it returned
    ``wait`` did (it must say killed: exit status 1)."""
    t0 = time.monotonic()
    fleet.stop()
    killed = time.monotonic()
    try:
        waiter.proc.wait(20)
    except subprocess.TimeoutExpired:
        raise RuntimeError("zwarm wait did not return within 20 s of kill --all") from None
    if waiter.proc.returncode != 1:
        raise RuntimeError(f"zwarm wait exited {waiter.proc.returncode} after kill (want 1)")
    return killed - t0, time.monotonic() - killed


def figure(quick: bool) -> list[dict[str, Any]]:
    n, rounds = (10, 1) if quick else (50, 3)
    fleet = Fleet(n)
    subs: list[Subject] = []
    try:
        log(f"[idle] starting {n} sessions whose agents sleep")
        fleet.start()
        subs = subjects(fleet)
        log(f"[idle] measuring CPU over {rounds} x {WINDOW_S:.0f} s windows")
        measure(subs, rounds)
        after = wait_returns(fleet, subs[0])
        return rows(subs, after, load=os.getloadavg()[0])
    finally:
        for s in subs:
            s.stop()
        fleet.stop()
        fleet.cleanup()


def rows(subs: list[Subject], after_kill: tuple[float, float], load: float) -> list[dict[str, Any]]:
    ref = statistics.median(subs[-1].samples)
    out = []
    for s in subs[:-1]:
        pct = statistics.median(s.samples)
        out.append(
            {
                "what": s.what,
                "value": f"{pct:.3f}% of a core",
                "reference": f"stat loop {ref:.3f}%",
                "ratio": f"{pct / ref:.2f}× ref" if ref > 0 else "-",
                "target": f"< {TARGET_PCT}%",
                "result": "PASS" if pct < TARGET_PCT else "MISS",
            }
        )
    out.append(
        {
            "what": "zwarm wait returns after kill --all returned",
            "value": f"{after_kill[1]:.2f} s",
            "reference": f"kill --all took {after_kill[0]:.2f} s",
            "ratio": "",
            "target": "",
            "result": "info",
        }
    )
    out.append(
        {
            "what": "load average (1 min) at the end",
            "value": f"{load:.2f}",
            "reference": "",
            "ratio": "",
            "target": "",
            "result": "info",
        }
    )
    return out


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    for r in figure(quick):
        print(
            " | ".join(
                str(r[k]) for k in ("what", "value", "reference", "ratio", "target", "result")
            )
        )
    return 0


if __name__ == "__main__":
    # the bench trusts the configs it writes in a trust file of its own, never the user's
    os.environ["XDG_CONFIG_HOME"] = str(HERE / ".cache" / "config")  # its own trust file
    sys.exit(main())
