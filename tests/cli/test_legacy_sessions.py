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
