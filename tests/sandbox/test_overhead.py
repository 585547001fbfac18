"""The start-up cost of zwarm's sandbox per turn (issue 34: target under 20 ms beyond an
unsandboxed start), measured in one run, interleaved so load hits both sides alike: a start
of ``true`` plain, in bubblewrap, and in bubblewrap with one port bridged. Printed (run with
``-s``); asserted only loosely, since the absolute figures follow the machine's load."""

from __future__ import annotations

import socket
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from zwarm.sandbox import Policy, bwrap

RUNS = 15


def _time(argv: list[str], cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t


@pytest.mark.perf
def test_sandbox_start_up_overhead_per_turn(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    plain = ["/bin/true"]
    boxed = Policy(cwd=str(tree), tree=str(tree), home=str(tmp_path / "home"))
    bridged = Policy(cwd=str(tree), tree=str(tree), home=str(tmp_path / "home"), ports=(port,))
    times: dict[str, list[float]] = {"plain": [], "bwrap": [], "bwrap+bridge": []}
    try:
        for _ in range(RUNS):
            times["plain"].append(_time(plain, tree))
            times["bwrap"].append(_time(bwrap.command(plain, boxed, None), tree))
            argv = bwrap.command(plain, bridged, bwrap.bridge_dir())
            times["bwrap+bridge"].append(_time(argv, tree))
    finally:
        srv.close()
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    over, over_bridge = med["bwrap"] - med["plain"], med["bwrap+bridge"] - med["plain"]
    print(
        f"\nsandbox start-up, median of {RUNS} (ms): plain {med['plain']:.1f}, "
        f"bwrap {med['bwrap']:.1f} (+{over:.1f}, x{med['bwrap'] / med['plain']:.1f}), "
        f"bwrap+bridge {med['bwrap+bridge']:.1f} (+{over_bridge:.1f})"
    )
    assert over < 500 and over_bridge < 1000, med  # loose: the figures are what matters


@pytest.mark.perf
def test_limits_overhead_per_turn(tmp_path: Path) -> None:
    """What a turn's limits add to a sandboxed start: the supervisor's cgroup made and
    written, the outer shell joining it, the cgroup removed at the end (or the rlimits)."""
    from zwarm.sandbox import limits

    tree = tmp_path / "tree"
    tree.mkdir()
    policy = Policy(cwd=str(tree), tree=str(tree), home=str(tmp_path / "home"))
    plain = ["/bin/true"]
    want = limits.Limits(memory=512 << 20, cpus=1.0, pids=256)
    times: dict[str, list[float]] = {"bwrap": [], "bwrap+limits": []}
    for _ in range(RUNS):
        times["bwrap"].append(_time(bwrap.command(plain, policy, None), tree))
        t = time.perf_counter()
        applied = limits.make(want)
        subprocess.run(
            bwrap.command(plain, policy, None, limits.shell(applied)), cwd=tree, check=True
        )
        limits.release(applied.group)
        times["bwrap+limits"].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    over = med["bwrap+limits"] - med["bwrap"]
    print(
        f"\nlimits per turn, median of {RUNS} (ms): bwrap {med['bwrap']:.1f}, with limits "
        f"{med['bwrap+limits']:.1f} (+{over:.1f}, x{med['bwrap+limits'] / med['bwrap']:.2f}); "
        f"{applied.line}"
    )
    assert over < 500, med  # loose: the figures are what matters
