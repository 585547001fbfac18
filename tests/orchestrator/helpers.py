"""Helpers for the orchestrator tool tests (imported by the test modules)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_config(zw: Any, text: str) -> Path:
    """Write ``config.toml`` in the ``zw`` world's state dir (creating the dir), trusted."""
    zw.state_dir.mkdir(parents=True, exist_ok=True)
    path: Path = zw.write_config(text)
    return path


def ok(result: dict[str, Any]) -> dict[str, Any]:
    """``result``, asserting the tool call succeeded and is JSON-ready."""
    assert result.get("ok") is True, result
    json.dumps(result)
    return result


def err(result: dict[str, Any]) -> str:
    """The error of a failed tool call, asserting its shape: ok false, one clear line."""
    assert result.get("ok") is False, result
    assert set(result) == {"ok", "error"}, result
    assert isinstance(result["error"], str) and result["error"], result
    assert "\n" not in result["error"], result
    return str(result["error"])
