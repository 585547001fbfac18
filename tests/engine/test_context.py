"""Summary-mode follow-up prompts: what a new turn is told about the earlier ones."""

from __future__ import annotations

import pytest

from zwarm.engine.context import Digest, build_followup, digest_steps, dump_digest, load_digest

pytestmark = pytest.mark.unit

TASK = "Write a parser for the INI format in parse.py, with tests."
NEW = "Now add support for multi-line values."


def digest(n: int, final: str | None = None, **kw) -> Digest:
    d = Digest(
        n=n,
        status=kw.pop("status", "completed"),
        message=kw.pop("message", f"msg {n}"),
        final_message=final if final is not None else f"final answer of turn {n}",
        **kw,
    )
    return d


def test_contains_everything_a_followup_needs() -> None:
    d1 = digest(
        1,
        "I wrote parse.py and test_parse.py.",
        message=TASK,
        commands=[("pytest -q", 1), ("pytest -q tests/test_parse.py", 0), ("ls", None)],
        files=[("parse.py", "add"), ("test_parse.py", "add"), ("old.py", "delete")],
        errors=["sandbox denied network access"],
    )
    p = build_followup(TASK, [d1], NEW, 24000)
    assert TASK in p
    assert "I wrote parse.py and test_parse.py." in p
    assert "`pytest -q` -> exit 1" in p
    assert "`pytest -q tests/test_parse.py` -> exit 0" in p
    assert "`ls` -> exit ?" in p
    assert "parse.py (add)" in p and "old.py (delete)" in p
    assert "sandbox denied network access" in p
    assert p.rstrip().endswith(NEW)  # the new message comes last, in full
    assert p.index(TASK) < p.index("I wrote parse.py") < p.index(NEW)


def test_new_message_always_in_full() -> None:
    msg = "x" * 30000
    p = build_followup(TASK, [digest(1)], msg, 24000)
    assert msg in p


@pytest.mark.parametrize("budget", [6000, 12000, 24000, 50000])
def test_respects_budget(budget: int) -> None:
    ds = [
        digest(
            i,
            "answer " * 300,
            message="request " * 200,
            commands=[(f"cmd-{i}-{k} " + "a" * 100, k % 2) for k in range(45)],
            files=[(f"f{i}_{k}.py", "update") for k in range(60)],
            errors=["e" * 500],
        )
        for i in range(1, 31)
    ]
    p = build_followup("task " * 5000, ds, NEW, budget)
    assert len(p) <= budget, len(p) - budget
    assert "Turn 30" in p  # the latest turn is never the one dropped
    assert NEW in p


def test_latest_turns_fullest() -> None:
    ds = [digest(i, f"FINAL-{i} " + "word " * 400) for i in range(1, 11)]
    p = build_followup(TASK, ds, NEW, 24000, full_turns=2)
    # the two latest final messages are rendered as full blocks, older ones are shortened
    assert ("word " * 399) in p.split("FINAL-10", 1)[1]
    assert ("word " * 399) in p.split("FINAL-9", 1)[1].split("FINAL-10")[0]
    older = p.split("FINAL-1 ", 1)[1].split("FINAL-2 ")[0]
    assert len(older) < 500


def test_a_huge_latest_turn_is_shortened_not_dropped() -> None:
    big = digest(
        2,
        "LATEST " + "z" * 40000,
        message="m" * 40000,
        commands=[("c" * 400, 0)] * 40,
        files=[("f" * 200, "add")] * 50,
        errors=["boom " * 100] * 10,
    )
    p = build_followup(TASK, [digest(1), big], NEW, 24000)
    assert len(p) <= 24000
    assert "Turn 2" in p and "LATEST" in p
    assert NEW in p


def test_hundred_turns_fit_and_omit_the_oldest_with_a_note() -> None:
    ds = [
        digest(
            i,
            f"result {i} " + "r" * 300,
            message=f"please do thing {i} " + "q" * 300,
            commands=[(f"make step{i}", 0)],
        )
        for i in range(1, 101)
    ]
    p = build_followup(TASK, ds, NEW, 12000)
    assert len(p) <= 12000
    assert "## Earlier turns (100)" in p
    assert "Turn 100" in p and "Turn 99" in p
    assert "Turn 1 " not in p and "Turn 1:" not in p and "Turn 1 (" not in p
    assert "earlier turns omitted to fit the context budget" in p
    import re

    omitted = int(re.search(r"\((\d+) earlier turns omitted", p).group(1))
    shown = len(set(re.findall(r"Turn (\d+) \(", p)))
    assert omitted + shown == 100
    assert omitted > 0 and shown > 10
    # kept turns are the newest, contiguous
    nums = sorted(int(x) for x in re.findall(r"Turn (\d+) \(", p))
    assert nums == list(range(101 - shown, 101))


def test_hundred_small_turns_all_kept() -> None:
    ds = [digest(i, "ok") for i in range(1, 101)]
    p = build_followup(TASK, ds, NEW, 24000)
    assert "omitted" not in p
    assert all(f"Turn {i} (" in p for i in range(1, 101))


def test_huge_task_is_cut_not_lost() -> None:
    task = "BEGIN " + "t" * 100000 + " END"
    p = build_followup(task, [digest(1)], NEW, 24000)
    assert "BEGIN" in p and "chars cut" in p
    assert len(p) <= 24000


# ---------------------------------------------------------------------------- digests
def test_digest_steps() -> None:
    steps = [
        {"kind": "message", "text": "hi"},
        {"kind": "command", "command": "ls", "exit_code": 0},
        {"kind": "command", "command": "false", "exit_code": 1},
        {"kind": "file_change", "changes": [{"path": "a.py", "kind": "add"}]},
        {
            "kind": "file_change",
            "changes": [{"path": "a.py", "kind": "update"}, {"path": "b.py", "kind": "delete"}],
        },
        {"kind": "error", "message": "retrying", "fatal": False},
        {"kind": "error", "message": "quota exceeded", "fatal": True},
        {"kind": "future_kind"},
    ]
    d = digest_steps(3, "failed", "do it", "final", "agent exited with code 1", steps)
    assert d.commands == [("ls", 0), ("false", 1)]
    assert d.files == [("a.py", "update"), ("b.py", "delete")]
    assert d.errors == ["quota exceeded", "agent exited with code 1"]
    assert (d.n, d.status, d.message, d.final_message) == (3, "failed", "do it", "final")


def test_digest_caps_commands() -> None:
    steps = [{"kind": "command", "command": f"c{i}", "exit_code": 0} for i in range(100)]
    d = digest_steps(1, "completed", "m", None, None, steps)
    assert len(d.commands) == 40 and d.more_commands == 60
    p = build_followup(TASK, [d], NEW, 24000)
    assert "and 60 more commands" in p


def test_digest_round_trip_and_bad_cache() -> None:
    d = digest(4, "f", commands=[("x", 2)], files=[("p", "add")], errors=["e"], more_commands=3)
    d.log_size = 1234
    assert load_digest(dump_digest(d)) == d
    for bad in (b"{}", b'{"version": 99}', b"not json", b'{"version": 1, "n": 1}'):
        with pytest.raises((ValueError, KeyError, TypeError)):
            load_digest(bad)
