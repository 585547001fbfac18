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
# a "sandbox" that isolates nothing: runs what follows "--" as it is
LEAKY = """#!/bin/sh
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
exec "$@"
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
