"""``zwarm.config_text``: the config ``zwarm init`` writes explains every key and reads back
as exactly the config it was made from."""

from __future__ import annotations

import tomllib

import pytest

from zwarm import agents, config
from zwarm.config_text import COMMON_DOCS, DOCS, commented, describe

pytestmark = pytest.mark.unit


def key_lines(text: str) -> list[tuple[str, str, str]]:
    """(table, key, the line above it) for every ``key = value`` line."""
    out, table, prev = [], "", ""
    for line in text.splitlines():
        if line.startswith("["):
            table = line.strip("[]")
        elif " = " in line and not line.startswith("#"):
            out.append((table, line.split(" = ", 1)[0], prev))
        prev = line
    return out


def test_every_key_is_written_under_a_one_line_comment() -> None:
    text = commented(config.defaults())
    assert tomllib.loads(text) == config.defaults().data
    lines = key_lines(text)
    # a family of named tables ([hosts.NAME]) has no key of its own: its example is commented
    want = {(t, k) for t, keys in config.schema().items() for k in keys if k != config.FAMILY}
    assert {(t, k) for t, k, _ in lines} == want
    for table, key, above in lines:
        assert above.startswith("# ") and len(above) <= 100, (table, key, above)
        assert above[2:] == describe(table, key)


def test_every_key_of_zwarm_and_of_the_shipped_agents_has_its_own_description() -> None:
    for table, keys in config.SCHEMA.items():
        assert set(keys) == set(DOCS[table]), table
    for name in agents.names():
        agent = agents.get(name)
        if not type(agent).__module__.startswith("zwarm."):
            continue
        for key, setting in agent.config_schema().items():
            assert setting.doc or key in COMMON_DOCS, (name, key)


def test_any_values_read_back_exactly() -> None:
    data = config.validate(
        {
            "defaults": {"adapter": "claude", "timeout": 12.5},
            "codex": {
                "config": {
                    "model_providers": {"mock": {"name": 'a "b"', "base_url": "http://h"}},
                    "dotted.key": 1,
                    "list": [1, 2],
                },
                "env": {"X_Y": "a\\nb"},
                "extra_args": ["--x", "ünï"],
                "prices": {"gpt-x": {"input": 1, "cached_input": 0.5, "output": 2.25}},
            },
            "hooks": {"on_finish": ["notify-send", "done"], "on_fail": "echo $ZWARM_HOOK_STATUS"},
        },
        "test",
    )
    text = commented(config.Config(data))
    assert tomllib.loads(text) == data


@pytest.mark.parametrize("table", ["hooks"])
def test_hooks_commands_need_trust(table: str) -> None:
    assert config.is_security_key(table, "on_finish") and config.is_security_key(table, "on_fail")
    assert not config.is_security_key(table, "timeout_s")
