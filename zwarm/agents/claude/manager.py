"""``ClaudeSessionManager``: the session life cycle (``BaseSessionManager``) bound to claude.

Owns nothing of its own: every claude-specific decision is ``ClaudeAgent``'s. Must stay true:
``agent`` is a ``ClaudeAgent`` and ``name`` its name.
"""

from __future__ import annotations

from typing import ClassVar

from zwarm.agents.base import Agent
from zwarm.agents.claude import ClaudeAgent
from zwarm.engine.manager import BaseSessionManager


class ClaudeSessionManager(BaseSessionManager):
    agent: ClassVar[Agent] = ClaudeAgent()
    name: ClassVar[str] = ClaudeAgent.name
