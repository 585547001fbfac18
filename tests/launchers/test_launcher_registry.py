"""Launchers are plugins as agents are: each declares its config table (checked by the one
config path, with its trust rules), its spawn options, its failure reasons (recorded, and
labelled in ``ls``) and its name (reserved from agents); the registry refuses a launcher whose
declarations break the rules; a reason no installed launcher declares reads as its words; and
the launcher package never reads the config itself. The end-to-end proof, a launcher installed
by entry point alone, is examples/toy-launcher (tests/agents/test_toy_launcher.py)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import msgspec
import pytest

from tests.project.test_layering import _reachable, import_graph
from zwarm import config, launchers
from zwarm.cli.render import short_reason
from zwarm.launchers.base import Failure, Launcher
from zwarm.launchers.local import LocalLauncher
from zwarm.launchers.slurm import SlurmLauncher
from zwarm.model import Status, Turn
from zwarm.model.records import Session
from zwarm.rules import EXECUTES, FREE, Setting

pytestmark = pytest.mark.unit


def test_the_launcher_package_never_imports_the_config_nor_the_engine() -> None:
    graph = import_graph()
    package = [m for m in graph if m == "zwarm.launchers" or m.startswith("zwarm.launchers.")]
    for m in package:
        reached = _reachable(graph, graph[m])
        assert "zwarm.config" not in reached, m
        assert not {r for r in reached if r.startswith("zwarm.engine")}, m


def test_slurms_table_is_the_launchers_own_declaration() -> None:
    assert config.schema()["slurm"] == {
        k: (s.types, s.default, s.trust) for k, s in SlurmLauncher.settings.items()
    }
    assert "slurm" not in config.SCHEMA  # nothing Slurm's left in zwarm's own schema
    shipped = {n: t for n, t in launchers.tables().items() if n in ("local", "slurm")}
    assert shipped == {"slurm": dict(SlurmLauncher.settings)}  # local has none


def test_a_launchers_table_shapes_are_checked_by_the_config() -> None:
    with pytest.raises(config.ConfigError, match=r"slurm.mem must be a Slurm memory size"):
        config.validate({"slurm": {"mem": "--wrap=rm -rf /"}}, "c.toml")
    with pytest.raises(config.ConfigError, match=r"slurm.env must be a list of environment"):
        config.validate({"slurm": {"env": ["A", "NOT A NAME"]}}, "c.toml")
    assert config.validate({"slurm": {"mem": "4G"}}, "c.toml")["slurm"]["mem"] == "4G"


def test_the_launcher_default_line_of_init_names_the_installed_launchers() -> None:
    from zwarm.config_text import describe

    line = describe("launcher", "default")
    assert '"local", "slurm"' in line
    assert describe("slurm", "mem") == SlurmLauncher.settings["mem"].doc


def _declared(**attrs: Any) -> type[Launcher]:
    return type("Bad", (LocalLauncher,), {"name": "bad", **attrs})


@pytest.mark.parametrize(
    ("attrs", "why"),
    [
        ({"name": "other"}, "registered as 'bad'"),
        ({"reasons": {"lost": Failure("lost", "")}}, "is not bad_<word>"),
        ({"reasons": {"bad_Lost!": Failure("lost", "")}}, "is not bad_<word>"),
        ({"spawn_options": ("nope",)}, "not a free key"),
        ({"settings": {"cmd": Setting((str,), "")}, "spawn_options": ("cmd",)}, "not a free"),
    ],
)
def test_a_launcher_that_breaks_the_rules_is_refused(attrs: dict[str, Any], why: str) -> None:
    with pytest.raises((TypeError, ValueError), match=why):
        launchers._checked("bad", _declared(**attrs))


def test_a_launcher_may_not_take_an_agents_or_zwarms_table_name() -> None:
    for name in ("codex", "defaults", "launcher", "Bad!"):
        with pytest.raises(ValueError, match="not a valid launcher name"):
            launchers._check_name(name)


class _Lying(LocalLauncher):
    name: ClassVar[str] = "local"
    reasons: ClassVar[Mapping[str, Failure]] = MappingProxyType(
        {"local_gone": Failure("gone", "declared")}
    )


def test_a_launcher_records_only_reasons_it_declares(tmp_path: Any) -> None:
    from zwarm.env import Env
    from zwarm.store import Store

    runner = _Lying(Store(tmp_path), Env(environ={}))
    assert runner.recordable("local_gone") == "local_gone"
    assert runner.recordable("timeout") == "timeout"  # zwarm's own
    assert runner.recordable("slurm_timeout") == "supervisor_lost"  # another launcher's
    assert runner.recordable("made_up") == "supervisor_lost"


def _meta(reason: str) -> bytes:
    from zwarm.model import schema

    t = Turn(1, Status.FAILED, "task", "task", "2026-01-01T00:00:00+00:00")
    t.ended_at, t.reason, t.error = "2026-01-01T00:00:01+00:00", reason, "gone"
    s = Session(
        "0b9d3f52-1c1e-4c55-9a52-6f7e2b7f0a11",
        "codex",
        "task",
        "/tmp",
        "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:00:01+00:00",
        turns=[t],
    )
    return schema.encode(s)


def test_a_reason_no_installed_launcher_declares_is_kept_and_read_as_its_words() -> None:
    from zwarm.model import schema

    s = schema.decode(_meta("nice_lost"))  # its launcher since uninstalled
    assert s.reason == "nice_lost" and s.status is Status.FAILED
    assert schema.decode(schema.encode(s)).turns[0].reason == "nice_lost"  # kept on a save
    assert short_reason({"reason": "nice_lost"}) == "nice lost"
    assert short_reason({"reason": "slurm_preempted"}) == "preempted"  # Slurm's own label
    assert short_reason({"reason": "timeout"}) == "timeout"
    assert short_reason({"reason": "agent_error", "error": "agent exited with code 3"}) == "exit 3"


@pytest.mark.parametrize("bad", ["Nice_lost", "nice lost", "x" * 65, "-x", "\x1b[31m"])
def test_a_reason_of_any_other_shape_makes_meta_json_damaged(bad: str) -> None:
    from zwarm.model import schema

    data = msgspec.json.decode(_meta("timeout"))
    data["turns"][0]["reason"] = bad
    with pytest.raises(ValueError):
        schema.decode(msgspec.json.encode(data))


def test_spawn_options_are_typed_and_only_the_launchers_free_keys() -> None:
    from zwarm.errors import InvalidInput

    got = launchers.parse_options("slurm", ["cpus=4", "time=1:00:00", "partition=debug"])
    assert got == {"cpus": 4, "time": "1:00:00", "partition": "debug"}
    with pytest.raises(InvalidInput, match="takes no option 'account'"):
        launchers.parse_options("slurm", ["account=someone-else"])  # executes: needs trust
    with pytest.raises(InvalidInput, match="takes no option 'x'"):
        launchers.parse_options("local", ["x=1"])
    with pytest.raises(InvalidInput, match="must be a number"):
        launchers.parse_options("slurm", ["cpus=many"])
    assert SlurmLauncher.settings["account"].trust == EXECUTES
    assert all(SlurmLauncher.settings[k].trust == FREE for k in SlurmLauncher.spawn_options)
