"""Accounts (``[accounts.<agent>.<name>]``, ``zwarm.engine.accounts``), with fake agents:
routing by priority and headroom under each account's ``max_running`` (20 spawns at once),
the account's env given to its agent (``${VAR}`` filled in), a usage limit that moves the turn
to another account exactly once and cools its account down, every account cooling: parked
until the first reset and resumed exactly once while two zwarm processes reconcile, a daily
budget that stops new work on its account only, the ledger (``zwarm usage``) equal to the sum
of the turns, and what a planted cooldown file or meta.json can (not) do."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZW, ZWARM_BIN, wait_status, wait_until
from tests.support.fleet import configure, counts, spawn_at_once, tally

pytestmark = pytest.mark.usefixtures("strays")


def _usage_limited(zw: ZW, reset: float, name: str = "usage_limit.jsonl") -> Path:
    """The real claude's usage-limit output (OAuth), its reset moved to ``reset``."""
    text = Path(zw.sample("limits_claude_usage_limit")).read_text()
    out = zw.tmp / name
    out.write_text(text.replace("1795447801", str(int(reset))))
    return out


def _epoch(iso: str) -> float:
    from zwarm.env import parse_iso

    return parse_iso(iso)


# ---------------------------------------------------------------------- routing
def test_twenty_spawns_at_once_never_exceed_either_accounts_cap(zw: ZW) -> None:
    """Account A (priority 2) and B, 2 running each: 20 spawns at once run 2 on each at
    most, A filled first, each agent with its account's env (a ``${VAR}`` filled in from the
    user's environment), every session recording its account."""
    configure(
        zw,
        "[accounts.codex.A]\n"
        'env = { ACCT = "A", ACCT_KEY = "${MY_A_KEY}" }\n'
        "priority = 2\nmax_running = 2\n"
        "[accounts.codex.B]\n"
        'env = { ACCT = "B" }\n'
        "max_running = 2\n",
    )
    extra, state = tally(zw, per="ACCT")
    gate = zw.tmp / "go"
    env = {**zw.env, **extra, "MY_A_KEY": "k-secret", "FAKE_WAIT_FILE": str(gate)}
    env["FAKE_REPLAY"] = zw.sample("codex_simple")
    # every zwarm command below runs with the spawns' environment: a queued turn gets the
    # environment of the command whose scheduler pass starts it (docs/fleet.md)
    extra = {k: v for k, v in env.items() if zw.env.get(k) != v}
    sids = spawn_at_once(zw, env, 20, "--adapter", "codex")
    wait_until(
        lambda: counts(state, "A")["now"] == 2 and counts(state, "B")["now"] == 2,
        timeout=120,
        message="2 agents running on each account",
    )
    rows = {r["id"]: r for r in zw.json("ls", env_extra=extra)}
    assert sum(rows[s]["status"] == "queued" for s in sids) == 16
    assert sorted(rows[s]["account"] for s in sids if rows[s]["status"] == "running") == [
        "A", "A", "B", "B",
    ]  # fmt: skip
    gate.touch()
    res = zw.run("wait", *sids, "--timeout", "240", env_extra=extra, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    a, b = counts(state, "A"), counts(state, "B")
    assert a["most"] == 2 and b["most"] == 2, (a, b)
    assert a["runs"] + b["runs"] == 20
    rows = {r["id"]: r for r in zw.json("ls", env_extra=extra)}
    on = [rows[s]["account"] for s in sids]
    assert on.count("A") == a["runs"] and on.count("B") == b["runs"]
    envs = [json.loads(p.read_text()) for p in zw.record.glob("env*.json")]
    assert len(envs) == 20
    assert all(e["ACCT_KEY"] == "k-secret" for e in envs if e["ACCT"] == "A")
    assert not any("ACCT_KEY" in e for e in envs if e["ACCT"] == "B")
    shown = zw.run("show", sids[0], env_extra=extra, check=True).stdout
    assert f"account {rows[sids[0]]['account']}" in shown
    ledger = {r["key"]: r for r in zw.json("usage", "--by", "account")["rows"]}
    assert ledger["A"]["turns"] == a["runs"] and ledger["B"]["turns"] == b["runs"]
    costs = [rows[s]["cost_usd"] for s in sids]
    total = zw.json("usage")["total"]
    assert total["cost_usd"] == round(sum(c or 0 for c in costs), 8)
    estimated = sum(rows[s]["cost_source"] == "estimated" for s in sids)  # codex: by prices
    assert total["estimated_turns"] == estimated and total["unpriced_turns"] == costs.count(None)


def test_spawn_account_pins_it_and_an_unknown_account_is_one_error_line(zw: ZW) -> None:
    configure(
        zw,
        '[accounts.claude.A]\nenv = { ACCT = "A" }\npriority = 5\n'
        '[accounts.claude.B]\nenv = { ACCT = "B" }\n',
    )
    env = zw.replay("claude_simple")
    sid = zw.spawn("t", "--adapter", "claude", "--account", "B", env_extra=env)
    m = wait_status(zw, sid, "completed")
    assert m["account"] == "B" and m["account_pinned"] and m["turns"][0]["account"] == "B"
    assert json.loads(next(zw.record.glob("env*.json")).read_text())["ACCT"] == "B"
    res = zw.run("spawn", "t", "--adapter", "claude", "--account", "C", env_extra=env)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("Error: --account C: claude has no such account"), res.stderr


def test_an_accounts_env_never_reaches_a_turn_on_another_account(zw: ZW) -> None:
    """Regression: a turn's agent got its command's environment plus its own account's env,
    so a variable one account sets and another does not (a login directory, an organisation,
    a second key) reached a turn on the other account whenever that turn was started by a
    command running in the first account's agent: a child it spawns (here), or a queued turn
    its ``zwarm`` call's scheduler pass starts. What an account set in an agent's environment
    (named in ``ZWARM_ACCOUNT_ENV``) is now removed before the turn's own account's env is
    applied."""
    configure(
        zw,
        '[accounts.claude.A]\nenv = { ACCT = "A", ONLY_A = "login-of-a" }\npriority = 5\n'
        '[accounts.claude.B]\nenv = { ACCT = "B" }\n',
    )
    child = '"$ZWARM" spawn --adapter claude --account B child > /dev/null'
    env = zw.replay("claude_simple", FAKE_SHELL=f"FAKE_SHELL=true {child}")
    sid = zw.spawn("t", "--adapter", "claude", "--account", "A", env_extra=env)
    assert wait_status(zw, sid, "completed")["account"] == "A"

    def envs() -> list[dict[str, str]]:
        return [json.loads(p.read_text()) for p in zw.record.glob("env*.json")]

    on_b = wait_until(lambda: [e for e in envs() if e.get("ACCT") == "B"], message="B's turn")
    assert "ONLY_A" not in on_b[0], on_b[0].get("ONLY_A")
    on_a = [e for e in envs() if e.get("ACCT") == "A"]
    assert on_a and on_a[0]["ONLY_A"] == "login-of-a"


# ---------------------------------------------------------------------- usage limits
def test_a_usage_limit_moves_the_turn_to_another_account_once(zw: ZW) -> None:
    """``on_usage_limit = "switch"``: A answers with claude's real usage-limit output; the
    turn is re-run once on B (a new agent session: the task again, said in show and the
    trajectory), A cools down until the reset it reported, and new work goes to B."""
    reset = int(time.time()) + 3600
    limited, simple = _usage_limited(zw, reset), zw.sample("claude_simple")
    configure(
        zw,
        '[limits]\non_usage_limit = "switch"\n'
        f'[accounts.claude.A]\nenv = {{ ACCT = "A", FAKE_REPLAY = "{limited}" }}\npriority = 1\n'
        f'[accounts.claude.B]\nenv = {{ ACCT = "B", FAKE_REPLAY = "{simple}" }}\n',
    )
    sid = zw.spawn("the task", "--adapter", "claude")
    m = wait_status(zw, sid, "completed")
    first, second = m["turns"]
    assert (first["account"], first["status"], first["reason"]) == ("A", "failed", "usage_limit")
    assert "re-run on another account (B)" in first["error"]
    assert second["account"] == "B" and second["switched_from"] == "A"
    assert second["context"] == "task" and m["account"] == "B"
    assert zw.calls() == 2
    _, prompt = zw.recorded(2)
    argv, _ = zw.recorded(2)
    assert prompt == b"the task" and "--resume" not in argv["argv"]  # a new agent session there
    accts = {a["name"]: a for a in zw.json("accounts")}
    assert accts["A"]["state"] == "cooling" and abs(_epoch(accts["A"]["until"]) - reset) < 1
    assert accts["A"]["last_limit"]["reason"] == "usage_limit"
    assert accts["B"]["state"] == "ready" and accts["B"]["last_limit"] is None
    text = zw.run("accounts", check=True).stdout
    assert "claude.A  cooling down until" in text  # the row names its account once
    steps = zw.json("trajectory", sid)
    notice = [s for s in steps if s["turn"] == 2 and s["kind"] == "error"]
    assert notice and "re-run on account B: account A hit its usage limit" in notice[0]["message"]
    other = zw.spawn("more", "--adapter", "claude")
    assert wait_status(zw, other, "completed")["account"] == "B"  # A cools down: B takes it


def test_every_account_cooling_parks_until_the_first_reset_and_resumes_once(zw: ZW) -> None:
    """A then B hit their usage limits (A resets in seconds, B in an hour): the session parks
    until A's reset and resumes exactly once, on A, while two zwarm processes list (and so
    reconcile and schedule) over and over at the same time."""
    soon = time.time() + 15
    fa = _usage_limited(zw, soon, "a.jsonl")
    fb = _usage_limited(zw, time.time() + 3600, "b.jsonl")
    configure(
        zw,
        '[limits]\non_usage_limit = "switch"\n'
        f'[accounts.claude.A]\nenv = {{ ACCT = "A", FAKE_REPLAY = "{fa}" }}\npriority = 1\n'
        f'[accounts.claude.B]\nenv = {{ ACCT = "B", FAKE_REPLAY = "{fb}" }}\n',
    )
    sid = zw.spawn("the task", "--adapter", "claude")
    m = wait_until(  # turn 1 parks for a moment too (its switch), then turn 2 until A's reset
        lambda: (lambda m: m if m["status"] == "parked" and len(m["turns"]) == 2 else None)(
            zw.meta(sid)
        ),
        message="turn 2 parked",
    )
    assert [t["account"] for t in m["turns"]] == ["A", "B"]
    assert "every claude account is cooling down" in m["turns"][1]["error"]
    assert abs(_epoch(m["turns"][1]["parked_until"]) - int(soon)) < 1.5
    fa.write_text(Path(zw.sample("claude_simple")).read_text())  # A's limit has reset
    listers = [
        subprocess.Popen(
            [sys.executable, "-c", _LIST_UNTIL_DONE, str(ZWARM_BIN), sid],
            env=zw.env,
            cwd=zw.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for p in listers:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    m = wait_status(zw, sid, "completed")
    assert [t["account"] for t in m["turns"]] == ["A", "B", "A"]
    assert m["turns"][2]["switched_from"] == "B" and m["auto_resumes"] == 2
    assert zw.calls() == 3


def test_a_session_queued_for_a_cooling_account_starts_at_its_reset_with_no_command_run(
    zw: ZW,
) -> None:
    """The one account's turn hits its usage limit (resetting in seconds) while a new session
    waits for its slot: the queued session starts at the reset by itself, as a parked turn
    resumes (the supervisor waits for the time), with no zwarm command run meanwhile (it used
    to wait for the next command's scheduler pass)."""
    soon = time.time() + 12
    limited = _usage_limited(zw, soon)
    configure(
        zw,
        f'[accounts.claude.A]\nenv = {{ ACCT = "A", FAKE_REPLAY = "{limited}" }}\n'
        "max_running = 1\n",
    )
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold)
    first = zw.spawn("first", "--adapter", "claude", env_extra=env)
    second = zw.spawn("second", "--adapter", "claude", env_extra=env)
    assert zw.meta(second)["status"] == "queued"
    hold.unlink()  # the first turn ends on A's usage limit: A cools down until `soon`
    m = wait_status(zw, first, "failed")
    assert m["turns"][0]["reason"] == "usage_limit", m["turns"][0]
    limited.write_text(Path(zw.sample("claude_simple")).read_text())  # A's limit has reset
    wait_until(
        lambda: "cooling down" in (zw.meta(second)["turns"][0].get("wait") or ""),
        message="the second session waits for A's reset",
    )
    assert time.time() < soon, "the test machine was too slow to see the wait"
    m = wait_until(  # meta.json read directly: no zwarm command, no scheduler pass
        lambda: (lambda m: m if m["status"] == "completed" else None)(zw.meta(second)),
        timeout=120,
        message="the queued session started at A's reset and completed",
    )
    assert m["account"] == "A" and _epoch(m["turns"][0]["started_at"]) >= int(soon) - 1


_LIST_UNTIL_DONE = """
import json, subprocess, sys, time
deadline = time.time() + 150
while time.time() < deadline:
    out = subprocess.run([sys.argv[1], "ls", "--json"], capture_output=True, check=True)
    rows = {r["id"]: r for r in json.loads(out.stdout)}
    if rows[sys.argv[2]]["status"] == "completed":
        sys.exit(0)
sys.exit("the session never completed")
"""


# ---------------------------------------------------------------------- budgets, ledger
def test_a_daily_budget_stops_new_work_on_its_account_only(zw: ZW, midday: str) -> None:
    """A's budget_daily is below one claude turn: once A spent it, new sessions go to B and
    one pinned to A waits, said; the ledger's totals are the sums of the turns."""
    configure(
        zw,
        '[accounts.claude.A]\nenv = { ACCT = "A" }\npriority = 1\nbudget_daily = 0.0005\n'
        '[accounts.claude.B]\nenv = { ACCT = "B" }\n',
    )
    env = zw.replay("claude_simple")
    first = zw.spawn("one", "--adapter", "claude", env_extra=env)
    assert wait_status(zw, first, "completed")["account"] == "A"
    second = zw.spawn("two", "--adapter", "claude", env_extra=env)
    assert wait_status(zw, second, "completed")["account"] == "B"
    pinned = zw.spawn("three", "--adapter", "claude", "--account", "A", env_extra=env)
    m = zw.meta(pinned)
    assert m["status"] == "queued" and "account A over budget" in m["turns"][0]["wait"]
    # the figures say why: not "$0.00 spent today (budget_daily $0.00)"
    assert "$0.0006 spent today (budget_daily $0.0005)" in m["turns"][0]["wait"]
    accts = {a["name"]: a for a in zw.json("accounts")}
    assert accts["A"]["state"] == "over_budget" and accts["A"]["spent_today_usd"] == 0.000638
    assert accts["B"]["state"] == "ready"
    ledger = zw.json("usage")
    turns = [t for s in (first, second) for t in zw.json("show", s)["turns_detail"]]
    by = {r["key"]: r for r in ledger["rows"]}
    assert set(by) == {"A", "B"} and by["A"]["turns"] == by["B"]["turns"] == 1
    assert ledger["total"]["cost_usd"] == round(sum(t["cost_usd"] for t in turns), 8)
    for k in ("input_tokens", "cached_input_tokens", "output_tokens", "total_tokens"):
        assert ledger["total"][k] == sum(t["usage"][k] for t in turns), k
    assert ledger["total"]["cost_complete"] and ledger["damaged"] == 0
    day = zw.json("usage", "--by", "day")["rows"]
    assert [r["turns"] for r in day] == [2]
    assert zw.json("usage", "--since", "2999-01-01")["rows"] == []
    res = zw.run("usage", "--since", "yesterday")
    assert res.returncode == 1 and res.stderr.startswith("Error: --since must be a date")


# ---------------------------------------------------------------------- untrusted input
def test_a_planted_cooldown_only_holds_an_account_back(zw: ZW) -> None:
    """What an agent can write in the state dir: a cooldown file far in the future keeps its
    account cooling for at most 8 days (then routes to the other account, never anywhere
    else); a malformed one or a link is no file; an agent that rewrites its meta.json's
    account does not get that account's env (the launch pin decides: refused)."""
    configure(
        zw,
        '[accounts.claude.A]\nenv = { ACCT = "A" }\npriority = 1\n'
        '[accounts.claude.B]\nenv = { ACCT = "B" }\n',
    )
    d = zw.state_dir / "accounts"
    d.mkdir(mode=0o700)
    planted = {"until": 9e10, "seen_at": 0, "reason": "usage_limit", "why": "planted"}
    (d / "claude.A.json").write_text(json.dumps(planted))
    env = zw.replay("claude_simple")
    sid = zw.spawn("t", "--adapter", "claude", env_extra=env)
    assert wait_status(zw, sid, "completed")["account"] == "B"
    a = {x["name"]: x for x in zw.json("accounts")}["A"]
    assert a["state"] == "cooling" and _epoch(a["until"]) <= time.time() + 8 * 86400 + 5
    (d / "claude.A.json").write_text('{"until": "soon"}')
    assert {x["name"]: x for x in zw.json("accounts")}["A"]["state"] == "ready"
    (d / "claude.A.json").unlink()
    (d / "claude.A.json").symlink_to(zw.tmp / "elsewhere.json")
    (zw.tmp / "elsewhere.json").write_text(json.dumps(planted))
    assert {x["name"]: x for x in zw.json("accounts")}["A"]["state"] == "ready"
    # a follow-up after the agent moved its session to A in meta.json: refused, nothing runs
    meta = zw.session_dir(sid) / "meta.json"
    m: dict[str, Any] = json.loads(meta.read_text())
    m["account"] = "A"
    meta.write_text(json.dumps(m))
    calls = zw.calls()
    zw.run("inject", sid, "more", env_extra=env, check=True)
    m = wait_status(zw, sid, "failed")
    assert "disagrees with the session's launch record about its account" in m["turns"][-1]["error"]
    assert zw.calls() == calls


def test_a_summary_follow_up_moves_off_a_cooling_account_a_native_one_waits(zw: ZW) -> None:
    """Both sessions ran on A, which then cools down: a native follow-up (its agent's own
    session lives with A's login) waits for A, said; a summary one (a new agent session
    anyway) runs now on B, and the session stays on B."""
    from zwarm.engine import accounts

    configure(
        zw,
        '[accounts.claude.A]\nenv = { ACCT = "A" }\npriority = 1\n'
        '[accounts.claude.B]\nenv = { ACCT = "B" }\n',
    )
    env = zw.replay("claude_simple")
    one, two = (zw.spawn(t, "--adapter", "claude", env_extra=env) for t in ("one", "two"))
    for sid in (one, two):
        assert wait_status(zw, sid, "completed")["account"] == "A"
    now = time.time()
    accounts.cool(zw.api().store, "claude", "A", now + 3600, "usage_limit", "used up", now)
    zw.run("inject", one, "more", "--context", "native", env_extra=env, check=True)
    m = zw.meta(one)
    assert m["status"] == "queued" and "account A cooling down until" in m["turns"][1]["wait"]
    zw.run("inject", two, "more", env_extra=env, check=True)
    m = wait_status(zw, two, "completed")
    assert [t["account"] for t in m["turns"]] == ["A", "B"] and m["account"] == "B"
    argv, prompt = zw.recorded()
    assert "--resume" not in argv["argv"] and b"more" in prompt
    assert json.loads((zw.record / f"env{zw.calls()}.json").read_text())["ACCT"] == "B"
    assert zw.meta(one)["status"] == "queued"


def test_a_second_limit_with_an_account_still_ready_resumes_there_at_once(zw: ZW) -> None:
    """A and B hit their limits one after the other, C is ready: the session is not parked
    for an hour until the first reset, it resumes at once on C (each move a turn of its own,
    within max_auto_resumes)."""
    hour = time.time() + 3600
    fa, fb = _usage_limited(zw, hour, "a.jsonl"), _usage_limited(zw, hour, "b.jsonl")
    configure(
        zw,
        '[limits]\non_usage_limit = "switch"\n'
        f'[accounts.claude.A]\nenv = {{ FAKE_REPLAY = "{fa}" }}\npriority = 3\n'
        f'[accounts.claude.B]\nenv = {{ FAKE_REPLAY = "{fb}" }}\npriority = 2\n'
        f'[accounts.claude.C]\nenv = {{ FAKE_REPLAY = "{zw.sample("claude_simple")}" }}\n',
    )
    sid = zw.spawn("the task", "--adapter", "claude")
    m = wait_status(zw, sid, "completed")
    assert [t["account"] for t in m["turns"]] == ["A", "B", "C"]
    assert "resumed on an account ready again" in m["turns"][1]["error"]
    assert m["auto_resumes"] == 2 and zw.calls() == 3
