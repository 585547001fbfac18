"""Checking a tool call's arguments against the tool's JSON Schema, by hand.

Owns the subset of JSON Schema the tools' schemas use (object, string, number, integer,
boolean, array; enum, minLength, maxLength, minimum, exclusiveMinimum, maximum, maxItems;
required; no extra properties) and how arguments arrive (a dict, or a JSON object string, as
LLM APIs send them).
Must stay true: every violation is a ``ToolError`` of one line naming the argument; nothing
else is raised; a schema feature a tool starts to use is checked here first (a schema is
never trusted to be enforced by the client).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from typing import Any

from zwarm.orchestrator.tools.base import ToolError


def parse_arguments(arguments: Any) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as e:
            raise ToolError(f"arguments are not valid JSON: {e}") from None
    if not isinstance(arguments, Mapping):
        raise ToolError(f"arguments must be a JSON object, not {type(arguments).__name__}")
    return dict(arguments)


def validate_args(schema: Mapping[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """``args`` checked against ``schema`` (the subset of JSON Schema the tools use).

    Optional arguments given as null count as absent; numeric strings are accepted for
    numbers (LLMs send them). Anything else wrong is a ``ToolError`` naming the argument.
    """
    props: Mapping[str, Any] = schema.get("properties", {})
    out: dict[str, Any] = {}
    for key, value in args.items():
        if key not in props:
            raise ToolError(f"unknown argument {key!r} (allowed: {', '.join(props) or 'none'})")
        if value is None:
            continue
        out[key] = _check_value(key, props[key], value)
    missing = [k for k in schema.get("required", ()) if k not in out]
    if missing:
        raise ToolError(f"missing required argument {missing[0]!r}")
    return out


def _check_value(key: str, spec: Mapping[str, Any], value: Any) -> Any:
    kind = spec.get("type")
    if kind == "string":
        value = _check_string(key, spec, value)
    elif kind in ("number", "integer"):
        value = _check_number(key, spec, value)
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise ToolError(f"argument {key!r} must be true or false, not {value!r}")
    elif kind == "array":
        if not isinstance(value, list):
            raise ToolError(f"argument {key!r} must be an array, not {value!r}")
        if len(value) > spec.get("maxItems", len(value)):
            raise ToolError(f"argument {key!r} has more than {spec['maxItems']} items")
        value = [_check_value(f"{key}[{i}]", spec.get("items", {}), v) for i, v in enumerate(value)]
    if "enum" in spec and value not in spec["enum"]:
        choices = ", ".join(str(c) for c in spec["enum"])
        raise ToolError(f"argument {key!r} must be one of {choices}, not {value!r}")
    return value


def _check_string(key: str, spec: Mapping[str, Any], value: Any) -> str:
    if not isinstance(value, str):
        raise ToolError(f"argument {key!r} must be a string, not {value!r}")
    if len(value) < spec.get("minLength", 0):
        raise ToolError(f"argument {key!r} must not be empty")
    if len(value) > spec.get("maxLength", len(value)):
        raise ToolError(f"argument {key!r} is longer than {spec['maxLength']:,} characters")
    return value


def _check_number(key: str, spec: Mapping[str, Any], value: Any) -> float | int:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value.strip())
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value):
        raise ToolError(f"argument {key!r} must be a number, not {value!r}")
    number: float | int = value
    if spec.get("type") == "integer":
        if number != int(number):
            raise ToolError(f"argument {key!r} must be a whole number, not {value!r}")
        number = int(number)
    if "minimum" in spec and number < spec["minimum"]:
        raise ToolError(f"argument {key!r} must be at least {spec['minimum']}, not {value!r}")
    if "exclusiveMinimum" in spec and number <= spec["exclusiveMinimum"]:
        raise ToolError(f"argument {key!r} must be more than {spec['exclusiveMinimum']}")
    if "maximum" in spec and number > spec["maximum"]:
        raise ToolError(f"argument {key!r} must be at most {spec['maximum']:g}, not {value!r}")
    return number
