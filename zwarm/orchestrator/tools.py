"""The orchestrator tool layer: every tool zwarm offers an LLM, defined once.

Owns each tool's name, LLM-facing description, JSON Schema and handler (handlers call only
``zwarm.api.Zwarm``), argument validation against that schema, ``cwd`` confinement, the
per-caller "last looked" state, and the rendering of the schemas for OpenAI, Anthropic and MCP.
Every surface (``zwarm tools``, ``zwarm mcp``, ``zwarm orchestrate``, ``dispatch`` here) is
generated from ``TOOLS``; nothing about a tool is written twice. Must stay true:
- ``Toolbox.dispatch`` never raises: unknown tools, bad arguments, unknown or ambiguous ids,
  finished sessions, even bugs come back as ``{"ok": false, "error": "<one clear line>"}``;
  every success is ``{"ok": true, ...}``; results are compact, JSON-ready and bounded in size;
- arguments are checked against the tool's own schema before its handler runs;
- a ``cwd`` resolves (symlinks followed) to a directory inside an allowed root, or is refused;
- reading a trajectory streams its steps (a huge log is never held in memory);
- ``wait`` blocks at most ``[tools] max_wait_s`` per call, and never returns at once for a
  session the caller was already told had finished (so an LLM cannot busy-poll);
- this module imports only the standard library and zwarm's core (never mcp, openai or rich);
  it uses ``Zwarm``'s public methods only (never its ``store`` or ``config``), and the API
  never imports this layer (``tests/tools/test_layering.py`` checks both).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zwarm import agents
from zwarm.api import Zwarm, row
from zwarm.env import parse_iso
from zwarm.errors import DamagedSession, InvalidInput, SessionStateError, ZwarmError
from zwarm.model import ACTIVE, FINISHED, Session, Status
from zwarm.model.steps import Step
from zwarm.store import atomic_write

Result = dict[str, Any]
Handler = Callable[["Toolbox", dict[str, Any]], Result]
FORMATS = ("openai", "anthropic", "mcp")

TEXT_CHARS = 500  # one text field of a step, in a normal trajectory
TASK_CHARS = 300
MESSAGE_CHARS = 2000
LIST_TASK_CHARS = 80
LIST_LIMIT = 50


class ToolError(ZwarmError):
    """A tool call that cannot be carried out; its message is the tool result's ``error``."""


@dataclass(frozen=True)
class Tool:
    """One tool: everything every surface needs, in one place."""

    name: str
    description: str
    schema: dict[str, Any]
    handler: Handler
    read_only: bool = False
    destructive: bool = False


# ---------------------------------------------------------------------------- schema helpers
def object_schema(props: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(required),
        "additionalProperties": False,
    }


def _s(desc: str, **kw: Any) -> dict[str, Any]:
    return {"type": "string", "description": desc, **kw}


_SESSION_ID = _s("Session id, unique id prefix (4+ chars) or session name.", minLength=1)


# ---------------------------------------------------------------------------- the toolbox
class Toolbox:
    """Runs tools for one caller (``source``: which orchestrator is calling) on one ``Zwarm``."""

    def __init__(
        self,
        api: Zwarm | None = None,
        source: str = "python",
        extra: Sequence[Tool] = (),
        run: str | None = None,
    ) -> None:
        self.api = api or Zwarm()
        self.source = source or "python"
        self.run = run  # the orchestrator run calling (zwarm orchestrate): its sessions' root
        self.tools = {t.name: t for t in (*TOOLS, *extra)}

    def dispatch(self, name: str, arguments: Any = None) -> Result:
        """Run tool ``name`` with ``arguments`` (a dict or a JSON object string). Never raises."""
        try:
            tool = self.tools.get(name) if isinstance(name, str) else None
            if tool is None:
                known = ", ".join(self.tools)
                raise ToolError(f"unknown tool {name!r}; the tools are: {known}")
            args = validate_args(tool.schema, parse_arguments(arguments))
            if self.api.has_sessions():
                self.looked().start(self.api.env.now_iso())
            self.api.warnings.clear()
            result = {"ok": True, **tool.handler(self, args)}
            if self.api.warnings:  # e.g. a native follow-up that gets a summary instead
                result["warnings"] = list(self.api.warnings)
            return result
        except ZwarmError as e:
            return {"ok": False, "error": _one_line(str(e))}
        except Exception as e:  # a bug must not kill the server or the loop
            where = traceback.extract_tb(e.__traceback__)[-1]
            return {
                "ok": False,
                "error": _one_line(
                    f"internal error in tool {name!r}: {type(e).__name__}: {e} "
                    f"({Path(where.filename).name}:{where.lineno})"
                ),
            }

    # ----- helpers for handlers
    def confine(self, raw: str | None) -> Path:
        return confine_cwd(self.api, raw)

    def looked(self) -> Looked:
        return Looked(self.api, self.source)

    def max_wait(self) -> float:
        return float(self.api.setting("tools", "max_wait_s"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def dispatch(
    name: str, arguments: Any = None, *, api: Zwarm | None = None, source: str = "python"
) -> Result:
    """Run one tool (see ``Toolbox.dispatch``): for people writing their own LLM loops."""
    return Toolbox(api, source).dispatch(name, arguments)


def to_json(result: Result) -> str:
    """A tool result as the compact JSON text an LLM reads."""
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"), default=str)


def schemas(format: str = "openai", tools: Iterable[Tool] | None = None) -> list[dict[str, Any]]:
    """The tool definitions in the shape ``format`` (openai, anthropic or mcp) expects."""
    items = list(TOOLS if tools is None else tools)
    if format == "openai":
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.schema},
            }
            for t in items
        ]
    if format == "anthropic":
        return [
            {"name": t.name, "description": t.description, "input_schema": t.schema} for t in items
        ]
    if format == "mcp":
        return [_mcp_tool(t) for t in items]
    raise InvalidInput(f"unknown schema format {format!r} (use {', '.join(FORMATS)})")


def _mcp_tool(t: Tool) -> dict[str, Any]:
    hints: dict[str, Any] = {"readOnlyHint": t.read_only}
    if not t.read_only:
        hints["destructiveHint"] = t.destructive
    return {
        "name": t.name,
        "description": t.description,
        "inputSchema": t.schema,
        "annotations": hints,
    }


# ---------------------------------------------------------------------------- arguments
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
    return number


# ---------------------------------------------------------------------------- cwd confinement
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


# ---------------------------------------------------------------------------- last-looked state
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


class Looked:
    """Which finished sessions one caller has been told about, kept on disk per source.

    ``.zwarm/orchestrator/seen/<source>.json`` maps session id -> "<turns>:<status>" at the
    time the caller saw it finished, plus ``since``: when the caller first used the tools.
    A finished session is *new* to the caller if it finished after ``since`` and the caller
    has not seen it finished in its current state (a continued session can be new again).
    """

    def __init__(self, api: Zwarm, source: str) -> None:
        slug = _SLUG.sub("_", source)[:60]
        digest = hashlib.sha1(source.encode("utf-8", "replace")).hexdigest()[:8]
        self.dir = api.state_dir / "orchestrator" / "seen"
        self.path = self.dir / f"{slug}-{digest}.json"
        self.api = api

    def load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def start(self, now: str) -> None:
        """Record when this caller started (once); later finishes count as new to it."""
        if "since" not in self.load():
            self._update(lambda d: d.setdefault("since", now))

    def is_new(self, state: Mapping[str, Any], r: Mapping[str, Any]) -> bool:
        if r.get("status") not in FINISHED:
            return False
        since = state.get("since")
        updated = r.get("updated_at")
        if not isinstance(since, str) or not isinstance(updated, str):
            return False
        seen = state.get("seen") or {}
        if seen.get(r["id"]) == _seen_key(r):
            return False
        try:
            return parse_iso(updated) > parse_iso(since)
        except ValueError:
            return False

    def mark(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Remember these rows' finished states as seen."""
        marks = {r["id"]: _seen_key(r) for r in rows if r.get("status") in FINISHED}
        if not marks:
            return

        def apply(d: dict[str, Any]) -> None:
            seen = d.setdefault("seen", {})
            seen.update(marks)
            try:
                live = set(self.api.session_ids())
            except ZwarmError:
                return  # keep the marks, prune nothing
            for sid in [s for s in seen if s not in live]:
                del seen[sid]

        self._update(apply)

    def _update(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        """Load-modify-write under a lock. Best effort: the flags are advisory, so a state dir
        that cannot be written must not make the tools themselves fail."""
        from zwarm.store.files import lock_fd, private_dir

        try:
            private_dir(self.dir)
            fd = lock_fd(self.dir / ".lock")
        except OSError:
            return
        try:
            data = self.load()
            fn(data)
            atomic_write(self.path, json.dumps(data, separators=(",", ":")).encode("utf-8"))
        except (OSError, ZwarmError):
            pass
        finally:
            os.close(fd)


def _seen_key(r: Mapping[str, Any]) -> str:
    return f"{r.get('turns')}:{r.get('status')}"


# ---------------------------------------------------------------------------- shaping results
def short(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` chars, keeping its head and tail, with a note of the cut."""
    if text is None or len(text) <= limit:
        return text
    head = max(limit * 2 // 3, 1)
    tail = max(limit - head, 0)
    cut = len(text) - head - tail
    end = text[-tail:] if tail else ""
    return f"{text[:head]}\n[... {cut} chars cut ...]\n{end}"


def _usage(u: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not u:
        return None
    return {k: u.get(k, 0) for k in ("input_tokens", "output_tokens", "total_tokens")}


def session_view(s: Session, new: bool) -> Result:
    """What ``check_session`` says about a session: compact, bounded."""
    t = s.current
    turn: dict[str, Any] | None = None
    if t is not None:
        turn = {
            "n": t.n,
            "status": t.status.value,
            "started_at": t.started_at,
            "ended_at": t.ended_at,
            "error": t.error,
        }
    return {
        "session_id": s.id,
        "name": s.name,
        "status": s.status.value,
        "finished_since_last_look": new,
        "adapter": s.adapter,
        "model": s.model,
        "source": s.source,
        "cwd": s.cwd,
        "task": short(s.task, TASK_CHARS),
        "turns": s.count,
        "current_turn": turn,
        "last_message": short(s.last_message, MESSAGE_CHARS),
        "error": s.error,
        "usage": _usage(s.usage.to_dict()),
        "cost_usd": s.cost_usd,
        "cost_complete": s.cost_complete,
        "cost_source": s.cost_source,
        "queued": [short(q.message, 200) for q in s.queue],
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        **fleet_view(s),
    }


def fleet_view(s: Session) -> Result:
    """The fleet facts worth an LLM's attention, only those that apply: the typed failure
    ``reason``; why a queued session waits; until when a parked one waits (it resumes by
    itself then); since when a stalled one's agent is silent; its group, priority, budget."""
    t = s.current
    out: Result = {}
    if s.reason is not None:
        out["reason"] = s.reason
    if t is not None and t.status is Status.QUEUED and t.wait:
        out["waiting"] = t.wait
    if t is not None and t.status is Status.PARKED:
        out["parked_until"] = t.parked_until
    if t is not None and t.status is Status.STALLED:
        out["silent_since"] = t.quiet_since
    for key, value in (
        ("group", s.group),
        ("priority", s.priority or None),
        ("after", s.after or None),
        ("max_cost_usd", s.max_cost_usd),
        ("max_tokens", s.max_tokens),
    ):
        if value is not None:
            out[key] = value
    return out


def _list_row(r: Mapping[str, Any], new: bool) -> Result:
    out = {
        "id": r["id"],
        "name": r.get("name"),
        "status": r["status"],
        "turns": r.get("turns"),
        "source": r.get("source"),
        "task": short(r.get("task"), LIST_TASK_CHARS) if not r.get("damaged") else None,
    }
    if r.get("damaged"):
        out["error"] = r.get("error")
    if r.get("queued"):
        out["queued"] = len(r["queued"])
    for key in ("reason", "queue_position", "waiting_for", "parked_until", "quiet_since"):
        if r.get(key):
            out[key] = r[key]
    if new:
        out["new"] = True
    return out


# ---------------------------------------------------------------------------- handlers
def _delegate(tb: Toolbox, a: dict[str, Any]) -> Result:
    cwd = tb.confine(a.get("cwd"))
    tb.api.ensure_state_dir()
    tb.looked().start(tb.api.env.now_iso())
    s = tb.api.spawn(
        a["task"],
        adapter=a.get("adapter"),
        model=a.get("model"),
        cwd=cwd,
        name=a.get("name"),
        timeout=a.get("timeout"),
        source=tb.source,
        worktree=a.get("worktree"),
        branch=a.get("branch"),
        base=a.get("base"),
        after=a.get("after"),
        after_any=bool(a.get("after_any")),
        group=a.get("group"),
        priority=int(a.get("priority", 0)),
        max_cost=a.get("max_cost"),
        max_tokens=a.get("max_tokens"),
        stall=a.get("stall_s"),
        detached=bool(a.get("detached")),
        run=tb.run,
    )
    out: Result = {
        "session_id": s.id,
        "name": s.name,
        "adapter": s.adapter,
        "model": s.model,
        "cwd": s.cwd,
        "status": s.status.value,
        "next": "call wait to block until it (or another session) finishes",
    }
    if s.status is Status.QUEUED:
        out["next"] = "it is queued and starts when it may (see check_session); call wait"
    if s.workspace is not None and s.workspace.mode == "worktree":
        out["branch"] = s.workspace.branch
    return out


def _converse(tb: Toolbox, a: dict[str, Any]) -> Result:
    s, state = tb.api.inject(
        a["session_id"], a["message"], context=a.get("context"), timeout=a.get("timeout")
    )
    turn = s.count + (len(s.queue) if state == "queued" else 0)
    out: Result = {"session_id": s.id, "state": state, "turn": turn}
    if state == "queued":
        out["note"] = (
            f"turn {s.count} is still running; this message starts turn {turn} "
            "when the turns ahead of it finish"
        )
    return out


def _check_session(tb: Toolbox, a: dict[str, Any]) -> Result:
    s = tb.api.get(a["session_id"])
    looked = tb.looked()
    r = row(s)
    new = looked.is_new(looked.load(), r)
    looked.mark([r])
    view = session_view(s, new)
    view.update(_tree_view(tb, s))
    return view


def _tree_view(tb: Toolbox, s: Session) -> Result:
    """Its place in its delegation tree and what its subtree (it and every session under
    it) used: a cost with unpriced parts is the known part, with their count; and if it is
    queued, its place in the queue (both from one listing)."""
    rows = tb.api.sessions()
    mine = next((r for r in rows if r["id"] == s.id), None)
    if mine is None:
        return {}
    out: Result = {"spawn_depth": mine["spawn_depth"], "children": mine["children"]}
    if mine["parent_session_id"]:
        out["parent_session_id"] = mine["parent_session_id"]
        out["lifecycle"] = mine["lifecycle"]
    out["subtree"] = {
        "sessions": mine["tree_sessions"],
        "usage": _usage(mine["tree_usage"]),
        "cost_usd": mine["tree_cost_usd"],
        "unpriced_sessions": mine["tree_unpriced"],
    }
    if mine["tree_unpriced"] and mine["tree_cost_usd"] is not None:
        out["subtree"]["note"] = "cost_usd is a lower bound: some sessions' cost is unknown"
    if s.status is Status.QUEUED:
        out.update({k: mine[k] for k in ("queue_position", "waiting_for")})
    return out


def _list_sessions(tb: Toolbox, a: dict[str, Any]) -> Result:
    rows = tb.api.sessions(a.get("status")) if tb.api.has_sessions() else []
    if a.get("mine"):
        rows = [r for r in rows if r.get("source") == tb.source]
    rows.reverse()  # newest first
    limit = int(a.get("limit", LIST_LIMIT))
    shown = rows[:limit]
    looked = tb.looked()
    state = looked.load()
    new_ids = [r["id"] for r in rows if looked.is_new(state, r)]
    out: Result = {
        "total": len(rows),
        "sessions": [_list_row(r, r["id"] in new_ids) for r in shown],
        "finished_since_last_look": new_ids,
    }
    if len(rows) > limit:
        out["note"] = f"showing the newest {limit} of {len(rows)}; pass limit or status for more"
    shown_ids = {r["id"] for r in shown}
    looked.mark(r for r in rows if r["id"] in shown_ids or r["id"] in new_ids)
    return out


def _end_session(tb: Toolbox, a: dict[str, Any]) -> Result:
    delete = bool(a.get("delete"))
    try:
        s = tb.api.get(a["session_id"])
    except DamagedSession as e:
        if not delete:
            raise ToolError(f"{e}; pass delete=true to delete it") from None
        tb.api.rm([e.session_id], force=True)
        return {"session_id": e.session_id, "killed": False, "deleted": True, "status": "damaged"}
    killed, dropped, children = _kill_if_running(tb, s)
    if not killed and not delete:
        raise ToolError(
            f"session {s.id} already finished ({s.status.value}); nothing to end "
            "(pass delete=true to delete its files)"
        )
    fresh = tb.api.get(s.id)
    if killed:
        tb.looked().mark([row(fresh)])
    if delete:
        tb.api.rm([s.id], force=True)
    out: Result = {
        "session_id": s.id,
        "killed": killed,
        "deleted": delete,
        "status": fresh.status.value,
        "dropped_queued": dropped,
    }
    if children:
        out["children_killed"] = children  # its linked children went with it
    return out


def _kill_if_running(tb: Toolbox, s: Session) -> tuple[bool, int, list[str]]:
    """(whether it was killed, its queued messages dropped, its linked children killed)."""
    if s.status not in ACTIVE:  # running, stalled, queued or parked: all can be ended
        return False, 0, []
    try:
        done = tb.api.kill([s.id])
    except SessionStateError:
        return False, 0, []  # it finished meanwhile
    if not done:
        return True, 0, []
    return True, int(done[0]["dropped_queued"]), list(done[0].get("children_killed") or [])


# ----- wait
def _wait(tb: Toolbox, a: dict[str, Any]) -> Result:
    looked = tb.looked()
    state = looked.load()
    ids = [tb.api.resolve(r) for r in a.get("session_ids") or []]
    if not ids:
        ids = _own_pending(tb, looked, state)
        if not ids:
            note = (
                "none of your sessions is running or has news; pass session_ids to wait on others"
            )
            return {"timed_out": False, "finished": [], "running": [], "note": note}
    ids = list(dict.fromkeys(ids))
    cap = tb.max_wait()
    asked = float(a.get("timeout_s", cap))
    timeout = min(asked, cap)
    started = time.monotonic()
    rows, done = _wait_loop(tb, ids, state, looked, timeout, bool(a.get("all")))
    looked.mark(r for r in rows.values() if r["status"] in FINISHED)
    out: Result = {
        "timed_out": not done,
        "waited_s": round(time.monotonic() - started, 1),
        "finished": [
            _finished_view(r, looked.is_new(state, r))
            for r in rows.values()
            if r["status"] in FINISHED
        ],
        "running": [sid for sid, r in rows.items() if r["status"] not in FINISHED],
    }
    if asked > cap:
        out["note"] = f"timeout capped at {cap:g} s per call; call wait again to keep waiting"
    return out


def _own_pending(tb: Toolbox, looked: Looked, state: Mapping[str, Any]) -> list[str]:
    """The caller's sessions still running, and those that finished without its being told
    (a quick task may finish before the caller gets to ``wait``: that is news, not nothing)."""
    if not tb.api.has_sessions():
        return []
    return [
        r["id"]
        for r in tb.api.sessions()
        if r.get("source") == tb.source and (r["status"] in ACTIVE or looked.is_new(state, r))
    ]


def _wait_loop(
    tb: Toolbox,
    ids: list[str],
    state: Mapping[str, Any],
    looked: Looked,
    timeout: float,
    all_: bool,
) -> tuple[dict[str, dict[str, Any]], bool]:
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        rows = {sid: row(tb.api.get(sid)) for sid in ids}
        finished = [r for r in rows.values() if r["status"] in FINISHED]
        if len(finished) == len(ids):
            return rows, True
        if not all_ and any(looked.is_new(state, r) for r in finished):
            return rows, True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return rows, False
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, 0.5)


def _finished_view(r: Mapping[str, Any], new: bool) -> Result:
    return {
        "session_id": r["id"],
        "name": r.get("name"),
        "status": r["status"],
        "new": new,
        "turns": r.get("turns"),
        "last_message": short(r.get("last_message"), TASK_CHARS),
        "error": r.get("error"),
    }


# ----- trajectory
@dataclass
class _Budget:
    """Keeps a head and a tail of a step stream within a character budget, counting the rest."""

    total: int
    head: list[Result] = field(default_factory=list)
    tail: deque[tuple[Result, int]] = field(default_factory=deque)
    head_chars: int = 0
    tail_chars: int = 0
    omitted: int = 0
    omitted_turns: set[int] = field(default_factory=set)
    first_omitted: int | None = None
    last_omitted: int | None = None
    count: int = 0

    def add(self, step: Result) -> None:
        self.count += 1
        size = len(to_json(step)) + 1
        if not self.omitted and not self.tail and self.head_chars + size <= self.total // 4:
            self.head.append(step)
            self.head_chars += size
            return
        self.tail.append((step, size))
        self.tail_chars += size
        while self.tail_chars > self.total - self.head_chars and len(self.tail) > 1:
            dropped, n = self.tail.popleft()
            self.tail_chars -= n
            self._omit(dropped)

    def _omit(self, step: Result) -> None:
        self.omitted += 1
        self.omitted_turns.add(int(step.get("turn") or 0))
        idx = int(step.get("index") or 0)
        self.first_omitted = idx if self.first_omitted is None else self.first_omitted
        self.last_omitted = idx

    def steps(self) -> list[Result]:
        return [*self.head, *(s for s, _ in self.tail)]


def _get_trajectory(tb: Toolbox, a: dict[str, Any]) -> Result:
    s = tb.api.get(a["session_id"])
    full = bool(a.get("full"))
    budget_chars = int(tb.api.setting("tools", "trajectory_chars"))
    field_chars = budget_chars // 2 if full else TEXT_CHARS
    budget = _Budget(budget_chars * 4 if full else budget_chars)
    shortened = [0]
    for step in tb.api.trajectory(s.id, a.get("turn")):
        budget.add(compact_step(step, field_chars, shortened))
    out: Result = {
        "session_id": s.id,
        "status": s.status.value,
        "turns": s.count,
        "total_steps": budget.count,
        "steps": budget.steps(),
    }
    note = _trajectory_note(budget, shortened[0], full, a.get("turn"))
    if note:
        out["note"] = note
    return out


def _trajectory_note(b: _Budget, shortened: int, full: bool, turn: int | None) -> str | None:
    parts = []
    if b.omitted:
        turns = sorted(b.omitted_turns)
        span = f"turn {turns[0]}" if len(turns) == 1 else f"turns {turns[0]}-{turns[-1]}"
        parts.append(
            f"{b.omitted} of {b.count} steps omitted to fit the context (indexes "
            f"{b.first_omitted}-{b.last_omitted}, {span}); the first and the latest are shown"
        )
        if turn is None and len(turns) > 1:
            parts.append("pass turn=N to read one turn")
    if shortened:
        what = "very long" if full else "long"
        parts.append(f"{shortened} {what} text fields shortened (marked '[... N chars cut ...]')")
        if not full:
            parts.append("pass full=true for longer texts")
    return "; ".join(parts) or None


def compact_step(step: Step, limit: int, shortened: list[int]) -> Result:
    """A step with only the fields that say something, long texts cut to ``limit``."""
    out: Result = {"turn": step.get("turn"), "index": step.get("index"), "kind": step.get("kind")}
    for key, value in step.items():
        if key in out or value is None or value == "" or value == []:
            continue
        if key == "arguments" and not isinstance(value, str):
            value = json.dumps(value, ensure_ascii=False)
        if key == "changes" and isinstance(value, list):
            value = [f"{c.get('kind')} {c.get('path')}" for c in value if isinstance(c, dict)]
        if isinstance(value, str) and len(value) > limit:
            shortened[0] += 1
            value = short(value, limit)
        out[key] = value
    return out


# ----- review: diffs, comments, merge
DIFF_FILES = 200  # files listed by one get_diff call


def _get_diff(tb: Toolbox, a: dict[str, Any]) -> Result:
    stat_only = bool(a.get("stat_only"))
    d = tb.api.diff(a["session_id"], a.get("turn"), hunks=False, text=not stat_only)
    files = d["files"]
    out: Result = {k: d[k] for k in ("session_id", "branch", "turn", "live", "changes")}
    out["files"] = [{k: f[k] for k in ("path", "status", "added", "removed")} for f in files]
    notes = [d["note"]] if d.get("note") else []
    if len(files) > DIFF_FILES:
        out["files"] = out["files"][:DIFF_FILES]
        notes.append(f"{len(files) - DIFF_FILES} more files not listed")
    if not stat_only:
        out["diff"], cut = _bounded_diff(d["text"], int(tb.api.setting("tools", "diff_chars")))
        if cut:
            notes.append(
                f"diff cut to fit the context; not shown: {', '.join(cut[:20])}"
                + (f" and {len(cut) - 20} more" if len(cut) > 20 else "")
                + "; pass turn=N for one turn, or read the files"
            )
    if notes:
        out["note"] = "; ".join(notes)
    return out


def _bounded_diff(text: str, budget: int) -> tuple[str, list[str]]:
    """``text`` kept file by file within ``budget`` characters; the files left out (a first
    file larger than the budget is cut inside, and counted as shown)."""
    blocks = re.split(r"(?m)^(?=diff --git )", text)
    kept: list[str] = []
    cut: list[str] = []
    used = 0
    for block in (b for b in blocks if b):
        if used + len(block) <= budget:
            kept.append(block)
            used += len(block)
        elif not kept:
            kept.append(block[:budget] + f"\n[... {len(block) - budget} chars cut ...]\n")
            used = budget
        else:
            cut.append(block.split("\n", 1)[0].removeprefix("diff --git "))
    return "".join(kept), cut


def _comment(tb: Toolbox, a: dict[str, Any]) -> Result:
    res = tb.api.comment(a["session_id"], [(a["path"], int(a["line"]), a["text"])])
    c = res["comments"][0]
    return {
        "session_id": res["session_id"],
        "comment": {k: c[k] for k in ("id", "path", "line")},
        "next": "it goes to the agent with your next converse on this session",
    }


def _merge(tb: Toolbox, a: dict[str, Any]) -> Result:
    res = tb.api.merge(a["session_id"], into=a.get("into"), squash=bool(a.get("squash")))
    return {k: v for k, v in res.items() if k != "worktree"}


# ---------------------------------------------------------------------------- the tools
TOOLS: tuple[Tool, ...] = (
    Tool(
        "delegate",
        "Start a coding agent (OpenAI Codex, Claude Code or Gemini CLI) on a task, in the "
        "background. "
        "Returns its session_id at once; the agent keeps working while you do other things. "
        "Give a complete, self-contained task: the agent sees nothing else of this "
        "conversation. Start several sessions for independent tasks, then call wait.",
        object_schema(
            {
                "task": _s(
                    "Everything the agent needs: goal, files, constraints, how to "
                    "verify, what to report back.",
                    minLength=1,
                ),
                "adapter": _s("Agent CLI to run (default from config).", enum=list(agents.names())),
                "model": _s(
                    "Model name; an alias like sonnet, opus or gpt-5 also picks the "
                    "adapter. Default: the configured one."
                ),
                "cwd": _s(
                    "Working directory for the agent (absolute, or relative to where "
                    "zwarm runs); must be inside the allowed roots."
                ),
                "name": _s(
                    "Optional unique name to refer to the session by "
                    "(letters, digits, '.', '_', '-')."
                ),
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Kill the turn after this many seconds.",
                },
                "worktree": {
                    "type": "boolean",
                    "description": "Run in a new git worktree and branch of cwd's repository, "
                    "so parallel agents never overwrite each other (default from config).",
                },
                "branch": _s("With worktree: the new branch (default zwarm/<name or id>)."),
                "base": _s("With worktree: the commit or branch to start from (default HEAD)."),
                "after": {
                    "type": "array",
                    "items": _SESSION_ID,
                    "maxItems": 100,
                    "description": "Start only once these sessions have finished; if any did "
                    "not complete it ends failed (dependency_failed) without starting.",
                },
                "after_any": {
                    "type": "boolean",
                    "description": "With after: start whatever their outcome.",
                },
                "group": _s("A group name: its [groups.NAME] caps and budgets apply."),
                "priority": {
                    "type": "integer",
                    "description": "Higher starts first when sessions are queued (default 0).",
                },
                "max_cost": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Budget in USD: past it the session is stopped, failed.",
                },
                "max_tokens": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Budget in tokens: past it the session is stopped, failed.",
                },
                "stall_s": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Mark it stalled when its agent is silent this long.",
                },
                "detached": {
                    "type": "boolean",
                    "description": "When you run inside a zwarm session: the new session is "
                    "not killed or removed with yours (default: it is).",
                },
            },
            ["task"],
        ),
        _delegate,
    ),
    Tool(
        "converse",
        "Send a follow-up message to a session: it continues with the context of its earlier "
        "turns. If a turn is still running the message is queued and starts when it ends. "
        "Returns at once with state 'started' or 'queued' and the turn number.",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "message": _s("The follow-up instruction or question.", minLength=1),
                "context": _s(
                    "How the agent gets the earlier turns: 'summary' (a fresh run "
                    "with a compact summary; default) or 'native' (resume the "
                    "agent's own session).",
                    enum=["summary", "native"],
                ),
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Kill this turn after this many seconds (default: the "
                    "session's own limit, given when it was delegated).",
                },
            },
            ["session_id", "message"],
        ),
        _converse,
    ),
    Tool(
        "check_session",
        "Status of one session: status (running, stalled, queued, parked, completed, failed, "
        "killed), current turn, the agent's last message, error and its typed reason "
        "(rate_limited, usage_limit, budget_exceeded...), token usage, cost, queued messages, "
        "for a queued session its place in the queue and what it waits for, and the sessions "
        "it started (children) with its whole subtree's usage and cost.",
        object_schema({"session_id": _SESSION_ID}, ["session_id"]),
        _check_session,
        read_only=True,
    ),
    Tool(
        "list_sessions",
        "List sessions, newest first, as compact rows. Sessions that finished since you last "
        "looked are flagged new and listed in finished_since_last_look.",
        object_schema(
            {
                "status": _s(
                    "Only sessions with this status.",
                    enum=[
                        "running",
                        "stalled",
                        "queued",
                        "parked",
                        "completed",
                        "failed",
                        "killed",
                        "damaged",
                    ],
                ),
                "mine": {
                    "type": "boolean",
                    "description": "Only the sessions you started (default false).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": f"At most this many rows (default {LIST_LIMIT}).",
                },
            }
        ),
        _list_sessions,
        read_only=True,
    ),
    Tool(
        "get_trajectory",
        "What a session's agent did, step by step: messages, reasoning, shell commands with "
        "exit codes and output, file changes, tool calls, errors. Long outputs are shortened "
        "and, if the whole does not fit, the middle steps are left out; a note says what was "
        "cut. Use it to verify work, not just the agent's own claims.",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "turn": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Only this turn (default: all turns).",
                },
                "full": {
                    "type": "boolean",
                    "description": "Keep long texts much longer (default false).",
                },
            },
            ["session_id"],
        ),
        _get_trajectory,
        read_only=True,
    ),
    Tool(
        "wait",
        "Block until a session finishes, instead of polling. Returns as soon as any of the "
        "given sessions finishes that you were not already told about (or, with all=true, "
        "when all have finished), or when the timeout passes; then it lists which finished "
        "and which still run. Default sessions: every session you started that is running "
        "or finished without your being told. One call "
        "waits at most about 45 s: call it again to keep waiting.",
        object_schema(
            {
                "session_ids": {
                    "type": "array",
                    "items": _SESSION_ID,
                    "maxItems": 100,
                    "description": "Sessions to wait for (default: yours that run or have news).",
                },
                "timeout_s": {
                    "type": "number",
                    "minimum": 0,
                    "description": "Give up after this many seconds (capped).",
                },
                "all": {
                    "type": "boolean",
                    "description": "Wait for all of them instead of the first (default false).",
                },
            }
        ),
        _wait,
        read_only=True,
    ),
    Tool(
        "end_session",
        "Stop a running session (kills the agent and drops its queued messages). With "
        "delete=true also delete its files; a finished session can only be deleted.",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "delete": {
                    "type": "boolean",
                    "description": "Also delete the session's files (default false).",
                },
            },
            ["session_id"],
        ),
        _end_session,
        destructive=True,
    ),
    Tool(
        "get_diff",
        "Exactly what a session (or one of its turns) changed in its git working tree: the "
        "changed files with added/removed line counts and the unified diff, from snapshots "
        "zwarm takes before and after each turn. Review it before merging. Long diffs are "
        "cut to fit (a note names the files left out).",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "turn": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Only this turn (default: the whole session).",
                },
                "stat_only": {
                    "type": "boolean",
                    "description": "Only the files and line counts (default false).",
                },
            },
            ["session_id"],
        ),
        _get_diff,
        read_only=True,
    ),
    Tool(
        "comment",
        "Attach a review comment to a line of a session's diff. Open comments are sent to "
        "the agent, with the diff lines around them, at the start of your next converse.",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "path": _s("A changed file, relative to the repository's top.", minLength=1),
                "line": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The line (in the file as the session left it).",
                },
                "text": _s("What should change there, and why.", minLength=1),
            },
            ["session_id", "path", "line", "text"],
        ),
        _comment,
    ),
    Tool(
        "merge",
        "Merge a finished worktree session's branch (its uncommitted work is committed "
        "first) into the main checkout's branch or another. Refused while it runs, or when "
        "it would write a file of the target that has uncommitted changes or that git does "
        "not track; a conflict is refused (nothing merged), listing the conflicting files, "
        "what was committed and what to do next.",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "into": _s("The branch to merge into (default: the main worktree's)."),
                "squash": {
                    "type": "boolean",
                    "description": "One commit on the target instead of a merge (default false).",
                },
            },
            ["session_id"],
        ),
        _merge,
    ),
)

TOOL_NAMES = tuple(t.name for t in TOOLS)
