"""Native resume through the real manager code: per-turn usage and cost are deltas of the
agents' cumulative figures, and session totals never double count."""

from __future__ import annotations

import pytest

CODEX_THREAD = "01a1ffe7-1cd8-73d1-b100-1335f36dd616"
CLAUDE_SESSION = "03f9693c-9b91-442a-8d50-c2baf6bdb463"


def _usage(i: int, c: int, o: int, r: int = 0) -> dict[str, int]:
    return {
        "input_tokens": i,
        "cached_input_tokens": c,
        "output_tokens": o,
        "reasoning_tokens": r,
        "total_tokens": i + o,
    }


def test_codex_native_resume_usage_deltas(zw) -> None:
    sid = zw.spawn("Create out.txt", "--model", "gpt-5", env_extra=zw.replay("codex_resume_turn1"))
    assert zw.wait(sid).returncode == 0
    res = zw.run(
        "inject",
        sid,
        "What does out.txt contain?",
        "--context",
        "native",
        env_extra=zw.replay("codex_resume"),
        check=True,
    )
    assert "started" in res.stdout
    assert zw.wait(sid).returncode == 0

    rec, prompt = zw.recorded(2)
    argv = rec["argv"]
    assert argv[-3:] == ["resume", CODEX_THREAD, "-"]
    assert argv[argv.index("--model") + 1] == "gpt-5"
    assert prompt == b"What does out.txt contain?"  # native: the message alone

    d = zw.json("show", sid)
    t1, t2 = d["turns_detail"]
    assert t2["context"] == "native"
    assert t1["usage"] == _usage(460, 200, 30)
    assert t2["usage"] == _usage(760 - 460, 450 - 200, 38 - 30)  # codex reports cumulative
    assert t2["reported_usage"] == _usage(760, 450, 38)
    assert d["usage"] == _usage(760, 450, 38)  # not 460 + 760
    assert d["agent_session_id"] == CODEX_THREAD

    def cost(i: int, c: int, o: int) -> float:  # gpt-5 prices, USD per 1M tokens
        return ((i - c) * 1.25 + c * 0.125 + o * 10.0) / 1e6

    assert t1["cost_usd"] == pytest.approx(cost(460, 200, 30))
    assert t2["cost_usd"] == pytest.approx(cost(300, 250, 8))
    assert d["cost_usd"] == pytest.approx(cost(460, 200, 30) + cost(300, 250, 8))
    assert d["cost_source"] == "estimated"
    assert zw.json("ls")[0]["usage"] == d["usage"]


def test_claude_native_resume_cost_delta(zw) -> None:
    sid = zw.spawn(
        "Create out.txt", "--adapter", "claude", env_extra=zw.replay("claude_resume_turn1")
    )
    assert zw.wait(sid).returncode == 0
    zw.run(
        "inject",
        sid,
        "What does out.txt contain?",
        "--context",
        "native",
        env_extra=zw.replay("claude_resume"),
        check=True,
    )
    assert zw.wait(sid).returncode == 0

    rec, prompt = zw.recorded(2)
    argv = rec["argv"]
    assert argv[argv.index("--resume") + 1] == CLAUDE_SESSION
    assert prompt == b"What does out.txt contain?"

    from zwarm.agents.claude.events import scan_outcome

    def reported(name: str):
        with open(zw.sample(name), "rb") as f:
            return scan_outcome(f)

    o1, o2 = reported("claude_resume_turn1"), reported("claude_resume")
    assert (o1.cost_usd, o2.cost_usd) == (pytest.approx(0.00248), pytest.approx(0.00389))

    d = zw.json("show", sid)
    t1, t2 = d["turns_detail"]
    assert t1["cost_usd"] == pytest.approx(0.00248)
    assert t2["cost_usd"] == pytest.approx(0.00389 - 0.00248)  # cumulative -> delta
    assert t2["reported_cost_usd"] == pytest.approx(0.00389)
    assert d["cost_usd"] == pytest.approx(0.00389)  # not 0.00248 + 0.00389
    assert d["cost_source"] == "reported"
    # claude's usage covers one run: no subtraction, and the session sums the turns
    assert t1["usage"] == o1.usage.to_dict()
    assert t2["usage"] == o2.usage.to_dict()
    total = o1.usage + o2.usage
    assert d["usage"] == total.to_dict()
    assert d["model"] == "claude-opus-5-5"
    assert zw.json("ls")[0]["cost_usd"] == pytest.approx(0.00389)


def test_native_without_agent_session_falls_back_to_summary(zw) -> None:
    """A first turn that reported no thread id cannot be resumed: summary mode is used."""
    sid = zw.spawn("first", env_extra={"FAKE_EXIT": "0"})  # no output at all
    assert zw.wait(sid).returncode == 1
    zw.run(
        "inject",
        sid,
        "second",
        "--context",
        "native",
        env_extra=zw.replay("codex_simple"),
        check=True,
    )
    assert zw.wait(sid).returncode == 0
    rec, prompt = zw.recorded(2)
    assert "resume" not in rec["argv"]
    assert b"first" in prompt and prompt.rstrip().endswith(b"second")
    assert zw.json("show", sid)["turns_detail"][1]["context"] == "summary"


def test_spawn_context_native_is_the_session_default(zw) -> None:
    sid = zw.spawn(
        "Create out.txt", "--context", "native", env_extra=zw.replay("codex_resume_turn1")
    )
    assert zw.wait(sid).returncode == 0
    zw.run("inject", sid, "next", env_extra=zw.replay("codex_resume"), check=True)
    assert zw.wait(sid).returncode == 0
    assert zw.recorded(2)[0]["argv"][-3:] == ["resume", CODEX_THREAD, "-"]
    t2 = zw.json("show", sid)["turns_detail"][1]
    assert t2["usage"]["input_tokens"] == 300
