"""Where a tool may point an agent: ``cwd`` confined to ``[tools] allowed_roots``.

Owns the resolution of a tool call's ``cwd`` (and of the roots themselves). Must stay true: a
``cwd`` resolves, symlinks followed, to an existing directory inside an allowed root, or is
refused with a ``ToolError`` that says how to allow it; a root that does not exist allows
nothing. The HTTP API (``zwarm serve``) confines its ``cwd`` with the same function.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from zwarm.api import Zwarm
from zwarm.orchestrator.tools.base import ToolError


def allowed_roots(api: Zwarm) -> list[Path]:
    """``[tools] allowed_roots``, resolved (relative ones against the directory zwarm runs in)."""
    base = api.env.cwd
    roots = []
    for raw in api.setting("tools", "allowed_roots"):
        p = Path(raw).expanduser()
        p = p if p.is_absolute() else base / p
        with contextlib.suppress(OSError, RuntimeError):
            roots.append(p.resolve(strict=True))
    return roots


def confine_cwd(api: Zwarm, raw: str | None) -> Path:
    """The real directory ``raw`` names (default: where zwarm runs), if inside an allowed root."""
    base = api.env.cwd
    p = base if raw is None else Path(raw).expanduser()
    p = p if p.is_absolute() else base / p
    try:
        real = p.resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        raise ToolError(f"cwd {str(raw if raw is not None else p)!r} does not exist") from None
    roots = allowed_roots(api)
    if not any(real == r or real.is_relative_to(r) for r in roots):
        shown = ", ".join(str(r) for r in roots) or "none"
        raise ToolError(
            f"cwd {str(raw if raw is not None else p)!r} is outside the allowed roots ({shown}); "
            "add a root to [tools] allowed_roots in .zwarm/config.toml to allow it"
        )
    if not real.is_dir():
        raise ToolError(f"cwd {str(raw)!r} is not a directory")
    return real
