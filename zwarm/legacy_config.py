"""zwarm 3.x's configuration: what it wrote, recognised (and ignored) when loading.

zwarm 3.x (3.10.6 is the last release) kept its settings in ``.zwarm/config.toml`` (read by its
``zwarm/core/config.py``, ``ZwarmConfig.from_dict``: ``[weave]``, ``[executor]``,
``[orchestrator]`` with ``[orchestrator.compaction]`` and ``[orchestrator.tc_compression]``,
``[watchers]``, a top-level ``state_dir``), in ``.zwarm/codex.toml`` and ``.zwarm/claude.toml``
(its session managers: ``model``, ``full_danger``, for codex any other key as a ``-c``
override) and in ``zwarm.yaml`` beside ``.zwarm/`` (the orchestrator's project context).

Owns ``ZWARM3``, the one list of the tables and keys 3.10.6 reads from ``config.toml``, the
names of its other files, and ``split``, which takes 3.x's settings out of a parsed config
before it is validated (``zwarm.upgrade`` maps them onto today's). Must stay true:
- a 3.x key is never applied by loading: ``config.load`` ignores it and the caller says so
  once (``warning``); a table or key that is neither zwarm's, an agent's nor 3.x's is still
  an error. Where 3.x and zwarm share a key (``[orchestrator] max_steps``) zwarm's meaning
  and checks apply;
- it imports nothing of zwarm at module level (``config.load`` uses it on every load).

What zwarm does with 3.x's sessions (their turn logs read, continued once confirmed) is
``zwarm.legacy``'s, above the engine: this module lies at the bottom, below the config that
loads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

VERSION = "3.10.6"

# table -> the keys zwarm 3.10.6 reads there (ZwarmConfig.from_dict and its dataclasses)
ZWARM3: dict[str, frozenset[str]] = {
    "weave": frozenset({"project", "enabled"}),
    "executor": frozenset({"adapter", "model", "sandbox", "timeout", "reasoning_effort"}),
    "orchestrator": frozenset(
        {
            "lm",
            "prompt",
            "tools",
            "max_steps",
            "max_steps_per_turn",
            "parallel_delegations",
            "compaction",  # [orchestrator.compaction]
            "tc_compression",  # [orchestrator.tc_compression]
            "allowed_dirs",
        }
    ),
    "watchers": frozenset({"enabled", "watchers", "message_role"}),
}
ZWARM3_TOP_KEYS = frozenset({"state_dir"})  # keys 3.10.6 reads outside any table
AGENT_FILES = ("codex.toml", "claude.toml")  # 3.x's per-agent settings, in the state dir
PROJECT_FILE = "zwarm.yaml"  # 3.x's orchestrator context, beside the state dir
BACKUP_SUFFIX = ".zwarm3"  # the 3.x config.toml, kept when an upgrade replaces it


def split(doc: dict[str, Any], known: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Take zwarm 3.x's settings out of ``doc`` (a parsed config.toml) and name them
    (``[weave]``, ``[orchestrator] lm``...): what ``known`` (zwarm's and the agents' tables)
    has is left, for zwarm's own checks."""
    out: list[str] = []
    for key in sorted(ZWARM3_TOP_KEYS & doc.keys()):
        if key not in known:
            del doc[key]
            out.append(key)
    for table, keys in ZWARM3.items():
        if table not in doc:
            continue
        if table not in known:
            del doc[table]
            out.append(f"[{table}]")
            continue
        values = doc[table]
        if not isinstance(values, dict):
            continue  # zwarm's own error says what is wrong
        old = sorted(k for k in values if k in keys and k not in known[table])
        for k in old:
            del values[k]
        if old:
            out.append(f"[{table}] {', '.join(old)}")
    return out


def warning(path: str | Path, names: list[str]) -> str:
    return (
        f"{path}: ignored zwarm 3.x settings {'; '.join(names)}; "
        "`zwarm init --upgrade` shows what carries over"
    )
