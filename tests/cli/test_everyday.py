"""Everyday use gives no wrong answers (issue 12, part A): each test here failed on the code
before the fix it covers, through the real ``zwarm`` command and fake agents.

Covered: duplicate references to one session (wait), names that shadow id prefixes, short
prefixes, per-turn timeouts on follow-ups, usage of killed and timed-out turns, the model
zwarm asked codex for, several references to kill/rm, ``wait --all``, missing turn logs and
damaged meta.json in trajectory/logs, and the misleading messages of item 13.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import SAMPLES, wait_until
from zwarm.model import Session, Status, Turn
from zwarm.store import Store

NOW = "2026-01-01T00:00:00.000+00:00"
A = "abcd1000-0000-4000-8000-000000000001"
B = "12345678-0000-4000-8000-000000000002"


def plant(zw: Any, sid: str, status: Status = Status.COMPLETED) -> None:
    """A finished session with a chosen id, written through the store."""
    store = Store(zw.state_dir)
    store.ensure()
    turn = Turn(1, status, "planted", "task", NOW, NOW)
    s = Session(id=sid, adapter="codex", task="planted", cwd=str(zw.cwd), created_at=NOW,
                updated_at=NOW, turns=[turn])  # fmt: skip
    store.create(s, b"planted")


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def no_traceback(res: Any) -> None:
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout, res.stderr


def turn(zw: Any, sid: str, n: int) -> dict[str, Any]:
    t: dict[str, Any] = zw.json("show", sid)["turns_detail"][n - 1]
    return t


# ---------------------------------------------------------------------------- 1. duplicates
def test_wait_on_the_same_session_twice_returns(zw) -> None:
    sid = zw.spawn("x", "--name", "twice", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    for refs in ([sid, sid], ["twice", sid[:8]], [sid[:6], "twice", sid]):
        res = zw.run("wait", *refs, "--timeout", "20")
        assert res.returncode == 0, (refs, res.returncode, res.stdout, res.stderr)
        assert lines(res.stdout) == [f"{sid} completed"]
    got = zw.api().wait([sid, sid], timeout=20)
    assert (got["timed_out"], got["statuses"], got["finished"]) == (
        False,
        {sid: "completed"},
        [sid],
    )


# ---------------------------------------------------------------------------- 2. names vs ids
@pytest.mark.parametrize("name", ["e4968661", "abcd", "DEADBEEF", "deadbeef-12", "0123-"[:4]])
def test_a_name_that_looks_like_an_id_prefix_is_refused(zw, name: str) -> None:
    res = zw.run("spawn", "x", "--name", name)
    assert res.returncode == 1 and "looks like a session id" in res.stderr, res.stderr
    assert zw.calls() == 0


@pytest.mark.parametrize("name", ["fix-login", "beefy", "abc", "dead-beef", "x1234567"])
def test_ordinary_names_are_still_fine(zw, name: str) -> None:
    sid = zw.spawn("x", "--name", name, env_extra=zw.replay("codex_simple"))
    assert zw.run("show", name, "--json", check=True)
    assert json.loads(zw.run("show", name, "--json").stdout)["id"] == sid
    zw.wait(sid)


def test_a_name_shadowing_another_sessions_prefix_is_ambiguous_not_chosen(zw) -> None:
    plant(zw, A)
    plant(zw, B)
    # a name claimed by an older zwarm: "abcd1000" names B but is a prefix of A's id
    (zw.state_dir / "names" / "abcd1000").write_text(B)
    for cmd in (["rm"], ["show"], ["kill"], ["wait", "--timeout", "5"]):
        res = zw.run(*cmd[:1], "abcd1000", *cmd[1:])
        no_traceback(res)
        assert res.returncode == 1, (cmd, res.stdout, res.stderr)
        err = lines(res.stderr)
        assert len(err) == 1 and "'abcd1000' matches 2 sessions" in err[0], err
        assert f"{B} (named 'abcd1000')" in err[0] and A in err[0]
    assert sorted(r["id"] for r in zw.json("ls")) == sorted([A, B])  # nothing deleted
    # the full ids (and the name where it is unambiguous) still work
    assert zw.json("show", A)["id"] == A


def test_a_short_prefix_says_the_minimum(zw) -> None:
    plant(zw, A)
    res = zw.run("show", "abc")
    assert res.returncode == 1
    assert lines(res.stderr) == [
        "Error: no session matches 'abc' (an id prefix needs at least 4 characters)"
    ]
    res = zw.run("show", "fff")  # nothing starts with it: the plain message
    assert lines(res.stderr) == ["Error: no session matches 'fff'"]


# ---------------------------------------------------------------------------- 3. timeouts
HANG = {"FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl"), "FAKE_HANG": "1"}


@pytest.mark.parametrize("how", ["flag", "config"])
def test_the_sessions_timeout_applies_to_follow_up_turns(zw, how: str) -> None:
    args = ["--timeout", "2"] if how == "flag" else []
    if how == "config":
        zw.state_dir.mkdir()
        zw.write_config("[defaults]\ntimeout = 2\n")
    sid = zw.spawn("x", *args, env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    zw.run("inject", sid, "now run forever", env_extra=HANG, check=True)
    res = zw.wait(sid, timeout=60)  # before the fix: turn 2 ran on, so this timed out (124)
    assert res.returncode == 1, (res.stdout, res.stderr)
    t2 = turn(zw, sid, 2)
    assert (t2["status"], t2["reason"], t2["timeout"]) == ("failed", "timeout", 2.0)
    assert t2["error"] == "timeout: killed after 2 s"


def test_a_follow_ups_own_timeout_wins(zw) -> None:
    sid = zw.spawn("x", "--timeout", "900", env_extra=zw.replay("codex_simple"))
    zw.wait(sid)
    zw.run("inject", sid, "hang", "--timeout", "1.5", env_extra=HANG, check=True)
    assert zw.wait(sid, timeout=60).returncode == 1
    assert turn(zw, sid, 2)["timeout"] == 1.5
    zw.run("inject", sid, "quick", env_extra=zw.replay("codex_simple"), check=True)
    assert zw.wait(sid).returncode == 0
    assert turn(zw, sid, 3)["timeout"] == 900.0  # the session's limit again, not turn 2's


# ---------------------------------------------------------------------------- 6. partial usage
# claude_toolcall: message 1 (input 200, output 1 so far) on lines 3-5, a tool result on
# line 6, message 2 (260 fresh + 200 cache read, output 1 so far) on line 7; then the result
SO_FAR_6 = {"input_tokens": 200, "cached_input_tokens": 0, "output_tokens": 1,
            "reasoning_tokens": 0, "total_tokens": 201}  # fmt: skip
SO_FAR_7 = {"input_tokens": 660, "cached_input_tokens": 200, "output_tokens": 2,
            "reasoning_tokens": 0, "total_tokens": 662}  # fmt: skip


def test_a_timed_out_turn_keeps_the_usage_reported_so_far(zw) -> None:
    env = zw.replay("claude_toolcall", FAKE_HANG="7")
    sid = zw.spawn("x", "--adapter", "claude", "--timeout", "2", env_extra=env)
    assert zw.wait(sid).returncode == 1
    d = zw.json("show", sid)
    t = d["turns_detail"][0]
    assert t["reason"] == "timeout"
    assert t["usage"] == d["usage"] == SO_FAR_7  # before: all zero
    assert t["cost_usd"] is None  # claude reports cost only at the end: unknown, not zero


def test_a_killed_turn_keeps_the_usage_reported_so_far(zw) -> None:
    sid = zw.spawn(
        "x", "--adapter", "claude", env_extra=zw.replay("claude_toolcall", FAKE_HANG="6")
    )
    log = zw.turn_file(sid, 1)
    wait_until(lambda: log.exists() and log.read_bytes().count(b"\n") >= 6, message="6 lines")
    zw.run("kill", sid, check=True)

    def recorded() -> Any:
        t = turn(zw, sid, 1)
        return t if t["exit_code"] is not None or t["signal"] is not None else None

    t = wait_until(recorded, message="the supervisor to record the killed turn")
    assert (t["status"], t["usage"]) == ("killed", SO_FAR_6)


# ---------------------------------------------------------------------------- 7. codex's model
@pytest.mark.parametrize(
    ("config", "model"),
    [
        ('[codex.config]\nmodel = "gpt-6.1-sol"\n', "gpt-6.1-sol"),
        ('[codex]\nextra_args = ["-m", "gpt-5.5"]\n', "gpt-5.5"),
        ('[codex]\nmodel = "gpt-6-luna"\n', "gpt-6-luna"),
    ],
)
def test_codex_sessions_record_the_model_zwarm_asked_for(zw, config: str, model: str) -> None:
    zw.state_dir.mkdir()
    zw.write_config(config)
    sid = zw.spawn("x", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    (r,) = zw.json("ls")
    assert r["model"] == model  # before: None ("default")
    assert r["cost_source"] == "estimated" and r["cost_usd"] and r["cost_usd"] > 0
    assert model in zw.run("ls", check=True).stdout


# ---------------------------------------------------------------------------- 8. kill / rm
def test_kill_and_rm_do_every_valid_one_and_report_each(zw) -> None:
    a = zw.spawn("a", env_extra=HANG)
    b = zw.spawn("b", env_extra=HANG)
    res = zw.run("kill", a, "nosuch", b, a)
    no_traceback(res)
    assert res.returncode == 1
    assert lines(res.stdout) == [f"{a} killed", f"{b} killed"]  # before: neither was killed
    assert lines(res.stderr) == ["Error: no session matches 'nosuch'"]
    statuses = {r["id"]: r["status"] for r in zw.json("ls")}
    assert statuses == {a: "killed", b: "killed"}

    c = zw.spawn("c", env_extra=HANG)
    res = zw.run("rm", a, c, "nosuch", b)
    assert res.returncode == 1
    assert lines(res.stdout) == [f"{a} removed", f"{b} removed"]
    assert lines(res.stderr) == [
        f"Error: session {c} is running (kill it first, or use --force)",
        "Error: no session matches 'nosuch'",
    ]
    assert [r["id"] for r in zw.json("ls")] == [c]
    res = zw.run("rm", c, "nosuch", "--json")
    assert res.returncode == 1 and json.loads(res.stdout) == []
    # one reference alone: its own error, as before
    res = zw.run("kill", "nosuch")
    assert (res.returncode, lines(res.stderr)) == (1, ["Error: no session matches 'nosuch'"])


# ---------------------------------------------------------------------------- wait --all
def test_wait_all_waits_for_every_running_session(zw) -> None:
    done = zw.spawn("done", env_extra=zw.replay("codex_simple"))
    zw.wait(done)
    gate = zw.tmp / "gate"
    held = zw.replay("codex_simple", FAKE_WAIT_FILE=str(gate))
    slow = [zw.spawn(f"s{i}", env_extra=held) for i in (1, 2)]
    # it waits for both (and not for the finished one) until its own time limit
    res = zw.run("wait", "--all", "--timeout", "1", "--json")
    assert res.returncode == 124, (res.stdout, res.stderr)
    assert json.loads(res.stdout)["statuses"] == {s: "running" for s in slow}
    gate.touch()
    assert zw.wait(*slow).returncode == 0
    res = zw.run("wait", "--all", "--json")  # none running: at once
    assert res.returncode == 0 and json.loads(res.stdout)["statuses"] == {}
    assert zw.run("wait", "--all").stderr.strip() == "no session is running"
    usage = zw.run("wait")
    assert usage.returncode == 2 and "give session ids or --all" in usage.stderr


# ---------------------------------------------------------------------------- 12. missing files
def two_turns(zw: Any) -> str:
    sid = zw.spawn("first", env_extra=zw.replay("codex_simple"))
    zw.wait(sid)
    zw.run("inject", sid, "second", env_extra=zw.replay("codex_toolcall"), check=True)
    assert zw.wait(sid).returncode == 0
    return sid


def test_a_missing_turn_log_is_said_and_the_rest_shown(zw) -> None:
    sid = two_turns(zw)
    log1 = zw.turn_file(sid, 1)
    log1.unlink()
    res = zw.run("trajectory", sid, "--json")
    assert res.returncode == 1  # before: exit 0
    steps = json.loads(res.stdout)
    assert steps[0] == {"kind": "error", "message": f"turn 1's log is missing ({log1})",
                        "fatal": False, "turn": 1, "index": 0}  # fmt: skip
    assert {s["turn"] for s in steps[1:]} == {2} and len(steps) > 3
    assert lines(res.stderr) == [f"Error: turn 1's log is missing ({log1})"]
    human = zw.run("trajectory", sid)
    assert human.returncode == 1 and "missing" in human.stdout + human.stderr
    res = zw.run("logs", sid, "--turn", "1")
    assert (res.returncode, lines(res.stderr)) == (
        1,
        [f"Error: session {sid}: turn 1's log is missing ({log1})"],
    )  # before: nothing, exit 0
    assert zw.run("logs", sid, "--turn", "2", check=True).stdout


def test_a_damaged_meta_json_still_shows_the_turn_logs(zw) -> None:
    sid = two_turns(zw)
    meta = zw.session_dir(sid) / "meta.json"
    raw = meta.read_bytes()
    meta.write_bytes(raw[: len(raw) // 2])
    res = zw.run("trajectory", sid, "--json")
    no_traceback(res)
    assert res.returncode == 1
    steps = json.loads(res.stdout)  # before: refused, nothing shown
    assert steps[0]["kind"] == "error" and "is damaged" in steps[0]["message"]
    assert "showing the turn logs found (2 turns)" in steps[0]["message"]
    assert {s["turn"] for s in steps} == {1, 2}
    assert any(s.get("command") for s in steps)  # turn 2 ran a command
    err = lines(res.stderr)
    assert len(err) == 1 and f"session {sid} is damaged" in err[0]
    one = zw.run("trajectory", sid, "--turn", "1", "--json")
    assert {s["turn"] for s in json.loads(one.stdout)} == {1}
    res = zw.run_bytes("logs", sid)
    assert res.returncode == 1 and res.stdout == zw.turn_file(sid, 2).read_bytes()
    assert b"showing turn 2's log as found" in res.stderr
    assert meta.read_bytes() == raw[: len(raw) // 2]  # never rewritten
    # a session zwarm did not start (no launch pin) is not read as ours: refused as before
    planted = zw.state_dir / "sessions" / A
    planted.mkdir()
    (planted / "turns").mkdir()
    (planted / "turns" / "turn_1.jsonl").write_bytes(zw.sample_bytes("codex_simple"))
    (planted / "meta.json").write_bytes(b"{")
    res = zw.run("trajectory", A)
    assert res.returncode == 1 and lines(res.stderr) == [
        f"Error: session {A} is damaged: meta.json is not valid JSON: it ends early (truncated?)"
    ]
    assert res.stdout == ""


# ---------------------------------------------------------------------------- 13. messages
def test_a_missing_agent_path_is_not_said_to_be_on_path(zw) -> None:
    zw.state_dir.mkdir()
    zw.write_config('[codex]\ncommand = "/nonexistent/bin/codex"\n')
    res = zw.run("spawn", "x")
    assert res.returncode == 1
    assert lines(res.stderr) == [
        "Error: codex agent binary '/nonexistent/bin/codex' does not exist"
    ]


def test_native_follow_up_without_an_agent_session_says_it_falls_back(zw, tmp_path: Path) -> None:
    no_thread = tmp_path / "no_thread.jsonl"
    sample = zw.sample_bytes("codex_simple").splitlines(keepends=True)
    no_thread.write_bytes(b"".join(ln for ln in sample if b"thread.started" not in ln))
    sid = zw.spawn("x", env_extra={"FAKE_REPLAY": str(no_thread)})
    zw.wait(sid)
    res = zw.run("inject", sid, "more", "--context", "native",
                 env_extra={"FAKE_REPLAY": str(no_thread)})  # fmt: skip
    assert res.returncode == 0
    (warning,) = lines(res.stderr)  # before: nothing said
    assert warning.startswith(f"warning: session {sid}: its agent reported no session id")
    assert "turn 2 continues with a summary" in warning
    zw.wait(sid)
    assert turn(zw, sid, 2)["context"] == "summary"


def test_a_model_of_another_agent_is_warned_about(zw) -> None:
    res = zw.run("spawn", "x", "-m", "sonnet", "--adapter", "codex",
                 env_extra=zw.replay("codex_simple"))  # fmt: skip
    assert res.returncode == 0
    assert lines(res.stderr) == [
        "warning: model 'sonnet' names a claude model, but the session runs the codex agent, "
        "which may not know it"
    ]
    zw.wait(res.stdout.strip())
    quiet = zw.run("spawn", "x", "-m", "gpt-5", "--adapter", "codex",
                   env_extra=zw.replay("codex_simple"))  # fmt: skip
    assert quiet.returncode == 0 and quiet.stderr == ""
    zw.wait(quiet.stdout.strip())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"nope", "meta.json is not valid JSON: invalid character at byte 4"),
        (b'{"schema_version":2}x', "meta.json is not valid JSON: trailing characters at byte 21"),
        (b'{"schema_version": 2', "meta.json is not valid JSON: it ends early (truncated?)"),
    ],
)
def test_a_broken_meta_json_is_described_once(data: bytes, message: str) -> None:
    from zwarm.model.schema import decode

    with pytest.raises(ValueError) as e:
        decode(data)
    assert str(e.value) == message  # before: "... (truncated?): JSON is malformed: ... (byte 4)"


def test_usage_so_far_counts_each_model_call_once() -> None:
    from zwarm import agents
    from zwarm.model import Usage

    lines = (SAMPLES / "claude_toolcall.jsonl").read_bytes().splitlines(keepends=True)
    claude, codex = agents.get("claude"), agents.get("codex")
    assert claude.partial_usage(lines[:7]) == Usage(660, 200, 2, 0)
    assert claude.partial_usage(lines[:6]) == Usage(200, 0, 1, 0)
    assert claude.partial_usage(lines[:2]) is None  # no model call yet: unknown, not zero
    assert claude.partial_usage([b"\xff{not json", b'{"type":"assistant","usage":7}']) is None
    codex_lines = (SAMPLES / "codex_toolcall.jsonl").read_bytes().splitlines(keepends=True)
    assert codex.partial_usage(codex_lines[:-1]) is None  # codex reports usage only at the end
