"""The tool layer (``orchestrator.tools``): schemas, argument checking, dispatch, cwd confinement,
and each tool against real sessions run by the fake agent."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.orchestrator.helpers import err, ok, write_config
from tests.support import SAMPLES
from zwarm.api import Zwarm
from zwarm.errors import InvalidInput
from zwarm.orchestrator import tools
from zwarm.orchestrator.tools import TOOL_NAMES, Toolbox, dispatch, schemas, validate_args

NAMES = {
    "delegate",
    "converse",
    "check_session",
    "list_sessions",
    "get_trajectory",
    "wait",
    "end_session",
    "get_diff",
    "comment",
    "merge",
    "best_of",
    "compare",
    "pick",
    "merge_queue",
}


# ---------------------------------------------------------------------------- schemas
def test_every_format_lists_the_same_tools_from_one_definition() -> None:
    oa, an, mc = schemas("openai"), schemas("anthropic"), schemas("mcp")
    assert set(TOOL_NAMES) == NAMES
    assert [t["function"]["name"] for t in oa] == list(TOOL_NAMES)
    assert [t["name"] for t in an] == [t["name"] for t in mc] == list(TOOL_NAMES)
    for o, a, m, tool in zip(oa, an, mc, tools.TOOLS, strict=True):
        assert o["type"] == "function"
        assert o["function"]["parameters"] is tool.schema
        assert a["input_schema"] is tool.schema and m["inputSchema"] is tool.schema
        assert o["function"]["description"] == a["description"] == m["description"]
        assert len(tool.description) > 80  # written for an LLM, not a stub
        assert m["annotations"]["readOnlyHint"] is tool.read_only


def test_schemas_are_strict_objects() -> None:
    for tool in tools.TOOLS:
        s = tool.schema
        assert s["type"] == "object" and s["additionalProperties"] is False
        assert set(s["required"]) <= set(s["properties"])
        for name, prop in s["properties"].items():
            assert prop.get("description"), (tool.name, name)
            assert prop["type"] in ("string", "number", "integer", "boolean", "array")
    assert schemas("mcp")[TOOL_NAMES.index("end_session")]["annotations"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
    }


def test_unknown_format_is_an_error() -> None:
    with pytest.raises(InvalidInput, match="unknown schema format 'gemini'"):
        schemas("gemini")


def test_cli_prints_each_format(zw) -> None:
    for fmt in ("openai", "anthropic", "mcp"):
        res = zw.run("tools", "--format", fmt, check=True)
        assert json.loads(res.stdout) == schemas(fmt)
    assert json.loads(zw.run("tools", check=True).stdout) == schemas("openai")
    bad = zw.run("tools", "--format", "gemini")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_python_surface_is_schemas_and_dispatch_over_an_api(zw) -> None:
    """For your own loop: ``schemas`` and ``dispatch`` here, on a ``Zwarm`` you pass (the API
    itself knows nothing of the tools: ``test_layering``)."""
    api = zw.api(env_extra={"FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl")})
    assert not hasattr(api, "dispatch") and not hasattr(api, "tool_schemas")
    r = ok(dispatch("delegate", {"task": "hi"}, api=api, source="mine"))
    assert api.get(r["session_id"]).source == "mine"
    assert "unknown tool" in err(dispatch("nope", api=api))
    r = ok(dispatch("list_sessions", "{}", api=api))
    assert r["total"] == 1


# ---------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "missing required argument 'task'"),
        ({"task": ""}, "argument 'task' must not be empty"),
        ({"task": 5}, "argument 'task' must be a string, not 5"),
        ({"task": "x", "adapter": "grok"}, "argument 'adapter' must be one of claude, codex"),
        ({"task": "x", "timeout": "soon"}, "argument 'timeout' must be a number"),
        ({"task": "x", "timeout": 0}, "argument 'timeout' must be more than 0"),
        ({"task": "x", "timeout": True}, "argument 'timeout' must be a number"),
        ({"task": "x", "timeout": float("inf")}, "argument 'timeout' must be a number"),
        ({"task": "x", "bogus": 1}, "unknown argument 'bogus' (allowed: task, adapter"),
        # the bounds SpawnRequest declares, which the generated schema carries
        ({"task": "x", "timeout": 1e12}, "argument 'timeout' must be at most 1e+09, not"),
        ({"task": "x", "priority": -2_000_000}, "argument 'priority' must be at least -1000000"),
        ({"task": "x", "branch": "b" * 201}, "argument 'branch' is longer than 200 characters"),
        ({"task": "x", "after": [""]}, "argument 'after[0]' must not be empty"),
    ],
)
def test_delegate_argument_errors(args, message) -> None:
    with pytest.raises(tools.ToolError) as e:
        validate_args(tools.TOOLS[0].schema, args)
    assert message in str(e.value)


def test_argument_leniency_llms_need() -> None:
    wait = next(t for t in tools.TOOLS if t.name == "wait").schema
    got = validate_args(wait, {"timeout_s": "30", "session_ids": None, "all": False})
    assert got == {"timeout_s": 30.0, "all": False}  # numeric string accepted, null = absent
    traj = next(t for t in tools.TOOLS if t.name == "get_trajectory").schema
    assert validate_args(traj, {"session_id": "abcd", "turn": 2.0}) == {
        "session_id": "abcd",
        "turn": 2,
    }
    with pytest.raises(tools.ToolError, match="must be a whole number"):
        validate_args(traj, {"session_id": "abcd", "turn": 1.5})
    with pytest.raises(tools.ToolError, match=r"argument 'session_ids\[1\]' must be a string"):
        validate_args(wait, {"session_ids": ["abcd", 7]})


def test_dispatch_never_raises(toolbox, monkeypatch) -> None:
    tb = toolbox()
    assert "unknown tool 'nope'; the tools are: delegate, converse" in err(tb.dispatch("nope"))
    assert "arguments are not valid JSON" in err(tb.dispatch("wait", "{oops"))
    assert "must be a JSON object, not list" in err(tb.dispatch("wait", [1, 2]))
    assert "unknown tool" in err(tb.dispatch(None, {}))  # type: ignore[arg-type]

    def boom(tb: Toolbox, a: dict) -> dict:
        raise RuntimeError("kaput")

    broken = tools.Tool("check_session", "x", tools.TOOLS[2].schema, boom)
    tb.tools["check_session"] = broken
    msg = err(tb.dispatch("check_session", {"session_id": "abcd"}))
    assert msg.startswith("internal error in tool 'check_session': RuntimeError: kaput")
    ok(tb.dispatch("list_sessions"))  # and the next call works


# ---------------------------------------------------------------------------- cwd confinement
def test_cwd_inside_the_root_is_used(zw, toolbox) -> None:
    tb = toolbox()
    sub = zw.cwd / "pkg" / "sub"
    sub.mkdir(parents=True)
    r = ok(tb.dispatch("delegate", {"task": "x", "cwd": "pkg/sub"}))
    assert r["cwd"] == str(sub.resolve())
    assert tb.api.get(r["session_id"]).cwd == str(sub.resolve())
    r = ok(tb.dispatch("delegate", {"task": "x", "cwd": "pkg/sub/../sub"}))
    assert r["cwd"] == str(sub.resolve())
    r = ok(tb.dispatch("delegate", {"task": "x"}))
    assert r["cwd"] == str(zw.cwd.resolve())


def test_cwd_escapes_are_refused(zw, toolbox, tmp_path) -> None:
    tb = toolbox()
    outside = tmp_path / "outside"
    outside.mkdir()
    (zw.cwd / "link").symlink_to(outside)
    (zw.cwd / "afile").write_text("x")
    cases = {
        "..": "is outside the allowed roots",
        "../outside": "is outside the allowed roots",
        str(outside): "is outside the allowed roots",
        "/": "is outside the allowed roots",
        "link": "is outside the allowed roots",  # a symlink is judged by where it points
        "link/": "is outside the allowed roots",
        "missing": "does not exist",
        "afile": "is not a directory",
        "bad\x00path": "does not exist",
    }
    for cwd, message in cases.items():
        assert message in err(tb.dispatch("delegate", {"task": "x", "cwd": cwd})), cwd
    assert tb.api.store.list_ids() == []  # nothing was started


def test_allowed_roots_from_config(zw, toolbox, tmp_path) -> None:
    extra = tmp_path / "extra"
    (extra / "deep").mkdir(parents=True)
    write_config(zw, f'[tools]\nallowed_roots = [".", "{extra}"]\n')
    tb = toolbox()
    ok(tb.dispatch("delegate", {"task": "x", "cwd": str(extra / "deep")}))
    write_config(zw, f'[tools]\nallowed_roots = ["{extra}"]\n')
    tb = toolbox()
    msg = err(tb.dispatch("delegate", {"task": "x"}))  # where zwarm runs is no longer allowed
    assert f"is outside the allowed roots ({extra.resolve()})" in msg


def test_no_agent_starts_inside_the_state_dir(zw) -> None:
    """``delegate`` (and ``zwarm spawn -C``, the same check) refuse a working directory that
    is the state dir, inside it, or a symlink into it, with one line; no session is made."""
    from zwarm.env import Env

    state = zw.cwd / ".zwarm"
    environ = {k: v for k, v in zw.env.items() if k != "ZWARM_DIR"}
    environ["FAKE_REPLAY"] = str(SAMPLES / "codex_simple.jsonl")
    api = Zwarm(env=Env(cwd=zw.cwd, environ=environ))
    tb = Toolbox(api, "t")
    ok(tb.dispatch("delegate", {"task": "make the state dir"}))
    (zw.cwd / "link").symlink_to(state / "sessions")
    for cwd in (".zwarm", ".zwarm/sessions", "link", str(state), "./.zwarm/../.zwarm"):
        msg = err(tb.dispatch("delegate", {"task": "x", "cwd": cwd}))
        assert f"is inside zwarm's state dir ({state})" in msg, cwd
        assert "\n" not in msg
    assert len(api.session_ids()) == 1
    for cwd in (".zwarm", "link"):
        res = zw.run("spawn", "-C", cwd, "x", env_extra={"ZWARM_DIR": ""})
        assert res.returncode != 0 and res.stdout == ""
        assert res.stderr.startswith("Error: ") and "inside zwarm's state dir" in res.stderr
        assert len(res.stderr.splitlines()) == 1
    assert len(api.session_ids()) == 1


def test_a_folder_that_became_a_link_into_the_state_dir_runs_no_turn_there(zw) -> None:
    """Regression: the check ran only when the session was made: an agent working in the
    project replaced another session's folder with a link into the state dir, and that
    session's next turn ran its agent inside the state dir."""
    (zw.cwd / "sub").mkdir()
    env = zw.replay("codex_simple")
    sid = zw.spawn("-C", "sub", "first", env_extra=env)
    assert zw.wait(sid).returncode == 0
    (zw.cwd / "sub").rename(zw.cwd / "sub.old")
    (zw.cwd / "sub").symlink_to(zw.state_dir / "sessions")
    res = zw.run("inject", "--wait", sid, "again", env_extra=env)
    assert res.returncode != 0
    turn = zw.meta(sid)["turns"][1]
    assert turn["status"] == "failed", turn
    assert "now leads into zwarm's state dir" in turn["error"], turn
    assert sorted(p.name for p in zw.record.glob("argv*.json")) == ["argv1.json"]  # no agent
    assert json.loads((zw.record / "argv1.json").read_text())["cwd"] == str(zw.cwd / "sub")


# ---------------------------------------------------------------------------- the tools
def test_delegate_records_the_source_shown_by_ls(zw, toolbox) -> None:
    tb = toolbox(source="orchestrate:run-1")
    sid = ok(tb.dispatch("delegate", {"task": "hello", "name": "greeter", "timeout": 60}))[
        "session_id"
    ]
    s = tb.api.get(sid)
    assert (s.source, s.name, s.turns[0].timeout) == ("orchestrate:run-1", "greeter", 60.0)
    assert zw.json("ls")[0]["source"] == "orchestrate:run-1"
    table = zw.run("ls", check=True).stdout.splitlines()
    assert "SOURCE" in table[0].split()
    assert "orchestrate:run-1" in table[1]
    assert "already exists" in err(tb.dispatch("delegate", {"task": "x", "name": "greeter"}))


def test_delegate_takes_every_spawn_option_its_subset_names(zw, toolbox) -> None:
    """Issue 31 (drift): delegate's schema was written by hand and had drifted from spawn's:
    its stall time was ``stall_s`` where every other front end says ``stall``, and it took no
    ``context``, ``notify`` or ``launcher``. Now it is generated from ``SpawnRequest``'s
    fields that ``catalog.DELEGATE`` names, and each reaches the session."""
    from zwarm.model.requests import SpawnRequest
    from zwarm.orchestrator.tools import catalog

    tb = toolbox()
    args = {"task": "t", "stall": 120, "context": "native", "notify": True, "launcher": "local"}
    sid = ok(tb.dispatch("delegate", args))["session_id"]
    meta = zw.meta(sid)
    assert (meta["stall_s"], meta["context_mode"], meta["notify"]) == (120.0, "native", True)
    assert meta["turns"][0]["launcher"] == "local"
    assert "unknown argument 'stall_s'" in err(tb.dispatch("delegate", {"task": "t", "stall_s": 1}))
    assert "dangerous" in err(tb.dispatch("delegate", {"task": "t", "dangerous": True}))
    bad = {"task": "t", "launcher_option": ["x=1"]}  # reaches the launcher: local takes none
    assert "launcher 'local' takes no option 'x'" in err(tb.dispatch("delegate", bad))
    fields = sorted([*catalog.DELEGATE, *catalog.DELEGATE_LEFT_OUT])
    assert fields == sorted(SpawnRequest.__struct_fields__)
    (delegate,) = [t for t in tools.TOOLS if t.name == "delegate"]
    assert list(delegate.schema["properties"]) == list(catalog.DELEGATE)
    converse = next(t for t in tools.TOOLS if t.name == "converse").schema["properties"]
    assert list(converse) == ["session_id", *catalog.CONVERSE]


def test_check_converse_trajectory_end(zw, toolbox) -> None:
    tb = toolbox()
    sid = ok(tb.dispatch("delegate", {"task": "say hi"}))["session_id"]
    ok(tb.dispatch("wait", {"session_ids": [sid]}))
    c = ok(tb.dispatch("check_session", {"session_id": sid[:6]}))
    assert (c["session_id"], c["status"], c["turns"]) == (sid, "completed", 1)
    assert c["last_message"] == "Hi there! This is the fake server."
    assert c["usage"] == {"input_tokens": 100, "output_tokens": 9, "total_tokens": 109}
    assert c["source"] == "t" and c["current_turn"]["status"] == "completed"
    t = ok(tb.dispatch("get_trajectory", {"session_id": sid}))
    assert t["steps"] == [
        {"turn": 1, "index": 0, "kind": "message", "text": "Hi there! This is the fake server."}
    ]
    assert "note" not in t
    r = ok(tb.dispatch("converse", {"session_id": sid, "message": "and again"}))
    assert (r["state"], r["turn"]) == ("started", 2)
    ok(tb.dispatch("wait", {"session_ids": [sid]}))
    assert ok(tb.dispatch("check_session", {"session_id": sid}))["turns"] == 2
    assert "has no turn 3" in err(tb.dispatch("get_trajectory", {"session_id": sid, "turn": 3}))
    assert len(ok(tb.dispatch("get_trajectory", {"session_id": sid, "turn": 2}))["steps"]) == 1
    assert "already finished (completed)" in err(tb.dispatch("end_session", {"session_id": sid}))
    r = ok(tb.dispatch("end_session", {"session_id": sid, "delete": True}))
    assert (r["killed"], r["deleted"]) == (False, True)
    assert not (zw.state_dir / "sessions" / sid).exists()
    assert f"no session matches '{sid}'" in err(tb.dispatch("check_session", {"session_id": sid}))


def test_converse_queues_behind_a_running_turn_and_end_kills(zw, toolbox) -> None:
    tb = toolbox(FAKE_HANG="1")
    sid = ok(tb.dispatch("delegate", {"task": "long job"}))["session_id"]
    r = ok(tb.dispatch("converse", {"session_id": sid, "message": "then this"}))
    assert (r["state"], r["turn"]) == ("queued", 2) and "still running" in r["note"]
    r = ok(tb.dispatch("converse", {"session_id": sid, "message": "and this"}))
    assert r["turn"] == 3
    c = ok(tb.dispatch("check_session", {"session_id": sid}))
    assert c["status"] == "running" and c["queued"] == ["then this", "and this"]
    r = ok(tb.dispatch("end_session", {"session_id": sid}))
    assert (r["killed"], r["deleted"], r["status"], r["dropped_queued"]) == (
        True,
        False,
        "killed",
        2,
    )
    assert tb.api.get(sid).status.value == "killed"


def test_ambiguous_prefix_and_bad_refs(zw, toolbox, monkeypatch) -> None:
    tb = toolbox()
    ids = iter(["abcd1111-0000-4000-8000-000000000001", "abcd2222-0000-4000-8000-000000000002"])
    monkeypatch.setattr(tb.api.store, "new_id", lambda: next(ids))
    ok(tb.dispatch("delegate", {"task": "one"}))
    ok(tb.dispatch("delegate", {"task": "two"}))
    msg = err(tb.dispatch("check_session", {"session_id": "abcd"}))
    assert "'abcd' matches 2 sessions" in msg
    assert "invalid session id or name" in err(tb.dispatch("wait", {"session_ids": ["../x"]}))
    assert "no session matches 'abcd3'" in err(
        tb.dispatch("converse", {"session_id": "abcd3", "message": "m"})
    )


def test_damaged_session_is_reported_then_deletable(zw, toolbox) -> None:
    tb = toolbox()
    sid = ok(tb.dispatch("delegate", {"task": "x"}))["session_id"]
    ok(tb.dispatch("wait", {"session_ids": [sid]}))
    (zw.state_dir / "sessions" / sid / "meta.json").write_text("{not json")
    assert "is damaged" in err(tb.dispatch("check_session", {"session_id": sid}))
    rows = ok(tb.dispatch("list_sessions"))["sessions"]
    assert rows[0]["status"] == "damaged" and "not valid JSON" in rows[0]["error"]
    assert "pass delete=true" in err(tb.dispatch("end_session", {"session_id": sid}))
    assert ok(tb.dispatch("end_session", {"session_id": sid, "delete": True}))["deleted"]
    assert tb.api.store.list_ids() == []


# ---------------------------------------------------------------------------- list + last looked
def test_list_sessions_rows_filters_and_limit(zw, toolbox) -> None:
    mine, other = toolbox(source="me"), toolbox(source="other")
    a = ok(mine.dispatch("delegate", {"task": "first " + "x" * 200}))["session_id"]
    b = ok(other.dispatch("delegate", {"task": "second"}))["session_id"]
    ok(mine.dispatch("wait", {"session_ids": [a, b], "all": True}))
    r = ok(mine.dispatch("list_sessions"))
    assert [s["id"] for s in r["sessions"]] == [b, a]  # newest first
    assert r["total"] == 2 and len(r["sessions"][1]["task"]) < 120
    assert [s["id"] for s in ok(mine.dispatch("list_sessions", {"mine": True}))["sessions"]] == [a]
    r = ok(mine.dispatch("list_sessions", {"limit": 1}))
    assert len(r["sessions"]) == 1 and "showing the newest 1 of 2" in r["note"]
    assert ok(mine.dispatch("list_sessions", {"status": "running"}))["total"] == 0
    assert "must be one of" in err(mine.dispatch("list_sessions", {"status": "done"}))


def test_finished_since_last_look_per_caller(zw, toolbox) -> None:
    a = toolbox(source="a", FAKE_HANG="1")
    sid = ok(a.dispatch("delegate", {"task": "job"}))["session_id"]
    b = toolbox(source="b")
    assert ok(b.dispatch("list_sessions"))["finished_since_last_look"] == []  # b starts looking
    ok(a.dispatch("end_session", {"session_id": sid}))  # killed: finished
    late = toolbox(source="late")
    r = ok(b.dispatch("list_sessions"))
    assert r["finished_since_last_look"] == [sid] and r["sessions"][0]["new"] is True
    assert ok(b.dispatch("list_sessions"))["finished_since_last_look"] == []  # seen now
    # a ended it itself, so it is not news to a; "late" arrived after it finished
    assert ok(a.dispatch("list_sessions"))["finished_since_last_look"] == []
    assert ok(late.dispatch("list_sessions"))["finished_since_last_look"] == []
    # continued and finished again: news again, for both callers that watch
    fast = toolbox(source="a")
    ok(fast.dispatch("converse", {"session_id": sid, "message": "resume"}))
    w = ok(fast.dispatch("wait", {"session_ids": [sid]}))
    assert w["finished"][0]["new"] is True and w["finished"][0]["turns"] == 2
    assert ok(a.dispatch("list_sessions"))["finished_since_last_look"] == []  # wait told a
    assert ok(b.dispatch("check_session", {"session_id": sid}))["finished_since_last_look"]
    assert ok(b.dispatch("list_sessions"))["finished_since_last_look"] == []  # check told b
    seen = zw.state_dir / "orchestrator" / "seen"
    assert len([p for p in seen.iterdir() if p.suffix == ".json"]) == 3


# ---------------------------------------------------------------------------- wait
def test_wait_returns_when_one_finishes_and_never_repeats_old_news(zw, toolbox) -> None:
    write_config(zw, "[tools]\nmax_wait_s = 30\n")
    fast, slow = toolbox(), toolbox(FAKE_HANG="1")
    f = ok(fast.dispatch("delegate", {"task": "quick"}))["session_id"]
    s = ok(slow.dispatch("delegate", {"task": "forever"}))["session_id"]
    r = ok(fast.dispatch("wait", {"session_ids": [f, s], "timeout_s": 60}))
    assert r["timed_out"] is False and r["running"] == [s]
    assert [(x["session_id"], x["status"], x["new"]) for x in r["finished"]] == [
        (f, "completed", True)
    ]
    assert "capped at 30 s" in r["note"]
    # f is old news now: the same wait blocks (up to the cap) instead of returning at once
    write_config(zw, "[tools]\nmax_wait_s = 1.5\n")
    fast = toolbox()
    r = ok(fast.dispatch("wait", {"session_ids": [f, s], "timeout_s": 60}))
    assert r["timed_out"] is True and r["waited_s"] >= 1.4 and r["running"] == [s]
    assert r["finished"][0]["new"] is False and "capped at 1.5 s" in r["note"]
    r = ok(fast.dispatch("wait", {"session_ids": [f, s], "timeout_s": 0.2, "all": True}))
    assert r["timed_out"] is True and "note" not in r
    ok(slow.dispatch("end_session", {"session_id": s}))
    r = ok(fast.dispatch("wait", {"session_ids": [f, s], "all": True}))
    assert r["timed_out"] is False and r["running"] == []
    assert {x["session_id"]: x["status"] for x in r["finished"]} == {f: "completed", s: "killed"}


def test_wait_defaults_to_own_running_sessions(zw, toolbox) -> None:
    me, other = toolbox(source="me"), toolbox(source="other", FAKE_HANG="1")
    assert "none of your sessions is running" in ok(me.dispatch("wait"))["note"]
    ok(other.dispatch("delegate", {"task": "not mine"}))
    sid = ok(me.dispatch("delegate", {"task": "mine"}))["session_id"]
    r = ok(me.dispatch("wait", {"timeout_s": 30}))
    assert [x["session_id"] for x in r["finished"]] == [sid] and r["running"] == []
    assert "none of your sessions is running" in ok(me.dispatch("wait"))["note"]  # told now
    assert "no session matches 'zzzz'" in err(me.dispatch("wait", {"session_ids": ["zzzz"]}))


def test_wait_reports_a_session_that_finished_before_the_call(zw, toolbox) -> None:
    """A quick task can finish between delegate and wait: wait must tell, not say 'none'."""
    me = toolbox(source="me")
    sid = ok(me.dispatch("delegate", {"task": "quick"}))["session_id"]
    zw.api().wait([sid], timeout=30)
    r = ok(me.dispatch("wait", {"timeout_s": 30}))
    assert r["timed_out"] is False and r["waited_s"] < 5
    assert [(x["session_id"], x["status"], x["new"]) for x in r["finished"]] == [
        (sid, "completed", True)
    ]
    assert "none of your sessions" in ok(me.dispatch("wait", {"timeout_s": 30}))["note"]


def test_a_failed_follow_up_never_reports_an_earlier_turns_answer(zw, toolbox) -> None:
    """Regression: a follow-up whose turn failed was reported by ``wait`` and
    ``check_session`` with the previous turn's final message as ``last_message``, which a
    model reads as the agent's answer to the follow-up."""
    tb = toolbox()
    sid = ok(tb.dispatch("delegate", {"task": "say hi"}))["session_id"]
    ok(tb.dispatch("wait", {"session_ids": [sid]}))
    assert ok(tb.dispatch("check_session", {"session_id": sid}))["last_message"]
    failing = toolbox(FAKE_REPLAY="", FAKE_EXIT="3")
    ok(failing.dispatch("converse", {"session_id": sid, "message": "and again"}))
    r = ok(failing.dispatch("wait", {"session_ids": [sid], "timeout_s": 30}))
    (f,) = r["finished"]
    assert (f["status"], f["turns"], f["last_message"]) == ("failed", 2, None)
    c = ok(failing.dispatch("check_session", {"session_id": sid}))
    assert (c["status"], c["last_message"]) == ("failed", None)
    assert c["current_turn"]["n"] == 2


# ---------------------------------------------------------------------------- trajectory
def _big_log(path: Path, n: int, out_chars: int) -> Path:
    lines = [
        json.dumps({"type": "thread.started", "thread_id": "t-1"}),
        json.dumps({"type": "turn.started"}),
    ]
    for i in range(n):
        item = {
            "id": f"item_{i}",
            "type": "command_execution",
            "command": f"step {i}",
            "aggregated_output": f"out-{i} " + "y" * out_chars,
            "exit_code": 0,
            "status": "completed",
        }
        lines.append(json.dumps({"type": "item.completed", "item": item}))
    done = {"id": "last", "type": "agent_message", "text": "FINAL ANSWER"}
    lines.append(json.dumps({"type": "item.completed", "item": done}))
    lines.append(
        json.dumps(
            {
                "type": "turn.completed",
                "usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 1},
            }
        )
    )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_trajectory_is_cut_to_fit_with_a_note(zw, toolbox, tmp_path) -> None:
    log = _big_log(tmp_path / "big.jsonl", 300, 2000)
    tb = toolbox(FAKE_REPLAY=str(log))
    sid = ok(tb.dispatch("delegate", {"task": "lots of output"}))["session_id"]
    ok(tb.dispatch("wait", {"session_ids": [sid]}))
    r = ok(tb.dispatch("get_trajectory", {"session_id": sid}))
    size = len(tools.to_json(r))
    assert size < 12000 * 1.3  # [tools] trajectory_chars, plus the envelope
    assert r["total_steps"] == 301 and len(r["steps"]) < 301
    assert r["steps"][0]["index"] == 0 and r["steps"][0]["command"] == "step 0"
    assert r["steps"][-1] == {"turn": 1, "index": 300, "kind": "message", "text": "FINAL ANSWER"}
    assert "steps omitted to fit the context" in r["note"]
    assert "long text fields shortened" in r["note"] and "full=true" in r["note"]
    assert "[... " in r["steps"][0]["output"] and len(r["steps"][0]["output"]) < 700
    indexes = [s["index"] for s in r["steps"]]
    assert indexes == sorted(indexes)
    gap = [b - a for a, b in itertools.pairwise(indexes) if b - a > 1]
    assert len(gap) == 1  # one contiguous cut in the middle
    full = ok(tb.dispatch("get_trajectory", {"session_id": sid, "full": True}))
    assert len(full["steps"][0]["output"]) > 2000  # whole outputs
    assert len(tools.to_json(full)) < 12000 * 4 * 1.3


def test_trajectory_streams_a_huge_log(zw, toolbox, tmp_path) -> None:
    import tracemalloc

    log = _big_log(tmp_path / "huge.jsonl", 4000, 4000)  # ~16 MB
    assert log.stat().st_size > 15_000_000
    tb = toolbox(FAKE_REPLAY=str(log))
    sid = ok(tb.dispatch("delegate", {"task": "huge"}))["session_id"]
    ok(tb.dispatch("wait", {"session_ids": [sid], "timeout_s": 45}))
    assert tb.api.get(sid).status.value == "completed", tb.api.get(sid).error
    tracemalloc.start()
    try:
        r = ok(tb.dispatch("get_trajectory", {"session_id": sid}))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r["total_steps"] == 4001
    assert peak < 4_000_000, f"peak {peak} bytes: the log was not streamed"


def test_state_dir_is_not_created_by_reads(zw, toolbox) -> None:
    tb = toolbox()
    ok(tb.dispatch("list_sessions"))
    assert "none of your sessions" in ok(tb.dispatch("wait"))["note"]
    err(tb.dispatch("check_session", {"session_id": "abcd"}))
    assert not zw.state_dir.exists()


def test_dispatch_from_another_directory_uses_that_directory(tmp_path) -> None:
    root = tmp_path / "proj"
    (root / "a").mkdir(parents=True)
    from zwarm.env import Env

    env = Env(cwd=root, environ=dict(os.environ), state_dir=tmp_path / "st")
    api = Zwarm(env=env)
    assert tools.confine_cwd(api, "a") == (root / "a").resolve()
    with pytest.raises(tools.ToolError, match="outside the allowed roots"):
        tools.confine_cwd(api, str(tmp_path))


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"after_any": True}, "after_any needs after (the sessions to wait for)"),
        ({"branch": "b1"}, "branch and base need worktree"),
        ({"group": "g"}, "group 'g' is not declared (declared groups: none)"),
        ({"account": "nope"}, "account nope: claude has no such account"),
    ],
)
def test_a_refused_field_is_named_by_its_argument_not_a_cli_flag(
    zw: Any, args: dict[str, Any], words: str
) -> None:
    """The engine names a request field (``errors.naming``); the tools spell it as their
    argument, never as the CLI's ``--option`` (tests/serve/test_same_errors.py: the CLI and
    the HTTP API, each its own way)."""
    got = err(Toolbox(zw.api(), source="bot").dispatch(
        "delegate", {"task": "x", "adapter": "claude", **args}
    ))  # fmt: skip
    assert got.startswith(words) and "--" not in got, got
