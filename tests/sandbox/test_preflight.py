"""``zwarm sandbox check`` (``zwarm.sandbox.check``): every probe is run, a machine where the
sandbox cannot hold is named with its reason and a non-zero exit, and a spawn with the
sandbox on refuses to start there rather than run unsandboxed. A leaky bubblewrap (one that
runs the agent with no isolation at all) must be caught by the probes themselves."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support import ZW

# bubblewrap as a kernel with user namespaces off answers it
REFUSING = """#!/bin/sh
echo "bwrap: No permissions to creating new namespace, likely because the kernel does not \
allow non-privileged user namespaces." >&2
exit 1
"""
# a "sandbox" that isolates nothing: runs what follows "--" as it is (as a job of its own,
# ended whole when it exits: what it starts, the port bridge's listeners, runs on the host)
LEAKY = """#!/bin/sh
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
exec setsid -w /bin/sh -c '"$@"; rc=$?; trap "" TERM; kill -TERM 0; exit $rc' sh "$@"
"""


def _bwrap(zw: ZW, script: str) -> dict[str, str]:
    d = zw.tmp / "fakebwrap"
    d.mkdir(exist_ok=True)
    p = d / "bwrap"
    p.write_text(script)
    p.chmod(0o755)
    return {"PATH": os.pathsep.join([str(d), zw.env["PATH"]])}


def test_the_sandbox_holds_here_and_every_probe_ran(zw: ZW) -> None:
    got = zw.json("sandbox", "check")
    assert got["holds"] is True and got["reason"] is None
    assert {p["probe"] for p in got["probes"]} == {
        "write_tree", "endpoint", "write_outside", "read_state", "other_port", "see_parent",
        "proxy", "proxy_other",
    }  # fmt: skip
    assert all(p["holds"] and p["got"] != "not run" for p in got["probes"]), got
    table = zw.run("sandbox", "check", check=True).stdout
    assert "see the processes outside" in table and "the sandbox holds" in table


def test_a_machine_that_refuses_namespaces_is_named_and_fails(zw: ZW) -> None:
    res = zw.run("sandbox", "check", env_extra=_bwrap(zw, REFUSING))
    assert res.returncode == 1, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: the sandbox cannot hold"), res.stderr
    assert "does not allow non-privileged user namespaces" in lines[0]
    assert "not run" in res.stdout


def test_a_leaky_sandbox_is_caught_by_the_probes(zw: ZW) -> None:
    res = zw.run("sandbox", "check", "--json", env_extra=_bwrap(zw, LEAKY))
    assert res.returncode == 1
    got = {p["probe"]: p for p in json.loads(res.stdout)["probes"]}
    for escape in ("write_outside", "read_state", "other_port", "see_parent"):
        assert got[escape]["got"] == "worked" and not got[escape]["holds"], got[escape]
    assert "write outside its worktree worked (must fail)" in res.stderr


def test_a_sandboxed_spawn_refuses_to_start_where_it_cannot_hold(zw: ZW) -> None:
    env = _bwrap(zw, REFUSING)
    res = zw.run("spawn", "--sandbox", "bwrap", "t", env_extra=env)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("Error: sandbox bwrap cannot hold on this machine"), res.stderr
    assert not list(Path(zw.state_dir, "sessions").glob("*"))
    assert zw.calls() == 0  # the agent never ran
    # without the sandbox it starts as ever
    sid = zw.spawn("--sandbox", "off", "t", env_extra={**env, **zw.replay("codex_simple")})
    assert zw.wait(sid).returncode == 0


def test_processes_ending_meanwhile_do_not_hide_a_leak(tmp_path: Path) -> None:
    """A process that ends while the probe reads /proc (a busy machine) leaves grep a file
    that is gone: a match elsewhere must still count (grep's exit 2 read as "failed" once)."""
    import subprocess

    from zwarm.sandbox.check import PROBES

    test = PROBES["see_parent"][2]
    assert "/proc/[0-9]*/cmdline" in test
    (tmp_path / "token").write_text("zwarm-preflight-x\n")
    (tmp_path / "a").write_bytes(b"sh\0-c\0zwarm-preflight-x\0")
    files = "a vanished"  # what the glob named; one process has ended since
    script = test.replace("/proc/[0-9]*/cmdline", files)
    res = subprocess.run(["/bin/sh", "-c", script], cwd=tmp_path, capture_output=True)
    assert res.returncode == 0, res


def test_a_sandbox_without_its_bridge_mount_does_not_wait_for_the_bridge(tmp_path: Path) -> None:
    """The script run first inside (the port bridge) waits for each port's socket in the
    bridge directory; where that directory was never bound (a leaky bubblewrap that set up no
    mounts) it must not wait at all: that wait, some 600 sleeps, once took the preflight past
    its timeout on a loaded machine, and the leak was reported as "not run"."""
    import shlex
    import socket
    import subprocess

    from zwarm.sandbox import Policy, bwrap

    assert not os.path.exists(bwrap.BRIDGE_DIR)
    with socket.create_server(("127.0.0.1", 0)) as srv:  # the port is up: no wait for it
        port = srv.getsockname()[1]
        policy = Policy(cwd=str(tmp_path), tree=str(tmp_path), ports=(port,), home=str(tmp_path))
        outer = bwrap.command(["true"], policy, str(tmp_path / "sock"))[2]
        line = outer[outer.index(bwrap.tools()["bwrap"] or "bwrap") : outer.rindex("\nrc=$?")]
        words = shlex.split(line)  # the bubblewrap line
        inner = words[words.index("--") + 3]  # -- /bin/sh -c SCRIPT
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        log = tmp_path / "sleeps"
        for name, body in (("sleep", f"echo x >> {log}"), ("socat", "exit 0")):
            (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
            (bin_dir / name).chmod(0o755)
        script = inner.replace(bwrap.tools()["socat"] or "socat", "socat")
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
        res = subprocess.run(["/bin/sh", "-c", script, "zw", "true"], env=env, timeout=60)
    assert res.returncode == 0
    assert not log.exists(), f"{len(log.read_text().splitlines())} sleeps"
