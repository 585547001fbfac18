"""One ``SpawnRequest`` and one ``MessageRequest`` (``zwarm.model.requests``), every front end
made from them (issue 31): each front end's subset of their fields is an explicit list that,
with the fields it leaves out (each with why), is every field exactly once; what a front end
offers has the request's type, bounds, default and help; a request built in Python is checked
by ``Zwarm`` with one clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from zwarm.api import Zwarm
from zwarm.cli import options
from zwarm.env import Env
from zwarm.errors import InvalidInput
from zwarm.model import requests
from zwarm.model.requests import MessageRequest, SpawnRequest
from zwarm.orchestrator.tools import catalog
from zwarm.serve import bodies

pytestmark = pytest.mark.unit

FRONT_ENDS: list[tuple[str, type[msgspec.Struct], tuple[str, ...], dict[str, str]]] = [
    ("cli spawn", SpawnRequest, tuple(o.field for o in options.SPAWN), options.SPAWN_LEFT_OUT),
    ("cli inject", MessageRequest, tuple(o.field for o in options.MESSAGE),
     options.MESSAGE_LEFT_OUT),
    ("http spawn", SpawnRequest, bodies.SPAWN, bodies.SPAWN_LEFT_OUT),
    ("http inject", MessageRequest, bodies.MESSAGE, bodies.MESSAGE_LEFT_OUT),
    ("tool delegate", SpawnRequest, catalog.DELEGATE, catalog.DELEGATE_LEFT_OUT),
    ("tool converse", MessageRequest, catalog.CONVERSE, catalog.CONVERSE_LEFT_OUT),
]  # fmt: skip


@pytest.mark.parametrize(("cls", "offered", "left_out"), [f[1:] for f in FRONT_ENDS],
                         ids=[f[0] for f in FRONT_ENDS])  # fmt: skip
def test_a_front_ends_subset_is_explicit(
    cls: type[msgspec.Struct], offered: tuple[str, ...], left_out: dict[str, str]
) -> None:
    fields = [f.name for f in msgspec.structs.fields(cls)]
    assert len(set(offered)) == len(offered)
    assert not set(offered) & set(left_out)
    assert sorted([*offered, *left_out]) == sorted(fields)
    assert all(why.strip() for why in left_out.values())


def test_every_field_has_help() -> None:
    for cls in (SpawnRequest, MessageRequest):
        helps = requests.field_help(cls)
        assert all(h.endswith(".") and len(h) > 10 for h in helps.values()), helps


def test_the_http_bodies_are_the_requests() -> None:
    """The same types, bounds and help; only ``source``'s default is the server's."""
    for body, cls in ((bodies.Spawn, SpawnRequest), (bodies.Message, MessageRequest)):
        want = {f.name: f for f in msgspec.structs.fields(cls)}
        for f in msgspec.structs.fields(body):
            assert f.type == want[f.name].type, f.name
            if f.name != "source":
                assert (f.default, f.required) == (want[f.name].default, want[f.name].required)
    got = msgspec.json.decode(b'{"task": "t", "after": ["a"]}', type=bodies.Spawn)
    req = bodies.spawn_request(got)
    assert (req.task, req.after, req.source, req.run, req.dangerous) == (
        "t", ("a",), "serve", None, None)  # fmt: skip


def test_the_click_options_are_the_requests() -> None:
    """Each option's help, default and choices are its field's."""
    import click

    from zwarm.cli.commands import cli

    for command, cls in (("spawn", SpawnRequest), ("inject", MessageRequest)):
        cmd = cli.get_command(click.Context(cli), command)
        assert cmd is not None
        params = {p.name: p for p in cmd.params}
        helps = requests.field_help(cls)
        defaults = {f.name: f.default for f in msgspec.structs.fields(cls)}
        for row in options.SPAWN if command == "spawn" else options.MESSAGE:
            p = params[row.field]
            assert isinstance(p, click.Option) and p.help == options._cli_words(helps[row.field])
            assert p.help is not None and "`" not in p.help, row.field  # every field an option
            assert p.default == defaults[row.field], row.field
        context = params["context"].type
        assert isinstance(context, click.Choice)
        assert tuple(context.choices) == requests.CONTEXT_MODES


def _api(tmp_path: Path) -> Zwarm:
    return Zwarm(env=Env(state_dir=tmp_path / "state", environ={}, cwd=tmp_path))


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda api: api.spawn("t", colour="red"), "SpawnRequest: Unexpected keyword argument"),
        (lambda api: api.spawn(SpawnRequest(task="t"), name="x"), "takes no other options"),
        (lambda api: api.spawn(""), "the prompt is empty"),
        (lambda api: api.spawn(SpawnRequest(task="t", timeout=0)), "timeout must be a positive"),
        (lambda api: api.spawn("t", context="task"), "unknown context mode 'task'"),
        (lambda api: api.inject("x", MessageRequest(message="a\x00")), "NUL bytes"),
        (lambda api: api.inject("x", "m", context="Native"), "use summary or native"),
        (lambda api: api.inject("x", "m", timeout=float("inf")), "timeout must be a positive"),
    ],
)
def test_a_request_built_in_python_is_checked(tmp_path: Path, call: Any, words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        call(_api(tmp_path))
    assert not (tmp_path / "state").exists()
