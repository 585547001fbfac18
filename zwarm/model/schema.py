"""Reading and writing ``meta.json``: one decoder, ordered migrations, one encoder.

Owns the bytes <-> ``Session`` boundary. Every reader (``ls``, ``show``, the engine, the
supervisor) goes through ``decode``, so all of them agree on what a valid file is.
Must stay true:
- ``decode`` returns a valid, refreshed ``Session`` or raises ``ValueError`` with a one-line
  reason (never another exception type), whatever the bytes;
- a file whose ``schema_version`` is newer than ``SCHEMA_VERSION`` is refused, never rewritten;
- older versions are upgraded in memory by ``MIGRATIONS``, in order, one version at a time
  (as simonw/llm orders its migrations); the file on disk is rewritten only by a later save;
- zwarm 3.x's meta.json (no ``schema_version``, a ``working_dir``) is version 0: migrated from
  that file alone into a record marked ``imported`` (its turns' outcomes are read from their
  logs by ``zwarm.legacy``), which no save writes back (``Store.transaction`` refuses it);
  a 3.x file that does not fit 3.x's format is damaged, with the field named;
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
ZWARM3_SOURCE = "zwarm3:"  # what a zwarm 3.x session's source begins with (its 3.x source after)

_decoder = msgspec.json.Decoder(Session)
_encoder = msgspec.json.Encoder()


class _Version(msgspec.Struct):
    schema_version: Any = None
    working_dir: Any = None  # only zwarm 3.x's meta.json has it (zwarm's says ``cwd``)


ZWARM3_VERSION = 0  # the version of zwarm 3.x's meta.json, which has no schema_version


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
        peek = _peek.decode(data)
    except msgspec.DecodeError as e:
        raise ValueError(_syntax_message(e, data)) from None
    except RecursionError:
        raise ValueError("meta.json is nested too deeply") from None
    return _version(peek.schema_version, peek.working_dir)


def _version(v: Any, working_dir: Any) -> int:
    """The schema version of a file whose ``schema_version`` is ``v``: zwarm 3.x's
    (``ZWARM3_VERSION``) if it has none and names a ``working_dir``."""
    if v is None and working_dir is not None:
        return ZWARM3_VERSION
    known = _known_version(v)
    if known < 1:
        raise ValueError(f"meta.json has an invalid schema_version {known}")
    return known


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
ZWARM3_STATUSES = ("pending", "running", "completed", "failed", "killed")
ZWARM3_ADAPTERS = ("codex", "claude")  # what 3.x ran; a record without one is codex's
ZWARM3_MAX_TURNS = 10_000  # a 3.x record claiming more is damaged (never 10^6 turns in memory)
_ERROR_CHARS = 16_000


def _v0_to_v1(d: dict[str, Any]) -> dict[str, Any]:
    """Version 0 (zwarm 3.x, ``tests/fixtures/zwarm3/README.md``): one record of the latest
    turn only. It becomes a record of its ``turn`` turns: turn 1's message is the task, a
    later one's is lost (3.x kept none); every turn but the latest completed (3.x continued
    it); the latest has 3.x's status, error, usage (claude's input counted with its cache
    reads, as zwarm counts it) and final message. 3.x's ``pending`` or ``running`` is what 3.x
    leaves when its process ends unseen: zwarm runs and signals none of 3.x's processes, so
    such a turn is failed (``supervisor_lost``), its pid only named. Naive local times become
    UTC. What its turn logs say (outcomes, thread ids, earlier turns' usage) is read by
    ``zwarm.legacy``; the record is marked ``imported`` so that it is never saved as is."""

    def want(key: str, typ: type | tuple[type, ...], optional: bool = False) -> Any:
        v = d.get(key)
        if (v is None and optional) or (isinstance(v, typ) and not isinstance(v, bool)):
            return v
        raise ValueError(f"zwarm 3.x meta.json: field '{key}' is missing or not {_kind(typ)}")

    status = want("status", str)
    if status not in ZWARM3_STATUSES:
        raise ValueError(f"zwarm 3.x meta.json: unknown status {status[:40]!r}")
    adapter = want("adapter", str, optional=True) or "codex"
    if adapter not in ZWARM3_ADAPTERS:
        raise ValueError(f"zwarm 3.x meta.json: unknown adapter {adapter[:40]!r}")
    cwd = want("working_dir", str)
    if not cwd.startswith("/"):
        raise ValueError("zwarm 3.x meta.json: field 'working_dir' is not an absolute path")
    created, updated = _utc(want("created_at", str)), _utc(want("updated_at", str))
    n = want("turn", int)
    if not 0 <= n <= ZWARM3_MAX_TURNS:
        raise ValueError(f"zwarm 3.x meta.json: field 'turn' is out of range ({n})")
    pid, error = want("pid", int, optional=True), want("error", str, optional=True)
    source = want("source", str, optional=True) or "user"
    last: dict[str, Any] = {"status": status}
    if status in ("pending", "running"):
        what = f"agent pid {pid}" if pid is not None else "no pid"
        last["status"], last["reason"] = "failed", "supervisor_lost"
        error = (
            f"zwarm 3.x recorded this turn {status} ({what}) and left no result: zwarm runs "
            "and signals none of zwarm 3.x's processes"
        )
        last["started"] = status == "running"
    elif status == "failed":
        last["reason"] = "agent_error"
    elif status == "killed":
        last["reason"] = "killed"
    last["error"] = error[:_ERROR_CHARS] if error is not None and status != "completed" else None
    last["usage"] = _zwarm3_usage(adapter, want("token_usage", dict, optional=True) or {})
    said = [m for m in want("messages", list, optional=True) or [] if isinstance(m, dict)]
    answers = [m["content"] for m in said if m.get("role") == "assistant"]
    if answers and isinstance(answers[-1], str):
        last["final_message"] = answers[-1]
    task = want("task", str)
    turns = []
    for i in range(1, max(n, 1) + 1):
        t = {
            "n": i,
            "status": "completed",
            "message": task if i == 1 else "",
            "context": "task" if i == 1 else "summary",
            "started_at": created,
            "ended_at": updated,
        }
        if i == max(n, 1):
            t.update(last)
        turns.append(t)
    out = {
        "id": want("id", str),
        "adapter": adapter,
        "task": task,
        "cwd": cwd,
        "created_at": created,
        "updated_at": updated,
        "model": want("model", str, optional=True),
        "source": f"{ZWARM3_SOURCE}{source}"[:4096],
        "context_mode": "native",  # a follow-up resumes the thread its turn logs name
        "imported": "zwarm3",
        "turns": turns,
        "schema_version": 1,
    }
    return out


def _kind(typ: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "a whole number", dict: "an object", list: "a list"}
    return " or ".join(
        names.get(t, t.__name__) for t in (typ if isinstance(typ, tuple) else (typ,))
    )


def _utc(when: str) -> str:
    """A 3.x time (naive local, with microseconds) as zwarm writes times: UTC, milliseconds."""
    from datetime import UTC, datetime

    try:
        t = datetime.fromisoformat(when[:64])
        return t.astimezone(UTC).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"zwarm 3.x meta.json: {when[:40]!r} is not an ISO time") from None


def _zwarm3_usage(adapter: str, raw: dict[str, Any]) -> dict[str, int]:
    """3.x's ``token_usage`` (the agent's own keys) as zwarm's ``Usage``."""

    def n(key: str) -> int:
        v = raw.get(key)
        return v if type(v) is int and 0 <= v <= 2**53 else 0

    if adapter == "claude":  # claude's input_tokens leave out the cache reads and writes
        cached = n("cache_read_input_tokens")
        fresh = n("input_tokens") + n("cache_creation_input_tokens")
        return {"input_tokens": fresh + cached, "cached_input_tokens": cached,
                "output_tokens": n("output_tokens")}  # fmt: skip
    return {
        "input_tokens": n("input_tokens"),
        "cached_input_tokens": n("cached_input_tokens"),
        "output_tokens": n("output_tokens"),
        "reasoning_tokens": n("reasoning_output_tokens"),
    }


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
    (ZWARM3_VERSION, _v0_to_v1),
    (1, _v1_to_v2),
    (2, _v2_to_v3),
]


def migrate(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` upgraded to ``SCHEMA_VERSION``, step by step; ``ValueError`` if impossible."""
    v = _version(d.get("schema_version"), d.get("working_dir"))
    d["schema_version"] = v
    for start, step in MIGRATIONS:
        if d["schema_version"] == start:
            d = step(d)
    if d.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"meta.json has an unsupported schema_version {v}")
    return d
