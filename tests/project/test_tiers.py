"""The test tiers hold (docs/testing.md): one tier per test, and a unit test stays in-process."""

from __future__ import annotations

import ast
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support import TESTS, TIERS

pytestmark = pytest.mark.unit


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


def test_a_test_that_pins_what_a_command_imports_is_marked_perf() -> None:
    """docs/testing.md: a test that reads ``-X importtime`` (itself or through a helper of its
    file) pins how zwarm starts, not what it does: it carries ``perf``, so a refactor that
    moves an import knows to update it on purpose."""
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if path == Path(__file__).resolve():
            continue
        tree = ast.parse(path.read_text())
        module_perf = any(
            isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
            and "perf" in ast.unparse(n.value)
            for n in tree.body
        )
        helpers = {
            n.name: ast.unparse(n)
            for n in tree.body
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("test_")
        }
        for n in tree.body:
            if not (isinstance(n, ast.FunctionDef) and n.name.startswith("test_")):
                continue
            calls = {
                c.func.id
                for c in ast.walk(n)
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
            }
            sources = [ast.unparse(n), *(helpers[c] for c in calls if c in helpers)]
            perf = module_perf or any("perf" in ast.unparse(d) for d in n.decorator_list)
            if any("importtime" in s for s in sources) and not perf:
                unmarked.append(f"{path.relative_to(TESTS)}::{n.name}")
    assert unmarked == []
