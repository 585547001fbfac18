"""Fixtures for the fleet-control suite (the shared ``zw`` fixture is tests/conftest.py's).

``leftovers`` is autouse: at teardown, after ``zw`` has killed every active session through
zwarm, it SIGKILLs any process still working under the test's ``tmp_path`` (a parked session's
waiting supervisor, a fake agent a test left behind), so nothing outlives a test.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest


@pytest.fixture(autouse=True)
def leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    root, me = str(tmp_path), os.getpid()
    for q in psutil.process_iter(["pid", "cwd", "cmdline"]):
        if q.pid == me:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            cwd = q.info.get("cwd") or ""
            cmd = " ".join(q.info.get("cmdline") or [])
            if cwd.startswith(root) or root in cmd:
                os.kill(q.pid, signal.SIGKILL)
