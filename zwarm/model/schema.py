"""Reading and writing ``meta.json``: one decoder, ordered migrations, one encoder.

Owns the bytes <-> ``Session`` boundary. Every reader (``ls``, ``show``, the engine, the
supervisor) goes through ``decode``, so all of them agree on what a valid file is.
Must stay true:
- ``decode`` returns a valid, refreshed ``Session`` or raises ``ValueError`` with a one-line
  reason (never another exception type), whatever the bytes;
- a file whose ``schema_version`` is newer than ``SCHEMA_VERSION`` is refused, never rewritten;
- older versions are upgraded in memory by ``MIGRATIONS``, in order, one version at a time
  (as simonw/llm orders its migrations); the file on disk is rewritten only by a later save;
- ``encode`` writes compact UTF-8 JSON with the current ``schema_version``, and only the turns
  that belong in ``meta.json``: a session loaded with its history (``zwarm.store.history``)
  is written without the archived turns;
- turn numbers are checked (``Session.check_numbers``): a file whose turns are not 1, then
  consecutive after the archived ones, is damaged, and so is one with no turn at all (a
  session is created with its turn 1: such a record lost what it knew of its turn files).
"""

from collections.abc import Callable
from typing import Any

import msgspec

from zwarm.model.records import Session

SCHEMA_VERSION = 3
MAX_META_BYTES = 64 * 1024 * 1024  # a larger meta.json is damaged, never loaded

_decoder = msgspec.json.Decoder(Session)
_encoder = msgspec.json.Encoder()


class _Version(msgspec.Struct):
    schema_version: Any = None


_peek = msgspec.json.Decoder(_Version)


def decode(data: bytes) -> Session:
    """The session in ``data`` (a whole ``meta.json``), validated and refreshed."""
    if not data.strip():
        raise ValueError("meta.json is empty")
    if len(data) > MAX_META_BYTES:
        raise ValueError(f"meta.json is too large ({len(data)} bytes)")
    try:
        s = _decoder.decode(data)
    except msgspec.DecodeError as e:
        return _decode_other_version(data, e)
    except UnicodeDecodeError as e:
        raise ValueError(f"meta.json is not valid UTF-8 (byte {e.start})") from None
    except RecursionError:
        raise ValueError("meta.json is nested too deeply") from None
    if s.schema_version != SCHEMA_VERSION:
        return _decode_other_version(data, None)
    return _checked(s)


def _checked(s: Session) -> Session:
    wrong = s.check_numbers()
    if wrong is not None:
        raise ValueError(f"meta.json's turns are out of order: {wrong}")
    s.refresh()
    return s


def encode(s: Session) -> bytes:
    s.refresh()
    s.schema_version = SCHEMA_VERSION
    a = s.archive
    if a is None or not a.turns or s.head_only:
        return _encoder.encode(s)
    live = [s.turns[0], *s.turns[1 + a.turns :]]
    return _encoder.encode(msgspec.structs.replace(s, turns=live))


def from_builtins(d: Any) -> Session:
    """Validate an already-decoded ``meta.json`` object (any supported schema version)."""
    if not isinstance(d, dict):
        raise ValueError("meta.json is not a JSON object")
    d = migrate(d)
    try:
        s = msgspec.convert(d, Session)
    except RecursionError:
        raise ValueError("meta.json is nested too deeply") from None
    except msgspec.ValidationError as e:
        raise ValueError(_validation_message(e)) from None
    return _checked(s)


def _decode_other_version(data: bytes, err: msgspec.DecodeError | None) -> Session:
    version = _version_of(data, err)
    if version == SCHEMA_VERSION:
        assert err is not None
        raise ValueError(_validation_message(err))
    import json  # only an older version's file comes here (start-up: ls never needs it)

    try:
        d = json.loads(data)
    except UnicodeDecodeError as e:
        raise ValueError(f"meta.json is not valid UTF-8 (byte {e.start})") from None
    except RecursionError:
        raise ValueError("meta.json is nested too deeply") from None
    except ValueError as e:  # not reached: _version_of parsed it
        raise ValueError(f"meta.json is not valid JSON: {e}") from None
    return from_builtins(d)


def _version_of(data: bytes, err: msgspec.DecodeError | None) -> int:
    """The file's schema_version; ``ValueError`` if the file has none usable."""
    try:
        v = _peek.decode(data).schema_version
    except msgspec.DecodeError as e:
        raise ValueError(_syntax_message(e, data)) from None
    except RecursionError:
        raise ValueError("meta.json is nested too deeply") from None
    v = _known_version(v)
    if v < 1:
        raise ValueError(f"meta.json has an invalid schema_version {v}")
    return v


def _known_version(v: Any) -> int:
    """``v`` as a schema version this zwarm can read or migrate; ``ValueError`` if not."""
    if type(v) is not int:
        raise ValueError("meta.json has no schema_version")
    if v > SCHEMA_VERSION:
        raise ValueError(
            f"meta.json has schema_version {v}, newer than this zwarm understands "
            f"({SCHEMA_VERSION}); upgrade zwarm"
        )
    return v


def _syntax_message(e: msgspec.DecodeError, data: bytes) -> str:
    msg = str(e)
    if "Expected `object`" in msg:
        return "meta.json is not a JSON object"
    if isinstance(e, msgspec.ValidationError):
        return "meta.json has no schema_version"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as u:
        return f"meta.json is not valid UTF-8 (byte {u.start})"
    if "truncated" in msg:
        return "meta.json is not valid JSON: it ends early (truncated?)"
    # msgspec says "JSON is malformed: invalid character (byte 8)": once, in plain words
    what, _, at = msg.removeprefix("JSON is malformed: ").partition(" (byte ")
    return (
        f"meta.json is not valid JSON: {what} at byte {at.rstrip(')')}"
        if at
        else (f"meta.json is not valid JSON: {what}")
    )


def _validation_message(e: msgspec.DecodeError) -> str:
    """msgspec's message in zwarm's words, naming the field: ``field 'turns[0].status' ...``."""
    msg, _, where = str(e).partition(" - at `$")
    field = where.rstrip("`").lstrip(".") or "(top level)"
    name = field.rsplit(".", 1)[-1]
    if msg.startswith("Object missing required field"):
        missing = msg.rsplit("`", 2)[-2] if msg.count("`") >= 2 else "?"
        return f"field '{missing}' is missing" + (f" (in {field})" if where else "")
    if msg.startswith("Invalid enum value"):
        return f"unknown {name} {msg.removeprefix('Invalid enum value ')} (at {field})"
    if msg.endswith("got `null`"):
        return f"field '{field}' is missing (null)"
    if msg.startswith("Expected `") and ", got `" in msg:
        want, got = msg[len("Expected `") :].split("`, got `", 1)
        return f"field '{field}' is not {want} (got {got.rstrip('`')})"
    return f"field '{field}': {msg[:1].lower()}{msg[1:]}"


# ---------------------------------------------------------------------- migrations
def _v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    """Version 1 (zwarm 0.1 before the engine seams): process refs were (pid, create_time in
    epoch seconds), which a clock step moves. They become (pid, start ticks, boot id) computed
    against this boot; a ref that cannot be converted is dropped (never trusted)."""
    turns = d.get("turns")
    if isinstance(turns, list):
        for t in turns:
            if isinstance(t, dict):
                for key in ("supervisor", "agent"):
                    t[key] = _v1_procref(t.get(key))
    d["schema_version"] = 2
    return d


def _v1_procref(ref: Any) -> dict[str, Any] | None:
    if not isinstance(ref, dict):
        return None
    pid, ct = ref.get("pid"), ref.get("create_time")
    if type(pid) is not int or not isinstance(ct, (int, float)) or isinstance(ct, bool):
        return None
    if not 0 < ct < 1e11:  # also refuses NaN: every comparison with it is false
        return None
    import os

    from zwarm.system.boot import legacy_ticks

    ticks = legacy_ticks(float(ct), os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
    return None if ticks is None else {"pid": pid, "start_ticks": ticks[0], "boot_id": ticks[1]}


def _v2_to_v3(d: dict[str, Any]) -> dict[str, Any]:
    """Version 2 kept every turn in meta.json; version 3 may move finished ones to the history
    file (``archive``). A version-2 file has none there: nothing to convert."""
    d["schema_version"] = 3
    return d


# (from_version, step): each step turns version N into N + 1.
MIGRATIONS: list[tuple[int, Callable[[dict[str, Any]], dict[str, Any]]]] = [
    (1, _v1_to_v2),
    (2, _v2_to_v3),
]


def migrate(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` upgraded to ``SCHEMA_VERSION``, step by step; ``ValueError`` if impossible."""
    v = _known_version(d.get("schema_version"))
    for start, step in MIGRATIONS:
        if d["schema_version"] == start:
            d = step(d)
    if d.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"meta.json has an unsupported schema_version {v}")
    return d
