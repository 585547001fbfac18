"""Plugin discovery: Python entry points, found without importing ``importlib.metadata``.

Owns how zwarm finds its agents (group ``zwarm.agents``) and launchers (``zwarm.launchers``):
the built-in ones are registered through the very same entry points as third-party packages
(as simonw/llm registers its own models through its plugin hook). ``importlib.metadata`` costs
~45 ms to import (it pulls in ``email``), more than a whole ``zwarm ls``; this module reads
the installed distributions' ``entry_points.txt`` files directly instead, once per process.
Must stay true: the answer equals ``importlib.metadata.entry_points(group=...)`` (names to
``module:attr`` values; on a duplicate name the first distribution on ``sys.path`` wins); a
malformed ``entry_points.txt`` is skipped, never an error.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

AGENTS = "zwarm.agents"  # the entry-point group of agents (``zwarm.agents``)
LAUNCHERS = "zwarm.launchers"  # ... of launchers (``zwarm.launchers``)

_cache: dict[str, dict[str, str]] | None = None


def entry_points(group: str) -> dict[str, str]:
    """``{name: "module:attr"}`` of every installed entry point in ``group``."""
    global _cache
    if _cache is None:
        _cache = _scan()
    return dict(_cache.get(group, {}))


def load(spec: str) -> Any:
    """The object an entry point value (``module:attr``) names."""
    module, _, attr = spec.partition(":")
    obj: Any = importlib.import_module(module.strip())
    for part in attr.strip().split(".") if attr.strip() else ():
        obj = getattr(obj, part)
    return obj


def _scan() -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    seen: set[str] = set()
    for entry in sys.path:
        for meta_dir in _dist_dirs(entry or "."):
            dist = _dist_name(meta_dir)
            if dist in seen:
                continue  # an earlier path entry has this distribution
            seen.add(dist)
            for group, items in _parse(os.path.join(entry or ".", meta_dir)).items():
                slot = found.setdefault(group, {})
                for name, value in items.items():
                    slot.setdefault(name, value)
    return found


def _dist_dirs(path: str) -> list[str]:
    try:
        names = os.listdir(path)
    except OSError:
        return []
    return sorted(n for n in names if n.endswith((".dist-info", ".egg-info")))


def _dist_name(meta_dir: str) -> str:
    stem = meta_dir.rsplit(".", 1)[0]
    return stem.split("-", 1)[0].lower().replace("_", "-").replace(".", "-")


def _parse(meta_path: str) -> dict[str, dict[str, str]]:
    try:
        with open(os.path.join(meta_path, "entry_points.txt"), encoding="utf-8") as f:
            text = f.read(1 << 20)
    except (OSError, UnicodeDecodeError):
        return {}
    groups: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = groups.setdefault(line[1:-1].strip(), {})
        elif current is not None and "=" in line:
            name, _, value = line.partition("=")
            current.setdefault(name.strip(), value.strip())
    return groups
