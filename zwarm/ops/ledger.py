"""The ledger: ``zwarm usage``, tokens and cost totalled from the recorded turns.

Owns how the turns of every session are totalled by account, agent, model, day, group
(``[groups.NAME]``) or best-of set (``usage``). Must stay true: every total is the sum of
the figures recorded on the turns themselves (each turn's usage and cost are deltas:
``engine.finishing``), archived turns included, so the ledger equals the sum of the turns
``show`` prints; a turn that ran without a known cost adds nothing to ``cost_usd`` and is
counted in ``unpriced_turns`` (the cost is then a lower bound, ``cost_complete`` false),
never guessed; one whose cost zwarm estimated from token prices (its agent reports none) is
counted in ``estimated_turns``; a session that cannot be read is counted in ``damaged``,
never silently dropped; nothing is written.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from zwarm.errors import DamagedSession, InvalidInput, SessionNotFound
from zwarm.model import Session, Status, Turn

if TYPE_CHECKING:
    from zwarm.api import Zwarm

BY = ("account", "agent", "model", "day", "group", "set")
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")
_USAGE = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens")
NONE = "-"  # the key of turns without one (no account, group, set or model known)


def usage(api: Zwarm, by: str = "account", since: str | None = None) -> dict[str, Any]:
    """Totals of the turns that ran (ended, or started if still running, on or after local
    day ``since``, YYYY-MM-DD), grouped ``by`` one of ``BY``: {"by", "since", "rows": [{key,
    turns, sessions, *token counts, total_tokens, cost_usd, cost_complete, unpriced_turns,
    estimated_turns}],
    "total": the same over every row, "damaged": sessions not read}."""
    if by not in BY:
        raise InvalidInput(f"--by must be one of {', '.join(BY)}, not {by!r}")
    if since is not None and not _valid_day(since):
        raise InvalidInput(f"--since must be a date YYYY-MM-DD, not {since!r}")
    rows: dict[str, dict[str, Any]] = {}
    total = _zero("total")
    damaged = 0
    for sid in api.session_ids():
        try:
            s = api.read(sid, history=True)
        except (DamagedSession, SessionNotFound):
            damaged += 1
            continue
        for t in s.turns:
            day = _day(t)
            if day is None or (since is not None and day < since):
                continue
            key = _key(s, t, by, day)
            for r in (rows.setdefault(key, _zero(key)), total):
                _add(r, s, t)
    out = sorted(rows.values(), key=lambda r: (r["key"] == NONE, r["key"]))
    if by == "day":
        out.sort(key=lambda r: r["key"])
    for r in (*out, total):
        r["sessions"] = len(r.pop("_ids"))
        r["cost_usd"] = round(r["cost_usd"], 8)
        r["cost_complete"] = r["unpriced_turns"] == 0
    return {"by": by, "since": since, "rows": out, "total": total, "damaged": damaged}


def _valid_day(day: str) -> bool:
    if not _DATE.match(day):
        return False
    try:
        time.strptime(day, "%Y-%m-%d")
    except ValueError:
        return False
    return True


def _day(t: Turn) -> str | None:
    """The local day of turn ``t``'s end (its start while it runs); None if it never ran."""
    from zwarm.env import parse_iso

    if not t.started or t.status is Status.QUEUED:
        return None
    try:
        when = parse_iso(t.ended_at or t.started_at)
    except ValueError:
        return None
    return time.strftime("%Y-%m-%d", time.localtime(when))


def _key(s: Session, t: Turn, by: str, day: str) -> str:
    if by == "account":
        return t.account or NONE
    if by == "agent":
        return s.adapter
    if by == "model":
        return s.model or NONE
    if by == "day":
        return day
    if by == "set":  # a best-of set's attempts: what the whole set cost
        return s.attempt.set if s.attempt is not None else NONE
    return s.group or NONE


def _zero(key: str) -> dict[str, Any]:
    r: dict[str, Any] = {"key": key, "turns": 0, "_ids": set()}
    r.update({k: 0 for k in _USAGE})
    r.update({"total_tokens": 0, "cost_usd": 0.0, "unpriced_turns": 0, "estimated_turns": 0})
    return r


def _add(r: dict[str, Any], s: Session, t: Turn) -> None:
    r["turns"] += 1
    r["_ids"].add(s.id)
    for k in (*_USAGE, "total_tokens"):
        r[k] += getattr(t.usage, k)
    if t.cost_usd is not None:
        r["cost_usd"] += t.cost_usd
        r["estimated_turns"] += s.cost_source == "estimated" and t.usage.total_tokens > 0
    else:  # unknown (or not recorded yet: it runs)
        r["unpriced_turns"] += 1
