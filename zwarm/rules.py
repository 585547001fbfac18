"""The trust rules a config key can have (``Rule``), and the ones zwarm uses.

Owns what each rule means; which key has which is declared next to the key (``zwarm.config``'s
``SCHEMA``, an agent's ``Setting.trust``), and how a value is compared under it is
``zwarm.config.changes``. Must stay true: imports nothing of zwarm (the config and every agent
module import it).
"""

from typing import Any, NamedTuple


class Rule(NamedTuple):
    """How trust treats a key (``zwarm.trust`` applies it): declared once per key, as the last
    element of its ``Spec`` (an agent's keys: ``Setting.trust``)."""

    kind: str  # "executes", "at_most" (a limit, lower is tighter), "at_least", "free"
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
# USD per 1M tokens by model: a limit, higher is tighter (a lower price lets a budget buy more);
# a model left out costs its list price (the agent's default_prices), an unknown one nothing
PRICES = Rule("at_least")
