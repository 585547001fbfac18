"""The orchestrator's ``bash`` tool: cwd confinement, an allowlisted environment, a time limit
and an exit that leave nothing running (process group, setsid escapees, orphans), and output
bounded in memory and never spooled to disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.orchestrator.helpers import err, ok, write_config
from tests.support import ROOT, wait_until
from zwarm.orchestrator.bash import (
    BASH_TOOL,
    ENV_ALLOW,
    OUTPUT_HEAD,
    OUTPUT_TAIL,
    TOKEN_VAR,
    Output,
    run_bash,
)
from zwarm.orchestrator.tools import Toolbox
from zwarm.sandbox.run import _own_children, kill_everything


@pytest.fixture
def box(zw):
    def make(**env: str) -> Toolbox:
        return Toolbox(zw.api(env_extra=env), "orchestrate:test", extra=[BASH_TOOL])

    return make


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie counts: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


# bash -c leads its own session: loop until the setsid child has left it (field 6: session id)
LEFT = "until [ \"$(cut -d' ' -f6 /proc/$!/stat)\" != $$ ]; do sleep 0.01; done"


def wait_gone(*pidfiles: Path) -> None:
    for pidfile in pidfiles:
        wait_until(pidfile.exists, message=f"{pidfile.name} to be written")
        pid = int(pidfile.read_text())
        wait_until(lambda pid=pid: gone(pid), message=f"process {pid} ({pidfile.name}) to die")


# ---------------------------------------------------------------------------- running
def test_runs_in_the_working_directory(zw, box) -> None:
    (zw.cwd / "sub").mkdir()
    (zw.cwd / "sub" / "f.txt").write_text("content\n")
    r = ok(box().dispatch("bash", {"command": "pwd; cat sub/f.txt; echo $((6*7)); exit 3"}))
    assert r["exit_code"] == 3 and r["timed_out"] is False
    assert r["output"] == f"{zw.cwd.resolve()}\ncontent\n42\n"
    assert "killed_leftovers" not in r and "note" not in r
    r = ok(box().dispatch("bash", {"command": "pwd", "cwd": "sub"}))
    assert r["output"].strip() == str((zw.cwd / "sub").resolve())
    assert "outside the allowed roots" in err(box().dispatch("bash", {"command": "ls", "cwd": "/"}))
    assert "must not be empty" in err(box().dispatch("bash", {"command": ""}))


def test_command_text_is_bash_argv_not_interpolated(zw, box) -> None:
    weird = "echo 'a b' \"$HOME\" `echo x`; printf '%s\\n' \"$0\""
    r = ok(box().dispatch("bash", {"command": weird}))
    assert r["output"].splitlines() == [f"a b {zw.env['HOME']} x", "/bin/bash"]


def test_environment_is_an_allowlist(zw, box) -> None:
    write_config(zw, '[orchestrator]\napi_key_env = "MY_ORCH_KEY"\n')
    b = box(
        MY_ORCH_KEY="sk-mine",
        ZWARM_ORCH_API_KEY="sk-orch",
        OPENAI_API_KEY="sk-openai",
        ANTHROPIC_API_KEY="sk-anthropic",
        AWS_SECRET_ACCESS_KEY="sk-aws",
        OTHER="val-other-123",
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        TZ="UTC",
    )
    r = ok(b.dispatch("bash", {"command": "/usr/bin/env"}))
    env = dict(line.split("=", 1) for line in r["output"].splitlines())
    assert "sk-" not in r["output"] and "val-other-123" not in r["output"]
    bash_own = {"PWD", "SHLVL", "_", "OLDPWD"}  # set by bash itself
    passed = set(env) - bash_own - {TOKEN_VAR}
    assert all(k in ENV_ALLOW or k.startswith("LC_") for k in passed), passed
    assert {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"} <= set(env)
    assert env["HOME"] == zw.env["HOME"] and env["PATH"] == zw.env["PATH"]
    assert len(env[TOKEN_VAR]) == 32
    again = ok(b.dispatch("bash", {"command": f"echo ${TOKEN_VAR}"}))["output"].strip()
    assert again != env[TOKEN_VAR]  # a new token per call


# ---------------------------------------------------------------------------- leaving nothing
def test_timeout_kills_the_group_and_children_that_left_it(zw, box, tmp_path) -> None:
    write_config(zw, "[orchestrator]\nbash_timeout_s = 1\n")
    bg, escaped = tmp_path / "bg.pid", tmp_path / "escaped.pid"
    command = (
        f"sleep 300 & echo $! > {bg}; setsid sleep 301 & echo $! > {escaped}; {LEFT}; sleep 302"
    )
    started = time.monotonic()
    r = ok(box().dispatch("bash", {"command": command, "timeout_s": 60}))
    assert time.monotonic() - started < 30
    assert r["timed_out"] is True and r["exit_code"] is None
    assert r["note"].startswith("killed after 1 s")
    assert r["killed_leftovers"] >= 2
    wait_gone(bg, escaped)


def test_a_command_that_exits_leaves_nothing_running(zw, box, tmp_path) -> None:
    bg, escaped = tmp_path / "bg.pid", tmp_path / "escaped.pid"
    command = (
        f"sleep 300 & echo $! > {bg}; setsid sleep 301 & echo $! > {escaped}; {LEFT}; echo done"
    )
    r = ok(box().dispatch("bash", {"command": command}))
    assert r["exit_code"] == 0 and r["output"] == "done\n" and r["timed_out"] is False
    assert r["killed_leftovers"] == 2
    assert "2 process(es) it left running were killed" in r["note"]
    wait_gone(bg, escaped)


def test_orphans_that_dropped_the_token_are_killed_too(zw, box, tmp_path) -> None:
    """A daemonized grandchild (double fork, setsid, token unset) is orphaned while the command
    runs: the tool is its subreaper, so it is found without the token."""
    inner, outer = tmp_path / "inner.pid", tmp_path / "outer.pid"
    daemon = f"sleep 300 & echo $! > {inner}; echo $$ > {outer}; exec sleep 301"
    ready = f"until [ -s {outer} ] && [ -s {inner} ]; do sleep 0.01; done"
    command = f"(unset {TOKEN_VAR}; setsid sh -c '{daemon}' &); {ready}; echo done"
    r = ok(box().dispatch("bash", {"command": command}))
    assert r["exit_code"] == 0 and r["output"] == "done\n"
    assert r["killed_leftovers"] >= 2
    wait_gone(inner, outer)


def test_ctrl_c_even_inside_popen_kills_the_command(tmp_path, monkeypatch) -> None:
    """Interrupted after the fork, before Popen returned: no handle, found by its token."""
    pidfile, real = tmp_path / "bash.pid", subprocess.Popen

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        wait_until(pidfile.exists, message="the command to start")
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess, "Popen", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_bash(f"echo $$ > {pidfile}; exec sleep 300", str(tmp_path), 60, {})
    monkeypatch.undo()
    wait_gone(pidfile)


def test_processes_it_did_not_start_are_left_alone(zw, box) -> None:
    """A child of this process started before the call, with no token: not the command's."""
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        r = ok(box().dispatch("bash", {"command": "sleep 30 & echo ran"}))
        assert r["output"] == "ran\n" and r["killed_leftovers"] == 1
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_sessions_started_by_the_same_process_keep_running(zw) -> None:
    """The orchestrator's own supervisors are its children too: never taken for orphans."""
    tb = Toolbox(zw.api(env_extra={"FAKE_HANG": "1"}), "orchestrate:test", extra=[BASH_TOOL])
    sid = ok(tb.dispatch("delegate", {"task": "run until killed"}))["session_id"]
    wait_until(lambda: zw.calls() == 1, message="the agent to start")
    r = ok(tb.dispatch("bash", {"command": "echo checked"}))
    assert r["output"] == "checked\n" and "killed_leftovers" not in r
    time.sleep(0.2)
    assert ok(tb.dispatch("check_session", {"session_id": sid}))["status"] == "running"


def test_token_finds_processes_outside_the_tree_and_only_its_own() -> None:
    """The token alone finds a process: this one is neither in the group nor an orphan."""
    leader = subprocess.Popen(["sleep", "300"], start_new_session=True)
    env = {"PATH": os.defpath}
    marked = subprocess.Popen(["sleep", "301"], env={**env, TOKEN_VAR: "a" * 32})
    other = subprocess.Popen(["sleep", "302"], env={**env, TOKEN_VAR: "b" * 32})
    try:
        wait_until(lambda: _carries_env(marked.pid), message="the marked sleep to exec")
        before = _own_children()  # so only the token can tell the marked sleep apart
        assert kill_everything(leader.pid, "a" * 32, before) == 1
        assert marked.wait(timeout=30) == -signal.SIGKILL
        assert leader.wait(timeout=30) == -signal.SIGKILL
        assert other.poll() is None
    finally:
        for p in (leader, marked, other):
            p.kill()
            p.wait()


def _carries_env(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return TOKEN_VAR.encode() in f.read()
    except OSError:
        return False


# ---------------------------------------------------------------------------- output
def test_long_output_keeps_head_and_tail(zw, box) -> None:
    cmd = "for i in $(seq 1 20000); do echo line-$i; done"
    r = ok(box().dispatch("bash", {"command": cmd}))
    out = r["output"]
    assert out.startswith("line-1\nline-2\n") and out.rstrip().endswith("line-20000")
    assert r["output_cut_bytes"] > 100_000
    assert f"[... {r['output_cut_bytes']} bytes of output cut ...]" in out
    assert len(out.encode()) < OUTPUT_HEAD + OUTPUT_TAIL + 100


def test_output_keeps_a_bounded_head_and_tail() -> None:
    o = Output(head_max=4, tail_max=3)
    for chunk in (b"ab", b"cdef", b"", b"ghijk", b"l"):
        o.feed(chunk)
    assert (bytes(o.head), bytes(o.tail), o.total, o.dropped) == (b"abcd", b"jkl", 12, 5)
    assert o.text() == "abcd\n[... 5 bytes of output cut ...]\njkl"
    small = Output(head_max=4, tail_max=3)
    small.feed(b"abcdef")
    assert (small.text(), small.dropped) == ("abcdef", 0)


_FLOOD = """
import json, resource, sys
from zwarm.orchestrator.bash import run_bash
limit = 1 << 20  # a command's output that reached a file would be killed by SIGXFSZ
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
env = {"PATH": "/usr/bin:/bin"}
big = run_bash("head -c 50000000 /dev/zero | tr '\\\\0' x; echo; echo end", ".", 60, env)
yes = run_bash("yes", ".", 1, env)
grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
print(json.dumps({"big": big, "yes": yes, "grown_kib": grown_kib}))
"""


def test_a_flood_of_output_costs_neither_memory_nor_disk(tmp_path) -> None:
    """50 MB, then `yes` until the time limit: drained, counted, never spooled to a file."""
    res = subprocess.run(
        [sys.executable, "-c", _FLOOD],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    big, yes = got["big"], got["yes"]
    assert big["exit_code"] == 0, big
    assert big["output"].startswith("xxxx") and big["output"].endswith("xxxx\nend\n")
    assert big["output_cut_bytes"] == 50_000_000 + 5 - OUTPUT_HEAD - OUTPUT_TAIL
    assert yes["timed_out"] is True and yes["output"].startswith("y\ny\ny\n")
    assert yes["output_cut_bytes"] > 1_000_000
    assert got["grown_kib"] < 32 * 1024  # far less than the 50 MB that went through


# ---------------------------------------------------------------------------- zwarm's sandbox
def test_in_the_sandbox_the_project_is_read_only_and_the_state_dir_hidden(zw, box) -> None:
    """[sandbox] mode = "bwrap": reading works; writing the project, reading the state dir,
    writing outside, reaching a loopback port all fail; the result says it was sandboxed."""
    import socket

    write_config(zw, '[sandbox]\nmode = "bwrap"\n')
    (zw.cwd / "sub").mkdir()
    (zw.cwd / "sub" / "f.txt").write_text("content\n")
    outside = zw.tmp / "outside"
    outside.mkdir()
    b = box()
    r = ok(b.dispatch("bash", {"command": "pwd; cat sub/f.txt; ls sub; echo $((6*7))"}))
    assert r["sandboxed"] is True and r["exit_code"] == 0
    assert r["output"] == f"{zw.cwd.resolve()}\ncontent\nf.txt\n42\n"
    r = ok(b.dispatch("bash", {"command": "echo x > new.txt", "cwd": "sub"}))
    assert r["exit_code"] != 0 and "Read-only file system" in r["output"], r
    assert not (zw.cwd / "sub" / "new.txt").exists()
    assert ok(b.dispatch("bash", {"command": f"touch {outside}/x"}))["exit_code"] != 0
    assert not (outside / "x").exists()
    r = ok(b.dispatch("bash", {"command": f"ls -A {zw.state_dir}; cat {zw.state_dir}/config.toml"}))
    assert r["exit_code"] != 0 and "mode" not in r["output"], r
    srv = socket.create_server(("127.0.0.1", 0))
    try:
        connect = f"exec 3<>/dev/tcp/127.0.0.1/{srv.getsockname()[1]} && echo reached"
        r = ok(b.dispatch("bash", {"command": connect}))
    finally:
        srv.close()
    assert r["exit_code"] != 0 and "reached" not in r["output"], r


def test_bash_writable_makes_the_project_writable_in_the_sandbox(zw, box) -> None:
    from tests.support.workspace import make_repo

    repo = make_repo(zw.cwd / "repo", zw.env)
    write_config(zw, '[sandbox]\nmode = "bwrap"\n[orchestrator]\nbash_writable = true\n')
    r = ok(box().dispatch("bash", {"command": "echo made > made.txt", "cwd": "repo"}))
    assert r["sandboxed"] is True and r["exit_code"] == 0, r
    assert (repo.path / "made.txt").read_text() == "made\n"
    # the repository's git metadata stays read-only; its history readable
    r = ok(box().dispatch("bash", {"command": "git log -1 --format=%s", "cwd": "repo"}))
    assert r["output"] == "init\n", r
    r = ok(box().dispatch("bash", {"command": "echo 0 > .git/refs/heads/moved", "cwd": "repo"}))
    assert r["exit_code"] != 0 and not (repo.path / ".git" / "refs" / "heads" / "moved").exists()


def test_an_untrusted_bash_writable_is_refused(zw, box) -> None:
    write_config(zw, '[sandbox]\nmode = "bwrap"\n')
    (zw.state_dir / "config.toml").write_text(
        '[sandbox]\nmode = "bwrap"\n[orchestrator]\nbash_writable = true\n'
    )
    msg = err(box().dispatch("bash", {"command": "echo x > new.txt"}))
    assert "orchestrator.bash_writable" in msg and "trust" in msg, msg
    assert not (zw.cwd / "new.txt").exists()


def test_a_sandbox_that_cannot_hold_refuses_rather_than_run_unsandboxed(
    zw, box, tmp_path, monkeypatch
) -> None:
    write_config(zw, '[sandbox]\nmode = "bwrap"\n')
    fake = tmp_path / "fakebwrap"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: no user namespaces' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    msg = err(box().dispatch("bash", {"command": "touch ran"}))
    assert "cannot hold on this machine" in msg and "does not run unsandboxed" in msg, msg
    assert not (zw.cwd / "ran").exists()


def test_without_the_sandbox_it_runs_as_before_and_says_so(zw, box) -> None:
    from zwarm.orchestrator.bash import sandbox_line

    r = ok(box().dispatch("bash", {"command": "echo x > new.txt"}))
    assert r["sandboxed"] is False and r["exit_code"] == 0 and (zw.cwd / "new.txt").exists()
    assert sandbox_line(zw.api()).startswith("bash tool: unsandboxed")
    assert "sandboxed: false" in BASH_TOOL.description
    write_config(zw, '[sandbox]\nmode = "bwrap"\n')
    line = sandbox_line(zw.api())
    assert "in zwarm's sandbox" in line and "read-only" in line and "no network" in line
