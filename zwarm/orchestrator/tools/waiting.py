"""The ``wait`` tool: block until one of a caller's sessions has news, within a cap.

Owns which sessions a bare ``wait`` waits for (the caller's running ones and those that
finished without its being told) and when a call returns. Must stay true:
- one call blocks at most ``[tools] max_wait_s``;
- it never returns at once for a session the caller was already told had finished (so an
  LLM cannot busy-poll);
- it sleeps in ``Zwarm.wait`` (woken by the sessions' files changing, ``system.notify``),
  the one waiting helper: no polling loop of its own;
- a wait its caller gave up (``Toolbox.stop``) stops within ``STOP_CHECK_S`` and marks
  nothing (a thread an MCP server abandoned must not record a finish nobody was told).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zwarm.api import row
from zwarm.model import ACTIVE, FINISHED
from zwarm.orchestrator.tools.base import Result, ToolError
from zwarm.orchestrator.tools.looked import Looked
from zwarm.orchestrator.tools.views import finished_view

if TYPE_CHECKING:
    from zwarm.orchestrator.tools.toolbox import Toolbox

STOP_CHECK_S = 1.0  # how soon a wait its caller gave up (a cancelled MCP call) stops


def wait(tb: Toolbox, a: dict[str, Any]) -> Result:
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
            finished_view(r, looked.is_new(state, r))
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
    """The rows of ``ids`` once one has news for the caller (``all_``: once all finished),
    or at ``timeout``; and whether that came before the timeout. Between looks it sleeps in
    ``Zwarm.wait`` on the sessions still running (any of them finishing is news)."""
    deadline = time.monotonic() + timeout
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
        if tb.stopped():
            raise ToolError("wait given up by the caller")
        running = [sid for sid, r in rows.items() if r["status"] not in FINISHED]
        pause = remaining if tb.stop is None else min(remaining, STOP_CHECK_S)
        tb.api.wait(running, timeout=pause, any_=not all_)
