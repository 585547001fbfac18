"""Human-readable output: the session table, session details and trajectories.

Owns how things look in a terminal. Must stay true: the ``ls`` table is formatted here without
rich (it must stay fast over 10,000 sessions); rich is imported only for ``show`` and
``trajectory``, and only by the functions that use it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from zwarm.env import parse_iso
from zwarm.model.steps import Step

_COLORS = {"running": "33", "completed": "32", "failed": "31", "killed": "35", "damaged": "41;37"}
_SHORT_LINES = 12
_SHORT_CHARS = 1200


def fmt_tokens(n: int | None) -> str:
    if n is None:
        return "-"
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def fmt_cost(cost: float | None, source: str | None) -> str:
    if cost is None:
        return "?"
    mark = "~" if source == "estimated" else ""
    return f"{mark}${cost:.4f}" if cost < 1 else f"{mark}${cost:.2f}"


def fmt_age(created: str | None, now: float) -> str:
    if not created:
        return "-"
    try:
        secs = max(0.0, now - parse_iso(created))
    except ValueError:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{int(secs // size)}{unit}"
    return f"{int(secs)}s"


def _oneline(text: str | None, width: int) -> str:
    s = " ".join((text or "").split())
    return s if len(s) <= width else s[: width - 1] + "…"


def session_table(rows: list[dict[str, Any]], now: float, color: bool) -> None:
    """The ``ls`` table (plain text, aligned; ANSI colours on a terminal)."""
    out = sys.stdout
    if not rows:
        out.write("no sessions\n")
        return
    header = ("ID", "NAME", "STATUS", "ADAPTER", "MODEL", "TURNS", "TOKENS", "COST", "AGE",
              "SOURCE", "TASK")  # fmt: skip
    table = [header] + [_cells(r, now) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]
    lines = []
    for k, cells in enumerate(table):
        parts = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        if color and k:
            code = _COLORS.get(cells[2].split()[0], "0")
            parts[2] = f"\x1b[{code}m{parts[2]}\x1b[0m"
        lines.append("  ".join(parts) + "  " + cells[-1])
    out.write("\n".join(lines) + "\n")


def _cells(r: dict[str, Any], now: float) -> tuple[str, ...]:
    usage = r.get("usage") or {}
    status = r["status"] + (f" +{len(r['queued'])}q" if r.get("queued") else "")
    if r.get("dangerous"):
        status += " !danger"
    task = r.get("error") if r.get("damaged") else r.get("task")
    return (
        r["id"][:8],
        _oneline(r.get("name") or "-", 20),
        status,
        r.get("adapter") or "-",
        _oneline(r.get("model") or "default", 24),
        str(r.get("turns", 0)),
        fmt_tokens(usage.get("total_tokens")) if usage else "-",
        fmt_cost(r.get("cost_usd"), r.get("cost_source")),
        fmt_age(r.get("created_at"), now),
        _oneline(r.get("source") or "-", 28),
        _oneline(task, 60),
    )


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def session_result(r: dict[str, Any]) -> None:
    c = _console()
    c.print(f"[bold]{r['id']}[/] {_status_markup(r['status'])}")
    if r.get("error"):
        c.print(f"[red]error:[/] {_esc(r['error'])}")
    if r.get("last_message"):
        c.print(_esc(r["last_message"]))


def _esc(text: Any) -> str:
    from rich.markup import escape

    return str(escape(str(text)))


def _status_markup(status: str) -> str:
    style = {"running": "yellow", "completed": "green", "failed": "red", "killed": "magenta"}
    return f"[{style.get(status, 'white')}]{status}[/]"


def session_detail(d: dict[str, Any]) -> None:
    c = _console()
    c.print(f"[bold]{d['id']}[/] {_esc(d.get('name') or '')} {_status_markup(d['status'])}")
    usage = d.get("usage") or {}
    c.print(
        f"adapter {d['adapter']}  model {_esc(d.get('model') or 'default')}  "
        f"tokens {fmt_tokens(usage.get('total_tokens'))}  "
        f"cost {fmt_cost(d.get('cost_usd'), d.get('cost_source'))} ({d.get('cost_source')})"
    )
    c.print(f"cwd {_esc(d['cwd'])}  source {_esc(d.get('source'))}  created {d['created_at']}")
    if d.get("dangerous"):
        c.print("[bold red]DANGEROUS: the agent runs without its sandbox/permission checks[/]")
    if d.get("permissions"):
        c.print(f"permissions {_esc(d['permissions'])}")
    if d.get("agent_session_id"):
        c.print(f"agent session {d['agent_session_id']}")
    if d.get("error"):
        c.print(f"[red]error:[/] {_esc(d['error'])}")
    for q in d.get("queued") or []:
        c.print(f"[yellow]queued:[/] {_esc(_oneline(q, 100))}")
    for t in d.get("turns_detail", []):
        _turn(c, t)


def _turn(c: Any, t: dict[str, Any]) -> None:
    u = t.get("usage") or {}
    code = t.get("exit_code")
    sig = t.get("signal")
    ended = f"exit {code}" if code is not None else (f"signal {sig}" if sig else "")
    c.rule(f"turn {t['n']} {t['status']} {ended}".strip())
    c.print(f"[dim]{t['started_at']} → {t.get('ended_at') or '…'}  context {t['context']}[/]")
    c.print(
        f"[dim]tokens in {u.get('input_tokens', 0)} (cached {u.get('cached_input_tokens', 0)}) "
        f"out {u.get('output_tokens', 0)} (reasoning {u.get('reasoning_tokens', 0)})  "
        f"cost {fmt_cost(t.get('cost_usd'), None)}[/]"
    )
    c.print(f"[cyan]prompt:[/] {_esc(_oneline(t.get('message'), 300))}")
    if t.get("error"):
        c.print(f"[red]error:[/] {_esc(t['error'])}")
    if t.get("final_message"):
        c.print(f"[green]final:[/] {_esc(t['final_message'])}")


def _short(text: str, full: bool) -> str:
    if full:
        return text
    lines = text.splitlines()
    if len(lines) > _SHORT_LINES:
        text = "\n".join(lines[:_SHORT_LINES]) + f"\n… ({len(lines) - _SHORT_LINES} more lines)"
    if len(text) > _SHORT_CHARS:
        text = text[:_SHORT_CHARS] + f"… ({len(text) - _SHORT_CHARS} more chars)"
    return text


def steps(items: Iterable[Step], full: bool = False) -> None:
    """Print steps as they stream in (a 200 MB log never sits in memory)."""
    c = _console()
    turn = None
    for s in items:
        if s.get("turn") != turn:
            turn = s.get("turn")
            c.rule(f"turn {turn}")
        c.print(_step_line(s, full))


def _step_line(s: Step, full: bool) -> str:
    kind = s.get("kind")
    if kind == "message":
        return f"[bold green]message[/] {_esc(_short(str(s.get('text', '')), full))}"
    if kind == "reasoning":
        return f"[dim]reasoning {_esc(_short(str(s.get('text', '')), full))}[/]"
    if kind == "command":
        code = s.get("exit_code")
        style = "green" if code == 0 else "red"
        out = _short(str(s.get("output") or ""), full)
        body = f"\n{_esc(out)}" if out.strip() else ""
        # no exit code: it never ran (declined) or never finished (in_progress)
        ended = f"exit {code}" if code is not None else _esc(s.get("status") or "no exit code")
        return f"[bold]$ {_esc(s.get('command'))}[/] [{style}]({ended})[/]{body}"
    if kind == "file_change":
        ch = ", ".join(f"{c.get('kind')} {c.get('path')}" for c in s.get("changes") or [])
        return f"[blue]files[/] {_esc(ch)}"
    if kind == "tool_call":
        args = _short(str(s.get("arguments")), full)
        return f"[magenta]tool {_esc(s.get('name'))}[/] {_esc(args)}"
    if kind == "tool_result":
        style = "red" if s.get("is_error") else "magenta"
        return f"[{style}]result[/] {_esc(_short(str(s.get('result', '')), full))}"
    if kind == "web_search":
        return f"[blue]search[/] {_esc(s.get('query'))}"
    if kind == "todo":
        todo = s.get("items") or []
        marks = (("[x] " if i.get("completed") else "[ ] ") + str(i.get("text")) for i in todo)
        items = "; ".join(marks)
        return f"[blue]todo[/] {_esc(items)}"
    if kind == "error":
        label = "error" if s.get("fatal") else "warning"
        return f"[bold red]{label}[/] {_esc(s.get('message'))}"
    return f"{_esc(kind)} {_esc(s)}"
