"""The session engine: the life cycle of sessions and turns, the same for every agent.

Owns ``manager_class``: the ``BaseSessionManager`` subclass bound to an agent of the registry
(``zwarm.agents``) — the agent's own (``Agent.manager``, e.g. ``CodexSessionManager``) or one
made for it. The engine depends on the agents, never the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zwarm.engine.manager import BaseSessionManager

_classes: dict[str, type[BaseSessionManager]] = {}


def manager_class(name: str) -> type[BaseSessionManager]:
    """The session manager bound to agent ``name``; ``UnknownAgent`` if there is none."""
    if name not in _classes:
        from zwarm import agents, plugins
        from zwarm.engine.manager import BaseSessionManager

        agent = agents.get(name)
        if agent.manager:
            cls = plugins.load(agent.manager)
            if not (isinstance(cls, type) and issubclass(cls, BaseSessionManager)):
                raise TypeError(f"{agent.manager} is not a BaseSessionManager")
        else:
            attrs = {"agent": agent, "name": agent.name, "__module__": type(agent).__module__}
            cls = type(f"{agent.name.title()}SessionManager", (BaseSessionManager,), attrs)
        _classes[name] = cls
    return _classes[name]
