"""The review tools: ``get_diff``, ``comment`` and ``merge``.

Owns how a session's diff is fitted to an LLM's context (file by file within
``[tools] diff_chars``, the files left out named). Must stay true: the work is ``Zwarm``'s
(``diff``, ``comment``, ``merge``); a merge result never exposes the worktree's path.
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
