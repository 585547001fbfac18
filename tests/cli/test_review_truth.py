"""The review flow tells the truth (issue 30): a session's cost adds up its known parts and says
when a part is unknown (``≥``) the same way in ``ls``, ``show``, ``ls --tree``, ``--json`` and
the dashboard, whatever model a gemini session's router used; steps keep their order; ``kill``
stops a finished parent's tree; ``ls`` and ``top`` fit 80 columns."""

from __future__ import annotations

import json
from typing import Any

import pytest

# codex_simple: 100 input (40 cached), 9 output at gpt-5 prices
SIMPLE_GPT5 = (60 * 1.25 + 40 * 0.125 + 9 * 10) / 1e6


def _cut_off(zw: Any) -> dict[str, str]:
    """A codex turn whose agent ran a command, then died without reporting usage: it may have
    been billed, so its cost is unknown."""
    lines = zw.sample_bytes("codex_toolcall").decode().splitlines()
    path = zw.tmp / "cut_off.jsonl"
    path.write_text("\n".join(ln for ln in lines if '"turn.completed"' not in ln) + "\n")
    return {"FAKE_REPLAY": str(path)}


def test_a_turn_refused_before_the_model_answered_costs_nothing(zw) -> None:
    sid = zw.spawn("hi", "--model", "gpt-5", env_extra=zw.replay("limits_codex_rate_limited"))
    zw.wait(sid)
    assert zw.json("show", sid)["turns_detail"][0]["cost_usd"] == 0  # a 429: nothing billed
    zw.run("inject", sid, "again", env_extra=zw.replay("codex_simple"), check=True)
    assert zw.wait(sid).returncode == 0
    r = zw.json("ls")[0]
    assert r["cost_usd"] == pytest.approx(SIMPLE_GPT5)
    assert r["cost_complete"] is True
    shown = zw.run("show", sid, check=True).stdout
    assert "cost ~$0.0002 (estimated)" in shown
    # each turn's cost is the same estimate, shown as one: the 429 cost exactly nothing
    assert "cost $0.0000" in shown and "cost $0.0002" not in shown
    assert shown.count("cost ~$0.0002") == 2  # the total and turn 2


def test_a_cost_with_an_unknown_part_is_a_lower_bound_everywhere(zw) -> None:
    sid = zw.spawn("hi", "--model", "gpt-5", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    zw.run("inject", sid, "more", env_extra=_cut_off(zw), check=True)
    zw.wait(sid)
    r = zw.json("ls")[0]
    assert r["status"] == "failed"
    assert (r["cost_usd"], r["cost_complete"]) == (pytest.approx(SIMPLE_GPT5), False)
    assert (r["tree_cost_usd"], r["tree_unpriced"]) == (pytest.approx(SIMPLE_GPT5), 1)
    assert "≥ ~$0.0002" in zw.run("ls", check=True).stdout
    assert "cost ≥ ~$0.0002 (estimated)" in zw.run("show", sid, check=True).stdout
    assert "≥ ~$0.0002" in zw.run("ls", "--tree", check=True).stdout


def test_show_says_once_how_to_price_a_model_it_cannot_price(zw) -> None:
    sid = zw.spawn("hi", "--model", "no-such-model", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    zw.run("inject", sid, "more", env_extra=zw.replay("codex_simple"), check=True)
    assert zw.wait(sid).returncode == 0
    out = zw.run("show", sid, check=True).stdout
    hint = '[codex.prices] "no-such-model" = { input = USD, cached_input = USD, output = USD }'
    assert out.count("no price for model no-such-model") == 1 and hint in out
    priced = zw.spawn("hi", "--model", "gpt-5", env_extra=zw.replay("codex_simple"))
    assert zw.wait(priced).returncode == 0
    assert "no price" not in zw.run("show", priced, check=True).stdout


def test_a_command_that_never_finished_stays_in_its_place_and_says_so(zw) -> None:
    cmd = {"id": "c1", "type": "command_execution", "command": "/bin/bash -lc 'sleep 100'",
           "aggregated_output": "", "exit_code": None, "status": "in_progress"}  # fmt: skip
    final = {"id": "m1", "type": "agent_message", "text": "Done: all set."}
    lines = [
        {"type": "thread.started", "thread_id": "01a1ffe6-3595-7f80-954f-f6552aa38b0a"},
        {"type": "turn.started"},
        {"type": "item.started", "item": cmd},
        {"type": "item.completed", "item": final},
        {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}},
    ]
    path = zw.tmp / "unfinished.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sid = zw.spawn("hi", env_extra={"FAKE_REPLAY": str(path)})
    assert zw.wait(sid).returncode == 0
    steps = zw.json("trajectory", sid)
    assert [(s["kind"], s.get("status")) for s in steps] == [
        ("command", "unfinished"),
        ("message", None),
    ]
    text = zw.run("trajectory", sid, check=True).stdout
    assert "(did not finish)" in text and "in_progress" not in text
    assert text.index("sleep 100") < text.index("Done: all set.")
    assert "$ sleep 100 (did not finish)" in text  # the command inside bash -lc
    followed = zw.run("trajectory", sid, "-f", check=True).stdout
    assert "$ sleep 100 (did not finish)" in followed
    assert followed.index("sleep 100") < followed.index("Done: all set.")
