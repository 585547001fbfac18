"""The command line's spawn and inject options: one table over ``SpawnRequest`` and
``MessageRequest`` (``zwarm.model.requests``), from which both the click options
(``click_options``) and the click-free fast path's grammar (``zwarm.cli.fast``, through
``described``) are made, and the name an error gives a request field at the command line
(``flag``: ``ZwarmError.spelled``, so an engine error names ``--after-any``, not ``after_any``).

Owns which request fields the CLI offers (``SPAWN``, ``MESSAGE``: the CLI's subset, each
left-out field named with why in ``SPAWN_LEFT_OUT``) and their flags. A field's type, default,
choices and help are the request's, read from it: nothing about an option is written here but
its flag. Must stay true: importing this module loads only the standard library (the request
module and click are imported by the functions that need them), and the fast path's grammar
and click's options are made from the same rows, so they cannot drift.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import click
    from msgspec import Struct


class Opt:
    """One row: a request field and the flags naming it (the first one long; ``--a/--b``
    sets a ``bool | None`` field True or False); ``kind`` only where the field's type does
    not say how the CLI reads it (``agent``: an installed agent's name); ``metavar`` as
    click shows it."""

    __slots__ = ("decls", "field", "kind", "metavar")

    def __init__(self, field: str, *decls: str, kind: str = "", metavar: str | None = None):
        self.field, self.decls, self.kind, self.metavar = field, decls, kind, metavar


SPAWN = (
    Opt("adapter", "--adapter", kind="agent"),
    Opt("model", "--model", "-m"),
    Opt("cwd", "-C", metavar="DIR"),
    Opt("name", "--name"),
    Opt("timeout", "--timeout"),
    Opt("context", "--context"),
    Opt("dangerous", "--dangerous"),
    Opt("sandbox", "--sandbox"),
    Opt("notify", "--notify"),
    Opt("worktree", "--worktree/--shared"),
    Opt("branch", "--branch"),
    Opt("base", "--base"),
    Opt("host", "--host"),
    Opt("launcher", "--launcher"),
    Opt("launcher_option", "--launcher-option", metavar="KEY=VALUE"),
    Opt("detached", "--detached"),
    Opt("after", "--after", metavar="ID[,ID...]"),
    Opt("after_any", "--after-any"),
    Opt("group", "--group"),
    Opt("priority", "--priority"),
    Opt("account", "--account"),
    Opt("max_cost", "--max-cost"),
    Opt("max_tokens", "--max-tokens"),
    Opt("stall", "--stall"),
    Opt("best_of", "--best-of", metavar="N"),
    Opt("agents", "--agents", metavar="AGENT[,AGENT...]"),
    Opt("models", "--models", metavar="MODEL[,MODEL...]"),
    Opt("check", "--check", metavar="CMD"),
    Opt("check_timeout", "--check-timeout", metavar="S"),
    Opt("protect", "--protect", metavar="PATH"),
    Opt("set_budget", "--set-budget", metavar="USD"),
)
SPAWN_LEFT_OUT = {
    "task": "the TASK argument (- reads it from stdin)",
    "source": "always cli",
    "run": "set by zwarm orchestrate for its own sessions, never by a user",
}
MESSAGE = (Opt("context", "--context"), Opt("timeout", "--timeout"))
MESSAGE_LEFT_OUT = {"message": "the MESSAGE argument (- reads it from stdin)"}


def flag(field: str) -> str:
    """How the CLI names request field ``field`` in an error (``ZwarmError.spelled``): its
    option (the first long one: ``--worktree``), else its argument (``TASK``)."""
    for row in (*SPAWN, *MESSAGE):
        if row.field == field:
            return row.decls[0].split("/")[0]
    return field.upper() if field in ("task", "message") else field


class Described:
    """A row with what the request says of its field: how the CLI reads it (``kind``:
    text, float, int, choice, multiple, flag, pair, or the row's own), its ``choices``, its
    ``default`` and its ``help``."""

    __slots__ = ("choices", "decls", "default", "field", "help", "kind", "metavar")

    def __init__(self, row: Opt, kind: str, choices: tuple[str, ...], default: Any, help_: str):
        self.field, self.decls, self.metavar = row.field, row.decls, row.metavar
        self.kind, self.choices, self.default, self.help = kind, choices, default, help_


def described(command: str) -> list[Described]:
    """``spawn``'s or ``inject``'s rows, each with what its request field says."""
    from typing import Literal, get_args, get_origin

    import msgspec

    from zwarm.model import requests

    cls: type[Struct] = requests.SpawnRequest if command == "spawn" else requests.MessageRequest
    fields = {f.name: f for f in msgspec.structs.fields(cls)}  # its annotations read once
    out = []
    for row in SPAWN if command == "spawn" else MESSAGE:
        f = fields[row.field]
        typ = requests.bare_type(f.type)
        choices: tuple[str, ...] = ()
        kind = row.kind
        if kind:
            pass
        elif typ is bool:
            kind = "pair" if "/" in row.decls[0] else "flag"
        elif get_origin(typ) is Literal:
            kind, choices = "choice", get_args(typ)
        elif get_origin(typ) is tuple:
            kind = "multiple"
        else:
            kind = {str: "text", float: "float", int: "int"}[typ]
        out.append(Described(row, kind, choices, f.default, requests.description(f.type)))
    return out


F = Callable[..., Any]


def click_options(command: str) -> Callable[[F], F]:
    """The click options of ``spawn`` or ``inject``, passed to the command under their
    request field's name."""
    import click

    types: dict[str, Any] = {"float": float, "int": int}

    def decorate(f: F) -> F:
        for d in reversed(described(command)):
            kw: dict[str, Any] = {"help": _cli_words(d.help), "default": d.default}
            if d.kind == "flag":
                kw["is_flag"] = True
            elif d.kind == "choice":
                kw["type"] = click.Choice(d.choices)
            elif d.kind == "multiple":
                kw["multiple"] = True
            elif d.kind == "agent":
                kw["callback"] = _agent_name
            elif d.kind in types:
                kw["type"] = types[d.kind]
            if d.metavar:
                kw["metavar"] = d.metavar
            f = click.option(*d.decls, d.field, **kw)(f)
        return f

    return decorate


# the request fields a best-of option's help names, as the command line spells them
def _cli_words(text: str) -> str:
    """A field's help as ``--help`` shows it: each field it names in backquotes (```best_of```,
    as the tools and HTTP read it) named by its option (``flag``: ``--best-of``)."""
    import re

    return re.sub(r"`([a-z_]+)`", lambda m: flag(m.group(1)), text)


def _agent_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--adapter: an installed agent, checked when given (never at --help: no plugin scan)."""
    if value is not None:
        import click

        from zwarm import agents

        try:
            agents.get(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None
    return value
