"""Everyday use, through the real ``zwarm`` command: nothing an agent or a user wrote drives the
terminal, a reader that goes away ends a command quietly, trajectory/logs follow a session
across its queued turns, the waits say what they wait for, ls filters and fits, and every
command's help shows an example. (The live views in a real terminal: ``test_live_tmux.py``.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZWARM_BIN, wait_until
from zwarm.text import cells

ESC_TASK = "fix \x1b[31mRED\x1b[0m \x1b]0;pwned\x07 now"


def escape_replay(zw: Any) -> dict[str, str]:
    """A codex replay whose message, command and output carry escape sequences."""
    lines = zw.sample_bytes("codex_toolcall").decode().splitlines()
    nasty = json.dumps("\x1b[2J\x1b[31mcleared\x1b[0m\u202e")[1:-1]  # JSON-escaped, as agents write
    out = [ln.replace("Done: wrote hello to out.txt.", f"Done {nasty}") for ln in lines]
    out = [ln.replace("echo hello > out.txt", f"echo {nasty}") for ln in out]
    path = zw.tmp / "escapes.jsonl"
    path.write_text("\n".join(out) + "\n")
    return {"FAKE_REPLAY": str(path)}


def no_controls(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\x9b\u202e")


# ---------------------------------------------------------------------- control characters
def test_nothing_printed_can_drive_the_terminal(zw: Any) -> None:
    """Regression: a task with escape sequences recoloured the terminal in ``zwarm ls``."""
    env = escape_replay(zw)
    res = zw.run("spawn", ESC_TASK, "--wait", env_extra=env)
    assert res.returncode == 0, res.stderr
    sid = res.stdout.splitlines()[0]
    assert no_controls(res.stdout), res.stdout
    outputs = {
        "ls": zw.run("ls", check=True).stdout,
        "ls-80": zw.run("ls", env_extra={"COLUMNS": "80"}, check=True).stdout,
        "show": zw.run("show", sid, check=True).stdout,
        "trajectory": zw.run("trajectory", sid, check=True).stdout,
        "trajectory-f": zw.run("trajectory", sid, "-f", check=True).stdout,
        "inject-wait": zw.run("inject", sid, "again \x1b[5m", "--wait", env_extra=env).stdout,
        "wait": zw.run("wait", sid, check=True).stdout,
    }
    for name, out in outputs.items():
        assert no_controls(out), (name, out)
    assert "fix RED now" in outputs["ls"] and "fix RED now" in outputs["show"]
    assert "cleared" in outputs["trajectory"]
    err = zw.run("show", "\x1b[31mnope").stderr  # an error quoting what the user typed
    assert no_controls(err) and err.count("\n") == 1, err
    # --json keeps the exact text (escaped by JSON): it is for programs, not terminals
    assert zw.json("show", sid)["task"] == ESC_TASK


def test_trust_shows_what_it_would_trust_exactly_never_interpreted(zw: Any) -> None:
    """A planted config's control characters are shown as escapes in the review, so what the
    user reads is what they trust, and the terminal is never driven by it."""
    zw.state_dir.mkdir()
    (zw.state_dir / "config.toml").write_text(
        '[codex]\ncommand = ["codex", "\\u009b2J\\u001b]0;x\\u0007ok\\u202e"]\n'
    )
    res = zw.run("trust", "--yes", check=True)
    assert no_controls(res.stdout + res.stderr), res.stdout
    assert "\\u009b2J\\u001b]0;x\\u0007ok\\u202e" in res.stdout


def test_logs_on_a_terminal_are_cleaned_and_piped_logs_are_exact(zw: Any) -> None:
    path = zw.tmp / "raw.jsonl"
    raw = b'{"type":"turn.started"}\n\x1b[31mnot json\x1b[0m\n'
    path.write_bytes(raw + zw.sample_bytes("codex_simple"))
    sid = zw.spawn("t", env_extra={"FAKE_REPLAY": str(path)})
    zw.wait(sid)
    piped = zw.run_bytes("logs", sid).stdout
    assert piped == path.read_bytes()  # byte for byte
    script = f"import pty, sys; sys.exit(pty.spawn([{str(ZWARM_BIN)!r}, 'logs', {sid!r}]))"
    tty = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=zw.env, cwd=zw.cwd, timeout=120
    )
    assert b"not json" in tty.stdout and b"\x1b[31m" not in tty.stdout


# ---------------------------------------------------------------------- readers that go away
def closed_stdout(zw: Any, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``zwarm ARGS`` with its stdout a pipe whose reader has already gone."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(
            [str(ZWARM_BIN), *args],
            stdout=w,
            stderr=subprocess.PIPE,
            env=zw.env,
            cwd=zw.cwd,
            timeout=120,
        )
    finally:
        os.close(w)


def test_a_reader_that_goes_away_ends_every_command_quietly(zw: Any) -> None:
    """Regression: ``zwarm show X | head -1`` and ``trajectory X | head`` exited 1."""
    sid = zw.spawn("t", "--name", "piped", "--adapter", "claude",
                   env_extra=zw.replay("claude_toolcall"))  # fmt: skip
    assert zw.wait(sid).returncode == 0
    for args in (
        ["show", sid],
        ["trajectory", sid],
        ["trajectory", sid, "--json"],
        ["trajectory", sid, "-f"],
        ["ls"],
        ["ls", "--json"],
        ["logs", sid],
        ["--help"],
        ["show", sid, "--json"],
    ):
        res = closed_stdout(zw, *args)
        assert (res.returncode, res.stderr) == (0, b""), (args, res)


def test_a_wait_whose_reader_went_away_still_exits_by_its_result(zw: Any) -> None:
    ok = zw.spawn("t", env_extra=zw.replay("codex_simple"))
    bad = zw.spawn("t", env_extra={**zw.replay("codex_simple"), "FAKE_FAIL_ON": "t"})
    zw.wait(ok, bad)
    assert closed_stdout(zw, "wait", ok).returncode == 0
    res = closed_stdout(zw, "wait", bad)
    assert (res.returncode, res.stderr) == (1, b"")


# ---------------------------------------------------------------------- following a session
def test_trajectory_starts_with_a_header_naming_the_session(zw: Any) -> None:
    sid = zw.spawn("t", "--name", "hdr", "--adapter", "claude",
                   env_extra=zw.replay("claude_toolcall"))  # fmt: skip
    zw.wait(sid)
    first, second = zw.run("trajectory", sid, check=True).stdout.splitlines()[:2]
    assert first == f"session {sid} (hdr)"
    assert second == "claude · claude-opus-5-5 · completed · 1 turn · 690 tokens"


def gated_with_queue(zw: Any, sample: str) -> tuple[str, Path, dict[str, str]]:
    """A session whose first turn is held, with a second turn queued behind it."""
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, **zw.replay(sample))
    sid = zw.spawn("first", env_extra=env)
    assert zw.run("inject", sid, "second", env_extra=env, check=True).stdout.endswith(
        "queued (turn 2)\n"
    )
    return sid, hold, env


def popen(zw: Any, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(ZWARM_BIN), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=zw.env,
        cwd=zw.cwd,
    )


def test_trajectory_follow_is_live_across_queued_turns_until_idle(zw: Any) -> None:
    sid, hold, _ = gated_with_queue(zw, "codex_toolcall")
    proc = popen(zw, "trajectory", sid, "-f")
    assert proc.stdout is not None
    header = proc.stdout.readline() + proc.stdout.readline()
    assert header.startswith(f"session {sid}\n") and "running" in header
    assert "1 turn (+1 queued)" in header
    assert proc.poll() is None  # following: the turn is held
    hold.unlink()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.count("Done: wrote hello to out.txt.") == 2  # both turns, live
    assert "turn 1 completed · took" in out and "turn 2 completed · took" in out
    assert out.rstrip().endswith(f"session {sid[:8]} is idle (completed)")
    steps = zw.json("trajectory", sid)
    live = zw.run("trajectory", sid, "-f", "--json", check=True).stdout
    assert json.loads(live) == steps  # -f --json: the same steps, numbered the same


def test_trajectory_follow_interrupted_leaves_the_session_running(zw: Any) -> None:
    hold = zw.tmp / "hold"
    hold.touch()
    sid = zw.spawn("t", env_extra=zw.gated(hold, **zw.replay("codex_simple")))
    proc = popen(zw, "trajectory", sid, "-f")
    assert proc.stdout is not None and proc.stdout.readline().startswith("session ")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"{sid} is still running; `zwarm kill {sid}` stops it" in err
    assert "Traceback" not in err
    assert zw.meta(sid)["status"] == "running"
    hold.unlink()
    assert zw.wait(sid).returncode == 0


def test_logs_follow_continues_into_queued_turns(zw: Any) -> None:
    """Regression: ``logs -f`` stopped when the first turn ended, though a queued one began."""
    sid, hold, _ = gated_with_queue(zw, "codex_simple")
    proc = subprocess.Popen(
        [str(ZWARM_BIN), "logs", sid, "--turn", "1", "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=zw.env,
        cwd=zw.cwd,
    )
    wait_until(lambda: zw.turn_file(sid, 1).exists(), message="turn 1 log")
    hold.unlink()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out == zw.turn_file(sid, 1).read_bytes() + zw.turn_file(sid, 2).read_bytes()


# ---------------------------------------------------------------------- waiting
def test_spawn_and_inject_wait_print_the_session_first(zw: Any) -> None:
    res = zw.run("spawn", "t", "--wait", env_extra=zw.replay("codex_simple"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    sid = lines[0]
    assert len(sid) == 36 and lines[1] == f"{sid} completed"
    assert res.stderr == ""  # no progress when stderr is not a terminal
    res = zw.run("inject", sid[:6], "more", "--wait", env_extra=zw.replay("codex_simple"))
    assert res.stdout.splitlines()[:2] == [f"{sid} started (turn 2)", f"{sid} completed"]
    res = zw.run("spawn", "t", "--wait", "--json", env_extra=zw.replay("codex_simple"))
    assert json.loads(res.stdout)["status"] == "completed"  # --json: one document only


# ---------------------------------------------------------------------- ls
def test_ls_filters_and_limit(zw: Any) -> None:
    env = zw.replay("codex_simple")
    a = zw.spawn("a", "--name", "api-fix", env_extra=env)
    b = zw.spawn("b", "--name", "api-docs", env_extra=env)
    c = zw.spawn("c", "--name", "web", "--adapter", "claude",
                 env_extra=zw.replay("claude_simple"))  # fmt: skip
    zw.wait(a, b, c)

    def ids(*args: str) -> list[str]:
        return [r["id"] for r in zw.json("ls", *args)]

    assert ids("--name", "api-*") == [a, b]
    assert ids("--name", "web") == [c]
    assert ids("--adapter", "claude") == [c]
    assert ids("--source", "cli") == [a, b, c]
    assert ids("--source", "mcp:*") == []
    assert ids("--limit", "2") == [b, c]
    assert ids("--name", "api-*", "--limit", "1") == [b]
    table = zw.run("ls", "--adapter", "codex", check=True).stdout
    assert a[:8] in table and c[:8] not in table


def test_ls_fits_80_columns_and_says_why_a_session_failed(zw: Any) -> None:
    long_task = "please refactor the whole parser module and add property tests " * 4
    ok = zw.spawn(
        long_task, "--name", "a-rather-long-session-name", env_extra=zw.replay("codex_simple")
    )
    bad = zw.spawn("t", env_extra={**zw.replay("codex_simple"), "FAKE_FAIL_ON": "t"})
    zw.wait(ok, bad)
    for width in (80, 160):
        out = zw.run("ls", env_extra={"COLUMNS": str(width)}, check=True).stdout
        lines = out.splitlines()
        assert len(lines) == 3 and all(cells(x) <= width for x in lines), out
        assert "failed (exit 3)" in next(x for x in lines if x.startswith(bad[:8]))
        assert "please refactor" in next(x for x in lines if x.startswith(ok[:8]))


# ---------------------------------------------------------------------- help and init
def commands() -> list[tuple[str, bool]]:
    """Every listed command, and whether it takes sessions (a SESSION/SESSIONS argument)."""
    import click

    from zwarm.cli.commands import cli

    ctx = click.Context(cli)
    out = []
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        args = {p.name for p in cmd.params if isinstance(p, click.Argument)}
        out.append((name, bool(args & {"session", "sessions"})))
    return out


@pytest.mark.parametrize(("command", "takes_sessions"), commands())
def test_every_command_help_has_an_example(zw: Any, command: str, takes_sessions: bool) -> None:
    out = zw.run(command, "--help", check=True).stdout
    assert "Example" in out and f"zwarm {command}" in out.split("Example", 1)[1], out
    if takes_sessions:
        assert "unique prefix of it (4+ characters), or its name" in " ".join(out.split()), out


def test_spawn_help_names_the_best_of_options_as_options(zw: Any) -> None:
    """spawn --help said "With best_of: ..." (the request field) for --agents, --check ...:
    an option the command line does not have."""
    out = " ".join(zw.run("spawn", "--help", check=True).stdout.split())
    assert "best_of" not in out and "With --best-of: a command that decides" in out
    assert "(with --models: paired)" in out and "(with --agents: paired)" in out


def test_top_level_help_never_cuts_a_description(zw: Any) -> None:
    """Regression: command descriptions were cut at 60 characters ('... stdin);...')."""
    out = zw.run("--help", env_extra={"COLUMNS": "80"}, check=True).stdout
    listing = out.split("Commands:", 1)[1]
    rows: list[str] = []
    for line in listing.splitlines():
        if line.startswith("  ") and not line.startswith("    "):
            rows.append(line.strip())
        elif line.strip():
            rows[-1] += " " + line.strip()
    assert len(rows) == len(commands())
    for r in rows:
        name, text = r.split(None, 1)
        assert text.endswith(".") and "..." not in text, r
        assert not name.startswith("_"), r  # hidden commands are not listed


def test_init_writes_every_key_with_a_comment(zw: Any) -> None:
    """Regression: ``zwarm init`` wrote bare TOML, no word on what any key does."""
    zw.run("init", "--yes", check=True)
    text = (zw.state_dir / "config.toml").read_text()
    from zwarm.config import defaults

    assert tomllib.loads(text) == defaults().data
    lines = text.splitlines()
    keys = [i for i, ln in enumerate(lines) if " = " in ln and not ln.startswith("#")]
    assert len(keys) > 30
    assert all(lines[i - 1].startswith("# ") for i in keys)
    assert "# Time limit of each turn" in text and "[hooks]" in text


def test_the_demo_shows_what_the_real_commands_print(zw: Any) -> None:
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(zw.tmp / "t")}
    (zw.tmp / "t").mkdir()
    res = zw.run("demo", env_extra=env, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    sid = out.split("$ zwarm spawn", 1)[1].splitlines()[1]
    assert len(sid) == 36
    assert f"{sid} completed" in out  # what `zwarm wait` prints
    assert f"{sid} started (turn 2)" in out  # what `zwarm inject --wait` prints
    assert f"session {sid}\ncodex · demo · completed · 1 turn" in out  # trajectory's header


def test_mcp_help_lists_install_uncut_and_the_top_level_help_names_it(zw: Any) -> None:
    """Regression: ``zwarm mcp --help`` cut install's description ('... a plain headless
    run...'), and ``zwarm --help`` said only "Serve zwarm's tools over MCP (stdio)": a user
    looking for how to wire zwarm into Claude Code or Codex did not find it there."""
    out = zw.run("mcp", "--help", env_extra={"COLUMNS": "80"}, check=True).stdout
    listing = " ".join(out.split("Commands:", 1)[1].split())
    assert listing.startswith("install ") and listing.endswith(".") and "..." not in listing
    top = zw.run("--help", env_extra={"COLUMNS": "80"}, check=True).stdout
    (row,) = [ln for ln in top.splitlines() if ln.strip().startswith("mcp ")]
    assert "mcp install" in row, row


def test_spawn_help_gives_the_default_of_every_option_the_config_sets(zw: Any) -> None:
    """Regression: --timeout, --max-cost, --max-tokens and --stall said nothing of their
    default (the config's), where --context, --worktree and --launcher name theirs."""
    out = " ".join(zw.run("spawn", "--help", check=True).stdout.split())
    for said in (
        "(default: [defaults] timeout)",
        "(default: its group's, else [limits] max_cost)",
        "(default: its group's, else [limits] max_tokens)",
        "(default: [limits] stall_s)",
    ):
        assert said in out, said


def test_inject_wait_of_a_failed_turn_never_shows_an_earlier_turns_answer(zw: Any) -> None:
    """Regression: ``inject --wait`` whose turn failed printed the previous turn's final
    message under the failure (and gave it as this turn's ``last_message`` in --json), as if
    the agent had answered the follow-up."""
    sid = zw.spawn("t", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    earlier = zw.json("show", sid)["last_message"]
    assert earlier
    res = zw.run("inject", sid, "more", "--wait", env_extra={"FAKE_EXIT": "3"})
    assert res.returncode == 1 and f"{sid} failed" in res.stdout, res.stdout
    assert earlier not in res.stdout, res.stdout
    res = zw.run("inject", sid, "more", "--wait", "--json", env_extra={"FAKE_EXIT": "3"})
    r = json.loads(res.stdout)
    assert r["status"] == "failed" and r["turn"] == 3 and r["last_message"] is None
