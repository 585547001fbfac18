"""Coming from zwarm 3.x, the sessions: a state dir holding sessions written by the real zwarm
3.10.6 (``tests/fixtures/zwarm3/sessions``, made by ``tests/make_zwarm3_fixtures.py``; its
README describes the format) is read by this zwarm through the one schema (version 0): every
read command shows them with their real status, tokens and cost and reads their turn logs,
nothing rewritten; ``inject`` continues one only once the user confirmed its folder and agent
(pinned from that, never from the file), resuming the agent's own thread and keeping the 3.x
file beside the migrated record; ``rm`` removes them; ``kill`` never signals a 3.x pid; and a
damaged 3.x file is still reported damaged."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, ZW

ZWARM3 = ROOT / "tests" / "fixtures" / "zwarm3"
EXPECTED = {r["id"]: r for r in json.loads((ZWARM3 / "expected-3.10.6.json").read_text())}
CODEX_SIMPLE = "0563318d-9dd5-44d7-8205-78c585bf156a"
CODEX_ERROR = "fe4dc41c-9f32-4bcf-89b5-95c15c60b238"
CODEX_RESUME = "a8fd3dca-2729-4a4a-84d2-5a0ae2222fe4"
CLAUDE_SIMPLE = "efd912ce-aacd-46e1-a7c4-28042112aa2f"
CLAUDE_ERROR = "b4f3d841-e60f-4c7d-aeaf-cd08ed9071ef"
CLAUDE_RESUME = "f3d20822-a9bc-41b4-a0aa-dcfc35cacd93"
HANG = "7676599c-8ed2-4674-9335-dd0c160f1860"  # 3.x left it "running", its process gone
CODEX_THREAD = "01a1ffe7-1cd8-73d1-b100-1335f36dd616"  # in a8fd3dca's turn logs
CLAUDE_THREAD = "03f9693c-9b91-442a-8d50-c2baf6bdb463"  # in f3d20822's
PRICES = '[codex.prices]\n"gpt-5.2-codex" = { input = 1.0, cached_input = 0.1, output = 10.0 }\n'


def zwarm3_sessions(zw: ZW, project: Path | None = None) -> Path:
    """The state dir holding the sessions 3.10.6 wrote, as working in ``project`` (default the
    world's cwd: the fixtures' ``/ZWARM3_PROJECT`` replaced, as 3.x wrote the real path)."""
    zw.state_dir.mkdir(mode=0o700)
    shutil.copytree(ZWARM3 / "sessions", zw.state_dir / "sessions")
    where = json.dumps(str(project or zw.cwd))[1:-1].encode()
    for meta in (zw.state_dir / "sessions").glob("*/meta.json"):
        meta.write_bytes(meta.read_bytes().replace(b"/ZWARM3_PROJECT", where))
    return zw.state_dir


def tree_hash(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def rows(zw: ZW) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in zw.json("ls")}


def test_every_read_command_shows_3x_sessions_with_their_real_status_tokens_and_cost(
    zw: ZW,
) -> None:
    zwarm3_sessions(zw)
    zw.write_config(PRICES)  # today's table prices gpt-5.2-codex
    before = tree_hash(zw.state_dir / "sessions")
    got = rows(zw)
    assert set(got) == set(EXPECTED)
    for sid, want in EXPECTED.items():
        r = got[sid]
        assert (r["adapter"], r["task"], r["turns"]) == (
            want["adapter"],
            want["task"],
            want["turn"],
        )
        assert r["source"] == "zwarm3:user" and not r["damaged"]
        assert r["cwd"] == str(zw.cwd)
    # what 3.10.6 lists, where its turn logs agree
    for sid in (CODEX_SIMPLE, CODEX_RESUME, CLAUDE_SIMPLE, CLAUDE_RESUME):
        assert got[sid]["status"] == "completed" and got[sid]["error"] is None
    assert (got[CODEX_ERROR]["status"], got[CODEX_ERROR]["error"]) == (
        "failed",
        EXPECTED[CODEX_ERROR]["error"],
    )
    # 3.10.6 lists claude's API error as completed: its log says the turn failed (overloaded)
    assert got[CLAUDE_ERROR]["status"] == "failed" and got[CLAUDE_ERROR]["reason"] == "overloaded"
    # recorded running, its process gone: failed as lost, its pid only named
    hang = got[HANG]
    assert (hang["status"], hang["reason"]) == ("failed", "supervisor_lost")
    assert "zwarm 3.x recorded this turn running (agent pid 24413)" in hang["error"]
    # tokens: every turn's, from the logs (3.x kept the latest turn's only)
    assert (
        got[CODEX_SIMPLE]["usage"]["total_tokens"]
        == EXPECTED[CODEX_SIMPLE]["token_usage"]["total_tokens"]
    )
    assert got[CODEX_RESUME]["usage"]["total_tokens"] == (460 + 30) + (760 + 38)
    assert got[CLAUDE_SIMPLE]["usage"]["input_tokens"] == 100 + 40 + 10  # cache reads counted in
    # cost: codex priced by today's table, claude as it reported
    assert got[CODEX_SIMPLE]["cost_usd"] == pytest.approx((60 * 1.0 + 40 * 0.1 + 9 * 10.0) / 1e6)
    assert got[CODEX_SIMPLE]["cost_source"] == "estimated" and got[CODEX_SIMPLE]["cost_complete"]
    assert got[CLAUDE_SIMPLE]["cost_source"] == "reported" and got[CLAUDE_SIMPLE]["cost_usd"] > 0
    assert got[CODEX_RESUME]["agent_session_id"] == CODEX_THREAD
    assert got[CLAUDE_RESUME]["agent_session_id"] == CLAUDE_THREAD
    table = zw.run("ls", check=True).stdout
    assert "failed (lost)" in table and "failed (overloaded)" in table and "damaged" not in table
    shown = zw.json("show", CODEX_RESUME[:8])
    assert [t["status"] for t in shown["turns_detail"]] == ["completed", "completed"]
    assert shown["turns_detail"][0]["final_message"] == "Done: wrote hello to out.txt."
    assert "agent session " + CODEX_THREAD in zw.run("show", CODEX_RESUME, check=True).stdout
    assert "agent pid 24413" in zw.run("show", HANG, check=True).stdout
    steps = zw.json("trajectory", CLAUDE_RESUME)
    assert [s["turn"] for s in steps if s["kind"] == "message"][-1] == 2
    assert "Follow-up answer" in zw.run("trajectory", CLAUDE_RESUME, check=True).stdout
    assert any(s["kind"] == "command" for s in zw.json("trajectory", CODEX_RESUME, "--turn", "1"))
    log = zw.run_bytes("logs", CODEX_RESUME, "--turn", "1")
    assert log.returncode == 0
    assert (
        log.stdout == (ZWARM3 / "sessions" / CODEX_RESUME / "turns" / "turn_1.jsonl").read_bytes()
    )
    assert tree_hash(zw.state_dir / "sessions") == before  # nothing rewritten by a read


def test_a_damaged_3x_file_is_still_reported_damaged(zw: ZW) -> None:
    zwarm3_sessions(zw)
    meta = zw.session_dir(CODEX_SIMPLE) / "meta.json"
    meta.write_bytes(meta.read_bytes()[:-40])  # cut short
    bad = zw.session_dir(CLAUDE_SIMPLE) / "meta.json"
    bad.write_bytes(bad.read_bytes().replace(b'"completed"', b'"exploded"'))
    rel = zw.session_dir(CODEX_ERROR) / "meta.json"
    rel.write_bytes(rel.read_bytes().replace(json.dumps(str(zw.cwd))[1:-1].encode(), b"proj"))
    got = rows(zw)
    assert got[CODEX_SIMPLE]["status"] == "damaged" and "truncated" in got[CODEX_SIMPLE]["error"]
    assert got[CLAUDE_SIMPLE]["error"] == "zwarm 3.x meta.json: unknown status 'exploded'"
    assert "'working_dir' is not an absolute path" in got[CODEX_ERROR]["error"]
    assert got[CODEX_RESUME]["status"] == "completed"  # the others still read
    res = zw.run("show", CLAUDE_SIMPLE)
    assert (
        res.returncode == 1 and res.stderr.startswith("Error: ") and "Traceback" not in res.stderr
    )
    assert len(res.stderr.strip().splitlines()) == 1


def test_inject_refuses_an_unconfirmed_3x_session_in_one_line_and_writes_nothing(zw: ZW) -> None:
    zwarm3_sessions(zw)
    before = tree_hash(zw.state_dir / "sessions")
    res = zw.run("inject", CODEX_RESUME, "go on", env_extra=zw.replay("codex_resume"))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"Error: session {CODEX_RESUME} was made by zwarm 3.x")
    assert "--confirm-dir DIR --confirm-agent AGENT" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = zw.run("inject", CODEX_RESUME, "go on", "--confirm-dir", str(zw.cwd),
                 "--confirm-agent", "claude")  # fmt: skip
    assert res.returncode == 1 and "continues only with codex" in res.stderr
    res = zw.run("inject", CODEX_RESUME, "go on", "--confirm-dir", str(zw.state_dir),
                 "--confirm-agent", "codex")  # fmt: skip
    assert res.returncode == 1 and "inside zwarm's state dir" in res.stderr
    # through the API (the tools, MCP, HTTP): never continued without the user's word
    from zwarm.errors import SessionStateError

    with pytest.raises(SessionStateError, match=r"made by zwarm 3\.x"):
        zw.api().inject(CODEX_RESUME, "go on")
    res = zw.run("retry", CODEX_ERROR)
    assert res.returncode == 1 and "made by zwarm 3.x" in res.stderr
    assert tree_hash(zw.state_dir / "sessions") == before
    assert zw.calls() == 0
    assert not (Path(zw.env["HOME"]) / ".local" / "state" / "zwarm" / "pins").exists()


@pytest.mark.parametrize(
    ("sid", "agent", "thread", "sample"),
    [
        (CODEX_RESUME, "codex", CODEX_THREAD, "codex_resume"),
        (CLAUDE_RESUME, "claude", CLAUDE_THREAD, "claude_resume"),
    ],
)
def test_a_confirmed_inject_migrates_the_3x_record_and_resumes_the_agents_thread(
    zw: ZW, sid: str, agent: str, thread: str, sample: str
) -> None:
    zwarm3_sessions(zw, project=Path("/ZWARM3_PROJECT"))  # 3.x's folder: moved away since
    original = (zw.session_dir(sid) / "meta.json").read_bytes()
    res = zw.run("inject", sid, "now add a test", "--confirm-dir", str(zw.cwd),
                 "--confirm-agent", agent, "--wait", env_extra=zw.replay(sample))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"its record names '/ZWARM3_PROJECT'; it continues in {str(zw.cwd)!r}" in res.stderr
    argv, prompt = zw.recorded()
    assert thread in argv["argv"] and argv["cwd"] == str(zw.cwd)
    assert prompt == b"now add a test"  # native resume: the message alone
    meta = zw.meta(sid)
    assert meta["schema_version"] == 3 and meta["imported"] is None
    assert meta["cwd"] == str(zw.cwd) and meta["source"] == "zwarm3:user"
    assert [t["status"] for t in meta["turns"]] == ["completed", "completed", "completed"]
    assert (
        meta["turns"][2]["context"] == "native" and meta["turns"][2]["agent_session_id"] == thread
    )
    assert (zw.session_dir(sid) / "meta.json.zwarm3").read_bytes() == original
    r = rows(zw)[sid]
    assert r["turns"] == 3 and r["status"] == "completed"
    # confirming again is refused in words that fit a session ls shows as zwarm3's (it said
    # "is not a zwarm 3.x session")
    res = zw.run("inject", sid, "and the docs", "--confirm-dir", str(zw.cwd),
                 "--confirm-agent", agent, env_extra=zw.replay(sample))  # fmt: skip
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        f"Error: session {sid} was made by zwarm 3.x and is already continued here (its "
        f"folder and agent confirmed: {agent} in {str(zw.cwd)!r}): inject it without "
        "--confirm-dir and --confirm-agent"
    ]
    # a further inject needs no confirmation: the session is zwarm's now, pinned
    res = zw.run("inject", sid, "and the docs", "--wait", env_extra=zw.replay(sample))
    assert res.returncode == 0, res.stderr
    assert zw.meta(sid)["turns"][3]["status"] == "completed"
    assert zw.run("rm", sid).returncode == 0
    assert not zw.session_dir(sid).exists()


def test_a_pin_decides_what_a_continued_3x_session_runs_not_its_record(zw: ZW) -> None:
    """After the confirmation, an agent rewriting the migrated record's folder gets the turn
    refused (the launch pin holds what the user confirmed)."""
    zwarm3_sessions(zw)
    res = zw.run("inject", CODEX_SIMPLE, "go", "--confirm-dir", str(zw.cwd), "--confirm-agent",
                 "codex", "--wait", env_extra=zw.replay("codex_resume"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    meta = zw.meta(CODEX_SIMPLE)
    meta["cwd"] = "/"
    (zw.session_dir(CODEX_SIMPLE) / "meta.json").write_text(json.dumps(meta))
    calls = zw.calls()
    res = zw.run("inject", CODEX_SIMPLE, "again", "--wait", env_extra=zw.replay("codex_resume"))
    assert res.returncode == 1
    assert zw.meta(CODEX_SIMPLE)["turns"][-1]["reason"] == "start_failed"
    assert zw.calls() == calls


def test_kill_and_rm_of_a_3x_session_recorded_running_never_signal_its_pid(zw: ZW) -> None:
    zwarm3_sessions(zw)
    victim = subprocess.Popen(["sleep", "600"], start_new_session=True)  # as 3.x's agent was
    try:
        meta = zw.session_dir(HANG) / "meta.json"
        meta.write_bytes(
            meta.read_bytes().replace(b'"pid": 24413', f'"pid": {victim.pid}'.encode())
        )
        r = rows(zw)[HANG]
        assert (r["status"], r["reason"]) == ("failed", "supervisor_lost")
        res = zw.run("kill", HANG)
        assert res.returncode == 1 and "made by zwarm 3.x" in res.stderr
        assert "Traceback" not in res.stderr
        assert zw.run("kill", "--all").returncode == 0
        assert victim.poll() is None  # never signalled
        assert zw.run("rm", HANG).returncode == 0
        assert not zw.session_dir(HANG).exists()
        assert victim.poll() is None
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()


def test_rm_removes_3x_sessions(zw: ZW) -> None:
    zwarm3_sessions(zw)
    res = zw.run("rm", CODEX_SIMPLE, CLAUDE_ERROR)
    assert res.returncode == 0, res.stderr
    assert set(rows(zw)) == set(EXPECTED) - {CODEX_SIMPLE, CLAUDE_ERROR}
    assert not zw.session_dir(CODEX_SIMPLE).exists()


def _on_terminal(zw: ZW, answer: bytes, *args: str, env_extra: dict[str, str]) -> tuple[int, str]:
    """``zwarm ARGS`` with a terminal as its stdin, ``answer`` typed there; (exit, stderr)."""
    import pty

    from tests.support import ZWARM_BIN

    master, slave = pty.openpty()
    try:
        os.write(master, answer)
        proc = subprocess.run(
            [str(ZWARM_BIN), *args],
            stdin=slave,
            capture_output=True,
            env={**zw.env, **env_extra},
            cwd=zw.cwd,
            timeout=120,
        )
    finally:
        os.close(slave)
        os.close(master)
    return proc.returncode, proc.stderr.decode()


def test_on_a_terminal_the_user_confirms_the_folder_and_agent_the_record_names(zw: ZW) -> None:
    zwarm3_sessions(zw)
    before = tree_hash(zw.state_dir / "sessions")
    code, err = _on_terminal(zw, b"n\n", "inject", CLAUDE_RESUME, "go on", env_extra={})
    assert code == 1 and err.endswith(
        "Error: session " + CLAUDE_RESUME + ": not continued (not confirmed)\n"
    )
    assert f"Continue it with claude in {str(zw.cwd)!r}? [y/N]" in err
    assert tree_hash(zw.state_dir / "sessions") == before and zw.calls() == 0
    gone = zw.session_dir(CODEX_RESUME) / "meta.json"  # 3.x's folder, since moved away
    gone.write_bytes(gone.read_bytes().replace(json.dumps(str(zw.cwd))[1:-1].encode(), b"/gone"))
    code, err = _on_terminal(zw, b"y\n", "inject", CODEX_RESUME, "go on", env_extra={})
    assert code == 1 and err.endswith(
        "working directory '/gone' does not exist (name the folder it continues in with "
        "--confirm-dir DIR)\n"
    )
    replay = zw.replay("claude_resume")
    code, err = _on_terminal(
        zw, b"y\n", "inject", CLAUDE_RESUME, "go on", "--wait", env_extra=replay
    )
    assert code == 0, err
    assert CLAUDE_THREAD in zw.recorded()[0]["argv"]
    assert zw.meta(CLAUDE_RESUME)["turns"][2]["status"] == "completed"


def test_a_3x_session_without_a_thread_id_continues_with_a_summary(zw: ZW) -> None:
    zwarm3_sessions(zw)
    for log in (zw.session_dir(CODEX_SIMPLE) / "turns").iterdir():
        log.write_bytes(b"Reading prompt from stdin...\n")  # 3.x merged stderr, no thread id
    confirm = ["--confirm-dir", str(zw.cwd), "--confirm-agent", "codex"]
    res = zw.run("inject", CODEX_SIMPLE, "carry on", *confirm, "--wait",
                 env_extra=zw.replay("codex_simple"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "continues with a summary of the earlier turns" in res.stderr
    argv, prompt = zw.recorded()
    assert "resume" not in argv["argv"]
    assert b"carry on" in prompt and b"Write hello.py printing hello" in prompt
    assert zw.meta(CODEX_SIMPLE)["turns"][1]["context"] == "summary"


def test_diff_of_a_3x_session_in_a_git_project_says_3x_recorded_no_workspace(zw: ZW) -> None:
    """zwarm 3.x kept no git workspace for a session: ``diff`` (and the tools' get_diff) said
    "it was not started in a git repository" of a session started in one."""
    subprocess.run(["git", "init", "-q", str(zw.cwd)], check=True, env=zw.env)
    zwarm3_sessions(zw)
    for sid in (CODEX_SIMPLE, CLAUDE_RESUME):
        res = zw.run("diff", sid)
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.strip().splitlines() == [
            f"Error: session {sid} was made by zwarm 3.x, which recorded no git workspace: "
            "zwarm cannot tell what it changed"
        ]


def test_show_says_a_3x_follow_up_prompt_was_not_recorded(zw: ZW) -> None:
    """zwarm 3.x kept the task, not a follow-up's message: ``show`` printed an empty
    "prompt: " line for such a turn."""
    zwarm3_sessions(zw)
    out = zw.run("show", CODEX_RESUME, check=True).stdout
    prompts = [ln for ln in out.splitlines() if ln.startswith("prompt:")]
    assert prompts == [
        "prompt: Create out.txt saying hello (sample=codex_resume_turn1)",
        "prompt: (not recorded)",
    ]


def test_a_session_of_this_zwarm_rewritten_as_3x_is_never_adopted(zw: ZW) -> None:
    """Regression: an agent that rewrote its own session's meta.json in zwarm 3.x's format got
    it "continued" once the user confirmed it: adopting replaced the session's launch pin,
    dropping its workspace (so ``rm`` left its worktree and branch behind) and its launcher
    options. zwarm 3.x made no pins: a session with one is this zwarm's, tampered with."""
    sid = zw.spawn("task", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    from zwarm.store import pins

    pin = pins.pins_dir(os.environ) / f"{sid}.json"
    before = pin.read_bytes()
    forged = {
        "id": sid, "task": "t", "status": "completed", "working_dir": str(zw.cwd),
        "created_at": "2025-01-01T00:00:00", "updated_at": "2025-01-01T00:00:00",
        "pid": None, "exit_code": 0, "model": None, "turn": 1, "messages": [],
        "token_usage": {}, "error": None, "source": "user", "adapter": "codex",
    }  # fmt: skip
    (zw.session_dir(sid) / "meta.json").write_text(json.dumps(forged))
    calls = zw.calls()
    res = zw.run("inject", sid, "go on", "--confirm-dir", str(zw.cwd), "--confirm-agent",
                 "codex", env_extra=zw.replay("codex_simple"))  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "rewritten" in res.stderr
    assert pin.read_bytes() == before and zw.calls() == calls
    assert not (zw.session_dir(sid) / "meta.json.zwarm3").exists()
