"""Shared test fixtures: an isolated zwarm world per test, and the test tiers.

Owns the ``zw`` fixture (a ``tests.support.ZW``: state dir, environment with the fake agents
first on PATH, running the installed ``zwarm`` as a real subprocess, building a
``zwarm.api.Zwarm`` on the same state dir), ``midday``, and the autouse ``private_trust``:
every test gets its own zwarm trust file and launch pins (``XDG_CONFIG_HOME`` and
``XDG_STATE_HOME`` under ``tmp_path``, and ``XDG_DATA_HOME``, where worktrees go, set in
``os.environ`` so every zwarm subprocess inherits them), the Slurm tests' ``slurm_cluster``
and ``sl`` (used from two folders), and ``strays``, the process reaper of the files that ask
for it (the fault and fleet tests: ``pytest.mark.usefixtures("strays")``). Plain helpers and
constants (``wait_until``, ``ZWARM_BIN``, ...) live in the tests/support/ package: import
them from there. Must stay true: nothing here
touches anything outside ``tmp_path`` (HOME, TMPDIR, the trust file, pins and worktrees are
isolated too); a fixture only wires up what tests/support/ defines.

Also applies the test tiers (docs/testing.md): every test gets exactly one of ``TIERS`` (by
folder, ``TIER_BY_PATH`` in tests/support/, unless it carries one), and a ``unit`` test that
starts a process or connects over the network fails.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    ROOT,
    TIER_BY_PATH,
    TIERS,
    ZW,
    kill_leftovers,
    make_env,
    midday_tz,
    stop_forkservers,
)


@pytest.fixture
def midday(zw: ZW) -> Iterator[str]:
    """``midday_tz()`` for this process and the world's zwarm subprocesses; restored after."""
    tz, old = midday_tz(), os.environ.get("TZ")
    os.environ["TZ"] = zw.env["TZ"] = tz
    time.tzset()
    try:
        yield tz
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test its tier marker (see TIERS); a ``unit`` test is also guarded by
    ``_no_process``."""
    for item in items:
        own = [m.name for m in item.iter_markers() if m.name in TIERS]
        if len(set(own)) > 1:
            raise pytest.UsageError(f"{item.nodeid}: more than one tier marker {own}")
        if not own:
            path = Path(str(item.path)).resolve().relative_to(ROOT).as_posix()
            tier = next(t for prefix, t in TIER_BY_PATH if path.startswith(prefix))
            item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("unit") is not None:
            item.fixturenames.insert(0, "_no_process")


@pytest.fixture
def _no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``unit`` test runs in this process only: starting a program (subprocess, fork,
    posix_spawn, exec) or connecting over the network fails it, saying to mark it
    ``subprocess`` instead."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(
            "a test marked unit started a process: mark it subprocess (tests/conftest.py)"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)
    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family != socket.AF_UNIX:
            raise AssertionError(
                "a test marked unit opened a network connection: mark it subprocess"
            )
        real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture(autouse=True)
def private_trust(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own zwarm trust file location (created only when something is trusted),
    and its own ``XDG_STATE_HOME`` (launch pins, serve's token) and ``XDG_CACHE_HOME`` (the
    listing's row cache), and no ``XDG_RUNTIME_DIR``: nothing a test does lands in the real home,
    and the API in the test process and the CLI and supervisors it starts agree on both."""
    xdg = tmp_path / "xdg-config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))  # zwarm's worktrees
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # the listing's rows
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)  # zwarm serve's token: state home
    return xdg / "zwarm" / "trust.json"


@pytest.fixture(autouse=True)
def no_forkservers_left(tmp_path: Path) -> Iterator[None]:
    """At teardown, stop the fork servers (``zwarm.runtime.forkserver``) of this test's state
    dirs: one would otherwise idle on for minutes after its test."""
    yield
    stop_forkservers(tmp_path)


@pytest.fixture
def strays(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """A list to register the processes a test starts itself: at teardown (after ``zw``'s,
    when the test file asks for it first: ``pytest.mark.usefixtures("strays")``) each is
    SIGKILLed with its group, then every process whose working directory or command line
    lies under the test's ``tmp_path`` (a supervisor, a parked session's, a fake agent and
    its children), so nothing outlives a test, whatever it asserted."""
    import contextlib
    import signal

    import psutil

    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            p.kill()
        with contextlib.suppress(Exception):
            p.wait(timeout=10)
    root, me = str(tmp_path), os.getpid()
    for q in psutil.process_iter(["pid", "cwd", "cmdline"]):
        if q.pid == me:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            cwd = q.info.get("cwd") or ""
            cmd = " ".join(q.info.get("cmdline") or [])
            if cwd.startswith(root) or root in cmd:
                q.kill()


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """A Slurm that answers (``tests.support.slurm.cluster_problem``): else the test skips
    with the reason, or fails when ``CI=true``."""
    from tests.support.slurm import cluster_problem

    problem = cluster_problem()
    if problem is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem)
        pytest.skip(problem)


@pytest.fixture(scope="session")
def ssh_hosts() -> Iterator[Any]:
    """The two ssh hosts of ``tests.support.hosts`` (a ``HostBed``), for the test session:
    else the test skips with the reason, or fails when ``CI=true``."""
    import shutil
    import tempfile

    from tests.support.hosts import bed_problem, start_bed

    problem = bed_problem()
    if problem is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    base = Path(tempfile.mkdtemp(prefix="zwarm-hosts-"))  # not pytest's: its user must enter it
    bed = start_bed(base)
    try:
        yield bed
    finally:
        bed.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def sl(zw: ZW, slurm_cluster: None) -> ZW:
    """The ``zw`` world with a state dir whose trusted config.toml runs every session on the
    slurm launcher, the fake agents' settings exported to the jobs (``sl_config``)."""
    from tests.support.slurm import sl_config

    zw.state_dir.mkdir()
    sl_config(zw)
    return zw


@pytest.fixture
def zw(tmp_path: Path) -> Iterator[ZW]:
    """An isolated zwarm world; state dir ``tmp/state`` (not created), cwd ``tmp/work``.

    At teardown every session still running in it is killed (its whole process tree).
    """
    cwd = tmp_path / "work"
    cwd.mkdir()
    state = tmp_path / "state"
    record = tmp_path / "record"
    world = ZW(
        tmp=tmp_path, state_dir=state, cwd=cwd, env=make_env(tmp_path, state, record), record=record
    )
    yield world
    kill_leftovers(world)
