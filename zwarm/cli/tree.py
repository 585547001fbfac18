"""Delegation trees in the terminal: ``ls --tree``, the children ``show`` lists, and what
``kill`` and ``rm`` of a parent did to its children.

Owns how a forest of sessions looks (``engine.tree`` owns what it is): each root (a session
without a parent in the listing, or an orchestrator run, drawn as a header) and under it its
children, indented with box-drawing guides, each line with the session's own tokens and cost
and its whole subtree's; ``ls --tree --json`` is the same forest, row by row. An orchestrator
run's row is the run's: its status, the orchestrator's own tokens and cost (from the run
store, ``run_parts``) and totals that add every session under it to them. Must stay true:
- plain text, no rich (``ls`` must stay fast): every text zwarm did not write goes through
  ``zwarm.text`` (``oneline``), so no agent drives the terminal;
- a subtree's cost with unknown parts is shown as a lower bound (``≥ $0.0600``, ``1 ?``),
  never as if it were the whole; with no known part it is ``?``, never zero;
- a run the run store cannot tell about (no store, no such run, a damaged one) is an unknown
  part of its total, never a zero; the store is opened (``sqlite3`` imported) only when a
  listed session belongs to a run;
- every row stays on one line, fitted to the terminal width when there is one the way ``ls``
  is (``render.fit_columns``, ``render.table_lines``): a column with nothing in it goes first,
  then the costs, the tokens, and the task is cut last (it always keeps some room).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zwarm.cli.render import (
    fit_columns,
    fleet_note,
    fmt_cost,
    fmt_tokens,
    launcher_status,
    row_cost,
    short_reason,
    table_lines,
)
from zwarm.text import cells, oneline

if TYPE_CHECKING:
    from zwarm.orchestrator.runstore import Run


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
def run_parts(state_dir: Path, rows: list[dict[str, Any]]) -> dict[str, Run | None]:
    """Each orchestrator run the rows belong to, as its store has it (None where it cannot
    tell); empty, without opening the store, when no row belongs to a run."""
    ids = {r["parent_run_id"] for r in rows if isinstance(r.get("parent_run_id"), str)}
    found: dict[str, Run | None] = dict.fromkeys(ids)
    if not ids:
        return found
    from zwarm.errors import ZwarmError
    from zwarm.orchestrator.runstore import RunStore

    try:
        rs = RunStore.open(state_dir, create=False)
    except (ZwarmError, OSError):
        return found
    if rs is None:
        return found
    with rs:
        for rid in ids:
            try:
                found[rid] = rs.load(rid)
            except (ZwarmError, OSError):
                pass
    return found


def forest(
    rows: list[dict[str, Any]], runs: Mapping[str, Run | None] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(guide prefix, row) in drawing order: roots oldest first, each followed by its
    subtree; the sessions of an orchestrator run under a header row for the run (its
    ``kind`` is "run"; its totals the orchestrator's own, from ``runs``, plus its sessions'
    subtrees')."""
    by_id = {r["id"]: r for r in rows}
    kids: dict[str, list[dict[str, Any]]] = {}
    roots: list[dict[str, Any]] = []
    run_rows: dict[str, dict[str, Any]] = {}
    for r in rows:
        parent = r.get("parent_session_id")
        if isinstance(parent, str) and parent in by_id and parent != r["id"]:
            kids.setdefault(parent, []).append(r)
        elif r.get("parent_run_id"):
            rid = r["parent_run_id"]
            run = run_rows.get(rid)
            if run is None:
                run = run_rows[rid] = _run_row(r, (runs or {}).get(rid))
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


def _run_row(first: dict[str, Any], run: Run | None) -> dict[str, Any]:
    """A run's header row, its totals so far the orchestrator's own (an unknown part when
    ``run`` is None or its model has no price)."""
    rid = str(first["parent_run_id"])
    usage = None
    if run is not None:
        usage = {"input_tokens": run.prompt_tokens, "output_tokens": run.completion_tokens,
                 "total_tokens": run.tokens}  # fmt: skip
    cost = run.cost_usd if run is not None else None
    return {
        "kind": "run",
        "id": f"run:{rid}",
        "run_id": rid,
        "created_at": run.created_at if run is not None else first.get("created_at"),
        "status": run.status if run is not None else None,
        "usage": usage,
        "cost_usd": cost,
        "tree_usage": dict(usage or {}),
        "tree_cost_usd": cost,
        "tree_unpriced": 0 if cost is not None else 1,
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
# What gives way, in order, while a fitted line is too wide (``render.fit_columns``): the
# costs before the tokens, as in ``ls``; the task keeps its room. At 80 columns a tree with
# long statuses keeps session, status (cut), tokens, subtree tokens and task.
_SQUEEZE = (
    ("SESSION", 30),
    ("STATUS", 20),
    ("COST", 0),
    ("TREE COST", 0),
    ("STATUS", 12),
    ("SESSION", 18),
    ("TREE TOKENS", 0),
    ("TOKENS", 0),
    ("SESSION", 12),
)
_SQUEEZABLE = frozenset({"TOKENS", "COST", "TREE TOKENS", "TREE COST"})


def tree_json(rows: list[dict[str, Any]], runs: Mapping[str, Run | None]) -> list[dict[str, Any]]:
    """``ls --tree --json``: the forest's rows in drawing order, each run's header row before
    its sessions (the session rows are ``ls --json``'s)."""
    return [
        {k: v for k, v in r.items() if k != "_kids"} if r.get("kind") == "run" else r
        for _, r in forest(rows, runs)
    ]


def tree_table(
    rows: list[dict[str, Any]],
    now: float,
    color: bool,
    width: int | None = None,
    runs: Mapping[str, Run | None] | None = None,
) -> None:
    """``ls --tree``: the forest, one line per session, its own figures and its subtree's."""
    out = sys.stdout
    if not rows:
        out.write("no sessions\n")
        return
    table = [list(_HEADER)] + [_cells(lead, r, now) for lead, r in forest(rows, runs)]
    widths = {h: max(cells(row[i]) for row in table) for i, h in enumerate(_HEADER)}
    if width is not None:  # fitted: a column with nothing in it goes first
        for i, h in enumerate(_HEADER):
            if h in _SQUEEZABLE and all(row[i] in ("", "-") for row in table[1:]):
                del widths[h]
    shown = fit_columns(widths, width, _SQUEEZE)
    out.write("\n".join(table_lines(_HEADER, table, shown, color)) + "\n")


def _cells(lead: str, r: dict[str, Any], now: float) -> list[str]:
    if r.get("kind") == "run":
        n = r["tree_sessions"]
        what = f"orchestrator run, {n} session{'' if n == 1 else 's'}"
        return [f"{lead}run {r['run_id']}", r["status"] or "?", _tokens(r["usage"]),
                fmt_cost(r["cost_usd"], None) if r["usage"] else "?",
                _tokens(r["tree_usage"]), tree_cost(r), what]  # fmt: skip
    status = launcher_status(r) or r["status"]
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
