"""Conformance, follow-up turns: ``zwarm inject`` in summary and native mode, real agents.

Matrix items 7-8 of issue 3. Summary mode starts a fresh agent run whose prompt carries the
task, a digest of earlier turns and the new message, never the earlier transcript; native
mode resumes the agent's own session (``codex exec resume`` / ``claude --resume``), which
resends the whole history and reports usage (codex) or cost (claude) cumulatively, from
which zwarm records per-turn deltas.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.llm import Reply, Usage, reasoning, shell, text
from tests.support.real import RealWorld, result_line, shell_args


def conversation(body: dict[str, Any], adapter: str) -> list[tuple[str, str]]:
    """(type, role) of every item (codex) / content block (claude) of a model request."""
    if adapter == "codex":
        return [(i.get("type", ""), i.get("role", "")) for i in body["input"]]
    out = []
    for m in body["messages"]:
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text"}]
        out += [(b.get("type", ""), m["role"]) for b in blocks]
    return out


def test_inject_summary_sends_a_digest_not_the_transcript(real: RealWorld, adapter: str) -> None:
    script = [
        Reply([
            reasoning("SECRET-REASONING"),
            text("Running it now."),
            shell("printf '%s-%s\\n' TRANSCRIPT ONLY"),  # prints TRANSCRIPT-ONLY
        ]),
        Reply([text("FIRST-FINAL: all done.")]),
        Reply([text("Second turn answer.")]),
    ]  # fmt: skip
    srv = real.use(adapter, script, **shell_args(adapter))
    sid = real.spawn("ORIGINAL-TASK: run the printf.", adapter)
    first = real.wait(sid)
    assert first["status"] == "completed"
    before = len(srv.requests)
    assert before == 2
    # the first turn's request history does hold the transcript (so its absence below counts)
    assert all(srv.requests[1].contains(s) for s in ("SECRET-REASONING", "TRANSCRIPT-ONLY"))

    out = real.cli("inject", sid, "NEW-MESSAGE: and now?", "--context", "summary").stdout
    assert out.strip() == f"{sid} started (turn 2)"
    d = real.wait(sid)

    assert (d["status"], d["last_message"]) == ("completed", "Second turn answer.")
    t1, t2 = d["turns_detail"]
    assert t2["context"] == "summary"
    assert t2["agent_session_id"] != t1["agent_session_id"]  # a fresh agent run
    (req,) = srv.requests[before:]
    for wanted in ("ORIGINAL-TASK: run the printf.", "FIRST-FINAL: all done.", "NEW-MESSAGE"):
        assert req.contains(wanted), wanted
    for transcript_only in ("SECRET-REASONING", "Running it now.", "TRANSCRIPT-ONLY"):
        assert not req.contains(transcript_only), transcript_only
    # no earlier assistant output, reasoning, tool call or tool result is replayed
    items = conversation(req.body, adapter)
    plain = "message" if adapter == "codex" else "text"
    assert all(kind == plain and role != "assistant" for kind, role in items), items
    # what the agent received is exactly the prompt zwarm wrote for the turn
    assert req.contains((real.state / "sessions" / sid / "turns" / "turn_2.prompt").read_text())


def test_inject_native_resumes_the_agents_session(real: RealWorld, adapter: str) -> None:
    script = [
        Reply([text("First answer.")], Usage(460, 200, 30)),
        Reply([text("Second answer.")], Usage(300, 250, 8)),
    ]
    srv = real.use(adapter, script)
    sid = real.spawn("FIRST PROMPT", adapter)
    assert real.wait(sid)["status"] == "completed"
    _, state = real.api().inject(sid, "SECOND PROMPT", context="native")
    assert state == "started"
    d = real.wait(sid)

    assert (d["status"], d["last_message"]) == ("completed", "Second answer.")
    t1, t2 = d["turns_detail"]
    assert (t2["context"], t2["exit_code"]) == ("native", 0)
    assert t1["agent_session_id"] == t2["agent_session_id"] == d["agent_session_id"]
    assert (real.state / "sessions" / sid / "turns" / "turn_2.prompt").read_text() == (
        "SECOND PROMPT"
    )
    history = srv.requests[1]  # the agent resent the whole conversation itself
    for wanted in ("FIRST PROMPT", "First answer.", "SECOND PROMPT"):
        assert history.contains(wanted), wanted
    assert len(srv.requests) == 2

    def usage(i: int, cached: int, o: int) -> dict[str, int]:
        return {"input_tokens": i, "cached_input_tokens": cached, "output_tokens": o,
                "reasoning_tokens": 0, "total_tokens": i + o}  # fmt: skip

    if adapter == "codex":
        # codex reports the thread's running total: 760/450/38 after the resumed turn
        assert t2["reported_usage"] == usage(760, 450, 38)
        assert (t1["usage"], t2["usage"]) == (usage(460, 200, 30), usage(300, 250, 8))
        assert d["usage"] == usage(760, 450, 38)  # not 460 + 760
        # estimated per turn at gpt-5.5's price, on each turn's own usage
        assert (t1["cost_usd"], t2["cost_usd"]) == (pytest.approx(0.0023), pytest.approx(0.000615))
        assert d["cost_usd"] == pytest.approx(0.002915)
    else:
        # claude reports this run's usage (input includes cache reads: 460+200, 300+250)...
        assert (t1["usage"], t2["usage"]) == (usage(660, 200, 30), usage(550, 250, 8))
        assert d["usage"] == usage(1210, 450, 38)
        # ...but the session's running total cost
        cost1 = result_line(real, sid, 1)["total_cost_usd"]
        cost2 = result_line(real, sid, 2)["total_cost_usd"]
        assert cost2 > cost1 > 0
        assert t2["reported_cost_usd"] == pytest.approx(cost2)
        assert t1["cost_usd"] == pytest.approx(cost1)
        assert t2["cost_usd"] == pytest.approx(cost2 - cost1)
        assert d["cost_usd"] == pytest.approx(cost2)  # not cost1 + cost2
