"""The run store lists runs in the order they were created: ``last`` is the newest run even
when two runs start in the same second (ids share the time prefix and sort by their random
suffix) or the clock stepped back between them."""

from __future__ import annotations

from pathlib import Path

import pytest

from zwarm.errors import OrchestratorError
from zwarm.orchestrator.runstore import Run, RunStore

pytestmark = pytest.mark.unit


def _run(rid: str, when: str) -> Run:
    return Run(
        id=rid, task="t", model="m", base_url=None, cwd="/", created_at=when, updated_at=when
    )


def test_last_is_the_newest_run_not_the_greatest_id(tmp_path: Path) -> None:
    rs = RunStore.open(tmp_path, create=True)
    assert rs is not None
    with rs:
        # same second; the second run's random suffix sorts first
        rs.create(_run("20261127-051500-ffff", "2026-11-27T05:15:00Z"), [])
        rs.create(_run("20261127-051500-0000", "2026-11-27T05:15:00Z"), [])
        # the clock stepped back an hour before the third
        rs.create(_run("20261127-041500-abcd", "2026-11-27T04:15:00Z"), [])
        first = rs.run_ids()
        rs.save_run(_run("20261127-051500-ffff", "2026-11-27T05:16:00Z"))  # an update
        assert first == rs.run_ids()  # keeps its place
    assert first == ["20261127-051500-ffff", "20261127-051500-0000", "20261127-041500-abcd"]
    rs = RunStore.open(tmp_path, create=False)
    assert rs is not None
    with rs:
        assert rs.find("last") == "20261127-041500-abcd"
        with pytest.raises(OrchestratorError, match="2 runs match"):  # unchanged
            rs.find("20261127-0515")
