"""Fleet control's pure parts: failure reasons read from the agents' own output (the captured
samples of /work/shared/reference/limits.md), the state machine's new states, budgets, parking
times, today's spend, and the [limits]/[groups] config."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support import bare_session, bare_turn
from zwarm import config
from zwarm.agents.claude import events as claude_events
from zwarm.agents.codex import events as codex_events
from zwarm.engine import limits, transitions
from zwarm.engine.transitions import TransitionError
from zwarm.errors import ConfigError, InvalidInput
from zwarm.model import Reason, Status, Turn, TurnOutcome, Usage

pytestmark = pytest.mark.unit

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "samples"
NOW = 1795444174.0  # 2026-11-23 14:29:34 UTC, when the samples were captured


def lines(name: str) -> list[bytes]:
    return (SAMPLES / name).read_bytes().splitlines(True)


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex prints its reset time in its local time, as the samples were taken: TZ=UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# ---------------------------------------------------------------------- codex
CODEX = {
    "limits_codex_rate_limited.jsonl": (Reason.RATE_LIMITED, None),
    # "try again at 3:29 PM", local (UTC) time, after 14:29:34
    "limits_codex_usage_limit.jsonl": (Reason.USAGE_LIMIT, 1795447740.0),
    "limits_codex_overloaded.jsonl": (Reason.OVERLOADED, None),
    "limits_codex_auth_failed.jsonl": (Reason.AUTH_FAILED, None),
    "limits_codex_context_overflow.jsonl": (Reason.CONTEXT_OVERFLOW, None),
}


@pytest.mark.parametrize("name", sorted(CODEX))
def test_codex_samples_are_typed(name: str, utc: None) -> None:
    o = codex_events.scan_outcome(lines(name), now=NOW)
    assert o.status is Status.FAILED
    assert (o.reason, o.reset_at) == CODEX[name]


@pytest.mark.parametrize(
    ("message", "reason", "retry_after"),
    [
        ("rate limit exceeded: Please try again in 1.5s.", Reason.RATE_LIMITED, 1.5),
        ("rate limit exceeded: Please try again in 250ms.", Reason.RATE_LIMITED, 0.25),
        ("rate limit exceeded: try again in 6m0s", Reason.RATE_LIMITED, 360.0),
        ("Quota exceeded. Check your plan and billing details.", Reason.USAGE_LIMIT, None),
        ("To use Codex with your ChatGPT plan, upgrade to Plus: x", Reason.USAGE_LIMIT, None),
        (
            "stream disconnected before completion: The usage limit has been reached",
            Reason.USAGE_LIMIT,
            None,
        ),
        ("unexpected status 403 Forbidden: no, url: u, request id: r", Reason.AUTH_FAILED, None),
        ("unexpected status 503 Service Unavailable: busy, url: u", Reason.OVERLOADED, None),
        ("We’re currently experiencing high demand, which may cause ...", Reason.OVERLOADED, None),
        ("stream disconnected before completion: stream closed", None, None),
        ("something else went wrong", None, None),
    ],
)
def test_codex_messages_are_typed(message: str, reason: Reason | None, retry_after: float) -> None:
    assert codex_events.classify(message, NOW)[:2] == (reason, retry_after)


def test_codex_reset_times(utc: None) -> None:
    at = codex_events.classify("You’ve hit your usage limit. Try again at 2:00 PM.", NOW)[2]
    assert at == NOW - 29 * 60 - 34 + 86400  # 14:00 has passed today: tomorrow's
    dated = "You’ve hit your usage limit. Try again at Nov 25th, 2026 10:03 PM."
    assert codex_events.classify(dated, NOW)[2] == 1795644180.0
    later = "You’ve hit your usage limit. Try again later."
    assert codex_events.classify(later, NOW) == (Reason.USAGE_LIMIT, None, None)


def test_a_completed_codex_turn_is_never_typed() -> None:
    o = codex_events.scan_outcome(lines("codex_err500_then_ok_with_retries.jsonl"))
    assert o.status is Status.COMPLETED and o.reason is None


# ---------------------------------------------------------------------- claude
CLAUDE = {
    "limits_claude_rate_limited.jsonl": (Status.FAILED, Reason.RATE_LIMITED, None),
    "limits_claude_usage_limit.jsonl": (Status.FAILED, Reason.USAGE_LIMIT, 1795447801.0),
    "limits_claude_overloaded.jsonl": (Status.FAILED, Reason.OVERLOADED, None),
    "limits_claude_auth_failed.jsonl": (Status.FAILED, Reason.AUTH_FAILED, None),
    "limits_claude_context_overflow.jsonl": (Status.FAILED, Reason.CONTEXT_OVERFLOW, None),
    # a subscription's allowed_warning on a successful turn: no failure at all
    "limits_claude_rate_limit_event_ok.jsonl": (Status.COMPLETED, None, None),
}


@pytest.mark.parametrize("name", sorted(CLAUDE))
def test_claude_samples_are_typed(name: str) -> None:
    o = claude_events.scan_outcome(lines(name))
    assert (o.status, o.reason, o.reset_at) == CLAUDE[name]


def _result(**fields: object) -> dict[str, object]:
    return {"type": "result", "subtype": "success", "is_error": True, "result": "x", **fields}


@pytest.mark.parametrize(
    ("result", "message", "rate", "retry", "want"),
    [
        # API key, credit used up
        (_result(api_error_status=400), {"error": "billing_error"}, {}, {}, Reason.USAGE_LIMIT),
        # a plain 429 on a subscription: rejected, but no reset and no usage_limit_reached
        (
            _result(api_error_status=429, api_error_type="rate_limit_error"),
            {"error": "rate_limit"},
            {"rate_limit_info": {"status": "rejected", "isUsingOverage": False}},
            {"subtype": "api_retry", "retry_delay_ms": 2243},
            Reason.RATE_LIMITED,
        ),
        (
            _result(api_error_status=403, api_error_type="permission_error"),
            {},
            {},
            {},
            Reason.AUTH_FAILED,
        ),
        (_result(result="Not logged in · Please run /login"), {}, {}, {}, Reason.AUTH_FAILED),
        (_result(api_error_status=503, api_error_type="api_error"), {}, {}, {}, Reason.OVERLOADED),
        # a lost connection is claude's "server_error", but no overload
        (_result(api_error="connection_failed"), {"error": "server_error"}, {}, {}, None),
        (_result(api_error="model_requires_usage_credits"), {}, {}, {}, Reason.USAGE_LIMIT),
    ],
)
def test_claude_fields_are_typed(
    result: dict[str, object],
    message: dict[str, object],
    rate: dict[str, object],
    retry: dict[str, object],
    want: Reason | None,
) -> None:
    reason, retry_after, _ = claude_events.classify(result, message, rate, retry)
    assert reason is want
    if retry:
        assert retry_after == 2.243


def test_claude_text_never_decides_the_reason() -> None:
    """A message that merely says "rate limit" (an agent's own words) types nothing."""
    result = _result(result="API Error: rate limit, usage limit, 401, overloaded")
    assert claude_events.classify(result, {}, {}, {})[0] is None


def test_claude_live_usage_counts_each_message_once() -> None:
    live = claude_events.LiveUsage()

    def line(mid: str, inp: int, out: int) -> bytes:
        msg = {"id": mid, "usage": {"input_tokens": inp, "output_tokens": out}}
        return json.dumps({"type": "assistant", "message": msg}).encode()

    assert live.feed(line("m1", 100, 1)) and live.usage == Usage(100, 0, 1, 0)
    assert live.feed(line("m1", 100, 7))  # the same message, more output streamed
    assert not live.feed(line("m1", 100, 7))  # repeated on its next content block
    assert not live.feed(b'{"type":"user","message":{"content":[]}}')
    assert live.feed(line("m2", 300, 5)) and live.usage == Usage(400, 0, 12, 0)


# ---------------------------------------------------------------------- the state machine


NOW_ISO = "2026-11-23T15:00:00+00:00"


def test_queued_turns_start_or_end_without_running() -> None:
    s = bare_session()
    transitions.begin(s, bare_turn(1, Status.QUEUED))
    t = s.turns[0]
    assert not t.started and t.queued_at == t.started_at
    with pytest.raises(TransitionError):
        transitions.begin(s, bare_turn(2, Status.RUNNING))  # a queued turn is active
    with pytest.raises(TransitionError):
        transitions.stall(s, t, NOW_ISO, NOW_ISO)
    transitions.start(s, t, NOW_ISO)
    assert t.status is Status.RUNNING and t.started and t.started_at == NOW_ISO


def test_stall_and_park_then_end_once() -> None:
    s = bare_session(bare_turn(1, Status.RUNNING))
    t = s.turns[0]
    transitions.stall(s, t, "2026-11-23T14:59:00+00:00", NOW_ISO)
    assert s.turns[0].status is Status.STALLED and t.quiet_since
    transitions.unstall(s, t, NOW_ISO)
    assert t.status is Status.RUNNING and t.quiet_since is None
    transitions.park(s, t, NOW_ISO, "2026-11-23T16:00:00+00:00", Reason.USAGE_LIMIT, "limit")
    assert t.status is Status.PARKED and t.ended_at == NOW_ISO
    with pytest.raises(TransitionError):
        transitions.start(s, t, NOW_ISO)
    transitions.end(s, t, Status.FAILED, "2026-11-23T16:01:00+00:00", Reason.USAGE_LIMIT, "x")
    assert t.ended_at == NOW_ISO  # a parked turn keeps when its agent ended
    with pytest.raises(TransitionError):
        transitions.end(s, t, Status.KILLED, NOW_ISO, Reason.KILLED, "again")


def test_a_started_turn_cannot_be_deferred() -> None:
    s = bare_session(bare_turn(1, Status.RUNNING))
    s.turns[0].handle = {"job": "1"}
    with pytest.raises(TransitionError):
        transitions.defer(s, s.turns[0], NOW_ISO)


def test_a_never_started_turn_costs_nothing() -> None:
    ran = bare_turn(1, Status.COMPLETED)
    ran.cost_usd = 0.5
    queued = bare_turn(2, Status.KILLED)
    queued.started = False
    s = bare_session(ran, queued)
    s.refresh()
    assert s.cost_usd == 0.5


# ---------------------------------------------------------------------- budgets and parking
def test_budget_counts_every_turn_and_the_streaming_one() -> None:
    done = bare_turn(1, Status.COMPLETED)
    done.usage, done.cost_usd = Usage(600, 0, 100, 0), 0.2
    s = bare_session(done)
    s.max_tokens = 1000
    assert limits.over_budget(s) is None
    assert "1,001 tokens" in (limits.over_budget(s, Usage(300, 0, 1, 0)) or "")
    s.max_tokens, s.max_cost_usd = None, 0.25
    assert limits.over_budget(s, None, 0.04) is None
    assert "$0.2600" in (limits.over_budget(s, None, 0.06) or "")


def _limits(**kw: object) -> config.Config:
    return config.Config(config.validate({"limits": kw}, "test"))


def test_park_until_prefers_the_agents_time_then_backs_off() -> None:
    s = bare_session()
    cfg = _limits(on_usage_limit="wait", resume_backoff_s=10, max_auto_resumes=2)
    o = TurnOutcome(reset_at=NOW + 600)
    assert limits.park_until(cfg, s, Reason.USAGE_LIMIT, o, NOW) == NOW + 600
    assert (
        limits.park_until(cfg, s, Reason.RATE_LIMITED, TurnOutcome(retry_after_s=3), NOW) == NOW + 3
    )
    assert limits.park_until(cfg, s, Reason.RATE_LIMITED, TurnOutcome(), NOW) == NOW + 10
    s.auto_resumes = 1
    assert limits.park_until(cfg, s, Reason.RATE_LIMITED, TurnOutcome(), NOW) == NOW + 20
    s.auto_resumes = 2  # used up
    assert limits.park_until(cfg, s, Reason.RATE_LIMITED, TurnOutcome(), NOW) is None
    assert limits.park_until(cfg, bare_session(), Reason.AUTH_FAILED, o, NOW) is None
    assert (
        limits.park_until(_limits(), bare_session(), Reason.USAGE_LIMIT, o, NOW) is None
    )  # "fail"


def test_spawn_options_beat_the_group_which_beats_the_limits() -> None:
    doc = {"limits": {"max_tokens": 100, "stall_s": 30}, "groups": {"g": {"max_tokens": 50}}}
    cfg = config.Config(config.validate(doc, "test"))
    s = bare_session()
    limits.settle(s, limits.Fleet(group="g", max_cost=2.0), cfg)
    assert (s.max_tokens, s.max_cost_usd, s.stall_s, s.group) == (50, 2.0, 30.0, "g")
    s = bare_session()
    limits.settle(s, limits.Fleet(max_tokens=7), cfg)
    assert (s.max_tokens, s.max_cost_usd) == (7, None)


@pytest.mark.parametrize(
    ("fleet", "words"),
    [
        (limits.Fleet(max_cost=-1), "max_cost must be"),
        (limits.Fleet(max_tokens=0), "max_tokens must be"),
        (limits.Fleet(stall=float("nan")), "stall must be"),
        (limits.Fleet(priority=10**9), "priority must be"),
        (limits.Fleet(after_any=True), "after_any needs after"),
        (limits.Fleet(group="../x"), "invalid group name"),
    ],
)
def test_bad_fleet_options_are_one_clear_error(fleet: limits.Fleet, words: str) -> None:
    """The engine names the request field (``errors.naming``); each front end spells it."""
    with pytest.raises(InvalidInput, match=f"^{words}"):
        limits.check(fleet)


def test_spent_today_counts_only_turns_that_ended_today(utc: None) -> None:  # days: local
    def ended(at: str, cost: float) -> Turn:
        t = bare_turn(1, Status.COMPLETED)
        t.ended_at, t.cost_usd = at, cost
        return t

    old, new = ended("2026-11-22T10:00:00+00:00", 5.0), ended("2026-11-23T10:00:00+00:00", 0.5)
    new.n = 2
    assert limits.spent_today([bare_session(old, new)], 1795430000.0) == 0.5


# ---------------------------------------------------------------------- config
def test_limits_and_groups_validate() -> None:
    ok = config.validate(
        {
            "limits": {"max_running": 3, "on_usage_limit": "wait"},
            "groups": {"be": {"max_running": 1}},
        },
        "x",
    )
    assert ok["limits"]["max_running"] == 3 and ok["groups"] == {"be": {"max_running": 1}}
    for bad, words in [
        ({"limits": {"on_stall": "explode"}}, "limits.on_stall must be one of"),
        ({"limits": {"max_running": -1}}, "must not be negative"),
        ({"groups": {"be": {"max_running": "2"}}}, "groups.be.max_running"),
        ({"groups": {"be": {"nope": 1}}}, "unknown key 'nope' in [groups.be]"),
        ({"groups": {"be": 3}}, "groups.be must be a table"),
    ]:
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace(".", r"\.")):
            config.validate(bad, "x")


def test_an_agents_max_running_needs_no_trust() -> None:
    assert not config.is_security_key("codex", "max_running")
