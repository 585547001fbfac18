"""The trust rules a config key can have (``Rule``), and what a plugin declares of its table.

Owns what each rule means; ``Setting``, one key of a plugin's config table (an agent's
``[codex]``, a launcher's ``[slurm]``: its type, default, shape and rule); ``Family``, a family
of named tables a launcher declares (``[hosts.NAME]``: each member's keys); and ``OWN_TABLES``,
zwarm's own table names that no plugin may take. Which key has which rule is declared next to
the key (``zwarm.config``'s ``SCHEMA``, a plugin's ``Setting.trust``), and how a value is
compared under it is ``zwarm.config.changes``. Must stay true: imports nothing of zwarm (the
config, every agent module and every launcher module import it).
"""

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple


class Rule(NamedTuple):
    """How trust treats a key (``zwarm.trust`` applies it): declared once per key, as the last
    element of its ``Spec`` (an agent's keys: ``Setting.trust``)."""

    kind: str  # "executes", "at_most" (a limit, lower is tighter), "at_least", "each", "free"
    none: Any = None  # at_most: the value meaning "no limit" (the loosest); None: there is none
    order: tuple[Any, ...] = ()  # at_most among choices: tightest first


# decides what runs, where, with what, or where data goes: used only at its default or its
# trusted value; an agent's key is this unless its Setting says otherwise
EXECUTES = Rule("executes")
FREE = Rule("free")  # limits nothing: never needs trust
CAP = Rule("at_most", none=0)  # a limit, lower is tighter; 0 = none (the loosest)
COUNT = Rule("at_most")  # a limit, lower is tighter; 0 allows nothing
KILL_FIRST = Rule("at_most", order=("kill", "mark"))  # [limits] on_stall
# an agent's own sandbox or permission mode (and ``dangerous``): a limit among its choices,
# tightest first; an agent's module declares its order (``Setting.trust``)
DANGEROUS = Rule("at_most", order=(False, True))
# zwarm's own sandbox of a turn ([sandbox] mode: zwarm.sandbox): "off" is the loosest
SANDBOX = Rule("at_most", order=("bwrap", "off"))
# a size in bytes ("512M", "2G": ``zwarm.config.size_bytes``), lower is tighter; "" = none
SIZE = Rule("at_most", none="")
# a table of limits, each key compared as its namesake one level up and as the engine uses
# it (the table's own value, else the one above): [sandbox.<agent>] (``zwarm.config``)
EACH = Rule("each")
# USD per 1M tokens by model: a limit, higher is tighter (a lower price lets a budget buy more);
# a model left out costs its list price (the agent's default_prices), an unknown one nothing
PRICES = Rule("at_least")


class Setting(NamedTuple):
    """One key of a plugin's config table (an agent's, a launcher's): accepted TOML types,
    default, allowed values, one line saying what it does (the comment ``zwarm init`` writes
    above it), its trust rule, and its shape: ``pattern``, which a string value (each string
    of a list) must match whole, ``shape`` saying what that is in an error ("a partition
    name"); ``bounds`` for a number. ``zwarm.config`` checks every declared key through the
    same path as its own."""

    types: tuple[type, ...]
    default: Any
    choices: tuple[str, ...] = ()
    doc: str = ""
    trust: Rule = EXECUTES  # how zwarm trust treats it (zwarm.config): default-deny
    pattern: str = ""
    shape: str = ""
    bounds: tuple[float, float] | None = None  # a number's lowest and highest value

    def shape_problem(self, name: str, value: Any) -> str | None:
        """What is wrong with ``value``'s shape as key ``name`` (``pattern`` whole, each string
        of a list too; a number within ``bounds``), or None."""
        if self.bounds is not None and isinstance(value, (int, float)):
            low, high = self.bounds
            if not low <= value <= high:
                return f"{name} must be from {low:g} to {high:g}, not {value!r}"
        if not self.pattern:
            return None
        if isinstance(value, str) and not re.match(self.pattern, value):
            return f"{name} must be {self.shape}, not {value!r}"
        if isinstance(value, list) and not all(
            isinstance(v, str) and re.match(self.pattern, v) for v in value
        ):
            return f"{name} must be {self.shape}"
        return None

    def problem(self, name: str, value: Any) -> str | None:
        """What is wrong with ``value`` as key ``name`` (its type, choices, shape), or None."""
        wrong_bool = isinstance(value, bool) and bool not in self.types  # True is an int too
        if not isinstance(value, self.types) or wrong_bool:
            kinds = " or ".join(type_name(t) for t in self.types)
            return f"{name} must be {kinds}, not {type_name(type(value))}"
        if self.choices and value not in self.choices:
            return f"{name} must be one of {', '.join(self.choices)}"
        return self.shape_problem(name, value)


def type_name(t: type) -> str:
    """A TOML type as an error says it ("an integer")."""
    names = {str: "a string", int: "an integer", float: "a number", bool: "true/false"}
    return {**names, list: "an array", dict: "a table"}.get(t, t.__name__)


class Family(NamedTuple):
    """A family of named tables a launcher declares (``Launcher.families``): ``[TABLE.NAME]``,
    one member per NAME (an ssh launcher's ``[hosts.a]``, ``[hosts.b]``). ``settings``: each
    member's keys, checked as a plugin's table is (type, ``pattern``, ``bounds``), none with a
    default in the file (a key left out is unset: whoever reads the member fills it);
    ``required``: the keys every member must set; ``name``: the pattern a NAME matches whole,
    ``doc`` and ``example`` what ``zwarm init``'s commented config shows. A member is one
    value to trust: it executes (what to connect to, what runs there), so it is used only as
    trusted, whole; a member the file no longer has needs no trust."""

    settings: Mapping[str, Setting]
    required: tuple[str, ...] = ()
    name: str = r"^[a-z][a-z0-9_-]{0,31}\Z"
    doc: str = ""
    example: Mapping[str, Any] = MappingProxyType({})

    def problem(self, table: str, name: str, value: Any) -> str | None:
        """What is wrong with ``[table.name]`` = ``value`` as a member (its name, each key
        declared and of its type and shape, the required ones set), or None."""
        if not re.match(self.name, name):
            return f"[{table}.{name}]: a name is a-z, 0-9, '_', '-' (a-z first)"
        if not isinstance(value, dict):
            return f"{table}.{name} must be a table"
        for key, v in value.items():
            setting = self.settings.get(key)
            if setting is None:
                keys = ", ".join(self.settings)
                return f"unknown key {key!r} in [{table}.{name}] (use {keys})"
            why = setting.problem(f"{table}.{name}.{key}", v)
            if why is not None:
                return why
        missing = [k for k in self.required if k not in value]
        return f"[{table}.{name}] needs {', '.join(missing)}" if missing else None


# config.toml tables that are zwarm's own, now or planned: no plugin (agent, launcher) may take
# one as its name; a launcher's name is its table's, so no agent may take it either
OWN_TABLES = frozenset(
    {"defaults", "workspace", "summary", "tools", "orchestrator", "limits", "groups", "hooks"}
    | {"launcher", "serve", "gemini-settings", "notify", "trust", "zwarm", "sandbox", "checks"}
    | {"accounts", "merge"}
)
