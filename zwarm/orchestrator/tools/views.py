"""What the tools say about sessions: compact, bounded views of a session and of a row.

Owns the shapes of ``check_session``'s view, ``list_sessions``' rows and ``wait``'s finished
entries, and ``short`` (a text cut to a length keeping its head and tail, with a note of the
cut). Must stay true: every view is JSON-ready and bounded in size whatever an agent wrote
(tasks, messages and queued texts are cut), and says only the facts that apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zwarm.model import Session, Status
from zwarm.orchestrator.tools.base import Result
from zwarm.text import elide

TASK_CHARS = 300
MESSAGE_CHARS = 2000
LIST_TASK_CHARS = 80


def short(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` chars, keeping two thirds from its head and the rest from its
    tail, with a note of the cut on its own line (``zwarm.text.elide``)."""
    if text is None:
        return None
    return elide(text, limit, head=max(limit * 2 // 3, 1), sep="\n")


def usage_view(u: Mapping[str, Any] | None) -> dict[str, Any] | None:
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
        "last_message": short(answer(s), MESSAGE_CHARS),
        "error": s.error,
        "usage": usage_view(s.usage.to_dict()),
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
        ("account", s.account),
        ("after", s.after or None),
        ("max_cost_usd", s.max_cost_usd),
        ("max_tokens", s.max_tokens),
    ):
        if value is not None:
            out[key] = value
    return out


def list_row(r: Mapping[str, Any], new: bool) -> Result:
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


def answer(s: Session) -> str | None:
    """What a model may read as the agent's answer: the latest turn's own final message once
    that turn has ended (a failed or killed follow-up has none: never an earlier turn's
    answer, which reads as a reply to the follow-up), else the latest answer so far."""
    t = s.current
    if t is not None and t.status.finished:
        return t.final_message
    return s.last_message


def finished_view(r: Mapping[str, Any], new: bool) -> Result:
    """A finished session in ``wait``'s answer; ``last_message`` only when its latest turn
    completed (a row's is the latest of any turn: see ``answer``)."""
    completed = r["status"] == Status.COMPLETED.value
    return {
        "session_id": r["id"],
        "name": r.get("name"),
        "status": r["status"],
        "new": new,
        "turns": r.get("turns"),
        "last_message": short(r.get("last_message"), TASK_CHARS) if completed else None,
        "error": r.get("error"),
    }
