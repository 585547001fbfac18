"""Shared test helpers: plain functions, classes and constants (fixtures are in conftest.py).

This package's modules hold what the tests of one component share with others (``serve``: a
real ``zwarm serve`` and its HTTP/SSE client; ``workspace``: git repositories; ``slurm``: the
cluster's job readers; ``agents``: the conformance kit's agent names; ``faults``: process
identities, victims, meta.json surgery; ``fleet``: the fleet tests' agent tally and scheduler
lock; ``orch`` and ``mcp_client``: the orchestrator's world and MCP client; ``real``: the
real agent CLIs' world; ``tmux``: a real terminal). This module owns the
test tiers' table (``TIERS``, ``TIER_BY_PATH``: docs/testing.md), the paths
(``ROOT``, ``SAMPLES``, ``FAKE_BIN``, ``ZWARM_BIN``), ``wait_until``, ``wait_status``, the
``ZW`` world class that the ``zw`` fixture (tests/conftest.py) builds, ``make_env``, the
fork-server finders and the helpers a few tests share (``StdoutRecorder``, ``parked_note``,
``midday_tz``).
Test files import these from here, never from a ``conftest.py``. Must stay true: nothing here
touches anything outside the test's ``tmp_path``; every wait is on a condition with a generous
deadline, never on elapsed time; a test's config.toml is trusted only by writing it through
``ZW.write_config`` (or ``zwarm.trust.trust_config``): there is no switch that trusts every
config.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SAMPLES = TESTS / "fixtures" / "samples"
FAKE_BIN = TESTS / "fakes" / "bin"
VENV_BIN = Path(sys.executable).parent
ZWARM_BIN = VENV_BIN / "zwarm" if (VENV_BIN / "zwarm").exists() else ROOT / ".venv/bin/zwarm"

# The tiers (docs/testing.md): every test gets exactly one of TIERS, by folder (TIER_BY_PATH,
# first match) unless it carries one itself; ``slow`` and ``perf`` are added on top.
TIERS = ("unit", "subprocess", "real", "slurm", "hosts", "browser")


TIER_BY_PATH: tuple[tuple[str, str], ...] = (
    ("tests/agents/real/", "real"),
    ("tests/launchers/slurm/", "slurm"),
    ("tests/launchers/ssh/", "hosts"),
    ("tests/serve/test_dashboard.py", "browser"),
    # files moved from tests/unit/ whose own tests carry other tiers (testmove.py)
    ("tests/store/test_listing_gc.py", "unit"),
    ("tests/store/test_rowcache.py", "unit"),
    ("tests/launchers/test_slurm_launcher.py", "unit"),
    ("tests/store/test_store.py", "unit"),
    ("tests/runtime/test_supervisor_cpu.py", "unit"),
    ("tests/", "subprocess"),
)

# Generous: the machine is small and shared.
DEFAULT_TIMEOUT = 60.0


class StdoutRecorder:
    """A stand-in for ``sys.stdout`` (monkeypatched in): records each write to its binary
    buffer, so a test sees how output was chunked as well as what it was."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.buffer = self

    def write(self, data: Any) -> int:
        self.writes.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def value(self) -> bytes:
        return b"".join(self.writes)


def follow_until_released(zw: Any, sid: str, release: Callable[[], object]) -> bytes:
    """``zwarm logs SID -f`` while the turn is held: still following after a second (it must
    not end early), then ``release()``, then everything it printed once the turn ended (exit
    0 asserted)."""
    import subprocess

    argv = [str(ZWARM_BIN), "logs", sid, "--follow"]
    pipe = subprocess.PIPE
    follow = subprocess.Popen(argv, env=zw.env, cwd=zw.cwd, stdout=pipe, stderr=pipe)
    try:
        try:
            follow.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass  # still following while the turn is held
        else:
            raise AssertionError(f"logs -f ended while the turn was held: {follow.returncode}")
        release()
        out, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
    assert follow.returncode == 0, err
    return out


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def wait_status(
    zw: ZW, sid: str, *statuses: str, timeout: float = DEFAULT_TIMEOUT
) -> dict[str, Any]:
    """Wait, reading meta.json only (nothing reconciled or scheduled), until session ``sid``
    is in one of ``statuses``; its meta.json then."""
    got: dict[str, Any] = wait_until(
        lambda: (lambda m: m if m["status"] in statuses else None)(zw.meta(sid)),
        timeout=timeout,
        message=f"{sid[:8]} to become {'/'.join(statuses)}",
    )
    return got


def parked_note(until: str, run: Callable[[], str]) -> tuple[str, list[str]]:
    """What ``run()`` printed, and what it must show of a session parked until ``until``
    (ISO): ``parked until 00:41``, or ``parked until Sat 00:41`` when that is another day
    than the listing's. Made by zwarm's own formatter (``render.fleet_note``) for the
    instants just before and after ``run`` (they differ only if a day began meanwhile),
    each checked to hold the reset's local hour and minute: right at any hour."""
    from zwarm.cli.render import fleet_note
    from zwarm.env import parse_iso

    row = {"status": "parked", "parked_until": until}
    before = time.time()
    out = run()
    after = time.time()
    want = [f"parked{fleet_note(row, now)}" for now in (before, after)]
    clock = time.strftime("%H:%M", time.localtime(parse_iso(until)))
    assert all(w.endswith(f" {clock}") for w in want), (want, clock)
    return out, want


def midday_tz() -> str:
    """A POSIX ``TZ`` in which it is now between 12:00 and 13:00: a test that counts local
    days runs in it (this process after ``time.tzset()``, and its zwarm subprocesses), so
    that no day begins while it runs, whatever the hour."""
    off = (12 - time.gmtime().tm_hour) % 24  # local = UTC + off hours
    off = off - 24 if off > 12 else off
    return f"ZWT{-off}"  # POSIX counts west of Greenwich as positive


@dataclass
class ZW:
    """One isolated zwarm world: a state dir, a cwd, an environment, helpers to drive it."""

    tmp: Path
    state_dir: Path
    cwd: Path
    env: dict[str, str]
    record: Path  # FAKE_RECORD directory the fake agents write argv/prompt into

    def run(
        self,
        *args: str,
        input: str | bytes | None = None,
        env_extra: Mapping[str, str] | None = None,
        check: bool | None = None,
        cwd: Path | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the installed ``zwarm`` CLI; text output. ``check=True`` asserts exit 0."""
        env = dict(self.env)
        if env_extra:
            env.update(env_extra)
        data = input.encode("utf-8") if isinstance(input, str) else input
        proc = subprocess.run(
            [str(ZWARM_BIN), *args],
            input=data,
            capture_output=True,
            env=env,
            cwd=str(cwd or self.cwd),
            timeout=timeout,
        )
        res = subprocess.CompletedProcess(
            proc.args,
            proc.returncode,
            proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"),
        )
        if check:
            assert res.returncode == 0, (
                f"zwarm {' '.join(args)} exited {res.returncode}\n"
                f"stdout: {res.stdout}\nstderr: {res.stderr}"
            )
        return res

    def run_bytes(
        self,
        *args: str,
        input: bytes | None = None,
        env_extra: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[bytes]:
        """Like ``run`` but returns raw bytes (for ``logs``)."""
        env = dict(self.env)
        if env_extra:
            env.update(env_extra)
        return subprocess.run(
            [str(ZWARM_BIN), *args],
            input=input,
            capture_output=True,
            env=env,
            cwd=str(self.cwd),
            timeout=timeout,
        )

    def python(
        self,
        code: str,
        *args: str,
        env_extra: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """``python -c code args`` (this interpreter) in this world's cwd and environment; text
        output, not checked."""
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            env={**self.env, **(env_extra or {})},
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def json(self, *args: str, **kw: Any) -> Any:
        """Run a command with ``--json`` appended and parse stdout (asserts exit 0)."""
        res = self.run(*args, "--json", check=True, **kw)
        return json.loads(res.stdout)

    def api(self, env_extra: Mapping[str, str] | None = None) -> Any:
        """A ``zwarm.api.Zwarm`` on the same state dir and environment."""
        from zwarm.api import Zwarm
        from zwarm.env import Env

        environ = dict(self.env)
        if env_extra:
            environ.update(env_extra)
        return Zwarm(env=Env(state_dir=self.state_dir, environ=environ, cwd=self.cwd))

    def write_config(self, text: str | bytes) -> Path:
        """Write ``config.toml`` in the state dir (which must exist) and trust it, as a user
        who wrote it would (``zwarm trust``): the test's fake-agent commands then run."""
        from zwarm.trust_plan import trust_config

        path = self.state_dir / "config.toml"
        data = text.encode("utf-8") if isinstance(text, str) else text
        path.write_bytes(data)
        trust_config(path, data, environ=self.env)
        return path

    def sample(self, name: str) -> str:
        """Absolute path of a sample JSONL, e.g. ``zw.sample("codex_simple")``."""
        p = SAMPLES / (name if name.endswith(".jsonl") else name + ".jsonl")
        assert p.exists(), p
        return str(p)

    def sample_bytes(self, name: str) -> bytes:
        return Path(self.sample(name)).read_bytes()

    def replay(self, name: str, **extra: str) -> dict[str, str]:
        """``env_extra`` making the fake agent replay a sample (plus more FAKE_* settings)."""
        return {"FAKE_REPLAY": self.sample(name), **extra}

    def recorded(self, n: int | None = None) -> tuple[dict[str, Any], bytes]:
        """(argv record, prompt bytes) of fake-agent call ``n`` (default: the latest)."""
        calls = sorted(int(p.stem[4:]) for p in self.record.glob("argv*.json"))
        assert calls, "the fake agent was never called"
        k = calls[-1] if n is None else n
        argv = json.loads((self.record / f"argv{k}.json").read_text())
        return argv, (self.record / f"prompt{k}.bin").read_bytes()

    def calls(self) -> int:
        return len(list(self.record.glob("argv*.json")))

    # ----- sessions, as a test sees them
    def spawn(
        self,
        *args: str,
        env_extra: Mapping[str, str] | None = None,
        input: str | bytes | None = None,
    ) -> str:
        """``zwarm spawn ARGS``; asserts exit 0 and returns the printed session id."""
        res = self.run("spawn", *args, env_extra=env_extra, input=input, check=True)
        sid = res.stdout.strip()
        assert len(sid) == 36 and sid.count("-") == 4, res.stdout
        return sid

    def wait(
        self, *sids: str, timeout: float = DEFAULT_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        return self.run("wait", *sids, "--timeout", str(timeout), timeout=timeout + 60)

    def session_dir(self, sid: str) -> Path:
        return self.state_dir / "sessions" / sid

    def meta(self, sid: str) -> dict[str, Any]:
        """meta.json as stored (read directly, no reconciliation)."""
        return json.loads((self.session_dir(sid) / "meta.json").read_bytes())

    def turn_file(self, sid: str, n: int, ext: str = "jsonl") -> Path:
        return self.session_dir(sid) / "turns" / f"turn_{n}.{ext}"

    def gated(self, hold: Path, **extra: str) -> dict[str, str]:
        """``env_extra`` whose agents wait while ``hold`` exists, then run the fake agent.

        Every turn run by a supervisor started with this env is gated, so a test can keep a
        turn running for as long as it needs, with no sleeps, then let it finish.
        """
        gate_bin = self.tmp / "gatebin"
        if not gate_bin.is_dir():
            gate_bin.mkdir()
            for name in ("codex", "claude"):
                script = gate_bin / name
                script.write_text(_GATE.format(python=sys.executable, fake=FAKE_BIN / name))
                script.chmod(0o755)
        path = os.pathsep.join([str(gate_bin), self.env["PATH"]])
        return {"PATH": path, "FAKE_GATE_HOLD": str(hold), **extra}


_GATE = """#!{python}
import os, sys, time
hold = os.environ.get("FAKE_GATE_HOLD")
while hold and os.path.exists(hold):
    time.sleep(0.02)
os.execv("{fake}", ["{fake}", *sys.argv[1:]])
"""


def make_env(tmp: Path, state_dir: Path, record: Path) -> dict[str, str]:
    home = tmp / "home"
    tmpdir = tmp / "tmpdir"
    home.mkdir(exist_ok=True)
    tmpdir.mkdir(exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ZWARM_", "FAKE_", "OPENAI_", "ANTHROPIC_", "CODEX_"))
    }
    env.update(
        PATH=os.pathsep.join([str(FAKE_BIN), str(VENV_BIN), env.get("PATH", "/usr/bin:/bin")]),
        ZWARM_DIR=str(state_dir),
        HOME=str(home),
        TMPDIR=str(tmpdir),
        FAKE_RECORD=str(record),
        PYTHONDONTWRITEBYTECODE="1",
        NO_COLOR="1",
        COLUMNS="200",
    )
    return env


def forkservers(under: Path, among: list[int] | None = None) -> list[int]:
    """Pids of the live fork servers (of those ``among``) whose state dir is ``under`` or
    below it."""
    found = []
    for entry in os.listdir("/proc") if among is None else map(str, among):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        if b"zwarm.runtime.forkserver" not in args or state.rsplit(b") ", 1)[-1][:1] == b"Z":
            continue
        if any(a == bytes(under) or a.startswith(bytes(under).rstrip(b"/") + b"/") for a in args):
            found.append(int(entry))
    return found


def stop_forkservers(under: Path) -> None:

    for pid in forkservers(under):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def kill_leftovers(world: ZW) -> None:
    if not (world.state_dir / "sessions").is_dir():
        return
    try:
        world.api().kill(all_=True)
    except Exception as e:  # teardown must not mask the test's own result
        print(f"zw teardown: could not kill leftover sessions: {e}", file=sys.stderr)


def bare_session(*turns: Any) -> Any:
    """A ``Session`` record with ``turns`` and nothing else, for tests of the state machine."""
    from zwarm.model import Session

    s = Session(
        id="0" * 8 + "-0000-4000-8000-" + "0" * 12,
        adapter="codex",
        task="t",
        cwd="/tmp",
        created_at="2026-11-23T14:00:00+00:00",
        updated_at="2026-11-23T14:00:00+00:00",
    )
    s.turns.extend(turns)
    return s


def bare_turn(n: int, status: Any) -> Any:
    """Turn ``n`` of a ``bare_session``, in ``status``."""
    from zwarm.model import Turn

    return Turn(n, status, "m", "task", "2026-11-23T14:00:00+00:00")
