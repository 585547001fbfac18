"""The ``get_trajectory`` tool: what an agent did, step by step, within a character budget.

Owns how a trajectory is fitted to an LLM's context: each step compacted (only the fields
that say something, long texts cut), the first steps and the latest kept, the middle left out
with a note saying what was cut and how to read it. Must stay true: the steps are streamed
(a huge log is never held in memory) and the result stays within the budget.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zwarm.model.steps import Step
from zwarm.orchestrator.tools.base import Result, to_json
from zwarm.orchestrator.tools.views import short

if TYPE_CHECKING:
    from zwarm.orchestrator.tools.toolbox import Toolbox

TEXT_CHARS = 500  # one text field of a step, in a normal trajectory


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


def get_trajectory(tb: Toolbox, a: dict[str, Any]) -> Result:
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
