"""``zwarm.cli.render``: the ls table fits the terminal, figures read as people read them, steps
show as they are (tool inputs as JSON)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from zwarm.cli import render
from zwarm.cli.render import activity
from zwarm.env import iso
from zwarm.text import cells

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0


def row(n: int, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": f"{n:08x}-aaaa-4bbb-8ccc-{n:012x}",
        "name": f"session-name-{n}",
        "status": "completed",
        "adapter": "claude",
        "model": "claude-sonnet-4-5-20250929",
        "turns": 3,
        "usage": {"total_tokens": 123_456},
        "cost_usd": 0.1234,
        "cost_source": "reported",
        "created_at": iso(NOW - 3600 * n),
        "source": "orchestrate:20261123-1620-abcdef",
        "task": f"task {n}: " + "refactor the parser and add tests for every edge case " * 3,
        "queued": [],
        "dangerous": False,
        "damaged": False,
        "error": None,
        "reason": None,
    }
    base.update(kw)
    return base


ROWS = [
    row(1),
    row(2, status="running", queued=["a", "b"], dangerous=True),
    row(3, status="failed", reason="timeout", error="timeout: killed after 30 s"),
    row(4, status="failed", reason="agent_error", error="agent exited with code 3: boom"),
    row(5, status="killed", name=None),
    {**row(6), "status": "damaged", "damaged": True, "error": "meta.json is empty", "task": None},
]


def table(capsys: pytest.CaptureFixture[str], width: int | None, rows: list[Any] = ROWS) -> str:
    render.session_table(rows, NOW, color=False, width=width)
    return capsys.readouterr().out


@pytest.mark.parametrize("width", [60, 80, 100, 120, 160, 220])
def test_every_row_fits_on_one_line(capsys: pytest.CaptureFixture[str], width: int) -> None:
    out = table(capsys, width)
    lines = out.splitlines()
    assert len(lines) == len(ROWS) + 1  # nothing wrapped, nothing lost
    assert all(cells(line) <= width for line in lines), [cells(x) for x in lines]
    for r, line in zip(ROWS, lines[1:], strict=True):
        assert line.startswith(r["id"][:8])
        assert r["status"] in line  # status is never dropped


def test_columns_go_by_priority_and_the_task_is_cut_last(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wide = table(capsys, 220).splitlines()[0].split()
    assert wide == ["ID", "NAME", "STATUS", "ADAPTER", "MODEL", "TURNS", "TOKENS", "COST", "AGE",
                    "SOURCE", "TASK"]  # fmt: skip
    narrow = table(capsys, 80).splitlines()
    head = narrow[0].split()
    assert head[:3] == ["ID", "NAME", "STATUS"] and head[-1] == "TASK"
    assert "SOURCE" not in head and "ADAPTER" not in head  # the least useful go first
    assert "AGE" in head  # ...and the useful ones stay while they fit
    task_col = narrow[0].index("TASK")
    assert all(len(line[task_col:]) >= 10 for line in narrow[1:])  # the task keeps room


def test_80_columns_keep_what_the_readme_promises_with_a_long_status_and_a_branch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 30: a long status and one worktree session made ``ls`` drop TOKENS (and keep
    BRANCH); at 80 columns it shows id, name, status (cut if long), tokens, age, task."""
    rows = [
        row(1, branch="zwarm/verbose-8e54390a"),
        row(
            2,
            status="parked",
            parked_until=iso(NOW + 3600 * 20),
            reason="usage_limit",
            queued=["x"],
            dangerous=True,
        ),
        row(3, status="failed", reason="dependency_failed", error="dependency killed"),
    ]
    lines = table(capsys, 80, rows).splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATUS", "TOKENS", "AGE", "TASK"]
    assert all(cells(x) <= 80 for x in lines)
    assert "123k" in lines[1] and lines[2].split()[2] == "parked"
    assert "…" in lines[2] and "task 2" in lines[2]  # the status cut, the task still there
    named = [{**r, "name": None} for r in rows]  # a column with nothing in it goes first
    assert "NAME" not in table(capsys, 80, named).splitlines()[0].split()


def test_failed_rows_say_why_in_a_word(capsys: pytest.CaptureFixture[str]) -> None:
    lines = table(capsys, 160).splitlines()
    assert "failed (timeout)" in lines[3]
    assert "failed (exit 3)" in lines[4]
    assert "running +2q !danger" in lines[2]
    assert "meta.json is empty" in lines[6]  # a damaged row says what is wrong


def test_not_a_terminal_keeps_every_column(capsys: pytest.CaptureFixture[str]) -> None:
    head = table(capsys, None).splitlines()[0].split()
    assert len(head) == 11


def test_task_text_cannot_recolour_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: a task with escape sequences recoloured the terminal in ``zwarm ls``."""
    nasty = [row(1, task="hello \x1b[31mRED\x1b[0m \x1b]0;title\x07task", name="n")]
    for width in (None, 80):
        out = table(capsys, width, nasty)
        assert "\x1b" not in out and "\x07" not in out
        assert "hello RED task" in out
    render.session_table(nasty, NOW, color=True, width=None)
    coloured = capsys.readouterr().out
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == table(capsys, None, nasty)


def test_figures_read_as_people_read_them() -> None:
    assert render.fmt_duration(13.14) == "13.1 s"
    assert render.fmt_duration(245) == "4 min 05 s"
    assert render.fmt_duration(7620) == "2 h 07 min"
    assert render.fmt_ago(iso(NOW - 5), NOW) == "just now"
    assert render.fmt_ago(iso(NOW - 300), NOW) == "5 min ago"
    assert render.fmt_ago(iso(NOW - 86400 * 3), NOW) == "3 days ago"
    assert render.fmt_clock(65) == "1:05" and render.fmt_clock(3723) == "1:02:03"
    assert render.fmt_age(iso(NOW - 7200), NOW) == "2h"
    local = render.fmt_local(iso(NOW))
    assert local == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(NOW))
    assert render.took(iso(NOW - 13.1), iso(NOW)) == pytest.approx(13.1, abs=0.01)


def test_tool_inputs_show_as_json_not_python_reprs() -> None:
    """Regression: tool arguments were printed as Python reprs ({'k': True, 'n': None})."""
    step = {"kind": "tool_call", "name": "Read", "arguments": {"path": "a.py", "all": True,
            "limit": None}}  # fmt: skip
    line = render.step_line(step, full=False)
    assert '{"path": "a.py", "all": true, "limit": null}' in line
    assert "True" not in line and "None" not in line
    assert activity(step) == 'tool Read {"path": "a.py", "all": true, "limit": null}'


def test_activity_is_one_clean_line() -> None:
    step = {"kind": "command", "command": "echo \x1b[2Jhi\nthere", "exit_code": None,
            "status": "in_progress"}  # fmt: skip
    assert activity(step) == "$ echo hi there (running)"
    assert activity({"kind": "message", "text": "x" * 500}, 20) == "x" * 19 + "…"
    assert activity(None) == ""


def test_trajectory_header_names_the_session() -> None:
    d = row(1, status="running", queued=["x"])
    head = render.trajectory_header(d, live_tokens=4567)
    first, second = head.split("\n")
    assert first == f"[bold]session {d['id']}[/] (session-name-1)"
    assert "4.6k tokens so far" in second
    assert "(+1 queued)" in head
    done = render.trajectory_header(row(2))
    assert "123k tokens" in done and "so far" not in done


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (
            "/bin/bash -lc 'echo hello > out.txt && cat out.txt'",
            "echo hello > out.txt && cat out.txt",
        ),
        ("sh -c ls", "ls"),
        ('/bin/zsh -lc "pytest -q \\"tests/a b.py\\""', 'pytest -q "tests/a b.py"'),
        ("bash -lc 'unbalanced", "bash -lc 'unbalanced"),  # not a shell line: as it is
        ("bash -lc 'a' b", "bash -lc 'a' b"),
        ("python -c 'print(1)'", "python -c 'print(1)'"),
    ],
)
def test_a_command_reads_as_the_command_inside_its_shell_wrapper(command: str, shown: str) -> None:
    """Issue 30: ``top`` at 80 columns showed ``$ /bin/bash -lc…``; top and trajectory show
    the command codex runs, from the same step text."""
    step = {
        "kind": "command",
        "command": command,
        "exit_code": 0,
        "output": "",
        "status": "completed",
    }
    assert activity(step, 200) == f"$ {shown} (exit 0)"
    assert render.step_line(step, False).startswith(f"[bold]$ {render.esc(shown)}[/]")


def test_a_tree_at_80_columns_keeps_its_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30 (a new user's eye): ``ls --tree`` at 80 columns cut every task to ``…`` (its
    columns were never fitted, only the task was cut to what was left: one cell). Fitted as
    ``ls`` is: the costs go before the tokens, the task keeps its room, every line fits."""
    from zwarm.cli import tree

    parent = row(1, children=["c"], tree_usage={"total_tokens": 200_000}, tree_cost_usd=0.5)
    kid = row(2, id="c" * 8 + "-aaaa-4bbb-8ccc-000000000002", parent_session_id=parent["id"])
    rows = [parent, kid, row(3, status="failed", reason="dependency_failed", error="x")]
    for r in rows:
        r.setdefault("tree_usage", None)
    tree.tree_table(rows, NOW, color=False, width=80)
    lines = capsys.readouterr().out.splitlines()
    assert all(cells(x) <= 80 for x in lines), lines
    assert lines[0].split()[:3] == ["SESSION", "STATUS", "TOKENS"] and "TASK" in lines[0]
    assert "task 1: refactor" in lines[1] and "task 2: refactor" in lines[2], lines
    assert "└─ cccccccc" in lines[2] and "failed (dep" in lines[3]
    assert "200k" in lines[1]  # the subtree's tokens stay
    tree.tree_table(rows, NOW, color=False, width=None)  # not a terminal: every column
    head = capsys.readouterr().out.splitlines()[0]
    assert head.split() == ["SESSION", "STATUS", "TOKENS", "COST", "TREE", "TOKENS", "TREE",
                            "COST", "TASK"]  # fmt: skip


# every kind of step (zwarm.model.steps.KINDS): what a trajectory line reads (markup
# removed) and what the live views' one line reads; both come from model/steps.py
EVERY_KIND: list[tuple[dict[str, Any], str, str]] = [
    ({"kind": "message", "text": "Done."}, "message Done.", "Done."),
    ({"kind": "reasoning", "text": "hmm"}, "reasoning hmm", "thinking: hmm"),
    (
        {
            "kind": "command",
            "command": "sh -c 'make'",
            "exit_code": 2,
            "output": "E",
            "status": "failed",
        },
        "$ make (exit 2)\nE",
        "$ make (exit 2)",
    ),
    (
        {
            "kind": "command",
            "command": "ls",
            "exit_code": None,
            "output": "",
            "status": "unfinished",
        },
        "$ ls (did not finish)",
        "$ ls (did not finish)",
    ),
    (
        {
            "kind": "file_change",
            "changes": [{"path": "a.py", "kind": "update"}],
            "status": "completed",
        },
        "files update a.py",
        "files: update a.py",
    ),
    (
        {"kind": "tool_call", "id": "1", "name": "Read", "arguments": {"n": None}},
        'tool Read {"n": null}',
        'tool Read {"n": null}',
    ),
    (
        {"kind": "tool_result", "id": "1", "name": None, "result": "ok", "is_error": True},
        "result ok",
        "result: ok",
    ),
    ({"kind": "web_search", "query": "zwarm"}, "search zwarm", "search: zwarm"),
    (
        {"kind": "todo", "items": [{"text": "a", "completed": True}, {"text": "b"}]},
        "todo [x] a; [ ] b",
        "todo: [x] a; [ ] b",
    ),
    ({"kind": "error", "message": "bad", "fatal": True}, "error bad", "error: bad"),
    ({"kind": "error", "message": "meh", "fatal": False}, "warning meh", "warning: meh"),
]


def test_every_step_kind_reads_the_same_in_a_trajectory_and_the_live_views() -> None:
    """Step kinds are declared once (model/steps.py) with their labels: each kind has its
    line in both views, and an unknown kind shows as its name and JSON, never a repr."""
    from rich.text import Text

    from zwarm.model.steps import KINDS

    assert sorted({s["kind"] for s, _, _ in EVERY_KIND}) == sorted(KINDS)
    for step, shown, line in EVERY_KIND:
        plain = Text.from_markup(render.step_line(dict(step), full=False)).plain
        assert (plain, render.activity(dict(step))) == (shown, line), step
    odd = {"kind": "new_kind", "x": True}
    assert render.step_line(odd, full=False) == 'new_kind {"kind": "new_kind", "x": true}'
    assert render.activity(odd) == "new_kind"
