"""Which messages a compaction takes (``orchestrator.compaction.plan``), the model windows,
and the retry waits (``orchestrator.chat``): the rules, case by case."""

from __future__ import annotations

from typing import Any

import pytest

from zwarm.orchestrator import chat, compaction
from zwarm.orchestrator.runstore import Stored

pytestmark = pytest.mark.unit


def log(*roles: str) -> list[Stored]:
    """Stored messages with these roles; an assistant followed by tool messages calls them."""
    out: list[Stored] = []
    calls: list[str] = []
    for i, role in enumerate(roles, 1):
        m: dict[str, Any] = {"role": role, "content": f"m{i}"}
        if role == "assistant":
            n = 0
            for r in roles[i:]:
                if r != "tool":
                    break
                n += 1
            calls = [f"c{i}-{k}" for k in range(n)]
            if calls:
                m["tool_calls"] = [
                    {"id": c, "type": "function", "function": {"name": "x", "arguments": "{}"}}
                    for c in calls
                ]
        elif role == "tool":
            m["tool_call_id"] = calls.pop(0)
        out.append(Stored(i, i, "active", m, ""))
    return out


def seqs(p: compaction.Plan) -> list[int]:
    return [s.seq for s in p.out]


def test_keeps_the_system_prompt_the_task_and_the_latest() -> None:
    msgs = log("system", "user", *["assistant", "tool"] * 6, "assistant")
    assert seqs(compaction.plan(msgs, 5)) == [3, 4, 5, 6, 7, 8, 9, 10]  # 11-15 kept


def test_never_keeps_a_result_without_its_call() -> None:
    # one call with three results: the cut (at the 2nd result) moves back to the call
    msgs = log("system", "user", "assistant", "tool", "assistant", "tool", "tool", "tool", "user")
    p = compaction.plan(msgs, 3)
    assert p.reason is not None and seqs(p) == []  # only 3, 4 before the call at 5
    more = log("system", "user", *["assistant", "tool"] * 3, "assistant", "tool", "tool", "user")
    assert seqs(compaction.plan(more, 2)) == [3, 4, 5, 6, 7, 8]


def test_without_a_system_prompt_the_first_user_message_is_the_task() -> None:
    msgs = log("user", *["assistant", "tool"] * 4)
    assert seqs(compaction.plan(msgs, 2)) == [2, 3, 4, 5, 6, 7]


def test_too_little_is_a_no_op_with_its_reason() -> None:
    p = compaction.plan(log("system", "user", "assistant", "tool", "assistant", "tool"), 1)
    assert p.out == [] and p.reason == (
        "nothing to compact: 2 message(s) between the task and the latest 1 (at least 4 are needed)"
    )


@pytest.mark.parametrize(
    ("model", "configured", "window"),
    [
        ("gpt-5-mini", 0, 400_000),
        ("openai/gpt-4.1-nano", 0, 1_047_576),
        ("claude-sonnet-4-5", 0, 200_000),
        ("my-local-model", 0, 32_000),
        ("gpt-5", 8192, 8192),
    ],
)
def test_windows(model: str, configured: int, window: int) -> None:
    assert compaction.window_for(model, configured) == window


def test_backoff_doubles_with_jitter_and_honours_retry_after() -> None:
    low, high = (lambda: 0.0), (lambda: 1.0)
    assert [chat.backoff(n, 1.0, None, low) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert [chat.backoff(n, 1.0, None, high) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert chat.backoff(30, 1.0, None, high) == chat.MAX_BACKOFF_S
    assert chat.backoff(1, 1.0, 3.0, low) == 3.0


def test_retrying_stops_on_what_is_not_transient_and_on_long_waits() -> None:
    class Flaky:
        def __init__(self, errors: list[chat.ChatError]) -> None:
            self.errors = errors
            self.calls = 0

        def complete(self, messages: Any, tools: Any, model: str | None = None) -> Any:
            self.calls += 1
            if self.errors:
                raise self.errors.pop(0)
            return chat.Completion({"role": "assistant", "content": "ok"})

    told: list[chat.Retry] = []
    waits: list[float] = []
    flaky = Flaky([chat.ChatError("503", True), chat.ChatError("cut", True, partial="par")])
    r = chat.Retrying(flaky, 5, 0.1, told.append, sleep=waits.append, rand=lambda: 0.0)
    assert r.complete([], []).message["content"] == "ok"
    assert flaky.calls == 3 and [t.partial for t in told] == [None, "par"] and len(waits) == 2
    for error, why in [
        (chat.ChatError("401", False), "401"),
        (chat.ChatError("429", True, retry_after=3600), "asked to retry after 3600 s"),
    ]:
        r = chat.Retrying(Flaky([error]), 5, 0.1, told.append, sleep=waits.append)
        with pytest.raises(chat.OrchestratorError, match=why):
            r.complete([], [])
