"""Helpers of the Slurm tests: zwarm's slurm launcher against a real (single-node) Slurm.

The cluster is started by ``tests/launchers/slurm/start-cluster`` (``.ci/run`` runs it first);
``cluster_problem`` says why there is none (the ``slurm_cluster`` fixture, tests/conftest.py,
then skips, or fails when ``CI=true``). ``sl_config(zw, **slurm_keys)`` writes (and trusts) a
config.toml whose ``[launcher] default`` is ``slurm`` and whose ``[slurm] env`` exports the
fake agents' ``FAKE_*`` settings to the jobs. Helpers read what Slurm says of a job
(``job_state``; ``final_state`` once it has settled) and find the processes carrying a
session's marker on this machine, which is also the cluster's only node (``marked``). Every
wait is on a condition with a deadline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import tomli_w

from tests.support import ROOT, ZW, wait_until

FAKE_ENV = [
    "FAKE_REPLAY",
    "FAKE_RECORD",
    "FAKE_SLEEP",
    "FAKE_HANG",
    "FAKE_CHILDREN",
    "FAKE_EXIT",
    "FAKE_FAIL_ON",
    "FAKE_GATE_HOLD",
    "FAKE_IGNORE_TERM",
    "ZW_TEST_SECRET",
]


START = ROOT / "tests/launchers/slurm/start-cluster"


def cluster_problem() -> str | None:
    """Why there is no usable Slurm here (None: there is one)."""
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
        return f"Slurm is not installed (no sbatch/squeue on PATH): run {START}"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=15)
        nodes = subprocess.run(
            ["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True, timeout=15
        )
    except subprocess.TimeoutExpired:
        return f"slurmctld does not answer: run {START}"
    if "UP" not in ping.stdout:
        said = (ping.stdout.strip() or ping.stderr.strip() or "no answer").splitlines()[0]
        return f"slurmctld is not up (scontrol ping: {said}): run {START}"
    if not any(s.strip("*~#") in ("idle", "mixed", "allocated") for s in nodes.stdout.split()):
        return f"no Slurm node is up ({nodes.stdout.strip()}): run {START}"
    return None


def sl_config(zw: ZW, **slurm: Any) -> None:
    """Write (and trust) the world's config: the slurm launcher, the fakes' env exported."""
    table = {"env": FAKE_ENV, **slurm}
    zw.write_config(tomli_w.dumps({"launcher": {"default": "slurm"}, "slurm": table}))


def job_of(zw: ZW, sid: str, n: int = 1) -> str:
    job: str = zw.meta(sid)["turns"][n - 1]["handle"]["job"]
    assert job.isdigit(), job
    return job


def job_state(job: str) -> tuple[str, str, str]:
    """(state, reason, dependency) as squeue says, "" for a job it no longer knows."""
    r = subprocess.run(
        ["squeue", "--noheader", "--states=all", f"--jobs={job}", "--format=%T|%r|%E"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    parts = r.stdout.strip().split("|")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else ("", "", "")


def final_state(job: str) -> str:
    """The state a job ends in: squeue shows ``COMPLETING`` for a moment after its batch
    script exits (the epilog, the step's cleanup), which is no verdict yet."""

    def settled() -> str | None:
        state = job_state(job)[0]
        return None if state in ("COMPLETING", "RUNNING", "CONFIGURING") else state

    state: str = wait_until(settled, message=f"job {job} settled")
    return state


def marked(sid: str) -> list[int]:
    """Pids on this machine (the cluster's node) carrying session ``sid``'s marker."""
    want = f"ZWARM_SESSION_ID={sid}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if want in env and not zombie:
            found.append(int(name))
    return found


def status(zw: ZW, sid: str) -> Callable[[], dict[str, Any] | None]:
    """A predicate: ``zwarm ls --json``'s row of ``sid`` once it is finished, else None."""

    def finished() -> dict[str, Any] | None:
        rows = {r["id"]: r for r in zw.json("ls")}
        r = rows[sid]
        return r if r["status"] in ("completed", "failed", "killed") else None

    return finished
