"""A session's limits: its budget, its stall time, when a parked turn resumes, today's spend.

Owns the rules that turn ``[limits]``, ``[groups.NAME]`` and spawn's options into the figures
a session keeps (``settle``), whether a session has passed its budget (``over_budget``), when a
turn hit by a usage or rate limit resumes (``park_until``) and what the state dir spent today
(``spent_today``). Must stay true:
- a session's budget and stall time are fixed when it is spawned (spawn's option > its group's
  > ``[limits]``) and kept in its meta.json, so a later config edit never changes a running
  session's limits; 0 in the config means no limit;
- a budget counts the whole session: every turn's usage and cost (deltas, as recorded) plus,
  while a turn streams, what it has reported so far; a cost that is unknown counts as nothing
  (said in docs/fleet.md: a cost budget needs the agent's cost or a price);
- this module reads the config and sessions it is given; it starts, stops or writes nothing.
"""

import re
import time
from typing import TYPE_CHECKING, Any

import msgspec

from zwarm.errors import InvalidInput, naming
from zwarm.model import Reason, Session, TurnOutcome, Usage
from zwarm.model.records import NAME, Count, Money, Priority, Seconds, out_of_bounds

if TYPE_CHECKING:
    from zwarm.config import Config

MAX_BACKOFF_S = 3600.0
_GROUP = re.compile(NAME)
MIN_PARK_S = 1.0


class Fleet(msgspec.Struct, frozen=True):
    """What spawn says about a session's place in the fleet (all optional)."""

    after: tuple[str, ...] = ()
    after_any: bool = False
    group: str | None = None
    priority: int = 0
    max_cost: float | None = None
    max_tokens: int | None = None
    stall: float | None = None
    account: str | None = None  # spawn --account: checked against the config by the caller


def check(f: Fleet) -> Fleet:
    """``f`` with its numbers checked against the bounds ``meta.json``'s schema declares
    (``records.out_of_bounds``; ``InvalidInput`` naming the bad one)."""
    for field, value, typ in (
        ("max_cost", f.max_cost, Money),
        ("max_tokens", f.max_tokens, Count),
        ("stall", f.stall, Seconds),
    ):
        if value is not None:
            need(field, value, typ, positive=True)
    need("priority", f.priority, Priority)
    if f.group is not None and not _GROUP.match(f.group):
        group = f.group
        raise naming(InvalidInput, lambda n: (
            f"invalid {n('group')} name {group!r}: use 1-64 letters, digits, '.', '_' or '-'"
        ))  # fmt: skip
    if f.after_any and not f.after:
        raise naming(
            InvalidInput,
            lambda n: f"{n('after_any')} needs {n('after')} (the sessions to wait for)",
        )
    return f


def need(field: str, value: Any, typ: Any, positive: bool = False) -> Any:
    """``value`` if ``meta.json``'s schema takes it as ``typ`` (``records.out_of_bounds``),
    else ``InvalidInput``: "``field`` must be ..., not ``value``" (``field``: the request
    field, ``zwarm.model.requests``, each front end naming it its way: ``errors.naming``)."""
    why = out_of_bounds(value, typ, positive)
    if why is not None:
        raise naming(InvalidInput, lambda n: f"{n(field)} must be {why}, not {value!r}")
    return value


def settle(s: Session, f: Fleet, config: "Config") -> None:
    """Record ``f`` on new session ``s``, filling budgets and stall time from the config."""
    group = config.groups().get(f.group, {}) if f.group else {}
    lim = config.table("limits")
    s.group, s.priority = f.group, f.priority
    s.account, s.account_pinned = f.account, f.account is not None
    s.after, s.after_any = list(dict.fromkeys(f.after)), f.after_any
    cost = f.max_cost if f.max_cost is not None else group.get("max_cost") or lim["max_cost"]
    tokens = (
        f.max_tokens if f.max_tokens is not None else (group.get("max_tokens") or lim["max_tokens"])
    )
    stall = f.stall if f.stall is not None else lim["stall_s"]
    s.max_cost_usd = float(cost) if cost else None
    s.max_tokens = int(tokens) if tokens else None
    s.stall_s = float(stall) if stall else None


# ---------------------------------------------------------------------- budgets
def spent(
    s: Session, extra: Usage | None = None, extra_cost: float | None = None
) -> tuple[int, float]:
    """(total tokens, known cost in USD) of ``s``'s turns, plus what a streaming turn reported
    so far (``extra``, ``extra_cost``)."""
    tokens, cost = s.spent()
    return tokens + (extra.total_tokens if extra else 0), cost + (extra_cost or 0.0)


def over_budget(
    s: Session, extra: Usage | None = None, extra_cost: float | None = None
) -> str | None:
    """Why ``s`` has passed its budget (a message), or None."""
    if s.max_tokens is None and s.max_cost_usd is None:
        return None
    tokens, cost = spent(s, extra, extra_cost)
    if s.max_tokens is not None and tokens > s.max_tokens:
        return f"budget exceeded: {tokens:,} tokens used, the session's budget is {s.max_tokens:,}"
    if s.max_cost_usd is not None and cost > s.max_cost_usd:
        return f"budget exceeded: ${cost:.4f} spent, the session's budget is ${s.max_cost_usd:.4f}"
    return None


# ---------------------------------------------------------------------- parking
def park_until(
    config: "Config", s: Session, reason: Reason, o: TurnOutcome, now: float
) -> float | None:
    """When a turn that ended on ``reason`` resumes, or None if it must not be parked
    (``[limits] on_usage_limit`` is "fail", or ``max_auto_resumes`` are used up; "switch"
    without another account parks as "wait": ``engine.finishing``): the
    agent's reset time or retry-after, else ``resume_backoff_s`` doubled per resume so far."""
    lim = config.table("limits")
    if lim["on_usage_limit"] == "fail" or s.auto_resumes >= lim["max_auto_resumes"]:
        return None
    if reason not in (Reason.USAGE_LIMIT, Reason.RATE_LIMITED):
        return None
    if o.reset_at is not None:
        return max(o.reset_at, now + MIN_PARK_S)
    if o.retry_after_s is not None:
        return now + max(o.retry_after_s, MIN_PARK_S)
    backoff = float(lim["resume_backoff_s"]) * 2.0 ** min(s.auto_resumes, 30)
    return now + max(MIN_PARK_S, min(backoff, MAX_BACKOFF_S))


# ---------------------------------------------------------------------- the day's spend
def today(now: float) -> str:
    """The local date of ``now``: the day ``max_cost_per_day`` counts."""
    return time.strftime("%Y-%m-%d", time.localtime(now))


def spent_today(sessions: list[Session], now: float) -> float:
    """What the turns that ended today (local time) cost, over ``sessions`` (known costs)."""
    from zwarm.env import parse_iso

    day = today(now)
    total = 0.0
    for s in sessions:
        for ended_at, cost in s.ended_costs():
            try:
                when = parse_iso(ended_at)
            except ValueError:
                continue
            if today(when) != day:
                if when < now - 86400:
                    break  # turns are in order: the older ones ended before today too
                continue
            total += cost
    return total
