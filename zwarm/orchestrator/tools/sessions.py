"""The handlers that start, continue, look at, list and end sessions.

Owns ``delegate``, ``converse``, ``check_session``, ``list_sessions`` and ``end_session``.
Must stay true: handlers use ``Zwarm``'s public methods only (never its ``store`` or
``config``); a ``cwd`` is confined before anything starts; what a caller is shown as finished
is marked as told (``looked``); ``end_session`` on a finished session deletes only when asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zwarm.api import row
from zwarm.errors import DamagedSession, SessionStateError
from zwarm.model import ACTIVE, Session, Status
from zwarm.model.requests import MessageRequest, SpawnRequest
from zwarm.orchestrator.tools.base import Result, ToolError
from zwarm.orchestrator.tools.views import list_row, session_view, usage_view

if TYPE_CHECKING:
    from zwarm.orchestrator.tools.toolbox import Toolbox

LIST_LIMIT = 50


def delegate(tb: Toolbox, a: dict[str, Any]) -> Result:
    cwd = tb.confine(a.get("cwd"))
    tb.api.ensure_state_dir()
    tb.looked().start(tb.api.env.now_iso())
    fields = {**a, "cwd": str(cwd), "after": tuple(a.get("after", ()))}  # checked: DELEGATE's
    s = tb.api.spawn(SpawnRequest(**fields, source=tb.source, run=tb.run))
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


def converse(tb: Toolbox, a: dict[str, Any]) -> Result:
    fields = {k: v for k, v in a.items() if k != "session_id"}  # checked: CONVERSE's
    s, state = tb.api.inject(a["session_id"], MessageRequest(**fields))
    turn = s.count + (len(s.queue) if state == "queued" else 0)
    out: Result = {"session_id": s.id, "state": state, "turn": turn}
    if state == "queued":
        out["note"] = (
            f"turn {s.count} is still running; this message starts turn {turn} "
            "when the turns ahead of it finish"
        )
    return out


def check_session(tb: Toolbox, a: dict[str, Any]) -> Result:
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
        "usage": usage_view(mine["tree_usage"]),
        "cost_usd": mine["tree_cost_usd"],
        "unpriced_sessions": mine["tree_unpriced"],
    }
    if mine["tree_unpriced"] and mine["tree_cost_usd"] is not None:
        out["subtree"]["note"] = "cost_usd is a lower bound: some sessions' cost is unknown"
    if s.status is Status.QUEUED:
        out.update({k: mine[k] for k in ("queue_position", "waiting_for")})
    return out


def list_sessions(tb: Toolbox, a: dict[str, Any]) -> Result:
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
        "state_dir": str(tb.api.state_dir),
        "you": tb.source,
        "total": len(rows),
        "sessions": [list_row(r, r["id"] in new_ids) for r in shown],
        "finished_since_last_look": new_ids,
    }
    if len(rows) > limit:
        out["note"] = f"showing the newest {limit} of {len(rows)}; pass limit or status for more"
    shown_ids = {r["id"] for r in shown}
    looked.mark(r for r in rows if r["id"] in shown_ids or r["id"] in new_ids)
    return out


def end_session(tb: Toolbox, a: dict[str, Any]) -> Result:
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
