"""The orchestrator gives no wrong answers (issue 12, part A): budgets survive ``--resume``,
a total with unpriced parts says so, sessions left running are named at the end, follow-ups
through the tools keep the session's time limit, and the closing line counts correctly.

Each test failed on the code before its fix. The real ``zwarm orchestrate`` command runs in
this process (``inproc``) against a scripted fake Chat Completions server, with fake agents.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.chat_server import FakeChatServer, call, final, reply
from tests.orchestrator.helpers import ok, write_config
from tests.support import SAMPLES, wait_until
from tests.support.orch import delegated, load_run, runs, sql


def looping(n: int, usage: tuple[int, int] = (80, 10)) -> list[Any]:
    return [reply(call("list_sessions"), usage=usage) for _ in range(n)]


# ---------------------------------------------------------------------------- 4. budgets
def test_a_resumed_run_keeps_its_token_budget(zw, inproc) -> None:
    with FakeChatServer([*looping(6), final("done")]) as srv:
        res = inproc(srv, "spend", "--max-tokens", "150")
        assert res.returncode == 3 and len(srv.requests) == 2  # 180 tokens >= 150
        res = inproc(srv, "--resume", "last")  # before: the budget was forgotten
        assert res.returncode == 3, res.stderr
        assert len(srv.requests) == 2  # stopped before calling the model again
        assert "stopped: token budget reached (180 of 150 tokens)" in res.stderr
        (run_dir,) = runs(zw)
        run, _ = load_run(run_dir)
        assert (run["max_tokens"], run["max_cost_usd"]) == (150, 0.0)
        res = inproc(srv, "--resume", "last", "--max-tokens", "400")  # raised explicitly
        assert res.returncode == 3 and len(srv.requests) == 5  # 180 -> 270 -> 360 -> 450
    run, _ = load_run(run_dir)
    assert (run["status"], run["max_tokens"], run["total_tokens"]) == ("budget", 400, 450)


def test_a_resumed_run_keeps_its_cost_budget(zw, inproc) -> None:
    write_config(
        zw,
        '[orchestrator.prices]\n"fake-orchestrator" = { input = 100.0, cached_input = 0.0, '
        "output = 100.0 }\n",
    )
    with FakeChatServer([*looping(5, usage=(50, 50)), final("done")]) as srv:
        res = inproc(srv, "spend", "--max-cost", "0.01")  # $0.01 a call
        assert res.returncode == 3 and len(srv.requests) == 1
        res = inproc(srv, "--resume", "last")
        assert res.returncode == 3 and len(srv.requests) == 1  # before: 5 more calls
        assert "stopped: cost budget reached ($0.0100 of $0.01)" in res.stderr
    (run_dir,) = runs(zw)
    assert load_run(run_dir)[0]["max_cost_usd"] == 0.01


def test_a_damaged_budget_in_run_json_is_one_line(zw, inproc) -> None:
    with FakeChatServer(looping(2)) as srv:
        assert inproc(srv, "x", "--max-steps", "1").returncode == 3
        (run_dir,) = runs(zw)
        sql(run_dir, "UPDATE runs SET max_tokens = 'lots'")  # the run store is a file too
        res = inproc(srv, "--resume", "last")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"Error: run {run_dir.name} is damaged: max_tokens is 'lots'"
    )


# ---------------------------------------------------------------------------- 5. partial totals
def test_a_total_with_unpriced_parts_says_so(zw, inproc) -> None:
    write_config(
        zw, '[codex.prices]\n"gpt-5" = { input = 1000.0, cached_input = 0.0, output = 0.0 }\n'
    )
    script = [
        reply(call("delegate", task="priced", model="gpt-5")),
        lambda req: reply(call("wait", session_ids=delegated(req), all=True)),
        final("All done."),
    ]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "go", "--json")
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)
    # the agent: 60 uncached input tokens at $1000/M; the orchestrator's model has no price
    assert (run["cost_usd"], run["total_cost_usd"], run["unpriced_parts"]) == (None, 0.06, 1)
    # before: "cost $0.0600 (orchestrator + agents)", as if it were the whole
    assert "cost ≥ $0.0600, 1 part unpriced (orchestrator + agents)" in res.stderr


def test_cost_text() -> None:
    from zwarm.orchestrator.progress import cost_text
    from zwarm.text import plural

    assert cost_text(0.0123, 0) == "$0.0123"
    assert cost_text(0.0075, 2) == "≥ $0.0075, 2 parts unpriced"
    assert cost_text(None, 3) == "? (3 parts unpriced)"
    assert (plural(1, "step"), plural(2, "step"), plural(0, "session")) == (
        "1 step",
        "2 steps",
        "0 sessions",
    )


# ---------------------------------------------------------------------------- 9. left running
def test_finishing_with_a_session_still_running_names_it(zw, inproc) -> None:
    script: list[Any] = [
        reply(call("delegate", task="slow")),
        final("Done (too early)."),
        final("Done anyway."),  # ignores the nudge: the run ends with the session running
    ]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "go", FAKE_HANG="1")
        sid = delegated(srv.requests[1])[0]
    assert res.returncode == 0 and res.stdout.strip() == "Done anyway."
    # before: nothing said, though the session runs on
    assert f"1 session is still running: {sid}" in res.stderr
    assert f"stop them with: zwarm kill {sid}" in res.stderr
    (run_dir,) = runs(zw)
    run, _ = load_run(run_dir)
    assert [(s["id"], s["status"]) for s in run["sessions"]] == [(sid, "running")]


# ---------------------------------------------------------------------------- 13. wording
def test_the_closing_line_counts_in_words(zw, inproc) -> None:
    with FakeChatServer(looping(1)) as srv:
        res = inproc(srv, "x", "--max-steps", "1")
    assert res.returncode == 3
    assert "stopped by the step limit after 1 step ·" in res.stderr  # before: "1 steps"
    assert "step_limit" not in res.stderr and "1 steps" not in res.stderr
    assert "stopped: step limit reached (1 step)" in res.stderr


# ---------------------------------------------------------------------------- 3. converse
def test_converse_keeps_the_sessions_timeout_or_takes_its_own(zw, toolbox) -> None:
    tb = toolbox()
    sid = ok(tb.dispatch("delegate", {"task": "first", "timeout": 600}))["session_id"]
    wait_until(lambda: tb.api.get(sid).status.value == "completed", message="turn 1")
    ok(tb.dispatch("converse", {"session_id": sid, "message": "again"}))
    wait_until(lambda: tb.api.get(sid).status.value == "completed", message="turn 2")
    ok(tb.dispatch("converse", {"session_id": sid, "message": "more", "timeout": 30}))
    wait_until(lambda: tb.api.get(sid).status.value == "completed", message="turn 3")
    assert [t.timeout for t in tb.api.get(sid).turns] == [600.0, 600.0, 30.0]


def test_a_native_converse_that_gets_a_summary_says_so(zw, toolbox, tmp_path) -> None:
    no_thread = tmp_path / "no_thread.jsonl"
    sample = (SAMPLES / "codex_simple.jsonl").read_bytes().splitlines(keepends=True)
    no_thread.write_bytes(b"".join(ln for ln in sample if b"thread.started" not in ln))
    tb = toolbox(FAKE_REPLAY=str(no_thread))
    sid = ok(tb.dispatch("delegate", {"task": "first"}))["session_id"]
    wait_until(lambda: tb.api.get(sid).status.value == "completed", message="turn 1")
    r = ok(tb.dispatch("converse", {"session_id": sid, "message": "go on", "context": "native"}))
    (warning,) = r["warnings"]
    assert "continues with a summary" in warning
    assert "warnings" not in ok(tb.dispatch("check_session", {"session_id": sid}))
