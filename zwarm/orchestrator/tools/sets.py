"""The best-of tools: ``best_of`` (start a set), ``compare`` (its attempts, ranked on zwarm's
evidence) and ``pick`` (merge the winner).

Must stay true: the work is ``Zwarm``'s (``best_of``, ``compare``, ``pick``); ``best_of``'s
working directory is confined as ``delegate``'s is (``Toolbox.confine``); results never
expose a worktree's path, and a check's output reaches the model only as its tail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zwarm.model.requests import SpawnRequest
from zwarm.orchestrator.tools.base import Result

if TYPE_CHECKING:
    from zwarm.orchestrator.tools.toolbox import Toolbox

TAIL_CHARS = 1500  # of a failed check's output, per check, in compare's result
_KEEP = (
    "place", "attempt", "session", "adapter", "model", "status", "pending", "passed", "flags",
    "protect_changed", "files", "lines", "tokens", "cost_usd", "wall_s", "claim",
)  # fmt: skip


def best_of(tb: Toolbox, a: dict[str, Any]) -> Result:
    cwd = tb.confine(a.get("cwd"))
    tb.api.ensure_state_dir()
    listed = ("agents", "models", "check", "protect")
    tuples: dict[str, Any] = {k: tuple(a[k]) for k in listed if k in a}
    fields: dict[str, Any] = {**a, **tuples, "cwd": str(cwd)}  # checked: BEST_OF's
    v = tb.api.best_of(SpawnRequest(**fields, source=tb.source, run=tb.run))
    return {
        "set_id": v["set"],
        "checks_sandboxed": v["checks_sandboxed"],
        "attempts": [
            {k: x[k] for k in ("attempt", "session", "adapter", "model", "status")}
            for x in sorted(v["attempts"], key=lambda x: x["attempt"])
        ],
        "next": "call wait on the attempts' sessions, then compare (zwarm runs the checks)",
    }


def compare(tb: Toolbox, a: dict[str, Any]) -> Result:
    v = tb.api.compare(a["set_id"], a.get("rank"))
    out: Result = {k: v[k] for k in ("set", "base", "checks", "protect", "rank", "picked")}
    rows: list[dict[str, Any]] = []
    for x in v["attempts"]:
        row = {k: x[k] for k in _KEEP}
        row["checks"] = [
            {**{k: c[k] for k in ("command", "passed", "exit_code", "timed_out", "duration_s")},
             **({"output_tail": c["output_tail"][-TAIL_CHARS:]} if not c["passed"] else {})}
            for c in x["checks"]
        ]  # fmt: skip
        rows.append(row)
    out["attempts"] = rows
    return out


def pick(tb: Toolbox, a: dict[str, Any]) -> Result:
    # queued: the user's trusted [merge] check only, as the merge_queue tool (a model names
    # no check command and cannot skip the check)
    queue = {"checks": [], "no_check": False} if a.get("queue") else None
    res = tb.api.pick(
        a["set_id"],
        a.get("attempt"),
        into=a.get("into"),
        squash=bool(a.get("squash")),
        queue=queue,
    )
    if "merge" in res:
        res["merge"] = {k: v for k, v in res["merge"].items() if k != "worktree"}
    return res
