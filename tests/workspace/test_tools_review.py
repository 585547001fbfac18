"""The orchestrator's review tools: delegate into a worktree, get_diff (bounded), comment,
merge; and the built-in orchestrator's prompt asks for a review before merging."""

from __future__ import annotations

import json
from typing import Any

from tests.support import ZW, wait_until
from tests.support.workspace import Repo, agent
from zwarm.orchestrator.tools import Toolbox


def _ok(res: dict[str, Any]) -> dict[str, Any]:
    assert res.get("ok") is True, res
    json.dumps(res)
    return res


def _box(zw: ZW, shell: str) -> Toolbox:
    return Toolbox(zw.api(env_extra=agent(shell)), "review-test")


def _finished(tb: Toolbox, sid: str) -> None:
    """Wait until the session's turn ends; it must have completed (else say what it recorded
    and what its supervisor logged)."""
    view = wait_until(
        lambda: (
            (v := tb.dispatch("check_session", {"session_id": sid}))["status"] != "running" and v
        )
    )
    log = tb.api.env.state_dir / "sessions" / sid / "supervisor.log"
    text = log.read_text(errors="replace") if log.exists() else "(no log)"
    if view["status"] != "completed" or "zwarm: no " in text:
        raise AssertionError(f"session ended {view}\nsupervisor.log:\n{text[-2000:]}")


def test_delegate_in_a_worktree_then_review_comment_and_merge(zw: ZW, repo: Repo) -> None:
    tb = _box(zw, "echo 'print(1)' > tool.py")
    res = _ok(
        tb.dispatch(
            "delegate",
            {"task": "add tool.py", "cwd": "repo", "worktree": True, "branch": "agents/tool"},
        )
    )
    assert res["branch"] == "agents/tool" and res["cwd"] != str(repo.path)
    sid = res["session_id"]
    _finished(tb, sid)
    d = _ok(tb.dispatch("get_diff", {"session_id": sid}))
    assert d["files"] == [{"path": "tool.py", "status": "added", "added": 1, "removed": 0}]
    assert "+print(1)" in d["diff"] and "note" not in d
    st = _ok(tb.dispatch("get_diff", {"session_id": sid, "turn": 1, "stat_only": True}))
    assert "diff" not in st and st["changes"] == {"files": 1, "added": 1, "removed": 0}
    c = _ok(
        tb.dispatch("comment", {"session_id": sid, "path": "tool.py", "line": 1, "text": "print 2"})
    )
    assert c["comment"] == {"id": 1, "path": "tool.py", "line": 1}
    _ok(tb.dispatch("converse", {"session_id": sid, "message": "fix it"}))
    _finished(tb, sid)
    assert "1. tool.py:1\n```diff\n+print(1)\n```\nprint 2" in zw.recorded()[1].decode()
    m = _ok(tb.dispatch("merge", {"session_id": sid}))
    assert m["merged"] and m["into"] == "main" and "worktree" not in m
    assert (repo.path / "tool.py").read_text() == "print(1)\n"


def test_get_diff_is_bounded_with_a_note_of_what_was_cut(zw: ZW, repo: Repo) -> None:
    zw.state_dir.mkdir()
    zw.write_config("[tools]\ndiff_chars = 600\n")
    shell = "for i in 1 2 3 4 5 6; do seq 1 40 > f$i.txt; done"
    tb = _box(zw, shell)
    sid = _ok(tb.dispatch("delegate", {"task": "t", "cwd": "repo"}))["session_id"]
    _finished(tb, sid)
    d = _ok(tb.dispatch("get_diff", {"session_id": sid}))
    assert len(d["diff"]) <= 600 and len(d["files"]) == 6
    assert "diff cut to fit the context; not shown: a/f" in d["note"]
    assert "pass turn=N" in d["note"]


def test_review_tool_errors_are_one_line(zw: ZW, repo: Repo) -> None:
    tb = _box(zw, "true")
    sid = _ok(tb.dispatch("delegate", {"task": "t", "cwd": "repo"}))["session_id"]
    _finished(tb, sid)
    for name, args in (
        ("get_diff", {"session_id": sid, "turn": 9}),
        ("comment", {"session_id": sid, "path": "x", "line": 1, "text": "y"}),
        ("merge", {"session_id": sid}),
        ("delegate", {"task": "t", "cwd": "repo", "worktree": True, "branch": "-bad"}),
    ):
        res = tb.dispatch(name, args)
        assert res["ok"] is False and "\n" not in res["error"], res


def test_the_orchestrators_prompt_asks_for_a_review_before_merging(zw: ZW) -> None:
    from zwarm.orchestrator.loop import system_prompt

    text = system_prompt(zw.api())
    assert "get_diff" in text and "before merging" in text and "worktree=true" in text


def test_the_merge_queue_tool_queues_runs_and_shows_with_the_users_check(
    zw: ZW, repo: Repo
) -> None:
    """merge_queue: the model names sessions, never the check (the user's [merge] check);
    without one it is refused in one line; an ejected session's reason is shown."""
    tb = _box(zw, "echo ok > ok.txt")
    good = _ok(tb.dispatch("delegate", {"task": "ok", "cwd": "repo", "worktree": True}))
    _finished(tb, good["session_id"])
    bad_box = _box(zw, "echo no > no.txt; touch BROKEN")
    bad = _ok(bad_box.dispatch("delegate", {"task": "no", "cwd": "repo", "worktree": True}))
    _finished(tb, bad["session_id"])
    ids = [good["session_id"], bad["session_id"]]
    refused = tb.dispatch("merge_queue", {"add": ids})
    assert refused["ok"] is False and "the merge queue has no check" in refused["error"]
    assert "\n" not in refused["error"]
    zw.write_config('[checks]\nunsandboxed = true\n\n[merge]\ncheck = ["test ! -e BROKEN"]\n')
    tb = _box(zw, "true")  # a Zwarm reads its config once
    unknown = tb.dispatch("merge_queue", {"add": ids, "no_check": True})
    assert unknown["ok"] is False and "unknown argument 'no_check'" in unknown["error"]
    res = _ok(tb.dispatch("merge_queue", {"add": ids, "send": False}))
    assert res["queued"] == ids and res["stopped"] == ["empty"]
    assert [(d["session_id"], d["state"]) for d in res["done"]] == [
        (ids[0], "merged"), (ids[1], "ejected")]  # fmt: skip
    assert res["done"][1]["why"] == "check failed: `test ! -e BROKEN` exited with 1"
    (q,) = res["queues"]
    assert q["target"] == "main" and [e["state"] for e in q["entries"]] == ["ejected", "merged"]
    assert (repo.path / "ok.txt").exists() and not (repo.path / "BROKEN").exists()
    shown = _ok(tb.dispatch("merge_queue", {}))
    assert shown["queues"] == res["queues"] and "done" not in shown
