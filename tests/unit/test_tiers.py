"""The test tiers hold (docs/testing.md): one tier per test, and a unit test stays in-process."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from tests.support import TIERS


def test_every_collected_test_has_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    for item in request.session.items:
        tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
        assert len(tiers) == 1, (item.nodeid, tiers)


def test_a_unit_test_cannot_start_a_process() -> None:
    with pytest.raises(AssertionError, match="mark it subprocess"):
        subprocess.run(["true"], check=False)
    with pytest.raises(AssertionError, match="mark it subprocess"):
        os.posix_spawn("/bin/true", ["true"], {})


def test_a_unit_test_cannot_connect_over_the_network() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s,
        pytest.raises(AssertionError, match="mark it subprocess"),
    ):
        s.connect(("127.0.0.1", 9))
