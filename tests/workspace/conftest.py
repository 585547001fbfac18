"""Fixtures for the workspace suite: ``repo``, a git repository (``tests.support.workspace``:
branch ``main``, one commit) at ``tmp/work/repo``, with the ``zw`` world (tests/conftest.py)
around it.
"""

from __future__ import annotations

import pytest

from tests.support import ZW
from tests.support.workspace import Repo, make_repo


@pytest.fixture
def repo(zw: ZW) -> Repo:
    return make_repo(zw.cwd / "repo", zw.env)
