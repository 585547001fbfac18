"""Fixtures for the fault suite (the shared ``zw`` fixture comes from tests/conftest.py).

``strays`` is autouse: at teardown it SIGKILLs every process the test registered and every
process whose working directory or command line lies under the test's ``tmp_path`` (the
supervisors run in their session dir, the fake agents and their children in the work dir),
so nothing outlives a test, whatever it asserted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest


@pytest.fixture(autouse=True)
def strays(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            p.kill()
        with contextlib.suppress(Exception):
            p.wait(timeout=10)
    root = str(tmp_path)
    me = os.getpid()
    for q in psutil.process_iter(["pid", "cwd", "cmdline"]):
        if q.pid == me:
            continue
        cwd = q.info.get("cwd") or ""
        cmd = " ".join(q.info.get("cmdline") or [])
        if cwd.startswith(root) or root in cmd:
            with contextlib.suppress(psutil.Error):
                q.kill()
