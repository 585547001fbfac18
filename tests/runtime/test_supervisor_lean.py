"""The supervisor stays lean (issue 16): what one turn imports, and how it finds leftovers.

Each test runs a real turn of the fake agent under a supervisor started through a wrapper
(``Env.python``): the wrapper runs ``zwarm.runtime.supervisor.main`` exactly as ``python -I
-m zwarm.runtime.supervisor`` would, with the /proc marker scan made to fail, and writes
``sys.modules`` when it ends. So a change that pulls a heavy import into the supervisor, or
that makes it scan every process of the machine at the end of each turn, fails here.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from zwarm.api import Zwarm
from zwarm.env import Env

# each test runs a real turn, and pins what it imports and scans (docs/testing.md, perf)
pytestmark = [pytest.mark.subprocess, pytest.mark.perf]

# never needed for a turn: the CLI and its rendering, the API facade, psutil (the supervisor
# reads /proc), OpenSSL (hashlib), the archive modules shutil loads, traceback (errors only),
# dataclasses (zwarm's records are msgspec Structs; not "inspect": some typing_extensions
# versions, which msgspec imports, import it themselves)
FORBIDDEN = (
    "dataclasses",
    "click",
    "rich",
    "psutil",
    "zwarm.api",
    "zwarm.cli",
    "zwarm.orchestrator",
    "zwarm.serve",
    "hashlib",
    "_hashlib",
    "shutil",
    "bz2",
    "lzma",
    "traceback",
)

WRAPPER = """#!{python} -I
import sys
from pathlib import Path

from zwarm.system import procs

from zwarm.runtime import supervisor


def _no_scan():
    raise AssertionError("the supervisor scanned /proc for its session's processes")


procs._MARKED._scan = _no_scan
state, sid = sys.argv[-2:]
try:
    rc = supervisor.main([state, sid])
finally:
    _tmp = Path(__file__).with_name(".modules-" + sid)  # renamed whole: never read half-written
    _tmp.write_text("\\n".join(sorted(sys.modules)))
    _tmp.rename(_tmp.with_name("modules-" + sid))
sys.exit(rc)
"""


def _turn(zw: Any, **fake: str) -> tuple[str, list[str]]:
    """Run one turn of the fake codex under the wrapper; (session id, modules it imported)."""
    wrapper = zw.tmp / "supervisor-wrapper"
    wrapper.write_text(WRAPPER.format(python=sys.executable))
    wrapper.chmod(0o755)
    environ = {**zw.env, "FAKE_REPLAY": zw.sample("codex_simple"), **fake}
    api = Zwarm(env=Env(state_dir=zw.state_dir, environ=environ, cwd=zw.cwd, python=str(wrapper)))
    sid: str = api.spawn("say ok", adapter="codex", cwd=zw.cwd).id
    out = wrapper.with_name("modules-" + sid)
    deadline = time.monotonic() + 60
    while not out.exists():
        assert time.monotonic() < deadline, "the supervisor did not end"
        time.sleep(0.05)
    log = (zw.session_dir(sid) / "supervisor.log").read_text()
    assert zw.meta(sid)["status"] == "completed", log
    return sid, out.read_text().split("\n")


def test_a_turn_imports_nothing_heavy(zw: Any) -> None:
    _, modules = _turn(zw)
    heavy = [m for m in modules if m.split(".")[0] in FORBIDDEN or m in FORBIDDEN]
    heavy += [m for m in modules for f in FORBIDDEN if "." in f and m.startswith(f + ".")]
    assert not heavy, f"the supervisor imported {sorted(set(heavy))}"
    assert "zwarm.engine.manager" in modules  # it did run the turn through the engine


def test_what_left_the_group_is_stopped_without_a_scan(zw: Any) -> None:
    """An agent leaves a ``setsid`` child behind: the supervisor, the child subreaper of its
    agents, finds it among its own descendants (the scan of /proc would fail) and stops it."""
    pidfile = zw.tmp / "left.pid"
    shell = f"setsid sleep 302 </dev/null >/dev/null 2>&1 & echo $! > {pidfile}"
    _turn(zw, FAKE_SHELL=shell)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while _is_sleep_302(pid):
        assert time.monotonic() < deadline, "the setsid child outlived its turn"
        time.sleep(0.05)


def _is_sleep_302(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return cmd == b"sleep\x00302\x00" and state not in (b"Z", b"X") and pid != os.getpid()


def test_the_gc_is_on_once_it_waits_for_its_agent() -> None:
    """Start-up runs without the cyclic GC; a turn (or a parked wait) can be long, so the
    GC is back on, start-up objects frozen, as soon as the supervisor waits."""
    import gc
    import subprocess

    from zwarm.runtime import supervisor

    agent = subprocess.Popen(["true"], start_new_session=True)
    gc.disable()
    try:
        assert supervisor._wait(agent.pid, "no-such-session", None) is False
        assert gc.isenabled()
    finally:
        agent.wait()
        gc.unfreeze()
        gc.enable()


def test_its_exit_keeps_its_output_and_status() -> None:
    """It ends with ``os._exit`` (no interpreter teardown): what it printed is flushed first
    and its exit status is kept."""
    import subprocess

    res = subprocess.run(
        [sys.executable, "-I", "-m", "zwarm.runtime.supervisor", "only-one-arg"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert res.stderr.startswith("usage: python -I -m zwarm.runtime.supervisor"), res.stderr
