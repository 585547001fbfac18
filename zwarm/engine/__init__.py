"""The session engine: the life cycle of sessions and turns, the same for every agent.

Owns ``manager_class``: the ``BaseSessionManager`` subclass bound to an agent of the registry
(``zwarm.agents``), made for it; what an agent does around its turns are its own hooks
(``Agent.launch_env``, ``after_turn``, ``reader``), which the engine calls. The engine depends
on the agents, never the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zwarm.engine.manager import BaseSessionManager


def manager_class(name: str) -> type[BaseSessionManager]:
    """The session manager bound to agent ``name``; ``UnknownAgent`` if there is none (made
    in ``engine.manager``, which the scheduler is handed it from: no import cycle)."""
    from zwarm.engine import manager

    return manager.manager_class(name)
