"""Agent adapters: one ``BaseSessionManager`` subclass per agent CLI, and model routing.

Owns the mapping from adapter names and model names to managers. Must stay true: only modules
in this package know an agent's argv or event format.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zwarm.adapters.base import BaseSessionManager

ADAPTERS = ("codex", "claude")

_CLAUDE = re.compile(r"^(sonnet|opus|haiku|opusplan|claude-.*|(sonnet|opus|haiku)\[.*\])$", re.I)
_CODEX = re.compile(r"^(gpt-.*|o\d.*|codex-.*|.*-codex.*|codex)$", re.I)


def adapter_for_model(model: str | None) -> str | None:
    """The adapter a model name implies, or None when it implies none."""
    if not model:
        return None
    if _CLAUDE.match(model):
        return "claude"
    if _CODEX.match(model):
        return "codex"
    return None


def manager_class(adapter: str) -> type[BaseSessionManager]:
    if adapter == "codex":
        from zwarm.adapters.codex import CodexSessionManager

        return CodexSessionManager
    if adapter == "claude":
        from zwarm.adapters.claude import ClaudeSessionManager

        return ClaudeSessionManager
    raise ValueError(f"unknown adapter {adapter!r} (use codex or claude)")
