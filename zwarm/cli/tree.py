"""Delegation trees in the terminal: ``ls --tree``, the children ``show`` lists, and what
``kill`` and ``rm`` of a parent did to its children.

Owns how a forest of sessions looks (``engine.tree`` owns what it is): each root (a session
without a parent in the listing, or an orchestrator run, drawn as a header) and under it its
children, indented with box-drawing guides, each line with the session's own tokens and cost
and its whole subtree's. Must stay true:
- plain text, no rich (``ls`` must stay fast): every text zwarm did not write goes through
  ``zwarm.cli.text`` (``oneline``), so no agent drives the terminal;
- a subtree's cost with unknown parts is shown as a lower bound (``≥ $0.0600``, ``1 ?``),
  never as if it were the whole; with no known part it is ``?``, never zero;
- every row stays on one line, cut to the terminal width when there is one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from zwarm.cli.render import COLORS, fleet_note, fmt_cost, fmt_tokens, row_cost, short_reason
from zwarm.cli.text import cut, oneline, pad

_TASK_MAX = 60
_GAP = "  "


def tree_cost(r: dict[str, Any]) -> str:
    """A subtree's cost: ``$0.0123``; ``≥ $0.0075 (2 ?)`` with unpriced parts; ``?``."""
    cost, unknown = r.get("tree_cost_usd"), r.get("tree_unpriced") or 0
    if cost is None:
        return "?"
    shown = fmt_cost(cost, None)
    return f"≥ {shown} ({unknown} ?)" if unknown else shown


def _tokens(usage: dict[str, Any] | None) -> str:
    return fmt_tokens((usage or {}).get("total_tokens")) if usage else "-"


# ---------------------------------------------------------------------- the forest
def forest(rows: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(guide prefix, row) in drawing order: roots oldest first, each followed by its
    subtree; the sessions of an orchestrator run under a header row for the run (its
    ``kind`` is "run", its totals its sessions' subtrees')."""
    by_id = {r["id"]: r for r in rows}
    kids: dict[str, list[dict[str, Any]]] = {}
    roots: list[dict[str, Any]] = []
    runs: dict[str, dict[str, Any]] = {}
    for r in rows:
        parent = r.get("parent_session_id")
        if isinstance(parent, str) and parent in by_id and parent != r["id"]:
            kids.setdefault(parent, []).append(r)
        elif r.get("parent_run_id"):
            run = runs.get(r["parent_run_id"])
            if run is None:
                run = runs[r["parent_run_id"]] = _run_row(r)
                roots.append(run)
            run["_kids"].append(r)
            _add_totals(run, r)
        else:
            roots.append(r)
    seen: set[str] = set()
    for root in roots:
        yield from _walk(root, kids, "", "", seen)


def _walk(
    r: dict[str, Any], kids: dict[str, list[dict[str, Any]]], lead: str, rest: str, seen: set[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    key = r["id"]
    if key in seen:  # links that loop (a file said so): drawn once
        return
    seen.add(key)
    yield lead, r
    below = r.get("_kids") if r.get("kind") == "run" else kids.get(key, [])
    below = [k for k in below or [] if k["id"] not in seen]
    for i, k in enumerate(below):
        last = i == len(below) - 1
        yield from _walk(k, kids, rest + ("└─ " if last else "├─ "),
                         rest + ("   " if last else "│  "), seen)  # fmt: skip


def _run_row(first: dict[str, Any]) -> dict[str, Any]:
    rid = str(first["parent_run_id"])
    return {
        "kind": "run",
        "id": f"run:{rid}",
        "run_id": rid,
        "created_at": first.get("created_at"),
        "tree_usage": {},
        "tree_cost_usd": None,
        "tree_unpriced": 0,
        "tree_sessions": 0,
        "_kids": [],
    }


def _add_totals(run: dict[str, Any], r: dict[str, Any]) -> None:
    for k, v in (r.get("tree_usage") or {}).items():
        if isinstance(v, int):
            run["tree_usage"][k] = run["tree_usage"].get(k, 0) + v
    cost = r.get("tree_cost_usd")
    if isinstance(cost, (int, float)):
        run["tree_cost_usd"] = round((run["tree_cost_usd"] or 0.0) + cost, 8)
    run["tree_unpriced"] += r.get("tree_unpriced") or 0
    run["tree_sessions"] += r.get("tree_sessions") or 0


# ---------------------------------------------------------------------- ls --tree
_HEADER = ("SESSION", "STATUS", "TOKENS", "COST", "TREE TOKENS", "TREE COST", "TASK")


def tree_table(
    rows: list[dict[str, Any]], now: float, color: bool, width: int | None = None
) -> None:
    """``ls --tree``: the forest, one line per session, its own figures and its subtree's."""
    out = sys.stdout
    if not rows:
        out.write("no sessions\n")
        return
    table = [list(_HEADER)] + [_cells(lead, r, now) for lead, r in forest(rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(_HEADER) - 1)]
    lines = []
    for k, row in enumerate(table):
        parts = [pad(cell, widths[i]) for i, cell in enumerate(row[:-1])]
        if color and k and row[1]:
            parts[1] = f"\x1b[{COLORS.get(row[1].split()[0], '0')}m{parts[1]}\x1b[0m"
        used = sum(widths) + len(_GAP) * len(widths)
        room = _TASK_MAX if width is None else max(1, width - used)
        lines.append(_GAP.join([*parts, cut(row[-1], room)]).rstrip())
    out.write("\n".join(lines) + "\n")


def _cells(lead: str, r: dict[str, Any], now: float) -> list[str]:
    if r.get("kind") == "run":
        n = r["tree_sessions"]
        what = f"orchestrator run, {n} session{'' if n == 1 else 's'}"
        return [f"{lead}run {r['run_id']}", "", "", "", _tokens(r["tree_usage"]), tree_cost(r),
                what]  # fmt: skip
    status = r["status"]
    if status == "failed":
        status += f" ({short_reason(r)})"
    status += fleet_note(r, now)
    name = f" {oneline(r['name'], 20)}" if r.get("name") else ""
    child = bool(r.get("parent_session_id"))
    detached = " (detached)" if child and r.get("lifecycle") == "detached" else ""
    has_kids = bool(r.get("children"))
    task = r.get("error") if r.get("damaged") else r.get("task")
    return [
        f"{lead}{r['id'][:8]}{name}{detached}",
        status,
        _tokens(r.get("usage")),
        row_cost(r),
        _tokens(r.get("tree_usage")) if has_kids else "",
        tree_cost(r) if has_kids else "",
        oneline(task, 400),
    ]


# ---------------------------------------------------------------------- show, kill, rm
def children_lines(d: dict[str, Any]) -> list[str]:
    """What ``show`` adds about the session's place in a tree: its parent, its depth, its
    children and its subtree's totals."""
    lines = []
    where = []
    if d.get("parent_session_id"):
        where.append(f"parent {d['parent_session_id']}")
        where.append(d.get("lifecycle") or "linked")
    if d.get("parent_run_id"):
        where.append(f"orchestrator run {d['parent_run_id']}")
    if where or (d.get("spawn_depth") or 1) > 1:
        lines.append(f"depth {d.get('spawn_depth') or 1}  " + "  ".join(where))
    kids = d.get("child_sessions") or []
    if kids:
        lines.append(
            f"subtree {d.get('tree_sessions')} sessions  tokens "
            f"{_tokens(d.get('tree_usage'))}  cost {tree_cost(d)}"
        )
        lines.append(f"children ({len(kids)}):")
        for k in kids:
            mode = " detached" if k.get("lifecycle") == "detached" else ""
            name = f" {oneline(k['name'], 20)}" if k.get("name") else ""
            lines.append(
                f"  {k['id']}{name} {k.get('status')}{mode}  tokens "
                f"{_tokens(k.get('tree_usage'))}  cost {tree_cost(k)}  "
                f"{oneline(k.get('task'), 60)}"
            )
    return lines


def kill_line(r: dict[str, Any]) -> str:
    """``zwarm kill``'s line for one session, with what it did to its children."""
    extra = f" (dropped {r['dropped_queued']} queued)" if r.get("dropped_queued") else ""
    done = "killed" if r.get("stopped", True) else f"had already {oneline(r.get('status'), 20)}"
    line = f"{r['id']} {done}{extra}"
    if r.get("children_killed"):
        line += f"; its linked children killed: {', '.join(r['children_killed'])}"
    if r.get("children_left"):
        line += f"; detached children left running: {', '.join(r['children_left'])}"
    return line


def rm_line(d: dict[str, Any]) -> str:
    """``zwarm rm``'s line for one session, with what it did to its children."""
    line = f"{d['id']} removed"
    if d.get("children_removed"):
        line += f", with its linked children: {', '.join(d['children_removed'])}"
    if d.get("children_kept"):
        line += f"; detached children kept: {', '.join(d['children_kept'])}"
    return line
