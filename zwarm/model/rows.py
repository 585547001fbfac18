"""A session's listing row: the one JSON contract of a session everywhere zwarm shows one.

Owns the row's four shapes, declared here once: ``row`` of a ``Session`` (``ls`` rows, the
``show`` header, kill's and the tools' results; ``_session_row``), ``row`` of a session's JSON
view (a meta dict: the same keys from ``to_dict``), ``damaged_row`` (a session whose files
cannot be read: listed, never hidden), and ``Row``, the schema a row must pass before zwarm
believes it from anywhere but a session it just decoded (the listing cache,
``zwarm.store.rowcache``). A listing fills in what only it knows (queue places, children,
subtree totals, what a launcher says: ``zwarm.ops.listing``). Must stay true:
- every shape has the same keys in the same order; ``Row``'s fields are the keys of ``row``'s
  result, each typed and bounded as the session record bounds the field it comes from
  (``zwarm.model.records``); no field has a default and no other key is accepted, so a row of
  an older or newer shape is refused, never filled in (a test compares both over varied
  sessions);
- ``to_row`` gives back exactly the dict ``row`` made (plain JSON types, same key order);
- this module imports only the standard library, msgspec and ``zwarm.model``.
"""

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from zwarm.model.records import (
    AGENT_NAME,
    NAME,
    RUN_ID,
    SET_ID,
    AbsPath,
    AgentSessionId,
    AttemptNo,
    Branch,
    Changes,
    Count,
    Money,
    Priority,
    ReasonCode,
    SandboxMode,
    Session,
    SessionId,
    Short,
    Text,
    Usage,
    When,
)
from zwarm.model.records import MAX_DEPTH as _MAX_DEPTH
from zwarm.model.status import Status

_Name = Annotated[str, Meta(pattern=NAME)]
_Ids = Annotated[list[SessionId], Meta(max_length=1_000_000)]


class Row(Struct, forbid_unknown_fields=True):
    """A session's row as ``row`` makes it (before a listing fills in its place in the
    queue and in its delegation tree)."""

    id: SessionId
    name: _Name | None
    adapter: Annotated[str, Meta(pattern=AGENT_NAME)]
    model: Short | None
    status: Status
    task: Text
    cwd: AbsPath
    created_at: When
    updated_at: When
    turns: Count
    usage: Usage
    cost_usd: Money | None
    cost_complete: bool
    cost_source: Literal["reported", "estimated", "unknown"]
    agent_session_id: AgentSessionId | None
    last_message: Text | None
    error: Text | None
    reason: ReasonCode | None
    queued: Annotated[list[Text], Meta(max_length=100_000)]
    source: Short
    dangerous: bool
    sandbox: SandboxMode
    branch: Branch | None
    worktree: AbsPath | None
    changes: Changes | None
    turn_changes: Annotated[list[Changes | None], Meta(max_length=1_000_000)]
    group: _Name | None
    priority: Priority
    set: Annotated[str, Meta(pattern=SET_ID)] | None
    attempt: AttemptNo | None
    account: _Name | None
    after: Annotated[list[SessionId], Meta(max_length=100)]
    max_cost_usd: Money | None
    max_tokens: Count | None
    auto_resumes: Count
    queued_at: When | None
    queue_position: Count | None
    waiting_for: _Ids
    wait: Short | None
    parked_until: When | None
    quiet_since: When | None
    parent_session_id: SessionId | None
    parent_run_id: Annotated[str, Meta(pattern=RUN_ID)] | None
    spawn_depth: Annotated[int, Meta(ge=1, le=_MAX_DEPTH)]
    lifecycle: Literal["linked", "detached"]
    children: _Ids
    tree_sessions: Annotated[int, Meta(ge=1, le=2**53)]
    tree_usage: Usage
    tree_cost_usd: Money | None
    tree_unpriced: Count
    launcher: Annotated[str, Meta(pattern=AGENT_NAME)] | None
    host: Short | None
    launcher_state: None
    shown_status: None
    damaged: Literal[False]


_decoder = msgspec.json.Decoder(Row)


def decode_row(data: bytes | memoryview) -> dict[str, Any]:
    """The row in ``data`` (one JSON object), validated by ``Row``, as ``row`` made it.
    Raises ``ValueError`` if it is not one."""
    try:
        r = _decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"not a session row: {e}") from None
    return to_row(r)


def to_row(r: Row) -> dict[str, Any]:
    d: dict[str, Any] = msgspec.to_builtins(r)
    return d


def row(m: dict[str, Any] | Session) -> dict[str, Any]:
    """The stable session JSON (ls rows, show header, tool results) from a session (or its
    JSON view, a meta dict)."""
    if isinstance(m, Session):
        return _session_row(m)
    turns = m.get("turns") or []
    return {
        "id": m["id"],
        "name": m.get("name"),
        "adapter": m.get("adapter"),
        "model": m.get("model"),
        "status": m.get("status"),
        "task": m.get("task"),
        "cwd": m.get("cwd"),
        "created_at": m.get("created_at"),
        "updated_at": m.get("updated_at"),
        "turns": len(turns),
        "usage": m.get("usage"),
        "cost_usd": m.get("cost_usd"),
        "cost_complete": m.get("cost_complete") is not False,
        "cost_source": m.get("cost_source"),
        "agent_session_id": m.get("agent_session_id"),
        "last_message": m.get("last_message"),
        "error": m.get("error"),
        "reason": m.get("reason"),
        "queued": [q.get("message") for q in m.get("queue") or []],
        "source": m.get("source"),
        "dangerous": bool(m.get("dangerous")),
        "sandbox": m.get("sandbox") or "off",
        "branch": (m.get("workspace") or {}).get("branch"),
        "worktree": _worktree(m.get("workspace")),
        "changes": m.get("changes"),
        "turn_changes": [_turn_changes(t) for t in turns],
        **_fleet_row(m, turns),
        **_tree_row(m),
        **_launcher_row(turns),
        "damaged": False,
    }


def _session_row(s: Session) -> dict[str, Any]:
    """``row`` of a ``Session``, read straight from its fields (``ls`` makes one per session:
    no intermediate dict, no turn converted); the same keys in the same order."""
    ws = s.workspace
    cur = s.current
    usage = s.usage
    u = {
        "input_tokens": usage.input_tokens,
        "cached_input_tokens": usage.cached_input_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "total_tokens": usage.total_tokens,
    }
    cost = s.cost_usd
    status = s.status.value
    return {
        "id": s.id,
        "name": s.name,
        "adapter": s.adapter,
        "model": s.model,
        "status": status,
        "task": s.task,
        "cwd": s.cwd,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "turns": s.count,
        "usage": u,
        "cost_usd": cost,
        "cost_complete": s.cost_complete,
        "cost_source": s.cost_source,
        "agent_session_id": s.agent_session_id,
        "last_message": s.last_message,
        "error": s.error,
        "reason": s.reason,
        "queued": [q.message for q in s.queue],
        "source": s.source,
        "dangerous": s.dangerous,
        "sandbox": s.sandbox,
        "branch": ws.branch if ws else None,
        "worktree": ws.tree if ws and ws.mode == "worktree" and not ws.removed else None,
        "changes": _changes(s.changes),
        "turn_changes": _all_turn_changes(s),
        "group": s.group,
        "priority": s.priority,
        "set": s.attempt.set if s.attempt else None,
        "attempt": s.attempt.n if s.attempt else None,
        "account": s.account,
        "after": list(s.after),
        "max_cost_usd": s.max_cost_usd,
        "max_tokens": s.max_tokens,
        "auto_resumes": s.auto_resumes,
        "queued_at": (cur.queued_at or cur.started_at) if cur and status == "queued" else None,
        "queue_position": None,
        "waiting_for": [],
        "wait": cur.wait if cur else None,
        "parked_until": cur.parked_until if cur else None,
        "quiet_since": cur.quiet_since if cur else None,
        "parent_session_id": s.parent_session_id,
        "parent_run_id": s.parent_run_id,
        "spawn_depth": s.spawn_depth,
        "lifecycle": s.lifecycle,
        "children": [],
        "tree_sessions": 1,
        "tree_usage": u,
        "tree_cost_usd": cost,
        "tree_unpriced": 0 if s.cost_complete and cost is not None else 1,
        "launcher": cur.launcher if cur else None,
        "host": _host(cur.handle if cur else None),
        "launcher_state": None,
        "shown_status": None,
        "damaged": False,
    }


def _changes(ch: Any) -> dict[str, int] | None:
    return None if ch is None else {"files": ch.files, "added": ch.added, "removed": ch.removed}


def _all_turn_changes(s: Session) -> list[dict[str, int] | None]:
    """Every turn's change stats in order; archived turns' from the archive's summary."""
    turns = s.turns
    if not s.head_only:
        return [_changes(t.changes) for t in turns]
    assert s.archive is not None
    archived = [_changes(c) for c in s.archive.changes]
    return [_changes(turns[0].changes), *archived, *(_changes(t.changes) for t in turns[1:])]


def _launcher_row(turns: list[Any]) -> dict[str, Any]:
    """What runs the latest turn (``local``, ``slurm``), the host it runs on (``host``:
    ``_host``) and, filled in by a listing while it runs, what that launcher says of it
    (``launcher_state``, see ``_launcher_state``) and the status shown for it when that is not
    just ``running`` (``shown_status``: ``queued (slurm: Resources)`` while its job waits in
    the cluster's queue, ``Probe.label``)."""
    cur = turns[-1] if turns else None
    name = cur.get("launcher") if isinstance(cur, dict) else getattr(cur, "launcher", None)
    handle = cur.get("handle") if isinstance(cur, dict) else getattr(cur, "handle", None)
    return {"launcher": name, "host": _host(handle), "launcher_state": None, "shown_status": None}


def _host(handle: Any) -> str | None:
    """The host the latest turn ran on, as its launcher's handle names it (``{"host": ...}``:
    ssh), for the listing's HOST column; a display value only (meta.json's word)."""
    host = handle.get("host") if isinstance(handle, dict) else None
    return host[:200] if isinstance(host, str) and host else None


def _tree_row(m: dict[str, Any]) -> dict[str, Any]:
    """A row's place in its delegation tree (``engine.tree``). ``children`` and the subtree's
    totals are filled in by a listing (``ls``, ``show``, ``kill``); alone, a row counts itself."""
    cost = m.get("cost_usd")
    return {
        "parent_session_id": m.get("parent_session_id"),
        "parent_run_id": m.get("parent_run_id"),
        "spawn_depth": m.get("spawn_depth") or 1,
        "lifecycle": m.get("lifecycle") or "linked",
        "children": [],
        "tree_sessions": 1,
        "tree_usage": m.get("usage"),
        "tree_cost_usd": cost,
        "tree_unpriced": 0
        if isinstance(cost, (int, float)) and m.get("cost_complete") is not False
        else 1,
    }


def _fleet_row(m: dict[str, Any], turns: list[Any]) -> dict[str, Any]:
    """A row's fleet fields (``engine.scheduler``): its group, priority, best-of set and
    attempt number (``set``, ``attempt``: ``spawn --best-of``; not ``group``), budget, what it runs
    after; of its latest turn why it waits (queued), until when it is parked, since when it
    is silent (stalled). ``queue_position`` and ``waiting_for`` are filled in by a listing."""
    cur = turns[-1] if turns else None

    def of(key: str) -> Any:
        return cur.get(key) if isinstance(cur, dict) else getattr(cur, key, None)

    return {
        "group": m.get("group"),
        "priority": m.get("priority") or 0,
        "set": (m.get("attempt") or {}).get("set"),
        "attempt": (m.get("attempt") or {}).get("n"),
        "account": m.get("account"),
        "after": list(m.get("after") or []),
        "max_cost_usd": m.get("max_cost_usd"),
        "max_tokens": m.get("max_tokens"),
        "auto_resumes": m.get("auto_resumes") or 0,
        "queued_at": of("queued_at") or of("started_at") if m.get("status") == "queued" else None,
        "queue_position": None,
        "waiting_for": [],
        "wait": of("wait"),
        "parked_until": of("parked_until"),
        "quiet_since": of("quiet_since"),
    }


_NO_FLEET = _fleet_row({}, [])


def _turn_changes(t: Any) -> dict[str, int] | None:
    """What one turn changed (files, added, removed), from a ``Turn`` or its JSON view."""
    ch = t.get("changes") if isinstance(t, dict) else t.changes
    if ch is None or isinstance(ch, dict):
        return ch
    return {"files": ch.files, "added": ch.added, "removed": ch.removed}


def _worktree(ws: dict[str, Any] | None) -> str | None:
    """The session's own worktree (worktree mode; None once removed or in shared mode)."""
    if not ws or ws.get("mode") != "worktree" or ws.get("removed"):
        return None
    tree: str | None = ws.get("tree")
    return tree


def damaged_row(sid: str, problem: str) -> dict[str, Any]:
    return {
        "id": sid,
        "name": None,
        "adapter": None,
        "model": None,
        "status": "damaged",
        "task": None,
        "cwd": None,
        "created_at": None,
        "updated_at": None,
        "turns": 0,
        "usage": None,
        "cost_usd": None,
        "cost_complete": False,
        "cost_source": "unknown",
        "agent_session_id": None,
        "last_message": None,
        "error": problem,
        "reason": None,
        "queued": [],
        "source": None,
        "dangerous": False,
        "sandbox": "off",
        "branch": None,
        "worktree": None,
        "changes": None,
        "turn_changes": [],
        **_NO_FLEET,
        **_launcher_row([]),
        **_tree_row({}),
        "damaged": True,
    }
