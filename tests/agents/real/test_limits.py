"""Conformance, limits: the real ``codex``/``claude`` hit a rate limit, a usage limit or a
refused key from the fake LLM servers, and zwarm types the failure from the agent's own output
(``rate_limited``, ``usage_limit`` with its reset time, ``auth_failed``); with
``[limits] on_usage_limit = "wait"`` the turn is parked until the reset and resumed natively.

The fakes send what the real APIs send (see /work/shared/reference/limits.md): a 429, a 429
``usage_limit_reached`` with ``resets_at`` (OpenAI), the ``anthropic-ratelimit-unified-*``
headers of a subscription (claude with an OAuth token: only then does it report the reset
time), a 401. Retries are off in this world, so every failure is the first answer.
"""

from __future__ import annotations

import time
import tomllib
from typing import Any

import pytest
import tomli_w

from tests.fakes.llm import Reply, http_error, text
from tests.support import parked_note
from tests.support.real import RealWorld, wait_until
from zwarm.env import parse_iso
from zwarm.trust_plan import trust_config


def _limits(real: RealWorld, **limits: Any) -> None:
    """Add a ``[limits]`` table to the world's config (trusted again, as its user would)."""
    path = real.state / "config.toml"
    doc = tomllib.loads(path.read_text())
    doc["limits"] = limits
    path.write_text(tomli_w.dumps(doc))
    trust_config(path, environ=real.environ)


def _subscription(real: RealWorld) -> None:
    """Claude as a subscriber (an OAuth token, no API key): it then reads the unified rate
    limit headers and reports the reset time."""
    table = real.agents["claude"].table
    table["env"] = {**table["env"], "CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-fake"}
    table["env"].pop("ANTHROPIC_API_KEY")
    real.write_config()


def _unified(reset: int) -> dict[str, str]:
    """What the Anthropic API sends a subscriber whose 5-hour limit is used up."""
    return {
        "anthropic-ratelimit-unified-status": "rejected",
        "anthropic-ratelimit-unified-reset": str(reset),
        "anthropic-ratelimit-unified-representative-claim": "five_hour",
        "anthropic-ratelimit-unified-5h-status": "rejected",
        "anthropic-ratelimit-unified-5h-reset": str(reset),
        "anthropic-ratelimit-unified-5h-utilization": "1.0",
    }


def _usage_limit(adapter: str, reset: int) -> Reply:
    if adapter == "codex":
        fields = {"resets_at": reset, "plan_type": "pro"}
        return http_error(429, "usage limit reached", "usage_limit_reached", fields=fields)
    return http_error(429, "Rate limited", headers=_unified(reset))


@pytest.mark.parametrize("status", [429, 401])
def test_rate_limit_and_refused_key_are_typed(real: RealWorld, adapter: str, status: int) -> None:
    real.use(adapter, [http_error(status, "no")])
    d = real.wait(real.spawn("Say hello.", adapter))
    want = "rate_limited" if status == 429 else "auth_failed"
    assert (d["status"], d["reason"]) == ("failed", want), d["error"]
    assert d["turns_detail"][0]["reason"] == want


def test_a_usage_limit_is_typed_with_its_reset_time(real: RealWorld, adapter: str) -> None:
    reset = int(time.time()) + 3 * 3600
    real.use(adapter, [_usage_limit(adapter, reset)])
    if adapter == "claude":
        _subscription(real)
    _limits(real, on_usage_limit="wait")
    sid = real.spawn("Say hello.", adapter)
    t = wait_until(
        lambda: (lambda s: s.current if s.status.value != "running" else None)(real.api().get(sid)),
        message="the turn to end",
    )
    assert (t.status.value, t.reason) == ("parked", "usage_limit"), t.error
    assert t.parked_until is not None
    # claude reports the epoch; codex "try again at 5:59 PM" (a minute's precision)
    assert reset - 60 <= parse_iso(t.parked_until) <= reset, t.error
    out, want = parked_note(t.parked_until, lambda: real.cli("ls").stdout)
    assert any(w in out for w in want), (want, out)  # "until Sat 00:41" on another day
    real.cli("kill", sid)
    assert real.show(sid)["status"] == "killed"


def test_claude_credit_used_up_is_a_usage_limit(real: RealWorld) -> None:
    """An API key whose credit is used up: claude says billing_error (no reset time)."""
    real.use("claude", [http_error(400, "Your credit balance is too low to access the API.")])
    d = real.wait(real.spawn("Say hello.", "claude"))
    assert (d["status"], d["reason"]) == ("failed", "usage_limit"), d["error"]


def test_a_rate_limited_turn_is_parked_then_resumed_natively(real: RealWorld, adapter: str) -> None:
    """No zwarm command runs while it waits: the parked turn's supervisor resumes it, and the
    agent continues its own session (codex exec resume, claude --resume)."""
    srv = real.use(adapter, [http_error(429, "slow down"), Reply([text("Done at last.")])])
    _limits(real, on_usage_limit="wait", resume_backoff_s=1)
    sid = real.spawn("Say hello.", adapter)
    wait_until(lambda: len(srv.requests) >= 2, message="the resumed turn's request")
    d = real.wait(sid)
    first, second = d["turns_detail"]
    assert (first["status"], first["reason"]) == ("failed", "rate_limited")
    assert "resumed by zwarm as turn 2" in first["error"]
    assert (d["status"], second["context"], second["retry_of"]) == ("completed", "native", 1)
    assert d["last_message"] == "Done at last." and d["auto_resumes"] == 1
    assert srv.requests[1].contains("Say hello.")
