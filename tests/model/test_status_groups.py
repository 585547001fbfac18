"""The status groups are declared once (``model.status``); the copies that must stay
spelled out elsewhere are pinned to them here."""

import re
from pathlib import Path

import pytest

from zwarm.cli import fast
from zwarm.model.status import ACTIVE, IDLE, ROW_STATUSES, RUNS, Status

pytestmark = pytest.mark.unit

STATIC = Path(__file__).resolve().parents[2] / "zwarm" / "serve" / "static" / "app.js"


def test_fast_path_statuses_mirror_the_model() -> None:
    assert fast.STATUSES == ROW_STATUSES
    assert set(ROW_STATUSES) == {s.value for s in Status} | {"damaged"}


def test_groups_match_plain_strings() -> None:
    """Rows carry statuses as plain strings: the groups must answer for them."""
    assert "running" in RUNS and "queued" in ACTIVE and "damaged" in IDLE
    assert "completed" in IDLE and "running" not in IDLE


def test_dashboard_mirrors_active() -> None:
    m = re.search(r"const ACTIVE = new Set\(\[([^\]]*)\]\)", STATIC.read_text())
    assert m is not None
    assert set(re.findall(r'"(\w+)"', m.group(1))) == {s.value for s in ACTIVE}
