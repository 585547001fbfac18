"""The shipped ``.zwarm.example/`` is a state dir zwarm reads as it is, with nothing damaged.

Its sessions were made by the real CLIs through zwarm (``tests/make_example.py``); this
test fails when a change to the on-disk format would leave the example (and so the
documentation of the format) behind.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from zwarm.api import Zwarm
from zwarm.env import Env

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / ".zwarm.example"


@pytest.fixture
def api(tmp_path: Path) -> Zwarm:
    state = tmp_path / ".zwarm"
    shutil.copytree(EXAMPLE, state)
    return Zwarm(env=Env(state_dir=state, environ={}, cwd=tmp_path))


def test_every_example_session_reads_back_finished(api: Zwarm) -> None:
    rows = {r["name"]: r for r in api.sessions()}
    assert sorted(rows) == ["notes", "tests"]
    assert {r["adapter"] for r in rows.values()} == {"codex", "claude"}
    for r in rows.values():
        assert r["status"] == "completed", r
        assert r["turns"] == 2 and r["usage"]["total_tokens"] > 0
    assert rows["tests"]["cost_usd"] > 0 and rows["notes"]["cost_usd"] is None


def test_example_turns_parse_into_the_documented_steps(api: Zwarm) -> None:
    kinds = {name: {s["kind"] for s in api.trajectory(name)} for name in ("notes", "tests")}
    assert {"reasoning", "command", "file_change", "message"} <= kinds["notes"]
    assert {"command", "message"} <= kinds["tests"]
    contexts = {
        name: [t["context"] for t in api.show(name)["turns_detail"]] for name in ("notes", "tests")
    }
    assert contexts == {"notes": ["task", "summary"], "tests": ["task", "native"]}


def test_example_config_is_the_config_zwarm_loads(api: Zwarm) -> None:
    assert api.config.get("codex", "sandbox") == "workspace-write"


def test_example_holds_no_machine_paths() -> None:
    for f in EXAMPLE.rglob("*"):
        if f.is_file():
            assert b"zwarm-example-" not in f.read_bytes(), f  # make_example.py's temp dir
