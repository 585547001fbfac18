"""config.toml: defaults, validation (every error names the file), prices and cost."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from zwarm.agents.codex import DEFAULT_PRICES
from zwarm.config import ConfigError, defaults, dumps, load, schema
from zwarm.engine import manager_class
from zwarm.env import Env
from zwarm.model import Usage
from zwarm.store import Store
from zwarm.trust_plan import trust_config

pytestmark = pytest.mark.unit


def write(tmp_path: Path, text: str | bytes) -> Path:
    p = tmp_path / "config.toml"
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    trust_config(p)  # as its user would (`zwarm trust`); tests/config/test_trust.py: untrusted
    return p


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    c = load(tmp_path / "none.toml")
    assert c == defaults()
    assert c.get("defaults", "adapter") == "codex"
    assert c.get("defaults", "model") == ""
    assert c.get("defaults", "context") == "summary"
    assert c.get("summary", "budget_chars") == 24000
    assert c.get("codex", "sandbox") == "workspace-write"
    assert c.get("codex", "dangerous") is False
    assert c.get("claude", "permission_mode") == "acceptEdits"
    assert c.get("claude", "dangerous") is False
    assert c.command("codex") == ["codex"] and c.command("claude") == ["claude"]
    assert not (tmp_path / "none.toml").exists()


def test_defaults_are_independent_copies() -> None:
    a = defaults()
    a.table("codex")["extra_args"].append("--x")
    assert defaults().get("codex", "extra_args") == []


def test_values_override_defaults_and_keep_others(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
[defaults]
adapter = "claude"
timeout = 30.5
[codex]
command = "/opt/codex"
config = { model_reasoning_effort = "high", tools = { web_search = true } }
[claude]
env = { CLAUDE_CODE_MAX_RETRIES = "0" }
""",
    )
    c = load(p)
    assert c.get("defaults", "adapter") == "claude"
    assert c.get("defaults", "timeout") == 30.5
    assert c.get("defaults", "context") == "summary"
    assert c.command("codex") == ["/opt/codex"]
    assert c.table("codex")["config"]["tools"] == {"web_search": True}
    assert c.table("claude")["env"] == {"CLAUDE_CODE_MAX_RETRIES": "0"}
    assert c.path == str(p)


def test_dumps_round_trips_defaults(tmp_path: Path) -> None:
    text = dumps(defaults())
    doc = tomllib.loads(text)
    assert set(doc) == set(SCHEMA)
    assert load(write(tmp_path, text)).data == defaults().data


def _wrong_value(types: tuple[type, ...]) -> object:
    if str in types:
        return 12
    if int in types or float in types:
        return "12"
    if bool in types:
        return "yes"
    if list in types:
        return "x"
    return 1  # dict


SCHEMA = schema()  # zwarm's tables and every installed agent's
ALL_KEYS = [(t, k) for t, keys in SCHEMA.items() for k in keys]


@pytest.mark.parametrize(("table", "key"), ALL_KEYS)
def test_every_key_type_error_names_file_and_key(tmp_path: Path, table: str, key: str) -> None:
    import tomli_w

    bad = _wrong_value(SCHEMA[table][key][0])
    p = write(tmp_path, tomli_w.dumps({table: {key: bad}}))
    with pytest.raises(ConfigError) as ei:
        load(p)
    msg = str(ei.value)
    assert msg.startswith(str(p) + ": "), msg
    assert f"{table}.{key}" in msg
    assert "\n" not in msg
    assert ei.value.path == str(p)


@pytest.mark.parametrize(
    ("table", "key"), [(t, k) for t, k in ALL_KEYS if SCHEMA[t][k][0] in ((int,), (int, float))]
)
def test_bool_is_not_a_number(tmp_path: Path, table: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"{table}\.{key} must be"):
        load(write(tmp_path, f"[{table}]\n{key} = true\n"))


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("[defaults\n", "invalid TOML"),
        ("adapter = codex\n", "invalid TOML"),
        ("[nope]\nx = 1\n", "unknown table [nope]"),
        ("[defaults]\nadaptr = 'codex'\n", "unknown key 'adaptr' in [defaults]"),
        ("defaults = 3\n", "[defaults] must be a table"),
        ("[defaults]\nadapter = 'grok'\n", "defaults.adapter must be one of claude, codex, gemini"),
        ("[defaults]\ncontext = 'full'\n", "defaults.context must be one of"),
        ("[codex]\nsandbox = 'none'\n", "codex.sandbox must be one of"),
        ("[claude]\npermission_mode = 'yolo'\n", "claude.permission_mode must be one of"),
        ("[defaults]\ntimeout = -1\n", "defaults.timeout must not be negative"),
        ("[summary]\nbudget_chars = -5\n", "must not be negative"),
        ("[defaults]\ntimeout = nan\n", "defaults.timeout must be a finite number"),
        ("[tools]\nmax_wait_s = inf\n", "tools.max_wait_s must be a finite number"),
        ("[codex]\ncommand = []\n", "codex.command must not be empty"),
        ("[codex]\ncommand = ''\n", "codex.command must not be empty"),
        ("[claude]\ncommand = ['claude', 3]\n", "claude.command must be a list of strings"),
        ("[codex]\nextra_args = ['--x', 1]\n", "codex.extra_args must be a list of strings"),
        ("[codex]\nenv = { 'BAD-NAME' = 'x' }\n", "codex.env.BAD-NAME"),
        ("[codex]\nenv = { OK = 1 }\n", "codex.env.OK"),
        ('[codex]\nenv = { "X\\n" = "1" }\n', "codex.env.X"),
        ("[codex.prices]\nm = { input = 1, output = 2 }\n", "needs exactly input, cached_input"),
        (
            "[codex.prices]\nm = { input = 1, cached_input = -1, output = 2 }\n",
            "codex.prices.m.cached_input must be a non-negative number",
        ),
        ("[codex.prices]\nm = 3\n", "codex.prices.m needs exactly"),
    ],
)
def test_invalid_files(tmp_path: Path, text: str, expect: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        load(p)
    assert str(ei.value).startswith(f"{p}: ")
    assert expect in str(ei.value)


def test_invalid_utf8(tmp_path: Path) -> None:
    p = write(tmp_path, b"[defaults]\nmodel = '\xff'\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load(p)


def test_unreadable_path(tmp_path: Path) -> None:
    (tmp_path / "config.toml").mkdir()
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "config.toml")


# ---------------------------------------------------------------------------- prices, cost
def _mgr(agent: str, tmp_path: Path, text: str = ""):
    c = load(write(tmp_path, text)) if text else defaults()
    return manager_class(agent)(Store(tmp_path / ".zwarm"), c, Env(cwd=tmp_path, environ={}))


def test_codex_cost_estimated_from_default_prices(tmp_path: Path) -> None:
    m = _mgr("codex", tmp_path)
    u = Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000)
    # gpt-5: 1.25 per 1M fresh input, 0.125 per 1M cached, 10 per 1M output
    assert m.estimate_cost(u, "gpt-5") == pytest.approx(0.6 * 1.25 + 0.4 * 0.125 + 0.1 * 10)
    assert m.cost_source("gpt-5") == "estimated"


def test_unknown_model_cost_is_unknown_not_zero(tmp_path: Path) -> None:
    m = _mgr("codex", tmp_path)
    assert m.estimate_cost(Usage(100, 0, 10), "mystery-model") is None
    assert m.estimate_cost(Usage(100, 0, 10), None) is None
    assert m.cost_source("mystery-model") == "unknown"
    assert m.cost_source(None) == "unknown"


def test_price_override_and_new_model(tmp_path: Path) -> None:
    m = _mgr(
        "codex",
        tmp_path,
        """
[codex.prices.gpt-5]
input = 2.0
cached_input = 0.0
output = 0.0
[codex.prices."my-local"]
input = 1
cached_input = 1
output = 1
""",
    )
    assert m.estimate_cost(Usage(2_000_000, 1_000_000, 0), "gpt-5") == pytest.approx(2.0)
    assert m.estimate_cost(Usage(500_000, 0, 500_000), "my-local") == pytest.approx(1.0)
    assert m.agent.price(m.config.table("codex"), "gpt-5-mini") == DEFAULT_PRICES["gpt-5-mini"]


def test_claude_cost_is_reported(tmp_path: Path) -> None:
    m = _mgr("claude", tmp_path)
    assert m.cost_source("sonnet") == "reported"
    assert m.cost_source(None) == "reported"
    assert m.agent.price(m.config.table("claude"), "gpt-5") is None  # codex's, not claude's


def test_each_agents_modes_are_ordered_as_limits_over_exactly_its_choices() -> None:
    """An agent's sandbox or permission mode is a limit (loosening it needs trust): its order,
    tightest first, names every choice the setting accepts, once."""
    from zwarm import agents

    for name in ("codex", "claude", "gemini"):
        agent = agents.get(name)
        for key, setting in agent.settings.items():
            if setting.trust.order and setting.choices:
                assert sorted(setting.trust.order) == sorted(setting.choices), (name, key)
                assert setting.trust.order.index(setting.default) < len(setting.trust.order) - 1
    assert {s.trust.order for s in (agents.get("codex").settings["sandbox"],)} == {
        ("read-only", "workspace-write", "danger-full-access")
    }
