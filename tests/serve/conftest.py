"""Fixtures for ``zwarm serve``: ``serve`` (start servers in the test's world, stopped at
teardown) and ``server`` (one, default options). The server and its client are in
tests/support/serve.py. Must stay true: every server started here is stopped (then killed) at
teardown, whatever the test's outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support import ZW
from tests.support.serve import Server, start_server


@pytest.fixture
def serve(zw: ZW) -> Iterator[Callable[..., Server]]:
    """Start servers in ``zw``'s world: ``serve(*args, env_extra=..., files=...)``; all
    stopped after."""
    started: list[Server] = []

    def start(
        *args: str, env_extra: dict[str, str] | None = None, files: int | None = None
    ) -> Server:
        s = start_server(zw, *args, env_extra=env_extra, files=files)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def server(serve: Callable[..., Server]) -> Server:
    """One server on the test's world, default options."""
    return serve()
