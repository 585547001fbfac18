"""The review tools: ``get_diff``, ``comment``, ``merge`` and ``merge_queue``.

Owns how a session's diff is fitted to an LLM's context (file by file within
``[tools] diff_chars``, the files left out named). Must stay true: the work is ``Zwarm``'s
(``diff``, ``comment``, ``merge``, ``enqueue_merge``...); a merge result never exposes the
worktree's path; the merge queue's checks are the user's ``[merge] check``, never a model's
(a queue without one is refused, and a model cannot pass ``no_check``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from zwarm.orchestrator.tools.base import Result
from zwarm.text import elide

if TYPE_CHECKING:
    from zwarm.orchestrator.tools.toolbox import Toolbox


DIFF_FILES = 200  # files listed by one get_diff call


def get_diff(tb: Toolbox, a: dict[str, Any]) -> Result:
    stat_only = bool(a.get("stat_only"))
    d = tb.api.diff(a["session_id"], a.get("turn"), hunks=False, text=not stat_only)
    files = d["files"]
    out: Result = {k: d[k] for k in ("session_id", "branch", "turn", "live", "changes")}
    out["files"] = [{k: f[k] for k in ("path", "status", "added", "removed")} for f in files]
    notes = [d["note"]] if d.get("note") else []
    if len(files) > DIFF_FILES:
        out["files"] = out["files"][:DIFF_FILES]
        notes.append(f"{len(files) - DIFF_FILES} more files not listed")
    if not stat_only:
        out["diff"], cut = _bounded_diff(d["text"], int(tb.api.setting("tools", "diff_chars")))
        if cut:
            notes.append(
                f"diff cut to fit the context; not shown: {', '.join(cut[:20])}"
                + (f" and {len(cut) - 20} more" if len(cut) > 20 else "")
                + "; pass turn=N for one turn, or read the files"
            )
    if notes:
        out["note"] = "; ".join(notes)
    return out


def _bounded_diff(text: str, budget: int) -> tuple[str, list[str]]:
    """``text`` kept file by file within ``budget`` characters; the files left out (a first
    file larger than the budget is cut inside, and counted as shown)."""
    blocks = re.split(r"(?m)^(?=diff --git )", text)
    kept: list[str] = []
    cut: list[str] = []
    used = 0
    for block in (b for b in blocks if b):
        if used + len(block) <= budget:
            kept.append(block)
            used += len(block)
        elif not kept:
            kept.append(elide(block, budget, head=budget, sep="\n") + "\n")
            used = budget
        else:
            cut.append(block.split("\n", 1)[0].removeprefix("diff --git "))
    return "".join(kept), cut


def comment(tb: Toolbox, a: dict[str, Any]) -> Result:
    res = tb.api.comment(a["session_id"], [(a["path"], int(a["line"]), a["text"])])
    c = res["comments"][0]
    return {
        "session_id": res["session_id"],
        "comment": {k: c[k] for k in ("id", "path", "line")},
        "next": "it goes to the agent with your next converse on this session",
    }


def merge(tb: Toolbox, a: dict[str, Any]) -> Result:
    res = tb.api.merge(a["session_id"], into=a.get("into"), squash=bool(a.get("squash")))
    return {k: v for k, v in res.items() if k != "worktree"}


QUEUE_ENTRIES = 50  # the latest entries of each queue a merge_queue call shows
WHY_CHARS = 600  # of each entry's reason (a failing check's output tail is longer)


def merge_queue(tb: Toolbox, a: dict[str, Any]) -> Result:
    from zwarm.text import elide

    out: Result = {}
    target = a.get("target")
    if a.get("add"):
        prio, send, run = int(a.get("priority") or 0), bool(a.get("send")), a.get("run", True)
        res = tb.api.enqueue_merge(list(a["add"]), target=target, priority=prio, send=send, run=run)
        out["queued"] = [e["session_id"] for e in res["queued"]]
        target = res["target"]
        runs = [res["run"]] if res["run"] is not None else []
    elif a.get("run"):
        runs = tb.api.run_merge_queues(target)
    else:
        runs = []
    if runs:
        out["done"] = [
            {k: d.get(k) for k in ("session_id", "branch", "state", "why", "commit")}
            | {"why": elide(d.get("why") or "", WHY_CHARS, head=0)}
            for r in runs
            for d in r.get("done", [])
        ]
        out["stopped"] = [r.get("stopped") for r in runs]
    queues = []
    for q in tb.api.merge_queues(target):
        entries = [
            {k: e[k] for k in ("session_id", "branch", "state", "priority", "commit")}
            | {"why": elide(e["why"], WHY_CHARS, head=0)}
            for e in q["entries"][:QUEUE_ENTRIES]
        ]
        view = {k: q[k] for k in ("target", "paused", "blocked", "green")} | {"entries": entries}
        if len(q["entries"]) > QUEUE_ENTRIES:
            view["note"] = f"{len(q['entries']) - QUEUE_ENTRIES} older entries not shown"
        queues.append(view)
    out["queues"] = queues
    return out
