"""How turns fail, as the agents really fail: their own error messages, exit codes, output
cut off, agents that cannot start; and a 200 KiB prompt that must arrive intact."""

from __future__ import annotations

import os

import pytest


def _turn(zw, sid: str, n: int = 1) -> dict:
    return zw.json("show", sid)["turns_detail"][n - 1]


def test_codex_turn_failed_uses_the_agents_message(zw) -> None:
    sid = zw.spawn("t", env_extra={**zw.replay("codex_error"), "FAKE_EXIT": "1"})
    assert zw.wait(sid).returncode == 1
    t = _turn(zw, sid)
    msg = "We’re currently experiencing high demand, which may cause temporary errors."
    assert (t["status"], t["exit_code"], t["error"]) == ("failed", 1, msg)
    r = zw.json("ls")[0]
    assert (r["status"], r["error"]) == ("failed", msg)
    assert msg in zw.run("show", sid, check=True).stdout
    steps = zw.json("trajectory", sid)
    assert any(s["kind"] == "error" for s in steps)


def test_codex_turn_failed_even_with_exit_zero(zw) -> None:
    sid = zw.spawn("t", env_extra=zw.replay("codex_error"))
    assert zw.wait(sid).returncode == 1
    assert _turn(zw, sid)["status"] == "failed"


def test_codex_error_events_then_success_is_completed(zw) -> None:
    sid = zw.spawn("t", env_extra=zw.replay("codex_err500_then_ok_with_retries"))
    assert zw.wait(sid).returncode == 0
    t = _turn(zw, sid)
    assert (t["status"], t["final_message"], t["error"]) == (
        "completed",
        "recovered after retries",
        None,
    )


@pytest.mark.parametrize(
    ("sample", "expect"),
    [
        ("claude_error", "API Error: 500 fake internal server error"),
        ("claude_max_turns", "maximum number of turns"),
    ],
)
def test_claude_is_error_fails(zw, sample: str, expect: str) -> None:
    sid = zw.spawn("t", "--adapter", "claude", env_extra={**zw.replay(sample), "FAKE_EXIT": "1"})
    assert zw.wait(sid).returncode == 1
    t = _turn(zw, sid)
    assert (t["status"], t["exit_code"]) == ("failed", 1)
    assert expect in t["error"]
    assert expect in zw.json("ls")[0]["error"]


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_nonzero_exit_without_terminal_event(zw, adapter: str) -> None:
    env = {"FAKE_EXIT": "3", "FAKE_STDERR": "fatal: cannot reach the model provider"}
    sid = zw.spawn("t", "--adapter", adapter, env_extra=env)
    assert zw.wait(sid).returncode == 1
    t = _turn(zw, sid)
    assert (t["status"], t["exit_code"]) == ("failed", 3)
    assert "agent exited with code 3" in t["error"]
    assert "fatal: cannot reach the model provider" in t["error"]
    assert zw.turn_file(sid, 1, "stderr").read_bytes() == (
        b"fatal: cannot reach the model provider\n"
    )


def test_clean_exit_without_terminal_event_is_failed(zw, tmp_path) -> None:
    """Output cut off mid-line (agent died mid-write): failed, and what was there is readable."""
    lines = zw.sample_bytes("codex_toolcall").splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:-1]) + lines[-1][:25])
    sid = zw.spawn("t", env_extra={"FAKE_REPLAY": str(cut)})
    assert zw.wait(sid).returncode == 1
    t = _turn(zw, sid)
    assert t["status"] == "failed" and t["exit_code"] == 0
    assert "no turn result" in t["error"]
    steps = zw.json("trajectory", sid)
    assert [s["text"] for s in steps if s["kind"] == "message"][-1] == (
        "Done: wrote hello to out.txt."
    )
    assert zw.run_bytes("logs", sid).stdout == cut.read_bytes()


def test_agent_that_cannot_start(zw) -> None:
    bad = zw.tmp / "bad-agent"
    bad.write_text("#!/nonexistent/interpreter\n")
    bad.chmod(0o755)
    zw.state_dir.mkdir()
    zw.write_config(f'[codex]\ncommand = ["{bad}"]\n')
    sid = zw.spawn("t")
    assert zw.wait(sid).returncode == 1
    t = _turn(zw, sid)
    assert t["status"] == "failed"
    assert "could not start agent" in t["error"] and str(bad) in t["error"]


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_200k_prompt_on_stdin_arrives_intact(zw, adapter: str) -> None:
    line = "Lorem ipsum dolor sit amet, ünïcödé ✓ — 0123456789.\n"
    prompt = (line * (200 * 1024 // len(line.encode()) + 1)).encode()
    assert len(prompt) > 200 * 1024
    res = zw.run(
        "spawn",
        "-",
        "--adapter",
        adapter,
        input=prompt,
        env_extra=zw.replay("codex_simple" if adapter == "codex" else "claude_simple"),
    )
    assert res.returncode == 0, res.stderr
    sid = res.stdout.strip()
    assert zw.wait(sid).returncode == 0
    rec, got = zw.recorded()
    assert got == prompt
    assert sum(len(a) for a in rec["argv"]) < 2000  # not on the command line
    assert zw.turn_file(sid, 1, "prompt").read_bytes() == prompt
    r = zw.json("ls")[0]
    assert prompt.decode().startswith(r["task"]) and len(r["task"]) < len(prompt)
    # a follow-up still carries the (cut) task
    zw.run(
        "inject",
        sid,
        "next",
        env_extra=zw.replay("codex_simple" if adapter == "codex" else "claude_simple"),
        check=True,
    )
    assert zw.wait(sid).returncode == 0
    p2 = zw.recorded()[1].decode()
    assert line.strip() in p2 and p2.rstrip().endswith("next")


def test_stdin_message_for_inject(zw) -> None:
    sid = zw.spawn("t", env_extra=zw.replay("codex_simple"))
    zw.wait(sid)
    zw.run(
        "inject",
        sid,
        "-",
        input="from stdin\nline two\n",
        env_extra=zw.replay("codex_simple"),
        check=True,
    )
    assert zw.wait(sid).returncode == 0
    assert zw.recorded()[1].decode().rstrip().endswith("from stdin\nline two")


def test_files_are_private(zw) -> None:
    sid = zw.spawn(
        "secret", "--name", "priv", env_extra={**zw.replay("codex_simple"), "FAKE_STDERR": "x"}
    )
    assert zw.wait(sid).returncode == 0
    assert os.stat(zw.state_dir).st_mode & 0o777 == 0o700
    for p in zw.session_dir(sid).rglob("*"):
        want = 0o700 if p.is_dir() else 0o600
        assert p.stat().st_mode & 0o777 == want, p
    for ext in ("jsonl", "stderr", "prompt"):
        assert zw.turn_file(sid, 1, ext).exists()


@pytest.mark.parametrize(
    "adapter,sample", [("codex", "codex_toolcall"), ("claude", "claude_toolcall")]
)
def test_spaced_json_output_still_yields_the_outcome(zw, adapter: str, sample: str) -> None:
    """Output laid out differently from the CLIs' compact JSON is still understood."""
    import json

    spaced = zw.tmp / f"{sample}_spaced.jsonl"
    lines = zw.sample_bytes(sample).splitlines()
    spaced.write_bytes(b"".join(json.dumps(json.loads(x)).encode() + b"\n" for x in lines))
    sid = zw.spawn("t", "--adapter", adapter, env_extra={"FAKE_REPLAY": str(spaced)})
    assert zw.wait(sid).returncode == 0
    t = _turn(zw, sid)
    assert (t["status"], t["final_message"]) == ("completed", "Done: wrote hello to out.txt.")
