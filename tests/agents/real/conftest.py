"""Fixtures of the real-agent conformance suite (the world itself is in ``world.py``).

``real``: a fresh ``RealWorld`` per test, closed at teardown (sessions killed through zwarm,
fakes stopped, stray processes under ``tmp_path`` SIGKILLed). ``adapter``: parametrizes a
test over both agent CLIs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.real import ADAPTERS, RealWorld


@pytest.fixture
def real(tmp_path: Path) -> Iterator[RealWorld]:
    with ExitStack() as stack:
        world = RealWorld(tmp_path, stack)
        try:
            yield world
        finally:
            world.close()


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name
