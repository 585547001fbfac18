"""The agent registry: agents are plugins, found through the ``zwarm.agents`` entry points.

Owns which agents exist and which one a model name implies. An agent is an ``Agent``
(``zwarm.agents.base``) registered by a Python package in the entry-point group
``zwarm.agents`` (``name = "module:AgentClass"``); the built-in ``codex`` and ``claude``
register the same way, in zwarm's own ``pyproject.toml``.

Must stay true:
- only modules in this package name an agent or know its argv, config keys or event format;
- importing this package is cheap: entry points are read (``zwarm.plugins``) and agents
  imported only when first asked for, once per process;
- a plugin that fails to load, or is not a valid ``Agent`` under the name it registers (its
  prompt on stdin, a plain ``turn_sidecar``, no session manager of its own: agents never
  import the engine), is left out with a one-line warning on stderr (once), never a crash;
- routing is deterministic: the agents that ship with zwarm are asked first, then plugins in
  name order.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zwarm.agents.base import Agent

DEFAULT_AGENT = "codex"  # [defaults] adapter
_BUILTIN = "zwarm.agents."  # the module prefix of the agents that ship with zwarm

_loaded: dict[str, Agent] = {}
_failed: dict[str, str] = {}


def names() -> tuple[str, ...]:
    """Every agent that loads: built-in ones first, then plugins, each in name order."""
    specs = _specs()
    ordered = sorted(specs, key=lambda n: (not specs[n].startswith(_BUILTIN), n))
    return tuple(n for n in ordered if _load(n) is not None)


def get(name: str) -> Agent:
    """The agent called ``name``; ``UnknownAgent`` (lists the known ones) if there is none."""
    agent = _load(name)
    if agent is None:
        from zwarm.agents.base import UnknownAgent

        raise UnknownAgent(name, names(), _failed.get(name))
    return agent


def agent_for_model(model: str | None) -> str | None:
    """The agent a model name implies, or None when it implies none."""
    if not model:
        return None
    for name in names():
        if get(name).claims_model(model):
            return name
    return None


def list_price(model: str) -> dict[str, float] | None:
    """A model's list price from the first agent that ships one (for LLMs zwarm itself calls)."""
    for name in names():
        price = get(name).default_prices.get(model)
        if price is not None:
            return dict(price)
    return None


def problems() -> dict[str, str]:
    """Plugins that failed to load, by name: why."""
    names()
    return dict(_failed)


def _specs() -> dict[str, str]:
    from zwarm import plugins

    return plugins.entry_points(plugins.AGENTS)


def _load(name: str) -> Agent | None:
    if name in _loaded:
        return _loaded[name]
    spec = _specs().get(name)
    if spec is None or name in _failed:
        return None
    try:
        _check_name(name)
        agent = _instantiate(name, _import(spec))
    except (Exception, SystemExit) as e:
        why = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        _failed[name] = why
        sys.stderr.write(f"zwarm: warning: agent plugin {name!r} ({spec}) not loaded: {why}\n")
        return None
    _loaded[name] = agent
    return agent


def _import(spec: str) -> Any:
    from zwarm import plugins

    return plugins.load(spec)


def _check_name(name: str) -> None:
    """A name is a config table and is stored in meta.json: checked before any import."""
    from zwarm.agents.base import NAME

    if not NAME.match(name) or name in reserved_tables():
        raise ValueError(f"{name!r} is not a valid agent name (a-z, 0-9, '_', '-'; not a table)")


def reserved_tables() -> frozenset[str]:
    """The config tables no agent may take as its name: zwarm's own (``rules.OWN_TABLES``)
    and every registered launcher's (``zwarm.launchers``), loaded or not."""
    from zwarm import plugins
    from zwarm.rules import OWN_TABLES

    return OWN_TABLES | frozenset(plugins.entry_points(plugins.LAUNCHERS))


def _instantiate(name: str, obj: Any) -> Agent:
    from zwarm.agents.base import SIDECAR, Agent

    if isinstance(obj, type) and issubclass(obj, Agent):
        obj = obj()
    if not isinstance(obj, Agent):
        raise TypeError(f"{obj!r} is not a zwarm.agents.base.Agent")
    if obj.name != name:
        raise ValueError(f"registered as {name!r} but the agent is named {obj.name!r}")
    if obj.prompt_on_stdin is not True:
        raise ValueError("zwarm gives the prompt on stdin only (prompt_on_stdin must be True)")
    if getattr(obj, "manager", None) is not None:  # a subclass of the engine zwarm once loaded
        raise ValueError(
            "it brings a session manager (Agent.manager), which zwarm no longer loads: an "
            "agent's work around a turn is its own hooks (launch_env, after_turn, reader)"
        )
    sidecar = obj.turn_sidecar
    if sidecar is not None and not (isinstance(sidecar, str) and SIDECAR.match(sidecar)):
        raise ValueError(f"turn_sidecar {sidecar!r} is not a file extension like 'facts.json'")
    return obj
