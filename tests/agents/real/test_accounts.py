"""Conformance, accounts: the real ``codex`` and ``claude`` with two accounts each
(``[accounts.<agent>.A|B]``, each its own login dir and key), against the fake LLM servers.

Account A answers with the CLI's real usage-limit shape, the session's turn moves to B (a new
agent session, with B's key), A cools down until its reset; B then hits its own limit (in the
other form: codex's in-stream ``response.failed``, claude's mid-stream break and credit
error), so the session parks until the first reset (A's) and resumes exactly once, on A. The
fakes see which key each request carried: every request went with its account's login.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.fakes.llm import Reply, Usage, broken_stream, failed_stream, http_error, text
from tests.support.real import RealWorld, wait_until
from zwarm.env import parse_iso


def _accounts(real: RealWorld, adapter: str, a: dict[str, str], b: dict[str, str]) -> None:
    """A (priority 1) and B for ``adapter``, each its own login dir, and ``switch``."""
    for name, env in (("A", a), ("B", b)):
        home = real.tmp / f"login-{name}"
        home.mkdir()
        key = "CODEX_HOME" if adapter == "codex" else "CLAUDE_CONFIG_DIR"
        env[key] = str(home)
    real.tables["accounts"] = {adapter: {"A": {"env": a, "priority": 1}, "B": {"env": b}}}
    real.tables["limits"] = {"on_usage_limit": "switch", "usage_limit_fallback": 3600}
    real.write_config()


def _parked_twice(real: RealWorld, sid: str) -> dict[str, Any]:
    def parked() -> Any:
        d = real.show(sid)
        return d if d["status"] == "parked" and len(d["turns_detail"]) == 2 else None

    got: dict[str, Any] = wait_until(parked, message="turn 2 parked")
    return got


def _states(real: RealWorld) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in real.cli_json("accounts")}


def test_codex_moves_to_another_account_and_resumes_once_after_the_first_reset(
    real: RealWorld,
) -> None:
    """A: codex's usage limit inside a successful stream (no reset time: A cools down for
    ``usage_limit_fallback``, shortened here); B: the HTTP 429 ``usage_limit_reached`` with
    its reset an hour on; the session parks until A's reset and resumes once, on A."""
    b_reset = int(time.time()) + 3600
    srv = real.use(
        "codex",
        [
            failed_stream("usage_limit_reached", "The usage limit has been reached"),
            http_error(
                429,
                "usage limit reached",
                "usage_limit_reached",
                fields={"resets_at": b_reset, "plan_type": "pro"},
            ),
            Reply([text("Done on A again.")]),
        ],
    )
    table = real.agents["codex"].table
    table["env"] = {k: v for k, v in table["env"].items() if k not in ("OPENAI_API_KEY",)}
    _accounts(real, "codex", {"OPENAI_API_KEY": "key-A"}, {"OPENAI_API_KEY": "key-B"})
    real.tables["limits"]["usage_limit_fallback"] = 15
    real.write_config()
    sid = real.spawn("Say hello.", "codex")
    d = _parked_twice(real, sid)
    first, second = d["turns_detail"]
    assert (first["account"], first["reason"]) == ("A", "usage_limit"), first["error"]
    assert "re-run on another account (B)" in first["error"]
    assert (second["account"], second["switched_from"], second["reason"]) == (
        "B", "A", "usage_limit",
    )  # fmt: skip
    states = _states(real)
    assert states["B"]["state"] == "cooling"
    assert b_reset - 60 <= parse_iso(states["B"]["until"]) <= b_reset  # "try again at 3:29 PM"
    d = real.wait(sid)
    assert d["status"] == "completed" and d["last_message"] == "Done on A again."
    assert [t["account"] for t in d["turns_detail"]] == ["A", "B", "A"]
    assert d["auto_resumes"] == 2 and len(srv.requests) == 3
    keys = [r.headers.get("Authorization") or r.headers.get("authorization") for r in srv.requests]
    assert keys == ["Bearer key-A", "Bearer key-B", "Bearer key-A"]
    assert _states(real)["A"]["state"] == "ready"
    homes = [real.tmp / f"login-{n}" / "sessions" for n in ("A", "B")]
    assert all(h.is_dir() for h in homes)  # each turn's rollout in its own account's CODEX_HOME


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


def test_claude_moves_to_another_account_and_resumes_once_after_the_first_reset(
    real: RealWorld,
) -> None:
    """A: a subscription (OAuth) whose 5-hour limit is used up, its reset seconds away (claude
    reports the epoch); B: an API key whose credit runs out mid-stream (claude re-sends the
    turn without streaming, which fails: a usage limit with no reset time, so B cools down
    for ``usage_limit_fallback``); the session parks until A's reset, resumes once on A."""
    a_reset = int(time.time()) + 15
    srv = real.use(
        "claude",
        [
            http_error(429, "Rate limited", headers=_unified(a_reset)),
            broken_stream(text("partial")),
            http_error(400, "Your credit balance is too low to access the Anthropic API."),
            Reply([text("Done on A again.")]),
        ],
    )
    table = real.agents["claude"].table
    table["env"] = {k: v for k, v in table["env"].items() if k != "ANTHROPIC_API_KEY"}
    _accounts(
        real,
        "claude",
        {"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-account-a"},
        {"ANTHROPIC_API_KEY": "sk-ant-account-b"},
    )
    sid = real.spawn("Say hello.", "claude")
    d = _parked_twice(real, sid)
    first, second = d["turns_detail"]
    assert (first["account"], first["reason"]) == ("A", "usage_limit"), first["error"]
    assert (second["account"], second["reason"]) == ("B", "usage_limit"), second["error"]
    assert abs(parse_iso(second["parked_until"]) - a_reset) < 1.5  # A's reset: the first
    states = _states(real)
    assert states["A"]["state"] == "cooling" and abs(parse_iso(states["A"]["until"]) - a_reset) < 1
    b = states["B"]
    assert b["state"] == "cooling" and b["last_limit"]["reason"] == "usage_limit"
    d = real.wait(sid)
    assert d["status"] == "completed" and d["last_message"] == "Done on A again."
    assert [t["account"] for t in d["turns_detail"]] == ["A", "B", "A"]
    assert d["auto_resumes"] == 2 and len(srv.requests) == 4
    h = [{k.lower(): v for k, v in r.headers.items()} for r in srv.requests]
    assert h[0].get("authorization") == "Bearer sk-ant-oat01-account-a"
    assert h[1].get("x-api-key") == h[2].get("x-api-key") == "sk-ant-account-b"
    assert h[3].get("authorization") == "Bearer sk-ant-oat01-account-a"
    assert Path(real.tmp / "login-B").is_dir()


def test_a_daily_budget_stops_new_work_on_its_account_only(real: RealWorld) -> None:
    """Claude's own cost of a turn passes A's ``budget_daily``: the next session goes to B
    (with B's key), and one pinned to A waits, said; ``zwarm usage`` totals what claude
    reported per account."""
    used = Usage(input=1000, output=100)
    srv = real.use("claude", [Reply([text("one")], used), Reply([text("two")], used)])
    table = real.agents["claude"].table
    table["env"] = {k: v for k, v in table["env"].items() if k != "ANTHROPIC_API_KEY"}
    _accounts(real, "claude", {"ANTHROPIC_API_KEY": "sk-ant-a"}, {"ANTHROPIC_API_KEY": "sk-ant-b"})
    real.tables["accounts"]["claude"]["A"]["budget_daily"] = 1e-9
    real.write_config()
    first = real.wait(real.spawn("One.", "claude"))
    assert (first["status"], first["account"]) == ("completed", "A") and first["cost_usd"] > 0
    second = real.wait(real.spawn("Two.", "claude"))
    assert (second["status"], second["account"]) == ("completed", "B")
    keys = [{k.lower(): v for k, v in r.headers.items()}.get("x-api-key") for r in srv.requests]
    assert keys == ["sk-ant-a", "sk-ant-b"]
    pinned = real.spawn("Three.", "claude", account="A")
    d = real.show(pinned)
    assert d["status"] == "queued" and "account A over budget" in d["wait"], d["wait"]
    assert _states(real)["A"]["state"] == "over_budget" and _states(real)["B"]["state"] == "ready"
    by = {r["key"]: r for r in real.cli_json("usage")["rows"]}
    assert by["A"]["cost_usd"] == round(first["cost_usd"], 8)
    assert by["B"]["cost_usd"] == round(second["cost_usd"], 8)
