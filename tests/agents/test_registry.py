"""The agent registry (``zwarm.agents``): discovery through entry points, broken plugins, names,
routing order, bound managers, plugin config tables, and staying out of start-up."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from zwarm import agents, config, engine
from zwarm.agents.base import UnknownAgent
from zwarm.engine.manager import BaseSessionManager
from zwarm.errors import ConfigError, InvalidInput

PLUGIN = textwrap.dedent(
    """
    from zwarm.agents.base import Agent, ConformanceSamples, Setting
    from zwarm.model import TurnOutcome


    class Good(Agent):
        name = "zz-good"
        model_pattern = r"gpt-.*|zz-.*"
        settings = {"flavour": Setting((str,), "plain", ("plain", "spicy"))}

        def build_argv(self, opts, resume_id):
            return [*opts.command, "--flavour", opts.settings["flavour"]]

        def permissions(self, table, bypass):
            return "", bypass

        def iter_steps(self, lines):
            return iter(())

        def scan_outcome(self, lines):
            return TurnOutcome()

        def conformance_samples(self):
            return ConformanceSamples(b"", b"", "")


    class Named(Good):
        name = "other"


    class OnArgv(Good):
        name = "zz-argv"
        prompt_on_stdin = False


    class WithManager(Good):  # a session manager of its own: a subclass of the engine's
        name = "zz-manager"
        manager = "zz_plugin:Manager"


    class BadSidecar(Good):  # its sidecar would be zwarm's own digest of the turn
        name = "zz-sidecar"
        turn_sidecar = "digest.json"


    NOT_AN_AGENT = object()
    """
)
BUILTIN = {"codex": "zwarm.agents.codex:CodexAgent", "claude": "zwarm.agents.claude:ClaudeAgent"}
FAKES = {
    "zz-good": "zz_plugin:Good",
    "zz-broken": "zz_broken:Agent",
    "zz-object": "zz_plugin:NOT_AN_AGENT",
    "zz-misnamed": "zz_plugin:Named",
    "zz-argv": "zz_plugin:OnArgv",
    "zz-manager": "zz_plugin:WithManager",
    "zz-sidecar": "zz_plugin:BadSidecar",
    "Bad Name": "zz_plugin:Good",
    "defaults": "zz_plugin:Good",
    "zz-missing": "zz_nowhere:Agent",
}


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry seeing the built-in agents plus ``FAKES`` (fresh caches)."""
    (tmp_path / "zz_plugin.py").write_text(PLUGIN)
    (tmp_path / "zz_broken.py").write_text("raise ImportError('missing dependency foo')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(agents, "_specs", lambda: {**BUILTIN, **FAKES})
    monkeypatch.setattr(agents, "_loaded", {})
    monkeypatch.setattr(agents, "_failed", {})
    yield
    for mod in ("zz_plugin", "zz_broken"):
        sys.modules.pop(mod, None)


def test_broken_plugins_are_left_out_with_one_line_each(
    registry: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert agents.names() == ("claude", "codex", "zz-good")
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == len(FAKES) - 1
    assert all(w.startswith("zwarm: warning: agent plugin ") for w in warnings)
    joined = "\n".join(warnings)
    for why in (
        "ImportError: missing dependency foo",
        "is not a zwarm.agents.base.Agent",
        "registered as 'zz-misnamed' but the agent is named 'other'",
        "prompt_on_stdin must be True",
        "it brings a session manager (Agent.manager), which zwarm no longer loads",
        "turn_sidecar 'digest.json' is not a file extension like 'facts.json'",
        "'Bad Name' is not a valid agent name",
        "'defaults' is not a valid agent name",
        "No module named 'zz_nowhere'",
    ):
        assert why in joined
    agents.names()
    assert capsys.readouterr().err == ""  # warned once per process
    assert set(agents.problems()) == set(FAKES) - {"zz-good"}


def test_a_broken_plugin_by_name_says_why(registry: None) -> None:
    with pytest.raises(UnknownAgent, match="'zz-broken' is installed but failed to load: Import"):
        agents.get("zz-broken")


def test_unknown_agent_lists_the_known_ones(registry: None) -> None:
    with pytest.raises(UnknownAgent) as ei:
        agents.get("gemini")
    assert isinstance(ei.value, InvalidInput) and isinstance(ei.value, ValueError)
    assert str(ei.value) == "unknown adapter 'gemini' (use claude, codex, zz-good)"
    assert ei.value.known == ("claude", "codex", "zz-good")


def test_builtin_agents_route_first_then_plugins(registry: None) -> None:
    assert agents.agent_for_model("gpt-5") == "codex"  # zz-good claims gpt-* too
    assert agents.agent_for_model("zz-large") == "zz-good"
    assert agents.agent_for_model("sonnet") == "claude"
    assert agents.agent_for_model("llama3") is None
    assert agents.agent_for_model(None) is None


def test_a_plugin_gets_a_bound_manager(registry: None) -> None:
    cls = engine.manager_class("zz-good")
    assert issubclass(cls, BaseSessionManager)
    assert cls.agent is agents.get("zz-good") and cls.name == "zz-good"
    assert engine.manager_class("zz-good") is cls
    assert cls.__name__ == "Zz-GoodSessionManager"


def test_a_plugin_table_is_validated_like_the_builtin_ones(registry: None) -> None:
    data = config.validate(
        {"zz-good": {"flavour": "spicy"}, "defaults": {"adapter": "zz-good"}}, "c"
    )
    assert data["zz-good"]["flavour"] == "spicy" and data["zz-good"]["command"] == ["zz-good"]
    assert data["codex"] == config.defaults().table("codex")
    with pytest.raises(ConfigError, match=r"zz-good.flavour must be one of plain, spicy"):
        config.validate({"zz-good": {"flavour": "bland"}}, "c")
    with pytest.raises(ConfigError, match=r"unknown key 'colour' in \[zz-good\]"):
        config.validate({"zz-good": {"colour": "red"}}, "c")
    with pytest.raises(ConfigError, match=r"unknown table \[zz-broken\]"):
        config.validate({"zz-broken": {}}, "c")
    with pytest.raises(
        ConfigError, match=r"defaults\.adapter must be one of claude, codex, zz-good"
    ):
        config.validate({"defaults": {"adapter": "zz-broken"}}, "c")


def test_list_price_comes_from_the_agents() -> None:
    assert agents.list_price("gpt-5") == {"input": 1.25, "cached_input": 0.125, "output": 10.0}
    assert agents.list_price("no-such-model") is None


@pytest.mark.perf
@pytest.mark.parametrize(
    "argv",
    [None, ["--help"], ["ls"], ["ls", "--json"]],
    ids=["import-api", "help", "ls", "ls-json"],
)
def test_start_up_reads_no_plugins(tmp_path: Path, argv: list[str] | None) -> None:
    """``zwarm --help`` and ``zwarm ls`` neither scan entry points nor import an agent."""
    script = textwrap.dedent(
        f"""
        import json, sys
        argv = {argv!r}
        if argv is None:
            import zwarm.api
        else:
            from zwarm.cli import main
            sys.argv = ["zwarm", "--state-dir", {str(tmp_path / "state")!r}, *argv]
            try:
                main()
            except SystemExit:
                pass
        loaded = [m for m in sys.modules if m.startswith(("zwarm.agents.", "zwarm.plugins"))]
        sys.stderr.write("MODULES" + json.dumps(loaded) + "\\n")
        """
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    marker = [line for line in res.stderr.splitlines() if line.startswith("MODULES")]
    assert marker, res.stderr
    assert json.loads(marker[0][len("MODULES") :]) == []


def test_zwarms_own_config_tables_are_reserved_agent_names() -> None:
    from zwarm import agents, config

    assert set(config.SCHEMA) <= agents.reserved_tables()
    assert {"local", "slurm"} <= agents.reserved_tables()  # every launcher's, from the registry
