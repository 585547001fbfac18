"""``CodexSessionManager``: the session life cycle (``BaseSessionManager``) bound to codex.

Owns nothing of its own: every codex-specific decision is ``CodexAgent``'s. Must stay true:
``agent`` is a ``CodexAgent`` and ``name`` its name.
"""

from __future__ import annotations

from typing import ClassVar

from zwarm.agents.base import Agent
from zwarm.agents.codex import CodexAgent
from zwarm.engine.manager import BaseSessionManager


class CodexSessionManager(BaseSessionManager):
    agent: ClassVar[Agent] = CodexAgent()
    name: ClassVar[str] = CodexAgent.name
