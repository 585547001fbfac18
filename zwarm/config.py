"""Configuration: ``.zwarm/config.toml``, its schema, defaults and validation.

Owns every configurable key and its default. Must stay true:
- ``SCHEMA`` is the single list of keys; ``.zwarm.example/config.toml`` documents each of them
  (a test checks the two agree);
- an invalid file (TOML syntax, unknown key, wrong type or value) raises ``ConfigError`` naming
  the file and the problem, before anything is created;
- loading uses only ``tomllib``; ``tomli_w`` is imported only when writing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zwarm.errors import ConfigError

# key -> (expected python type(s), default). Tables with free-form keys use dict.
SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], Any]]] = {
    "defaults": {
        "adapter": ((str,), "codex"),
        "model": ((str,), ""),
        "context": ((str,), "summary"),
        "timeout": ((int, float), 0),
    },
    "summary": {
        "budget_chars": ((int,), 24000),
        "full_turns": ((int,), 2),
    },
    "codex": {
        "command": ((str, list), ["codex"]),
        "model": ((str,), ""),
        "sandbox": ((str,), "workspace-write"),
        "dangerous": ((bool,), False),
        "extra_args": ((list,), []),
        "env": ((dict,), {}),
        "config": ((dict,), {}),
        "prices": ((dict,), {}),
    },
    "claude": {
        "command": ((str, list), ["claude"]),
        "model": ((str,), ""),
        "permission_mode": ((str,), "acceptEdits"),
        "dangerous": ((bool,), False),
        "extra_args": ((list,), []),
        "env": ((dict,), {}),
        "prices": ((dict,), {}),
    },
    "tools": {
        "allowed_roots": ((list,), ["."]),
        "max_wait_s": ((int, float), 45),
        "trajectory_chars": ((int,), 12000),
    },
    "orchestrator": {
        "base_url": ((str,), ""),
        "model": ((str,), ""),
        "api_key_env": ((str,), "OPENAI_API_KEY"),
        "max_steps": ((int,), 60),
        "max_tokens": ((int,), 0),
        "max_cost_usd": ((int, float), 0),
        "bash_timeout_s": ((int, float), 60),
        "prices": ((dict,), {}),
    },
}

CHOICES = {
    ("defaults", "adapter"): ("codex", "claude"),
    ("defaults", "context"): ("summary", "native"),
    ("codex", "sandbox"): ("read-only", "workspace-write", "danger-full-access"),
    ("claude", "permission_mode"): (
        "acceptEdits",
        "bypassPermissions",
        "default",
        "dontAsk",
        "plan",
        "auto",
    ),
}

# USD per 1M tokens. Shipped defaults (public list prices); override under [codex.prices.MODEL].
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "gpt-5": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gpt-5-codex": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gpt-5-mini": {"input": 0.25, "cached_input": 0.025, "output": 2.0},
    "gpt-5-nano": {"input": 0.05, "cached_input": 0.005, "output": 0.4},
    "gpt-5.1": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gpt-5.1-codex": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gpt-5.1-codex-mini": {"input": 0.25, "cached_input": 0.025, "output": 2.0},
    "gpt-4.1": {"input": 2.0, "cached_input": 0.5, "output": 8.0},
    "o3": {"input": 2.0, "cached_input": 0.5, "output": 8.0},
    "o4-mini": {"input": 1.1, "cached_input": 0.275, "output": 4.4},
}

_PRICE_KEYS = ("input", "cached_input", "output")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: "$" allows a trailing newline


@dataclass(frozen=True)
class Config:
    """A validated configuration. ``data[table][key]`` always exists (defaults filled in)."""

    data: dict[str, dict[str, Any]]
    path: str | None = None

    def get(self, table: str, key: str) -> Any:
        return self.data[table][key]

    def table(self, table: str) -> dict[str, Any]:
        return self.data[table]

    def command(self, adapter: str) -> list[str]:
        cmd = self.data[adapter]["command"]
        return [cmd] if isinstance(cmd, str) else list(cmd)

    def price(self, adapter: str, model: str | None) -> dict[str, float] | None:
        if not model:
            return None
        table = self.data[adapter]["prices"]
        if model in table:
            return dict(table[model])
        return DEFAULT_PRICES.get(model) if adapter == "codex" else None


def defaults() -> Config:
    return Config({t: {k: _copy(v[1]) for k, v in keys.items()} for t, keys in SCHEMA.items()})


def _copy(v: Any) -> Any:
    if isinstance(v, dict):
        return dict(v)
    if isinstance(v, list):
        return list(v)
    return v


def load(path: Path) -> Config:
    """Load and validate ``path``; a missing file gives the defaults."""
    import tomllib

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return defaults()
    except OSError as e:
        raise ConfigError(str(path), f"cannot read: {e.strerror}") from None
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(str(path), f"invalid TOML: {e}") from None
    return Config(validate(doc, str(path)), str(path))


def validate(doc: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    out = defaults().data
    for table, values in doc.items():
        if table not in SCHEMA:
            raise ConfigError(where, f"unknown table [{table}]")
        if not isinstance(values, dict):
            raise ConfigError(where, f"[{table}] must be a table")
        for key, value in values.items():
            out[table][key] = _check(table, key, value, where)
    return out


def _check(table: str, key: str, value: Any, where: str) -> Any:
    spec = SCHEMA[table].get(key)
    if spec is None:
        raise ConfigError(where, f"unknown key {key!r} in [{table}]")
    types = spec[0]
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        names = " or ".join(_type_name(t) for t in types)
        raise ConfigError(where, f"{table}.{key} must be {names}, not {_type_name(type(value))}")
    choices = CHOICES.get((table, key))
    if choices and value not in choices:
        raise ConfigError(where, f"{table}.{key} must be one of {', '.join(choices)}")
    _check_shape(table, key, value, where)
    return value


def _check_shape(table: str, key: str, value: Any, where: str) -> None:
    name = f"{table}.{key}"
    if key in ("command", "extra_args", "allowed_roots") and isinstance(value, list):
        if not all(isinstance(x, str) for x in value):
            raise ConfigError(where, f"{name} must be a list of strings")
        if key == "command" and not value:
            raise ConfigError(where, f"{name} must not be empty")
    if key == "command" and isinstance(value, str) and not value:
        raise ConfigError(where, f"{name} must not be empty")
    if key == "env":
        for k, v in value.items():
            if not _ENV_NAME.match(k) or not isinstance(v, str):
                raise ConfigError(where, f"{name}.{k} must be a string (valid variable name)")
    if key == "prices":
        _check_prices(name, value, where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(where, f"{name} must be a finite number")
        if value < 0:
            raise ConfigError(where, f"{name} must not be negative")


def _check_prices(name: str, value: dict[str, Any], where: str) -> None:
    for model, p in value.items():
        if not isinstance(p, dict) or set(p) != set(_PRICE_KEYS):
            raise ConfigError(where, f"{name}.{model} needs exactly {', '.join(_PRICE_KEYS)}")
        for k in _PRICE_KEYS:
            if not isinstance(p[k], (int, float)) or isinstance(p[k], bool) or p[k] < 0:
                raise ConfigError(where, f"{name}.{model}.{k} must be a non-negative number")


def _type_name(t: type) -> str:
    return {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true/false",
        list: "an array",
        dict: "a table",
    }.get(t, t.__name__)


def dumps(config: Config) -> str:
    """The config as TOML text (tomli-w), every key present."""
    import tomli_w

    return tomli_w.dumps(config.data)

