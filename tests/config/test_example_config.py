"""The shipped example config documents every key zwarm reads, and is itself valid."""

import tomllib
from pathlib import Path

import pytest

from zwarm import agents, config, launchers

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / ".zwarm.example" / "config.toml"


def test_example_is_valid():
    doc = tomllib.loads(EXAMPLE.read_text())
    config.validate(doc, str(EXAMPLE))


def _shipped(table: str) -> bool:
    """zwarm's own tables and those of the agents and launchers that ship with it (not
    plugins')."""
    if table in config.SCHEMA:
        return True
    found = launchers.loaded().get(table) or type(agents.get(table))
    return found.__module__.startswith("zwarm.")


def test_example_documents_every_key():
    doc = tomllib.loads(EXAMPLE.read_text())
    tables = {t: keys for t, keys in config.schema().items() if _shipped(t)}
    assert set(tables) - set(config.SCHEMA) == {"codex", "claude", "gemini", "slurm"}
    missing = [
        f"{table}.{key}"
        for table, keys in tables.items()
        for key in keys
        if key not in doc.get(table, {})
        and not (table == "sandbox" and key in agents.names() and not _shipped(key))
    ]
    assert missing == []


def test_example_values_are_the_defaults():
    doc = tomllib.loads(EXAMPLE.read_text())
    want = config.defaults().data
    for table, keys in doc.items():
        for key, value in keys.items():
            if key in ("config", "prices"):
                continue  # tables shown empty, with commented examples
            assert value == want[table][key], f"{table}.{key}"
