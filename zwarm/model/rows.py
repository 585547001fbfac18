"""The schema of a session's listing row (``api.row``), for rows read back from a file.

Owns ``Row``: the one schema a row must pass before zwarm believes it from anywhere but a
session it just decoded (the listing cache, ``zwarm.store.rowcache``). Must stay true:
- ``Row``'s fields are the keys of ``api.row``'s result, in the same order, each typed and
  bounded as the session record bounds the field it comes from (``zwarm.model.records``); no
  field has a default and no other key is accepted, so a row of an older or newer shape is
  refused, never filled in (a test compares both over varied sessions);
- ``to_row`` gives back exactly the dict ``api.row`` made (plain JSON types, same key order);
- this module imports only the standard library, msgspec and ``zwarm.model``.
"""

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from zwarm.model.records import (
    AGENT_NAME,
    NAME,
    RUN_ID,
    AbsPath,
    AgentSessionId,
    Branch,
    Changes,
    Count,
    Money,
    Priority,
    ReasonCode,
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
    """A session's row as ``api.row`` makes it (before a listing fills in its place in the
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
    branch: Branch | None
    worktree: AbsPath | None
    changes: Changes | None
    turn_changes: Annotated[list[Changes | None], Meta(max_length=1_000_000)]
    group: _Name | None
    priority: Priority
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
    launcher_state: None
    shown_status: None
    damaged: Literal[False]


_decoder = msgspec.json.Decoder(Row)


def decode_row(data: bytes | memoryview) -> dict[str, Any]:
    """The row in ``data`` (one JSON object), validated by ``Row``, as ``api.row`` made it.
    Raises ``ValueError`` if it is not one."""
    try:
        r = _decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"not a session row: {e}") from None
    return to_row(r)


def to_row(r: Row) -> dict[str, Any]:
    d: dict[str, Any] = msgspec.to_builtins(r)
    return d
