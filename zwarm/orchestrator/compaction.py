"""Compaction of an orchestrator run's transcript: its oldest messages become one summary.

Owns when a run is compacted (``due``: its context passed ``[orchestrator] compact_at`` of the
model's window), the window of known models (``window_for``), which messages go (``plan``), the
summary request and the summary message, and the accounting of that model call. The store
(``runstore``) owns keeping it: compacted messages stay there, marked out, with an audit row.
Must stay true:
- the system prompt, the first user message (the task) and the latest ``compact_keep``
  messages are kept verbatim; a tool result is never kept without the assistant message that
  called it, nor a call without its result (the kept part never starts with a tool result);
- fewer than ``MIN_MESSAGES`` messages to compact is a no-op with its reason, never an error;
- the summary takes the place of the first message it replaces, so the transcript keeps its
  order; the run's context is then the summary's estimate (``context_estimated``) until the
  next model call reports it;
- callers hold the run's lock (``RunStore.lock``): two compactions of a run never overlap (the
  store also refuses one whose messages are no longer active).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from zwarm.orchestrator.chat import ChatLLM, Completion
from zwarm.orchestrator.runstore import Run, RunStore, Stored
from zwarm.text import elide

MIN_MESSAGES = 4
DEFAULT_WINDOW = 32_000  # a model we know nothing of: small enough for most
ITEM_CHARS = 2_000  # of each message, in the summary request
REQUEST_CHARS = 200_000  # of the whole transcript sent to be summarized
# context windows of known models, in tokens (the longest prefix that matches wins)
WINDOWS = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude-": 200_000,
    "gemini-": 1_048_576,
}

SUMMARY_PROMPT = """\
You compact the transcript of an orchestrator: an LLM that hands coding work to agent sessions \
through tools (delegate, wait, check_session, get_trajectory, converse, bash...). The messages \
below will be replaced by your summary, and the orchestrator will carry on from it alone. \
Write it so nothing it needs is lost: the plan and the decisions taken; every session it \
started (id, name, what it was asked, its latest known status and result); what was verified \
and how, with the results; problems met; what is left to do next. Keep ids, names, paths, \
commands and numbers exact. Be concise, do not invent, do not address the orchestrator."""

NOTE = (
    "[zwarm: summary of messages {first}-{last} of this run, compacted to fit the context; "
    "the originals are kept in the run store]\n"
)


@dataclass(frozen=True)
class Policy:
    """A run's compaction settings: window (tokens), threshold (share of it), messages kept,
    the summary model and its price (USD per 1M tokens, None: unpriced)."""

    window: int
    at: float
    keep: int
    model: str
    price: dict[str, float] | None = None


def window_for(model: str, configured: int) -> int:
    """``configured`` if set, else the window of a known model, else ``DEFAULT_WINDOW``."""
    if configured > 0:
        return configured
    name = model.lower().rsplit("/", 1)[-1]  # openrouter-style "openai/gpt-5"
    best = max((p for p in WINDOWS if name.startswith(p)), key=len, default=None)
    return WINDOWS[best] if best else DEFAULT_WINDOW


def estimate(messages: list[dict[str, Any]]) -> int:
    """Tokens of ``messages``, estimated (about 4 characters a token, plus overhead)."""
    chars = sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)
    return chars // 4 + 4 * len(messages)


def due(run: Run, p: Policy) -> bool:
    return p.at > 0 and run.context_tokens >= p.at * p.window


@dataclass(frozen=True)
class Plan:
    """The messages to compact (consecutive, in order) and why there are none, if none."""

    out: list[Stored]
    reason: str | None = None


def plan(stored: list[Stored], keep: int) -> Plan:
    """Which of the active messages ``stored`` to compact (see the module docstring)."""
    protected = set()
    for i, s in enumerate(stored):
        if s.message.get("role") == "system" and i == 0:
            protected.add(i)
        if s.message.get("role") == "user":
            protected.add(i)
            break
    start = max(protected, default=-1) + 1
    cut = max(start, len(stored) - max(keep, 0))
    while start < cut < len(stored) and stored[cut].message.get("role") == "tool":
        cut -= 1  # keep the assistant message whose call these results answer
    out = stored[start:cut]
    if len(out) < MIN_MESSAGES:
        why = (
            f"nothing to compact: {len(out)} message(s) between the task and the latest "
            f"{keep} (at least {MIN_MESSAGES} are needed)"
        )
        return Plan([], why)
    return Plan(out)


@dataclass
class Outcome:
    """What a compaction did: how many messages it replaced (0: none, ``reason`` says why),
    the context before and after, and the summary's seq."""

    compacted: int
    reason: str | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    summary_seq: int | None = None


def compact(rs: RunStore, run: Run, llm: ChatLLM, p: Policy, trigger: str, now: str) -> Outcome:
    """Compact ``run`` now (its lock held): summarize the planned messages with ``llm``
    (``p.model``), then replace them in the store, in one transaction."""
    stored = rs.stored(run.id)
    chosen = plan(stored, p.keep)
    if chosen.reason is not None:
        return Outcome(0, chosen.reason, run.context_tokens, run.context_tokens)
    c = llm.complete(_request(run, chosen.out), [], p.model)
    text = str(c.message.get("content") or "").strip()
    if not text:
        return Outcome(0, "the model returned an empty summary: nothing compacted")
    first, last = chosen.out[0].seq, chosen.out[-1].seq
    summary = {"role": "user", "content": NOTE.format(first=first, last=last) + text}
    seqs = {s.seq for s in chosen.out}
    kept = [s.message for s in stored if s.seq not in seqs]
    before, after = run.context_tokens, estimate([*kept, summary])
    cost = _account(run, c, p)
    run.context_tokens, run.context_estimated = after, True
    run.compactions += 1
    run.updated_at = now
    audit = {
        "tokens_before": before,
        "tokens_after": after,
        "model": p.model,
        "trigger": trigger,
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "cost_usd": cost,
    }
    seq = rs.compact(run, sorted(seqs), summary, audit)
    call = {"kind": "compaction", "model": p.model, "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens, "cached_tokens": c.cached_tokens,
            "cost_usd": cost}  # fmt: skip
    rs.add_round(run.id, call, now)
    return Outcome(len(seqs), None, before, after, seq)


def _account(run: Run, c: Completion, p: Policy) -> float | None:
    """Add the summary call's tokens (and cost, if priced) to the run's; its cost."""
    tokens_in, tokens_out = c.prompt_tokens or 0, c.completion_tokens or 0
    run.prompt_tokens += tokens_in
    run.completion_tokens += tokens_out
    if p.price is None or c.prompt_tokens is None:
        run.cost_usd = None
        return None
    fresh, cached = max(tokens_in - c.cached_tokens, 0), min(c.cached_tokens, tokens_in)
    pr = p.price
    cost = (fresh * pr["input"] + cached * pr["cached_input"] + tokens_out * pr["output"]) / 1e6
    if run.cost_usd is not None:
        run.cost_usd = round(run.cost_usd + cost, 8)
    return round(cost, 8)


def _request(run: Run, out: list[Stored]) -> list[dict[str, Any]]:
    names = {
        call.get("id"): (call.get("function") or {}).get("name")
        for s in out
        for call in s.message.get("tool_calls") or []
    }
    lines = [_render(s, names) for s in out]
    text = "\n".join(lines)
    if len(text) > REQUEST_CHARS:
        half = REQUEST_CHARS // 2
        cut = len(text) - REQUEST_CHARS
        text = f"{text[:half]}\n[... {cut} characters of the middle left out ...]\n{text[-half:]}"
    ask = (
        f"The task the orchestrator was given:\n{elide(run.task, ITEM_CHARS * 2)}\n\n"
        f"The messages to summarize ({out[0].seq} to {out[-1].seq}):\n{text}"
    )
    return [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": ask}]


def _render(s: Stored, names: dict[Any, Any]) -> str:
    m = s.message
    role = m.get("role")
    content = elide(str(m.get("content") or ""), ITEM_CHARS)
    if role == "tool":
        name = names.get(m.get("tool_call_id")) or "a tool"
        return f"[{s.seq}] result of {name}: {content}"
    calls = [
        f"{(c.get('function') or {}).get('name')}"
        f"({elide(str((c.get('function') or {}).get('arguments')), 400)})"
        for c in m.get("tool_calls") or []
    ]
    said = f" {content}" if content else ""
    return f"[{s.seq}] {role}:{said}" + (f" -> calls {', '.join(calls)}" if calls else "")
