"""The live views in a real terminal (tmux): ``zwarm top`` refreshes and quits on q or Ctrl-C,
leaving the terminal as it was; ``wait`` and ``spawn --wait`` show progress on stderr and say
how to stop a session left running on Ctrl-C; ``trajectory -f`` follows queued turns; ``ls``
keeps every row on one line at 80 and 160 columns."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import tmux as tmux_mod
from tests.support.tmux import PROMPT, Tmux

pytestmark = pytest.mark.skipif(not tmux_mod.available(), reason="tmux is not installed")


@pytest.fixture
def term(zw: Any) -> Iterator[Tmux]:
    t = Tmux(zw.tmp, zw.env, 120, 30)
    yield t
    t.close()


def running_claude(zw: Any, name: str, lines: int = 5) -> str:
    """A claude session whose agent printed ``lines`` lines (its Bash call) and hangs."""
    env = zw.replay("claude_toolcall", FAKE_HANG=str(lines))
    sid: str = zw.spawn("run the tests and fix what fails", "--adapter", "claude", "--name",
                        name, env_extra=env)  # fmt: skip
    return sid


def exited(term: Tmux) -> str:
    """The screen once the command line's ``echo rc=$?`` has printed."""
    return term.wait_until(lambda s: re.search(r"^rc=\d+$", s, re.M), "rc=N")


def prompt_back(shown: str) -> bool:
    return shown.rstrip().endswith(PROMPT.strip())


def test_top_shows_what_each_running_agent_does_and_quits_on_q(zw: Any, term: Tmux) -> None:
    done = zw.spawn("write the changelog", "--name", "notes", env_extra=zw.replay("codex_simple"))
    zw.wait(done)
    live = running_claude(zw, "fixer")
    term.type("stty -a | grep -o -- '-\\?icanon'; zwarm top --interval 0.5")
    shown = term.wait_for("$ echo hello > out.txt && cat out.txt (running)")
    assert "zwarm top · 1 running · 2 sessions" in shown
    row = next(x for x in shown.splitlines() if x.startswith(live[:8]))
    assert "fixer" in row and "running" in row
    got = re.search(r"running\s+1\s+0:\d\d\s+(\d+)\s", row)  # turn, elapsed, tokens so far
    assert got and int(got.group(1)) > 0, row  # claude reports usage as it streams
    old = next(x for x in shown.splitlines() if x.startswith(done[:8]))
    assert "completed" in old and "Hi there! This is the fake server." in old
    term.wait_until(lambda s: s != shown, "a refresh")  # the clock moves
    term.keys("q")
    after = term.wait_until(prompt_back, "the prompt after q")
    assert "zwarm top ·" not in after and "fixer" not in after  # the alternate screen is gone
    term.clear()
    term.type("stty -a | grep -o -- '-\\?icanon'")
    assert "-icanon" not in term.wait_for("icanon")  # the terminal is as it was
    zw.run("kill", live, check=True)


def test_top_quits_on_ctrl_c_and_sessions_keep_running(zw: Any, term: Tmux) -> None:
    live = running_claude(zw, "stays")
    term.type("zwarm top; echo rc=$?")
    term.wait_for("zwarm top · 1 running")
    term.keys("C-c")
    shown = exited(term)
    assert "rc=0" in shown and "Traceback" not in shown
    assert zw.json("show", live)["status"] == "running"
    zw.run("kill", live, check=True)


def test_wait_shows_progress_and_ctrl_c_says_how_to_stop(zw: Any, term: Tmux) -> None:
    live = running_claude(zw, "slow")
    term.type("zwarm wait slow; echo rc=$?")
    shown = term.wait_for("$ echo hello > out.txt")  # the latest step, on stderr
    line = next(x for x in shown.splitlines() if live[:8] in x)
    assert re.search(r"turn 1 · 0:\d\d · [1-9]\d* tokens · ", line), line
    assert "waiting" in shown
    term.keys("C-c")
    shown = exited(term)
    assert f"{live} is still running; `zwarm kill {live}` stops it" in shown
    assert "rc=130" in shown
    assert zw.json("show", live)["status"] == "running"
    zw.run("kill", live, check=True)


def test_spawn_wait_prints_the_id_then_progress_then_the_result(zw: Any, term: Tmux) -> None:
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, **zw.replay("codex_toolcall"))
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    term.type(f'env {exports} zwarm spawn "add a flag" --wait; echo rc=$?')
    shown = term.wait_for("waiting")
    sid = shown.split("--wait; echo rc=$?", 1)[1].split()[0]
    assert re.fullmatch(r"[0-9a-f-]{36}", sid)
    hold.unlink()
    shown = exited(term)
    tail = shown.split(sid, 1)[1]
    assert f"{sid} completed" in tail and "Done: wrote hello to out.txt." in tail
    assert "waiting" not in shown.split("rc=")[0].split(sid)[-1]  # the progress line is gone
    assert "rc=0" in shown


def test_inject_wait_interrupted_leaves_the_turn_running(zw: Any, term: Tmux) -> None:
    hold = zw.tmp / "hold"
    env = zw.gated(hold, **zw.replay("codex_simple"))
    sid = zw.spawn("first", env_extra=env)
    zw.wait(sid)
    hold.touch()
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    term.type(f'env {exports} zwarm inject {sid[:8]} "and more" --wait; echo rc=$?')
    shown = term.wait_for("waiting")
    assert f"{sid} started (turn 2)" in shown  # said first
    term.keys("C-c")
    shown = exited(term)
    assert f"{sid} is still running; `zwarm kill {sid}` stops it" in shown
    assert "rc=130" in shown and "Traceback" not in shown
    hold.unlink()
    assert zw.wait(sid).returncode == 0  # the turn went on, and ended as it would have


def test_trajectory_follow_in_a_terminal(zw: Any, term: Tmux) -> None:
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, **zw.replay("claude_toolcall"))
    sid = zw.spawn("first", "--adapter", "claude", "--name", "follow", env_extra=env)
    zw.run("inject", sid, "second", env_extra=env, check=True)
    term.type("zwarm trajectory follow -f")
    shown = term.wait_for("(+1 queued)")
    assert f"session {sid} (follow)\nclaude · default · running · 1 turn (+1 queued)" in shown
    hold.unlink()
    shown = term.wait_for("is idle (completed)")
    assert "turn 1 completed · took" in shown and "turn 2 completed · took" in shown
    assert shown.count("$ echo hello > out.txt && cat out.txt (exit 0)") == 2


@pytest.mark.parametrize("width", [80, 160])
def test_ls_rows_stay_on_one_line(zw: Any, width: int) -> None:
    env = zw.replay("codex_simple")
    long = "refactor the parser module, add property-based tests and update the docs " * 3
    sids = [
        zw.spawn(long, "--name", "parser-refactor-with-a-long-name", env_extra=env),
        zw.spawn("t", env_extra={**env, "FAKE_FAIL_ON": "t"}),
        zw.spawn("summarise", "--adapter", "claude", env_extra=zw.replay("claude_simple")),
    ]
    zw.wait(*sids)
    t = Tmux(zw.tmp, zw.env, width, 20)
    try:
        t.type("zwarm ls")
        shown = t.wait_until(lambda s: s.count("\n") >= 5 and prompt_back(s), "ls output")
    finally:
        t.close()
    rows = shown.splitlines()[1:-1]
    assert rows[0].startswith("ID ") and len(rows) == 4, shown  # no row wrapped
    assert all(len(r) <= width for r in rows)
    assert {r[:8] for r in rows[1:]} == {s[:8] for s in sids}
    assert "failed (exit 3)" in shown
