"""Helpers for the fleet-control suite: a configured world, an agent wrapper that counts how
many agents run at once, the scheduler lock held from a test, fake agent output made to order.

Every wait is on a condition with a generous deadline (``wait_until``), never on elapsed time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support import FAKE_BIN, ZW, ZWARM_BIN


def configure(zw: ZW, text: str) -> None:
    """Create the state dir and write (and trust) its config.toml."""
    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config(text)


_TALLY = """#!{python}
import fcntl, json, os, subprocess, sys
state = {state!r}{per}
def change(by):
    fd = os.open(state + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        try:
            d = json.load(open(state))
        except (OSError, ValueError):
            d = {{"now": 0, "most": 0, "runs": 0}}
        d["now"] += by
        d["most"] = max(d["most"], d["now"])
        d["runs"] += by > 0
        json.dump(d, open(state, "w"))
    finally:
        os.close(fd)
change(1)
try:
    rc = subprocess.call([{fake!r}, *sys.argv[1:]])
finally:
    change(-1)
sys.exit(rc)
"""


def tally(zw: ZW, per: str = "", **extra: str) -> tuple[dict[str, str], Path]:
    """``env_extra`` whose agents (codex and claude) count themselves while they run, and the
    JSON file with the count: ``now`` running, ``most`` at once, ``runs`` started. With
    ``per`` (an env var's name, e.g. an account's ``ACCT``), one count file per value of that
    variable in the agent's environment: ``<file>.<value>`` (``counts(file, value)``)."""
    suffix = f"-{per}" if per else ""
    bindir = zw.tmp / f"tallybin{suffix}"
    state = zw.tmp / f"tally{suffix}.json"
    code = f' + "." + os.environ.get({per!r}, "none")' if per else ""
    if not bindir.is_dir():
        bindir.mkdir()
        for name in ("codex", "claude"):
            script = bindir / name
            fake = str(FAKE_BIN / name)
            text = _TALLY.format(python=sys.executable, state=str(state), per=code, fake=fake)
            script.write_text(text)
            script.chmod(0o755)
    path = os.pathsep.join([str(bindir), zw.env["PATH"]])
    return {"PATH": path, **extra}, state


def spawn_at_once(zw: ZW, env: dict[str, str], n: int, *args: str) -> list[str]:
    """Run ``zwarm spawn "task <i>" ARGS`` ``n`` times at once (each its own process, with
    the whole environment ``env``); each must succeed; returns the session ids in order."""
    procs = [
        subprocess.Popen(
            [str(ZWARM_BIN), "spawn", f"task {i}", *args],
            env=env,
            cwd=zw.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(n)
    ]
    ids = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        ids.append(out.decode().strip())
    return ids


def counts(state: Path, value: str | None = None) -> dict[str, int]:
    """The count in ``tally``'s file (``value``: the one for that value of its ``per``)."""
    try:
        got: dict[str, int] = json.loads(Path(f"{state}.{value}" if value else state).read_text())
        return got
    except (OSError, ValueError):
        return {"now": 0, "most": 0, "runs": 0}


@contextlib.contextmanager
def held_scheduler_lock(zw: ZW) -> Iterator[None]:
    """Hold the state dir's scheduler lock, as a pass does (``engine.scheduler``)."""
    d = zw.state_dir / "scheduler"
    d.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def jsonl(path: Path, *events: dict[str, Any]) -> str:
    """Write ``events`` as a JSONL file for the fake agent to replay; returns its path."""
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return str(path)
