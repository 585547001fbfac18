"""The shipped example config documents every key zwarm reads, and is itself valid."""

import tomllib
from pathlib import Path

from zwarm import config

EXAMPLE = Path(__file__).resolve().parents[2] / ".zwarm.example" / "config.toml"


def test_example_is_valid():
    doc = tomllib.loads(EXAMPLE.read_text())
    config.validate(doc, str(EXAMPLE))


def test_example_documents_every_key():
    doc = tomllib.loads(EXAMPLE.read_text())
    missing = [
        f"{table}.{key}"
        for table, keys in config.SCHEMA.items()
        for key in keys
        if key not in doc.get(table, {})
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
