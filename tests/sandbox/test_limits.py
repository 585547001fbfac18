"""A sandboxed turn's limits (``zwarm.sandbox.limits``, issue 34): ``[sandbox] memory``,
``cpus``, ``pids`` hold on the agent and all it starts, through a cgroup its supervisor makes
and removes (v1 on this machine kind), else rlimits; how each held, or why not, is recorded on
the turn and shown. Real programs throughout: bubblewrap, the cgroup file system, zwarm
subprocesses, the fake agent (``FAKE_ALLOC_MB`` has it allocate, ``FAKE_SHELL`` fork)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support import SAMPLES, ZW, wait_until
from zwarm.sandbox import limits

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is not installed"
)


def _config(zw: ZW, extra: str) -> None:
    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config(f'[sandbox]\nread_only = ["{SAMPLES}"]\n{extra}')


def _env(zw: ZW, **extra: str) -> dict[str, str]:
    return {"FAKE_RECORD": "", **zw.replay("codex_simple"), **extra}


def _cgroup(key: str) -> str:
    """Where this machine makes a turn's cgroup for limit ``key`` (skips where it has none:
    then the rlimit fallback, tested below, is what holds)."""
    how, where = limits.methods({})[key]
    if not how.startswith("cgroup"):
        pytest.skip(f"no writable cgroup for {key} here ({where})")
    return where


def _left(parent: str, pid: int) -> list[str]:
    """The turn cgroups a supervisor (``pid``) left under ``parent``."""
    return [n for n in os.listdir(parent) if n.startswith(f"{limits.PREFIX}{pid}-")]


def test_a_turn_past_its_memory_limit_is_killed_and_recorded_out_of_memory(zw: ZW) -> None:
    parent = _cgroup("memory")
    _config(zw, 'memory = "64M"\n')
    sid = zw.spawn("--sandbox", "bwrap", "big", env_extra=_env(zw, FAKE_ALLOC_MB="512"))
    zw.wait(sid)
    show = zw.json("show", sid)
    turn = show["turns_detail"][0]
    assert show["status"] == "failed" and turn["reason"] == "out_of_memory", show
    assert "out of memory" in turn["error"] and "[sandbox] memory" in turn["error"], turn
    assert turn["limits"].startswith("memory 64M via cgroup"), turn
    assert not (zw.cwd / "alloc.txt").exists()
    assert (
        _left(parent, zw.meta(sid)["turns"][0]["supervisor"]["pid"]) == []
    )  # its supervisor removed it
    text = zw.run("show", sid, check=True).stdout
    assert "memory 64M via cgroup" in text, text


def test_a_turn_within_its_limits_completes_and_says_how_they_held(zw: ZW) -> None:
    _cgroup("memory")
    _config(zw, 'memory = "256M"\ncpus = 0.5\npids = 64\n')
    sid = zw.spawn("--sandbox", "bwrap", "small", env_extra=_env(zw, FAKE_ALLOC_MB="16"))
    zw.wait(sid)
    show = zw.json("show", sid)
    turn = show["turns_detail"][0]
    assert show["status"] == "completed", show
    assert (zw.cwd / "alloc.txt").read_text() == "allocated\n"
    assert "memory 256M via cgroup" in turn["limits"] and "cpus 0.5 via" in turn["limits"]
    assert "pids 64 via" in turn["limits"], turn


def test_a_fork_bomb_past_pids_fails_inside_and_the_host_is_unhurt(zw: ZW) -> None:
    parent = _cgroup("pids")
    _config(zw, "pids = 24\n")
    # forks sleepers until the kernel refuses, writing how many it got (at most 200)
    bomb = (
        "python3 -c 'import os,time\n"
        "n=0\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        pid=os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid==0:\n"
        "        time.sleep(60); os._exit(0)\n"
        "    n+=1\n"
        'open("forked.txt","w").write(str(n))\''
    )
    sid = zw.spawn("--sandbox", "bwrap", "bomb", env_extra=_env(zw, FAKE_SHELL=bomb))
    zw.wait(sid)
    show = zw.json("show", sid)
    turn = show["turns_detail"][0]
    forked = int((zw.cwd / "forked.txt").read_text())
    assert 0 < forked < 24, forked  # refused inside, at the limit
    assert show["status"] == "completed" and "pids 24 via cgroup" in turn["limits"], show
    assert _left(parent, zw.meta(sid)["turns"][0]["supervisor"]["pid"]) == []
    # nothing of it is left running, and the host still starts processes
    assert not [p for p in psutil.process_iter(["cmdline"]) if "forked.txt" in str(p.info)]
    assert psutil.Process().children() is not None and os.system("true") == 0


def test_the_rlimit_fallback_still_limits_memory(zw: ZW) -> None:
    _config(zw, 'memory = "256M"\n')
    forced = {limits.FORCE_VAR: "rlimit"}  # zwarm's own environment, never a file
    sid = zw.spawn(
        "--sandbox",
        "bwrap",
        "big",
        env_extra={**_env(zw, FAKE_ALLOC_MB="512", FAKE_SHELL="env > agent-env.txt"), **forced},
    )
    zw.wait(sid)
    show = zw.json("show", sid)
    turn = show["turns_detail"][0]
    assert show["status"] == "failed", show
    assert turn["limits"] == "memory 256M via rlimit (RLIMIT_AS)", turn
    assert not (zw.cwd / "alloc.txt").exists()
    # the override is the supervisor's: the agent (and what it would spawn) does not get it
    seen = (zw.cwd / "agent-env.txt").read_text()
    assert "ZWARM_PARENT_SESSION=" in seen and limits.FORCE_VAR not in seen
    assert "MemoryError" in zw.run("logs", sid, "--stderr").stdout + turn.get("error", "")


def test_a_limit_the_machine_cannot_apply_is_said_not_dropped(zw: ZW) -> None:
    _config(zw, "cpus = 1.5\n")
    forced = {limits.FORCE_VAR: "rlimit"}  # no cgroup: cpus has no rlimit
    sid = zw.spawn("--sandbox", "bwrap", "t", env_extra={**_env(zw), **forced})
    zw.wait(sid)
    turn = zw.json("show", sid)["turns_detail"][0]
    assert turn["limits"] == "cpus 1.5 NOT applied (forced to rlimits)", turn
    assert "cpus 1.5 NOT applied" in zw.run("show", sid, check=True).stdout


def test_a_killed_turn_leaves_no_cgroup_and_a_lost_supervisors_is_swept(zw: ZW) -> None:
    parent = _cgroup("memory")
    _config(zw, 'memory = "128M"\n')
    env = _env(zw, FAKE_HANG="1")
    sid = zw.spawn("--sandbox", "bwrap", "hang", env_extra=env)
    wait_until(lambda: zw.meta(sid)["turns"][0].get("agent"))
    sup = zw.meta(sid)["turns"][0]["supervisor"]["pid"]
    assert len(_left(parent, sup)) == 1
    zw.run("kill", sid, check=True)
    wait_until(lambda: zw.meta(sid)["status"] == "killed")
    wait_until(lambda: not psutil.pid_exists(sup) or not _left(parent, sup))
    assert _left(parent, sup) == []
    # a supervisor SIGKILLed mid-turn leaves its cgroup: the next sandboxed turn sweeps it
    lost = zw.spawn("--sandbox", "bwrap", "hang", env_extra=env)
    wait_until(lambda: zw.meta(lost)["turns"][0].get("agent"))
    t = zw.meta(lost)["turns"][0]
    left = _left(parent, t["supervisor"]["pid"])
    assert len(left) == 1
    os.kill(t["supervisor"]["pid"], signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(t["supervisor"]["pid"]))
    # (any zwarm's sandboxed turn sweeps: one a concurrent test runs may come first)
    zw.run("kill", lost)  # its agent (a zwarm kill finds it by its marker)
    nxt = zw.spawn("--sandbox", "bwrap", "next", env_extra=_env(zw))
    zw.wait(nxt)
    assert not Path(parent, left[0]).exists()


def test_tightening_a_limit_needs_no_trust_and_loosening_one_does(zw: ZW) -> None:
    _config(zw, 'memory = "1G"\npids = 64\n[sandbox.codex]\ncpus = 1\n')
    path = zw.state_dir / "config.toml"
    env = _env(zw)
    base = f'[sandbox]\nread_only = ["{SAMPLES}"]\n'
    for text, says in [
        (base + 'memory = "2G"\npids = 64\n[sandbox.codex]\ncpus = 1\n', "sandbox.memory"),
        (base + 'memory = ""\npids = 64\n[sandbox.codex]\ncpus = 1\n', "sandbox.memory"),
        (base + 'memory = "1G"\npids = 0\n[sandbox.codex]\ncpus = 1\n', "sandbox.pids"),
        (base + 'memory = "1G"\npids = 64\n[sandbox.codex]\ncpus = 2\n', "sandbox.codex.cpus"),
        # the agent's own table is compared as used: its value, else [sandbox]'s
        (
            base + 'memory = "1G"\npids = 64\n[sandbox.codex]\nmemory = "4G"\ncpus = 1\n',
            "codex.memory",
        ),
        (base + 'memory = "1G"\npids = 64\n', "sandbox.codex.cpus"),
    ]:
        path.write_text(text)  # edited, not trusted
        res = zw.run("spawn", "--sandbox", "bwrap", "t", env_extra=env)
        assert res.returncode != 0 and says in res.stderr and "loosens" in res.stderr, (
            text,
            res.stderr,
        )
        assert "Traceback" not in res.stderr
    # tighter everywhere: used as it is, without zwarm trust
    path.write_text(base + 'memory = "512M"\npids = 32\n[sandbox.codex]\ncpus = 0.5\npids = 16\n')
    sid = zw.spawn("--sandbox", "bwrap", "t", env_extra=env)
    zw.wait(sid)
    turn = zw.json("show", sid)["turns_detail"][0]
    assert turn["limits"].startswith("memory 512M via"), turn
    assert "cpus 0.5 via" in turn["limits"] and "pids 16 via" in turn["limits"], turn


def test_a_bad_limit_is_one_error_line(zw: ZW) -> None:
    zw.state_dir.mkdir()
    for text, says in [
        ('[sandbox]\nmemory = "lots"\n', 'sandbox.memory must be a size ("512M", "2G")'),
        ('[sandbox]\nmemory = "512"\n', "sandbox.memory must be at least 1M"),
        ("[sandbox]\nmemory = 512\n", "sandbox.memory must be a string"),
        ("[sandbox]\npids = -1\n", "sandbox.pids must not be negative"),
        ("[sandbox]\ncpus = true\n", "sandbox.cpus must be"),
        ('[sandbox.codex]\npids = "x"\n', "sandbox.codex.pids must be an integer"),
        ('[sandbox.codex]\nmemory = "1Q"\n', "sandbox.codex.memory must be a size"),
        ("[sandbox.codex]\ncpus = -2\n", "sandbox.codex.cpus must be a non-negative number"),
    ]:
        zw.write_config(text)
        res = zw.run("spawn", "t")
        assert res.returncode != 0 and says in res.stderr, (text, res.stderr)
        assert "Traceback" not in res.stderr


def test_sandbox_check_says_how_each_limit_would_be_applied(zw: ZW) -> None:
    got = zw.json("sandbox", "check")
    want = ", ".join(
        f"{k} via {how}" if how else f"{k} not available ({why})"
        for k, (how, why) in limits.methods({}).items()
    )
    assert got["limits"] == want, got
    table = zw.run("sandbox", "check", check=True).stdout
    assert f"limits: {want}" in table
    forced = zw.run("sandbox", "check", env_extra={limits.FORCE_VAR: "rlimit"}, check=True)
    assert "limits: memory via rlimit, cpus not available (forced to rlimits)" in forced.stdout


def _bridges(pid: int) -> list[Path]:
    return list(Path("/tmp").glob(f"zwarm-bridge-{pid}-*"))


def test_a_signal_killed_turn_leaves_no_bridge_directory_behind(zw: ZW) -> None:
    _config(zw, "ports = [47999]\n")  # bridged: the turn has a bridge directory in /tmp
    env = _env(zw, FAKE_HANG="1")
    # its outer shell SIGKILLed (it removes the directory as it ends, when it can): the
    # supervisor removes it after the turn
    sid = zw.spawn("--sandbox", "bwrap", "hang", env_extra=env)
    wait_until(lambda: zw.meta(sid)["turns"][0].get("agent"))
    t = zw.meta(sid)["turns"][0]
    wait_until(lambda: len(_bridges(t["supervisor"]["pid"])) == 1)
    os.killpg(t["agent"]["pid"], signal.SIGKILL)
    wait_until(lambda: zw.meta(sid)["status"] not in ("running",))
    wait_until(lambda: not _bridges(t["supervisor"]["pid"]))
    # its supervisor SIGKILLed too: the directory stays until the next sandboxed turn
    lost = zw.spawn("--sandbox", "bwrap", "hang", env_extra=env)
    wait_until(lambda: zw.meta(lost)["turns"][0].get("agent"))
    t = zw.meta(lost)["turns"][0]
    wait_until(lambda: len(_bridges(t["supervisor"]["pid"])) == 1)
    left = _bridges(t["supervisor"]["pid"])
    os.kill(t["supervisor"]["pid"], signal.SIGKILL)
    os.killpg(t["agent"]["pid"], signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(t["supervisor"]["pid"]))
    # (any zwarm's sandboxed turn sweeps: one a concurrent test runs may come first)
    zw.run("kill", lost)
    nxt = zw.spawn("--sandbox", "bwrap", "next", env_extra=_env(zw))
    zw.wait(nxt)
    assert not left[0].exists()
    # and zwarm sandbox check sweeps one as well; never a link, nor another uid's
    other = Path("/tmp") / "zwarm-bridge-999999999-1-0000abcd"
    other.symlink_to(zw.tmp)
    try:
        zw.run("sandbox", "check", check=True)
        assert other.is_symlink() and zw.tmp.exists()
    finally:
        other.unlink()


def test_a_timed_out_turn_leaves_no_cgroup(zw: ZW) -> None:
    parent = _cgroup("pids")
    _config(zw, "pids = 64\n")
    env = _env(zw, FAKE_HANG="1")
    sid = zw.spawn("--sandbox", "bwrap", "--timeout", "1", "slow", env_extra=env)
    wait_until(lambda: zw.meta(sid)["turns"][0].get("supervisor"))
    sup = zw.meta(sid)["turns"][0]["supervisor"]["pid"]
    zw.wait(sid)
    m = zw.meta(sid)
    assert m["status"] == "failed" and m["turns"][0]["reason"] == "timeout", m
    wait_until(lambda: not _left(parent, sup))


def test_limits_without_the_sandbox_are_said_not_applied(zw: ZW) -> None:
    _config(zw, 'memory = "1G"\n')
    sid = zw.spawn("--sandbox", "off", "t", env_extra=_env(zw))
    zw.wait(sid)
    turn = zw.json("show", sid)["turns_detail"][0]
    assert turn["limits"] == "none applied: the sandbox is off (they hold in it only)", turn


FOREIGN_TURN = """
import os, sys, time
from zwarm.sandbox import limits
applied = limits.make(limits.Limits(pids=64))
for d in applied.group.dirs:
    with open(os.path.join(d, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
print(" ".join(applied.group.dirs), flush=True)
time.sleep(600)
"""


def _in_pid_namespace(script: str, cwd: Path, **kw: Any) -> Any:
    """``script`` run by Python in a pid namespace of its own (as in a container), its
    stdout piped; skipped where no pid namespace can be made (the CI machine can)."""
    import subprocess
    import sys

    probe = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot make a pid namespace here")
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", script]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=cwd, **kw)


def test_sweep_never_touches_a_live_turns_cgroup_made_in_another_pid_namespace(
    tmp_path: Path,
) -> None:
    """Regression: ``sweep`` took the pid in a turn cgroup's name for a pid of its own pid
    namespace, so a zwarm running in a container (its own pid namespace) that shares the
    cgroup hierarchy had its live turns' cgroups removed and their processes SIGKILLed by
    the next sandboxed turn outside (pid 1 there is not the pid 1 it named)."""
    import contextlib

    _cgroup("pids")
    dirs: list[str] = []
    inside: list[int] = []
    proc = _in_pid_namespace(FOREIGN_TURN, tmp_path)
    try:
        assert proc.stdout is not None
        dirs = proc.stdout.readline().decode().split()
        assert dirs and all(Path(d).is_dir() for d in dirs), dirs
        inside = [int(p) for p in Path(dirs[0], "cgroup.procs").read_text().split()]
        assert inside, dirs
        swept = limits.sweep()
        assert not set(swept) & set(dirs), swept
        assert all(Path(d).is_dir() for d in dirs)
        assert all(psutil.pid_exists(p) for p in inside)
        assert proc.poll() is None
    finally:
        for p in inside:  # (the namespace's first process: unshare does not pass SIGKILL on)
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        proc.kill()
        proc.wait(10)
        for d in dirs:
            if Path(d).is_dir():
                wait_until(lambda d=d: not Path(d, "cgroup.procs").read_text().split())
                os.rmdir(d)


FOREIGN_BRIDGE = """
import time
from zwarm.sandbox import bwrap
print(bwrap.bridge_dir(), flush=True)
time.sleep(600)
"""


def test_sweep_never_removes_a_live_bridge_made_in_another_pid_namespace(
    tmp_path: Path,
) -> None:
    """Regression: like the cgroups', a port bridge's directory in /tmp named its maker by a
    pid of the maker's pid namespace, and ``sweep_bridges`` looked that pid up in its own: a
    container sharing /tmp (an Apptainer one, with its own pid namespace) lost its live
    turns' bridge sockets to the next sandboxed turn outside."""

    from zwarm.sandbox import bwrap

    proc = _in_pid_namespace(FOREIGN_BRIDGE, tmp_path, start_new_session=True)
    d = ""
    try:
        assert proc.stdout is not None
        d = proc.stdout.readline().decode().strip()
        assert d and Path(d).is_dir(), d
        assert d not in bwrap.sweep_bridges()
        assert Path(d).is_dir() and proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        if d:
            bwrap.remove_bridge(d)
