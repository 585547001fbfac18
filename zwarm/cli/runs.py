"""``zwarm orchestrate ls`` and ``zwarm orchestrate show``: the orchestrator's runs as stored.

Owns how runs and their transcripts look in a terminal and in ``--json``; the run store
(``orchestrator.runstore``) owns what they are. Must stay true:
- reading never creates the store (a state dir without runs lists none);
- every text zwarm did not write (tasks, messages, tool results, errors) goes through
  ``zwarm.text.clean``/``oneline`` before it is printed: no LLM drives the terminal;
- compacted messages are shown only with ``--all``, marked, each where it was; a damaged run
  is listed with its error, and showing it is one error line;
- plain text (no rich): this is read by people and by ``grep``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from zwarm.cli import output
from zwarm.text import cells, clean, oneline, pad


def list_runs(api: Any, as_json: bool) -> None:
    from zwarm.orchestrator import loop

    rs = loop.open_store(api, create=False)
    items: list[Any] = []
    problems: list[str] = []
    if rs is not None:
        with rs:
            items, problems = rs.runs(), rs.problems
    for p in problems:
        click.echo(f"warning: {clean(p, newlines=False)}", err=True)
    if as_json:
        rows = [r.to_dict() if not isinstance(r, Exception) else _damaged(i, r) for i, r in items]
        output.emit_json(rows)
        return
    if not items:
        click.echo("no orchestrator runs")
        return
    header = ("RUN", "STATUS", "STEPS", "TOKENS", "CONTEXT", "COST", "TASK")
    table = [header] + [_cells(i, r) for i, r in items]
    widths = [max(cells(row[k]) for row in table) for k in range(len(header) - 1)]
    for row in table:
        padded = [pad(c, w) for c, w in zip(row, widths, strict=False)]
        click.echo("  ".join([*padded, row[-1]]).rstrip())


def _damaged(rid: str, e: Exception) -> dict[str, Any]:
    return {"id": rid, "status": "damaged", "error": str(e)}


def _cells(rid: str, r: Any) -> tuple[str, ...]:
    from zwarm.cli.render import fmt_tokens
    from zwarm.orchestrator.progress import cost_text

    if isinstance(r, Exception):
        return (rid, "damaged", "", "", "", "", oneline(str(r), 80))
    context = fmt_tokens(r.context_tokens) + ("~" if r.context_estimated else "")
    if r.compactions:
        context += f" ({r.compactions}x compacted)"
    cost = cost_text(r.total_cost_usd, r.unpriced_parts) if r.status != "running" else "-"
    return (r.id, r.status, str(r.steps), fmt_tokens(r.tokens), context, cost, oneline(r.task, 60))


def show_run(api: Any, ref: str, everything: bool, as_json: bool) -> None:
    from zwarm.orchestrator import loop

    rs, rid = loop.find_run(api, ref)
    with rs:
        run = rs.load(rid)
        stored = rs.stored(rid, everything)
        compactions = rs.compactions(rid)
        rounds = rs.rounds(rid) if everything else []
    if as_json:
        out = {
            "run": run.to_dict(),
            "messages": [_message_json(s) for s in stored],
            "compactions": compactions,
            "rounds": rounds,
        }
        output.emit_json(out)
        return
    _header(run, len(compactions))
    for s in stored:
        click.echo(_message_text(s))
    if everything:
        _audit(compactions, rounds)
    sys.stdout.flush()


def _message_json(s: Any) -> dict[str, Any]:
    return {"seq": s.seq, "pos": s.pos, "state": s.state, "created_at": s.created_at, **s.message}


def _header(run: Any, compactions: int) -> None:
    from zwarm.orchestrator.progress import cost_text
    from zwarm.text import plural

    click.echo(f"run {run.id}  {run.status}  model {oneline(run.model, 60)}")
    cost = cost_text(run.total_cost_usd, run.unpriced_parts) if run.status != "running" else "-"
    click.echo(
        f"{plural(run.steps, 'step')}  {plural(run.tokens, 'token')}  cost {cost}  context "
        f"{run.context_tokens:,}{' (estimated)' if run.context_estimated else ''} tokens  "
        f"{plural(compactions, 'compaction')}"
    )
    if run.stop_reason:
        click.echo(f"stopped: {oneline(run.stop_reason, 300)}")
    click.echo(f"task: {oneline(run.task, 300)}")
    click.echo("")


def _message_text(s: Any) -> str:
    m = s.message
    mark = " (compacted out)" if s.state == "compacted_out" else ""
    head = f"[{s.seq}] {m.get('role')}{mark}"
    text = clean(str(m.get("content") or ""))
    if m.get("role") == "system":
        text = oneline(text, 100)
    elif m.get("role") == "tool":
        text = oneline(text, 300)
    calls = [
        f"  -> {oneline((c.get('function') or {}).get('name'), 60)}"
        f"({oneline((c.get('function') or {}).get('arguments'), 200)})"
        for c in m.get("tool_calls") or []
    ]
    body = "\n".join(f"  {line}" for line in text.splitlines()) if text else ""
    return "\n".join(x for x in (head, body, *calls) if x)


def _audit(compactions: list[dict[str, Any]], rounds: list[dict[str, Any]]) -> None:
    click.echo("")
    for c in compactions:
        click.echo(
            f"compaction {c['id']} ({oneline(c['trigger'], 20)}): messages {c['first_seq']}-"
            f"{c['last_seq']} ({c['messages']}) -> summary {c['summary_seq']}; context "
            f"{c['tokens_before']} -> ~{c['tokens_after']} tokens; model {oneline(c['model'], 60)}"
        )
    for r in rounds:
        if not r.get("error"):
            continue
        click.echo(
            f"failed request {r['n']} ({oneline(r['kind'], 30)}): {oneline(r['error'], 300)}"
        )
        if r.get("partial"):
            click.echo(f"  the cut reply had sent: {oneline(r['partial'], 600)}")
