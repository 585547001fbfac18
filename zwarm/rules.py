"""The trust rules a config key can have (``Rule``), and what a plugin declares of its table.

Owns what each rule means; ``Setting``, one key of a plugin's config table (an agent's
``[codex]``, a launcher's ``[slurm]``: its type, default, shape and rule), and ``OWN_TABLES``,
zwarm's own table names that no plugin may take. Which key has which rule is declared next to
the key (``zwarm.config``'s ``SCHEMA``, a plugin's ``Setting.trust``), and how a value is
compared under it is ``zwarm.config.changes``. Must stay true: imports nothing of zwarm (the
config, every agent module and every launcher module import it).
"""

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


# config.toml tables that are zwarm's own, now or planned: no plugin (agent, launcher) may take
# one as its name; a launcher's name is its table's, so no agent may take it either
OWN_TABLES = frozenset(
    {"defaults", "workspace", "summary", "tools", "orchestrator", "limits", "groups", "hooks"}
    | {"launcher", "serve", "gemini-settings", "notify", "trust", "zwarm", "sandbox", "checks"}
)
