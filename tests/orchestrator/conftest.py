"""Fixtures for the orchestrator tool tests: toolboxes on the shared ``zw`` world.

Must stay true: everything lives under the test's ``tmp_path`` (via ``zw``, whose teardown
kills sessions left running); waits are on conditions with generous deadlines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support import SAMPLES
from tests.support.orch import make_inproc, restore_dumpable
from zwarm.orchestrator.tools import Toolbox


@pytest.fixture
def toolbox(zw: Any) -> Callable[..., Toolbox]:
    """``toolbox(source="t", **env_extra)``: a Toolbox on the zw state dir, cwd ``zw.cwd``.

    Its agents replay ``codex_simple`` (a completed turn) unless ``env_extra`` says otherwise,
    e.g. ``FAKE_HANG="1"`` for agents that run until killed.
    """

    def make(source: str = "t", **env_extra: str) -> Toolbox:
        env = {"FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl"), **env_extra}
        return Toolbox(zw.api(env_extra=env), source)

    return make


@pytest.fixture
def inproc(zw: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """``inproc(srv, *args, **env)``: ``zwarm orchestrate`` run in this process (see
    ``orch_world.make_inproc``); this process is dumpable again afterwards."""
    try:
        yield make_inproc(zw, monkeypatch)
    finally:
        restore_dumpable()
