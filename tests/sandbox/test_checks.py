"""Checks (``zwarm.sandbox.run``): commands the user named that run code an agent wrote.

They run in zwarm's sandbox where it holds (the worktree writable, no network, the state dir,
zwarm's per-user files and the home hidden, the repository's git metadata read-only), and
where it does not, only with the user's trusted opt-in (``[checks] unsandboxed = true``),
else ``ChecksRefused`` before anything runs. Each is killed at its time limit with everything
it started, leaves nothing running when it exits, and its output is bounded. Real programs
throughout: bubblewrap, sh, git; leftovers are looked for with psutil."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support import ROOT, ZW, wait_until
from tests.support.workspace import make_repo
from zwarm import config as config_mod
from zwarm.errors import ChecksRefused
from zwarm.sandbox.run import TAIL_CHARS, CheckResult, check_plan, run_checks
from zwarm.trust import trust_file

REFUSING = """#!/bin/sh
echo "bwrap: No permissions to creating new namespace, likely because the kernel does not \
allow non-privileged user namespaces." >&2
exit 1
"""


def _config(zw: ZW, text: str, trusted: bool = True) -> config_mod.Config:
    zw.state_dir.mkdir(parents=True, exist_ok=True)
    if trusted:
        path = zw.write_config(text)
    else:
        path = zw.state_dir / "config.toml"
        path.write_text(text)
    return config_mod.load(path, zw.env)


def _sandboxed(zw: ZW) -> config_mod.Config:
    return _config(zw, '[sandbox]\nmode = "bwrap"\n')


def _env(zw: ZW) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": zw.env["HOME"], "LANG": "C.UTF-8"}


def _leftovers(mark: str) -> list[psutil.Process]:
    """Live processes whose command line carries ``mark``."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if p.info["status"] != psutil.STATUS_ZOMBIE and any(mark in a for a in cmd):
            out.append(p)
    return out


def _mark() -> str:
    """A sleep duration no other process uses: its argv tells its processes apart."""
    return f"3{secrets.randbelow(10**6):06d}.5"


_ALONE = """
import json, sys
from pathlib import Path
import msgspec
from zwarm import config
from zwarm.sandbox.run import run_checks
cfg = config.load(Path(sys.argv[1]), {**__import__("os").environ})
env = json.loads(sys.argv[4])
t = float(sys.argv[5])
[r] = run_checks([sys.argv[2]], Path(sys.argv[3]), config=cfg, timeout_s=t, env=env)
sys.stdout.write(msgspec.json.encode(r).decode())
"""


def _alone(zw: ZW, cfg: config_mod.Config, cmd: str, cwd: Path, timeout_s: float) -> CheckResult:
    """``run_checks`` of ``cmd`` in a process of its own, single-threaded as zwarm's commands
    are (unsandboxed, orphans are adopted only then: a thread another test left in this one,
    e.g. a fake server's, would turn that off and make the test depend on the order)."""
    assert cfg.path is not None
    args = [cfg.path, cmd, str(cwd), json.dumps(_env(zw)), str(timeout_s)]
    res = subprocess.run(
        [sys.executable, "-c", _ALONE, *args],
        env={**zw.env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    import msgspec

    return msgspec.json.decode(res.stdout, type=CheckResult)


# ---------------------------------------------------------------------------- running
@pytest.mark.parametrize("boxed", [True, False], ids=["sandboxed", "unsandboxed"])
def test_pass_fail_and_what_is_recorded(zw: ZW, boxed: bool) -> None:
    repo = make_repo(zw.cwd / "repo", zw.env)
    cfg = _sandboxed(zw) if boxed else _config(zw, "[checks]\nunsandboxed = true\n")
    checks = [
        "test -f README.md && echo fine",
        "echo out; echo err >&2; exit 3",
        "git log -1 --format=%s",
    ]
    got = run_checks(checks, repo.path, config=cfg, timeout_s=60, env=_env(zw), repo=repo.path)
    assert [r.command for r in got] == checks
    assert [r.exit_code for r in got] == [0, 3, 0], got
    assert [r.passed() for r in got] == [True, False, True]
    assert got[0].output_tail == "fine\n" and got[1].output_tail == "out\nerr\n"
    assert got[2].output_tail == "init\n"  # the repository's history is readable inside
    assert all(r.sandboxed is boxed and not r.timed_out and r.duration_s >= 0 for r in got)
    assert all(r.output_cut_bytes == 0 for r in got)


@pytest.mark.parametrize("boxed", [True, False], ids=["sandboxed", "unsandboxed"])
def test_timeout_kills_the_whole_tree(zw: ZW, boxed: bool, tmp_path: Path) -> None:
    """At its time limit the check, its background children, one that left the session
    (setsid) and a daemon that also dropped zwarm's token are all killed."""
    cfg = _sandboxed(zw) if boxed else _config(zw, "[checks]\nunsandboxed = true\n")
    m = _mark()
    daemon = f"(unset ZWARM_RUN_TOKEN; setsid sh -c 'sleep {m} & exec sleep {m}' &)"
    cmd = f"sleep {m} & setsid sleep {m} & {daemon}; echo started; exec sleep {m}"
    started = time.monotonic()
    r = _alone(zw, cfg, cmd, tmp_path, timeout_s=2)
    assert time.monotonic() - started < 30
    assert r.timed_out and r.exit_code is None and not r.passed()
    assert r.output_tail == "started\n" and r.sandboxed is boxed
    wait_until(lambda: not _leftovers(m), message="every process of the check to be gone")


@pytest.mark.parametrize("boxed", [True, False], ids=["sandboxed", "unsandboxed"])
def test_a_check_that_exits_leaves_nothing_running(zw: ZW, boxed: bool, tmp_path: Path) -> None:
    cfg = _sandboxed(zw) if boxed else _config(zw, "[checks]\nunsandboxed = true\n")
    m = _mark()
    daemon = f"(unset ZWARM_RUN_TOKEN; setsid sh -c 'exec sleep {m}' &)"
    cmd = f"sleep {m} & setsid sleep {m} & {daemon}; echo done"
    r = _alone(zw, cfg, cmd, tmp_path, timeout_s=60)
    assert r.passed() and r.output_tail == "done\n", r
    wait_until(lambda: not _leftovers(m), message="the check's leftovers to be killed")


def test_a_check_that_cannot_start_fails_with_its_reason(zw: ZW, tmp_path: Path) -> None:
    cfg = _config(zw, "[checks]\nunsandboxed = true\n")
    [r] = run_checks(["true"], tmp_path / "gone", config=cfg, timeout_s=5, env=_env(zw))
    assert r.exit_code is None and not r.passed() and not r.timed_out
    assert "cannot run it in" in r.output_tail and "No such file" in r.output_tail


_FLOOD = """
import json, resource, sys
from pathlib import Path
from zwarm import config
from zwarm.trust import trust_file
from zwarm.sandbox.run import run_checks
limit = 1 << 20  # output that reached a file would be killed by SIGXFSZ
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
cfg = config.load(Path(sys.argv[1]), {**__import__("os").environ})
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
big = "head -c 50000000 /dev/zero | tr '\\\\0' x; echo; echo end"
[r] = run_checks([big], Path("."), config=cfg, timeout_s=120, env={"PATH": "/usr/bin:/bin"})
grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
print(json.dumps({"tail": r.output_tail, "cut": r.output_cut_bytes, "ok": r.passed(),
                  "boxed": r.sandboxed, "grown_kib": grown_kib}))
"""


def test_huge_output_is_bounded(zw: ZW, tmp_path: Path) -> None:
    """50 MB of output: drained, only its tail kept, never in memory nor on disk."""
    path = _sandboxed(zw).path
    assert path is not None
    res = subprocess.run(
        [sys.executable, "-c", _FLOOD, path],
        cwd=tmp_path,
        env={**zw.env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["ok"] and got["boxed"]
    assert got["tail"].endswith("x\nend\n") and got["cut"] > 49_000_000
    assert got["tail"].startswith("[... ") and len(got["tail"]) < TAIL_CHARS + 100
    assert got["grown_kib"] < 20_000, got["grown_kib"]


# ---------------------------------------------------------------------------- the sandbox
def test_a_sandboxed_check_cannot_get_out(zw: ZW) -> None:
    """Write outside the worktree, into the repository's refs, read the state dir, the home,
    zwarm's trust store, reach a loopback port: each fails; writing the worktree works."""
    repo = make_repo(zw.cwd / "repo", zw.env)
    cfg = _sandboxed(zw)
    outside = zw.tmp / "outside"
    outside.mkdir()
    home = Path(zw.env["HOME"])
    (home / "secret").write_text("the user's\n")
    trust = trust_file(zw.env)
    assert trust.is_file()  # written by the test's trusted config
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    connect = "python3 -c 'import socket; socket.create_connection((\"{}\", {}), 3)'"
    probes = {
        "write tree": "echo made > made.txt",
        "write outside": f"echo x > {outside}/escaped",
        "write refs": "echo 0 > .git/refs/heads/moved",
        "write objects": "echo x > .git/objects/planted",
        "read state": f"cat {zw.state_dir}/config.toml",
        "read home": f"cat {home}/secret",
        "read trust": f"cat {trust}",
        "reach port": connect.format("127.0.0.1", port),
        "reach outside": connect.format("1.1.1.1", 53),
    }
    try:
        got = run_checks(
            list(probes.values()), repo.path, config=cfg, timeout_s=60, env=_env(zw), repo=repo.path
        )
    finally:
        srv.close()
    result = dict(zip(probes, got, strict=True))
    assert all(r.sandboxed for r in got)
    assert result.pop("write tree").passed() and (repo.path / "made.txt").read_text() == "made\n"
    leaked = {k: r.output_tail for k, r in result.items() if r.passed()}
    assert leaked == {}, leaked
    assert not (outside / "escaped").exists()
    assert not (repo.path / ".git" / "refs" / "heads" / "moved").exists()
    assert not (repo.path / ".git" / "objects" / "planted").exists()


def test_a_state_dir_inside_the_worktree_is_hidden(zw: ZW, tmp_path: Path) -> None:
    """The state dir of the config is hidden even where it lies in the checked directory."""
    cfg = _sandboxed(zw)
    inside = zw.state_dir.parent
    [r] = run_checks([f"ls -A {zw.state_dir}"], inside, config=cfg, timeout_s=60, env=_env(zw))
    assert r.passed() and r.output_tail == "", r  # an empty tmpfs over it


# ---------------------------------------------------------------------------- opting in
def test_no_sandbox_and_no_opt_in_is_refused_before_anything_runs(zw: ZW, tmp_path: Path) -> None:
    cfg = _config(zw, "")  # [sandbox] mode = "off" by default
    with pytest.raises(ChecksRefused) as e:
        run_checks([f"touch {tmp_path}/ran"], tmp_path, config=cfg, timeout_s=5, env=_env(zw))
    msg = str(e.value)
    assert "\n" not in msg and "sandbox is off" in msg
    assert "[checks] unsandboxed = true" in msg and "zwarm trust" in msg
    assert not (tmp_path / "ran").exists()


def test_a_sandbox_that_cannot_hold_is_refused_with_its_reason(
    zw: ZW, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _sandboxed(zw)
    fake = tmp_path / "fakebwrap"
    fake.mkdir()
    (fake / "bwrap").write_text(REFUSING)
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    with pytest.raises(ChecksRefused) as e:
        check_plan(cfg, tmp_path)
    # the reason is the preflight's (its last line of bubblewrap's stderr: the bridge's
    # forwarder may speak after it, so the exact text is not asserted here)
    assert "sandbox bwrap cannot hold on this machine" in str(e.value), e.value
    assert "\n" not in str(e.value) and "[checks] unsandboxed = true" in str(e.value)
    # the opt-in lets them run, unsandboxed (and says so)
    cfg = _config(zw, '[sandbox]\nmode = "bwrap"\n[checks]\nunsandboxed = true\n')
    [r] = run_checks(["true"], tmp_path, config=cfg, timeout_s=5, env=_env(zw))
    assert r.passed() and r.sandboxed is False


def test_a_trusted_opt_in_runs_them_unsandboxed(zw: ZW, tmp_path: Path) -> None:
    cfg = _config(zw, "[checks]\nunsandboxed = true\n")
    assert check_plan(cfg, tmp_path) is False
    outside = zw.tmp / "outside-unsandboxed"
    [r] = run_checks([f"echo x > {outside}"], tmp_path, config=cfg, timeout_s=5, env=_env(zw))
    assert r == CheckResult(r.command, 0, r.duration_s, False, "", False)
    assert outside.read_text() == "x\n"  # unsandboxed: as the user


def test_an_untrusted_opt_in_is_refused(zw: ZW, tmp_path: Path) -> None:
    cfg = _config(zw, "[checks]\nunsandboxed = true\n", trusted=False)
    with pytest.raises(ChecksRefused) as e:
        run_checks([f"touch {tmp_path}/ran"], tmp_path, config=cfg, timeout_s=5, env=_env(zw))
    msg = str(e.value)
    assert "\n" not in msg and "not trusted" in msg and "checks.unsandboxed" in msg
    assert "zwarm --state-dir" in msg and " trust" in msg
    assert not (tmp_path / "ran").exists()
    # trusting the file (zwarm trust) is the opt-in
    cfg = _config(zw, "[checks]\nunsandboxed = true\n")
    assert check_plan(cfg, tmp_path) is False


def test_the_opt_in_is_validated(zw: ZW) -> None:
    with pytest.raises(config_mod.ConfigError, match=r"checks\.unsandboxed must be true/false"):
        config_mod.validate({"checks": {"unsandboxed": "yes"}}, "config.toml")
    with pytest.raises(config_mod.ConfigError, match="unknown key 'other' in \\[checks\\]"):
        config_mod.validate({"checks": {"other": 1}}, "config.toml")
