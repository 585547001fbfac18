"""Fleet control through the orchestrator tools: delegate's after/group/priority/budgets, and
check_session/list_sessions showing queued (place, what it waits for), parked, the reason."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support import ZW, wait_status
from tests.support.fleet import configure
from zwarm.orchestrator.tools import Toolbox, schemas

pytestmark = pytest.mark.usefixtures("strays")


def test_delegate_takes_the_fleet_options_and_check_session_shows_the_queue(zw: ZW) -> None:
    configure(zw, "[limits]\nmax_running = 1\n[groups.g]\n")
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, FAKE_REPLAY=zw.sample("codex_simple"))
    tb = Toolbox(zw.api(env), source="bot")
    a = tb.dispatch("delegate", {"task": "first", "max_tokens": 5000, "group": "g"})
    assert a["ok"] and a["status"] == "running", a
    b = tb.dispatch("delegate", {"task": "second", "after": [a["session_id"]], "priority": 2})
    assert b["ok"] and b["status"] == "queued" and "queued" in b["next"], b
    seen = tb.dispatch("check_session", {"session_id": b["session_id"]})
    assert seen["status"] == "queued" and seen["queue_position"] == 1
    assert seen["waiting_for"] == [a["session_id"]] and seen["after"] == [a["session_id"]]
    assert seen["priority"] == 2 and seen["waiting"].startswith("waiting for")
    first = tb.dispatch("check_session", {"session_id": a["session_id"]})
    assert (first["max_tokens"], first["group"]) == (5000, "g")
    listed = tb.dispatch("list_sessions", {"status": "queued"})
    assert [r["id"] for r in listed["sessions"]] == [b["session_id"]]
    assert listed["sessions"][0]["queue_position"] == 1
    bad = tb.dispatch("delegate", {"task": "x", "max_cost": -1})
    assert not bad["ok"] and "max_cost" in bad["error"]
    hold.unlink()
    done = tb.dispatch("wait", {"session_ids": [b["session_id"]], "all": True, "timeout_s": 40})
    assert done["ok"] and [f["status"] for f in done["finished"]] == ["completed"], done


def test_end_session_cancels_a_queued_one_and_the_reason_is_typed(zw: ZW) -> None:
    configure(zw, '[limits]\nmax_running = 1\non_usage_limit = "wait"\n')
    text = Path(zw.sample("limits_claude_usage_limit")).read_text()
    replay = zw.tmp / "limit.jsonl"
    replay.write_text(text.replace("1795447801", str(int(time.time()) + 3600)))
    tb = Toolbox(zw.api({"FAKE_REPLAY": str(replay)}), source="bot")
    a = tb.dispatch("delegate", {"task": "t", "adapter": "claude"})
    wait_status(zw, a["session_id"], "parked")
    # b holds the one slot (it hangs: were it to replay the limit too, it could park before
    # c is asked for, and c would run: it did under load)
    tb = Toolbox(zw.api({"FAKE_HANG": "1"}), source="bot")
    b = tb.dispatch("delegate", {"task": "u", "adapter": "claude"})
    assert b["status"] == "running"  # a parked session holds no slot
    view = tb.dispatch("check_session", {"session_id": a["session_id"]})
    assert view["status"] == "parked" and view["reason"] == "usage_limit" and view["parked_until"]
    c = tb.dispatch("delegate", {"task": "v", "adapter": "claude"})
    assert c["status"] == "queued"
    ended = tb.dispatch("end_session", {"session_id": c["session_id"]})
    assert ended["ok"] and ended["killed"] and ended["status"] == "killed"
    assert not zw.meta(c["session_id"])["turns"][0]["started"]


def test_the_schemas_offer_the_new_states_and_options() -> None:
    tools = {t["name"]: t for t in schemas("anthropic")}
    props = tools["delegate"]["input_schema"]["properties"]
    assert {"after", "after_any", "group", "priority", "max_cost", "max_tokens"} <= set(props)
    states = tools["list_sessions"]["input_schema"]["properties"]["status"]["enum"]
    assert {"queued", "stalled", "parked"} <= set(states)
