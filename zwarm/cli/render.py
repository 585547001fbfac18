"""Human-readable output: the session table, session details, trajectories, and the figures
(tokens, cost, ages, durations, times) they show.

Owns how things look in a terminal. Must stay true:
- every text zwarm did not write (task, name, messages, commands, outputs, errors) goes
  through ``zwarm.text`` (``clean``/``oneline``) before it is printed, and through rich's
  ``escape`` where rich markup is used: an agent or a user can never drive the terminal;
- the ``ls`` table is formatted here without rich (it must stay fast over 10,000 sessions), and
  fitted to the terminal width when there is one: every row stays on one line, columns are
  dropped or shortened by priority and the task is cut last; rich is imported only by the
  functions that use it (``show``, ``trajectory``, the live views);
- a reader that goes away (``| head``) is a ``BrokenPipeError`` here, never rich's own exit.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from zwarm.env import parse_iso
from zwarm.model import steps as step_text
from zwarm.model.status import IDLE, RUNS, WAITING, Status
from zwarm.model.steps import Step
from zwarm.text import brief, cells, clean, cut, oneline, pad, usd

COLORS = {  # status -> ANSI colour (table_lines: ls and ls --tree)
    "running": "33",
    "stalled": "33;1",
    "queued": "36",
    "parked": "36",
    "completed": "32",
    "failed": "31",
    "killed": "35",
    "damaged": "41;37",
}
_STYLES = {
    "running": "yellow",
    "stalled": "bold yellow",
    "queued": "cyan",
    "parked": "cyan",
    "completed": "green",
    "failed": "red",
    "killed": "magenta",
}
_SHORT_LINES = 12
_SHORT_CHARS = 1200


# ---------------------------------------------------------------------- figures
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


def fmt_cost(cost: float | None, source: str | None, complete: bool = True) -> str:
    """``$0.0123``, ``~$0.0123`` (estimated from token prices), ``≥ $0.0123`` (the known part
    of a cost with unknown parts), ``?`` (nothing known). The dashboard's ``fmtCost``
    (serve/static/app.js) renders the same."""
    if cost is None:
        return "?"
    mark = ("" if complete else "≥ ") + ("~" if source == "estimated" else "")
    return mark + usd(cost)


def price_hint(d: dict[str, Any]) -> str | None:
    """How to make an unknown cost known (said once, by ``show``): the agent reports none and
    zwarm has no price for the session's model."""
    if d.get("cost_source") != "unknown" or d.get("damaged") or _exact(d):
        return None
    table = f"[{oneline(d.get('adapter'), 32)}.prices]"
    model = d.get("model")
    key = json.dumps(oneline(model, 80)) if model else '"MODEL"'
    which = f"model {oneline(model, 80)}" if model else "the agent's default model"
    return (
        f"no price for {which}: set one in .zwarm/config.toml, {table} "
        f"{key} = {{ input = USD, cached_input = USD, output = USD }} (per 1M tokens)"
    )


def _exact(d: dict[str, Any]) -> bool:
    """Whether the session's cost is known whole though its model has no price: every turn
    cost nothing (it never started, or failed before the model answered)."""
    return d.get("cost_usd") is not None and d.get("cost_complete") is not False


def cost_label(d: dict[str, Any]) -> str:
    """``show``'s cost with where it comes from: ``~$0.0123 (estimated)``; an exact zero of
    an unpriced model is just ``$0.0000`` (never ``$0.0000 (unknown)``)."""
    source = d.get("cost_source")
    if source == "unknown" and _exact(d):
        return row_cost(d)
    return f"{row_cost(d)} ({oneline(source, 20)})"


def row_cost(r: dict[str, Any]) -> str:
    """A session row's own cost (``fmt_cost`` of its ``cost_usd``, ``cost_source`` and
    ``cost_complete``)."""
    return fmt_cost(r.get("cost_usd"), r.get("cost_source"), r.get("cost_complete") is not False)


def _seconds(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return parse_iso(iso)
    except ValueError:
        return None


def fmt_age(created: str | None, now: float) -> str:
    """A compact age for tables: ``45s``, ``12m``, ``3h``, ``2d``."""
    t = _seconds(created)
    if t is None:
        return "-"
    secs = max(0.0, now - t)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{int(secs // size)}{unit}"
    return f"{int(secs)}s"


def fmt_ago(iso: str | None, now: float) -> str:
    """How long ago, in words: ``just now``, ``5 min ago``, ``3 h ago``, ``2 days ago``."""
    t = _seconds(iso)
    if t is None:
        return "-"
    secs = max(0.0, now - t)
    if secs < 10:
        return "just now"
    if secs < 60:
        return f"{int(secs)} s ago"
    if secs < 3600:
        return f"{int(secs // 60)} min ago"
    if secs < 86400:
        return f"{int(secs // 3600)} h ago"
    days = int(secs // 86400)
    return "1 day ago" if days == 1 else f"{days} days ago"


def fmt_duration(secs: float | None) -> str:
    """A duration: ``0.4 s``, ``13.1 s``, ``4 min 05 s``, ``2 h 07 min``."""
    if secs is None or secs < 0:
        return "-"
    if secs < 60:
        return f"{secs:.1f} s"
    whole = int(secs)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def fmt_clock(secs: float) -> str:
    """An elapsed time for live views: ``0:07``, ``12:30``, ``1:02:03``."""
    whole = max(0, int(secs))
    h, rest = divmod(whole, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def fmt_local(iso: str | None) -> str:
    """An ISO time as local time, to the second: ``2026-11-23 17:18:31``."""
    t = _seconds(iso)
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def took(started: str | None, ended: str | None, now: float | None = None) -> float | None:
    """Seconds from ``started`` to ``ended`` (or to ``now`` if it has not ended)."""
    a, b = _seconds(started), _seconds(ended) if ended else now
    return None if a is None or b is None else max(0.0, b - a)


_AGENT_ERROR = ("agent_error", "killed")  # said by the error (exit 3) or the status itself
_REASONS = {  # zwarm's own reasons; a launcher's are labelled by the launcher
    "timeout": "timeout",
    "supervisor_lost": "lost",
    "start_failed": "no start",
    "setup_failed": "setup",
    "rate_limited": "rate limit",
    "usage_limit": "usage limit",
    "overloaded": "overloaded",
    "auth_failed": "auth",
    "context_overflow": "context full",
    "budget_exceeded": "budget",
    "stalled": "stalled",
    "dependency_failed": "dependency",
    "out_of_memory": "memory",
}


def short_reason(r: dict[str, Any]) -> str:
    """Why a failed session failed, in a word or two (``timeout``, ``exit 3``, ``lost``): a
    launcher's own reason as it labels it (``preempted``), one no installed launcher declares
    (its launcher uninstalled) as its words (``nice lost``)."""
    reason = r.get("reason")
    if reason in _REASONS:
        return _REASONS[reason]
    if isinstance(reason, str) and reason not in _AGENT_ERROR:
        from zwarm import launchers

        found = launchers.failure(reason)
        return oneline(found.label if found is not None else reason.replace("_", " "), 20)
    error = str(r.get("error") or "")
    for prefix, word in (("agent exited with code ", "exit "), ("agent killed by signal ", "sig ")):
        if error.startswith(prefix):
            return word + error[len(prefix) :].split(":", 1)[0].split(";", 1)[0].strip()[:6]
    return "error"


# ---------------------------------------------------------------------- the ls table
# (header, how much it matters: the lowest is dropped first, None never)
_COLUMNS = (
    ("ID", None),
    ("NAME", 8),
    ("BRANCH", 1),  # shown only when a session has one (a worktree)
    ("HOST", 9),  # shown only when a session runs on a host
    ("SET", 2),  # shown only when a session is an attempt of a best-of set: "set-3f2a9b1c #2"
    ("STATUS", None),
    ("ADAPTER", 2),
    ("MODEL", 4),
    ("TURNS", 3),
    ("TOKENS", 6),
    ("COST", 5),
    ("AGE", 7),
    ("SOURCE", 1),
    ("TASK", None),
)
# What is done, in order, while the table is too wide: (column, shrink to width, or 0: drop).
# A column with nothing in it (every cell "-") goes before any of this. At 80 columns the
# table keeps id, name, status (a long one cut), tokens, age and task (docs/sessions.md).
_SQUEEZE = (
    ("BRANCH", 16),
    ("HOST", 12),
    ("SET", 0),
    ("SOURCE", 12),
    ("MODEL", 16),
    ("NAME", 14),
    ("SOURCE", 0),
    ("ADAPTER", 0),
    ("TURNS", 0),
    ("COST", 0),
    ("BRANCH", 0),
    ("MODEL", 0),
    ("NAME", 8),
    ("STATUS", 20),
    ("TOKENS", 0),
    ("STATUS", 12),
    ("AGE", 0),
    ("NAME", 0),
)
_SQUEEZABLE = frozenset(col for col, _ in _SQUEEZE)
_TASK_ROOM = 20  # the task keeps at least this much before anything but it is cut
_TASK_MAX = 60  # the task's width when the output is not fitted to a terminal
_GAP = "  "


def session_table(
    rows: list[dict[str, Any]], now: float, color: bool, width: int | None = None
) -> None:
    """The ``ls`` table: plain aligned text, ANSI colours on a terminal, fitted to ``width``
    terminal cells when given (every row on one line)."""
    out = sys.stdout
    if not rows:
        out.write("no sessions\n")
        return
    header = [h for h, _ in _COLUMNS]
    table = [header] + [_cells(r, now) for r in rows]
    widths = {h: max(cells(row[i]) for row in table) for i, h in enumerate(header)}
    if not any(r.get("branch") for r in rows):
        del widths["BRANCH"]
    if not any(r.get("host") for r in rows):
        del widths["HOST"]
    if not any(r.get("set") for r in rows):
        del widths["SET"]
    if width is not None:  # fitted: a column with nothing in it goes first
        for i, h in enumerate(header):
            if h in _SQUEEZABLE and all(row[i] == "-" for row in table[1:]):
                widths.pop(h, None)
    shown = fit_columns(widths, width, _SQUEEZE)
    out.write("\n".join(table_lines(header, table, shown, color)) + "\n")


def table_lines(
    header: Sequence[str], table: Sequence[Sequence[str]], shown: dict[str, int], color: bool
) -> list[str]:
    """``table`` (its first row the header) as lines of the columns ``shown`` (``fit_columns``):
    each cell cut and padded to its column's width (the task, last, only cut), a row's status
    coloured when ``color`` (``ls`` and ``ls --tree``)."""
    lines = []
    for k, row in enumerate(table):
        parts = []
        for i, h in enumerate(header):
            if h not in shown:
                continue
            cell = cut(row[i], shown[h])
            cell = cell if h == "TASK" else pad(cell, shown[h])
            if color and k and h == "STATUS" and row[i]:
                cell = f"\x1b[{COLORS.get(row[i].split()[0], '0')}m{cell}\x1b[0m"
            parts.append(cell)
        lines.append(_GAP.join(parts).rstrip())
    return lines


def fit_columns(
    widths: dict[str, int], width: int | None, squeeze: Sequence[tuple[str, int]]
) -> dict[str, int]:
    """The columns shown and their widths (in order), for a line of at most ``width``: the
    last column (the task) keeps ``_TASK_ROOM`` cells before anything but it is cut, while
    ``squeeze`` says, in order, what else gives way: (column, shrink to width, or 0: drop).
    Shared by ``ls`` and ``ls --tree`` (``cli.tree``)."""
    shown = dict(widths)
    last = list(shown)[-1]
    if width is None:
        shown[last] = min(shown[last], _TASK_MAX)
        return shown
    task = shown.pop(last)

    def used() -> int:
        return sum(shown.values()) + len(_GAP) * len(shown)

    for col, to in squeeze:
        if used() + min(task, _TASK_ROOM) <= width:
            break
        if col not in shown:
            continue
        if to:
            shown[col] = min(shown[col], max(to, cells(col)))
        else:
            del shown[col]
    shown[last] = max(1, min(task, width - used()))
    return shown


def _cells(r: dict[str, Any], now: float) -> list[str]:
    usage = r.get("usage") or {}
    status = launcher_status(r) or r["status"]
    if status == "failed":
        status += f" ({short_reason(r)})"
    status += fleet_note(r, now)
    if r.get("queued"):
        status += f" +{len(r['queued'])}q"
    if r.get("dangerous"):
        status += " !danger"
    task = r.get("error") if r.get("damaged") else r.get("task")
    return [
        r["id"][:8],
        oneline(r.get("name") or "-", 20),
        oneline(r.get("branch") or "-", 32),
        oneline(r.get("host") or "-", 24),
        f"{r['set']} #{r.get('attempt')}" if r.get("set") else "-",
        status,
        oneline(r.get("adapter") or "-", 16),
        oneline(r.get("model") or "default", 24),
        str(r.get("turns", 0)),
        fmt_tokens(usage.get("total_tokens")) if usage else "-",
        row_cost(r),
        fmt_age(r.get("created_at"), now),
        oneline(r.get("source") or "-", 28),
        oneline(task, 400),
    ]


def launcher_status(r: dict[str, Any]) -> str | None:
    """What a running row shows instead of ``running`` when its launcher says so (the row's
    ``shown_status``): ``queued (slurm: Resources)`` (its job waits in the cluster's queue),
    ``unknown (slurm unreachable)`` (the cluster could not be asked); None otherwise. The
    dashboard's ``launcherStatus`` (serve/static/app.js) shows the same."""
    shown = r.get("shown_status")
    if r.get("status") not in RUNS or not shown:
        return None
    return oneline(shown, 60)


def shown_markup(r: dict[str, Any]) -> str:
    """A row's status as shown (``launcher_status``, else its status), styled."""
    shown = launcher_status(r)
    if shown is None:
        return status_markup(r.get("status") or "-")
    style = _STYLES.get(shown.split(" ", 1)[0], "white")
    return f"[{style}]{esc(shown)}[/]"


def fleet_note(r: dict[str, Any], now: float) -> str:
    """What a waiting or stalled row adds to its status: ``#2 after 3f2a1b2c`` (its place in
    the queue, what it waits for), ``until 15:00`` (parked), ``4m`` (stalled: silent since)."""
    status = r["status"]
    if status == "queued":
        place = f" #{r['queue_position']}" if r.get("queue_position") else ""
        waits = r.get("waiting_for") or []
        return place + (" after " + ",".join(w[:8] for w in waits) if waits else "")
    if status == "parked" and r.get("parked_until"):
        t = _seconds(r["parked_until"])
        if t is None:
            return ""
        same_day = time.localtime(t)[:3] == time.localtime(now)[:3]
        day = "" if same_day else "%a "
        return " until " + time.strftime(day + "%H:%M", time.localtime(t))
    if status == "stalled" and r.get("quiet_since"):
        return " " + fmt_age(r["quiet_since"], now)
    return ""


# ---------------------------------------------------------------------- rich output
def console(stderr: bool = False) -> Any:
    """A rich console for zwarm's output; a closed pipe raises ``BrokenPipeError`` (rich's
    own handling would exit 1), which the CLI turns into a quiet exit (``output.reader_gone``)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return _Console(highlight=False, soft_wrap=False, stderr=stderr)


def esc(text: Any, newlines: bool = True) -> str:
    """``text`` cleaned of control characters and escaped for rich markup."""
    from rich.markup import escape

    return str(escape(clean(text, newlines)))


def status_markup(status: str) -> str:
    return f"[{_STYLES.get(status, 'white')}]{esc(status)}[/]"


def session_result(r: dict[str, Any]) -> None:
    """What ``spawn/inject --wait`` print when the turn ends: status, error, final message."""
    c = console()
    c.print(f"[bold]{r['id']}[/] {status_markup(r['status'])}")
    if r.get("error"):
        c.print(f"[red]error:[/] {esc(r['error'])}")
    if r.get("last_message"):
        c.print(esc(r["last_message"]))


def session_detail(d: dict[str, Any], now: float | None = None) -> None:
    """``zwarm show``: the session, then each turn (local times, durations)."""
    now = time.time() if now is None else now
    c = console()
    name = f" {esc(d['name'], False)}" if d.get("name") else ""
    c.print(f"[bold]{d['id']}[/]{name} {shown_markup(d)}")
    usage = d.get("usage") or {}
    c.print(
        f"adapter {esc(d['adapter'])}  model {esc(d.get('model') or 'default', False)}  "
        f"tokens {fmt_tokens(usage.get('total_tokens'))}  "
        f"cost {esc(cost_label(d), False)}"
    )
    hint = price_hint(d)
    if hint:
        c.print(f"[dim]{esc(hint, False)}[/]")
    created = f"{fmt_local(d['created_at'])} ({fmt_ago(d['created_at'], now)})"
    c.print(f"cwd {esc(d['cwd'], False)}  source {esc(d.get('source'), False)}  created {created}")
    if d.get("dangerous"):
        c.print("[bold red]DANGEROUS: the agent runs without its sandbox/permission checks[/]")
    if d.get("permissions"):
        c.print(f"permissions {esc(d['permissions'], False)}")
    if d.get("sandbox") not in (None, "off"):  # zwarm's own (its limits: each turn's)
        c.print(f"sandbox {esc(d['sandbox'], False)}")
    if d.get("agent_session_id"):
        c.print(f"agent session {esc(d['agent_session_id'], False)}")
    _workspace(c, d)
    _fleet(c, d, now)
    if d.get("error"):
        c.print(f"[red]error:[/] {esc(d['error'])}")
    for q in d.get("queued") or []:
        c.print(f"[yellow]queued:[/] {esc(oneline(q, 100))}")
    turns = d.get("turns_detail", [])
    for t in turns:
        _turn(c, t, now, launcher_status(d) if t is turns[-1] else None, d.get("cost_source"))


def _fleet(c: Any, d: dict[str, Any], now: float) -> None:
    """Its group, priority, budget and what it runs after; why it waits, if it does."""
    parts = []
    if d.get("set"):
        parts.append(f"attempt {d.get('attempt')} of best-of {esc(d['set'], False)}")
    if d.get("group"):
        parts.append(f"group {esc(d['group'], False)}")
    if d.get("priority"):
        parts.append(f"priority {d['priority']}")
    if d.get("account"):
        parts.append(f"account {esc(d['account'], False)}")
    if d.get("max_cost_usd") is not None:
        parts.append(f"budget {fmt_cost(d['max_cost_usd'], None)}")
    if d.get("max_tokens") is not None:
        parts.append(f"budget {fmt_tokens(d['max_tokens'])} tokens")
    if d.get("after"):
        parts.append("after " + ", ".join(a[:8] for a in d["after"]))
    if parts:
        c.print("  ".join(parts))
    if d["status"] == "queued":  # its place, and why it waits (the scheduler's words)
        place = f"#{d['queue_position']}" if d.get("queue_position") else ""
        said = " · ".join(filter(None, [place, d.get("wait")]))
    else:
        said = fleet_note(d, now).strip()
    if said and d["status"] in WAITING | {Status.STALLED}:
        c.print(f"[cyan]{esc(d['status'])}:[/] {esc(said)}")


def fmt_changes(ch: dict[str, Any] | None) -> str:
    if not ch:
        return "-"
    n = ch.get("files", 0)
    return f"{n} file{'' if n == 1 else 's'} +{ch.get('added', 0)} -{ch.get('removed', 0)}"


def _workspace(c: Any, d: dict[str, Any]) -> None:
    """The session's repository, worktree and branch, what it changed, its open comments."""
    ws = d.get("workspace")
    if ws:
        where = f"repo {esc(ws['repo'], False)}"
        if ws["mode"] == "worktree":
            gone = " (removed)" if ws.get("removed") else ""
            base = (ws.get("base") or "")[:12]
            where += f"  worktree {esc(ws['tree'], False)}{gone}  branch "
            where += f"{esc(ws.get('branch'), False)}  base {base}"
        c.print(where)
    if d.get("changes"):
        c.print(f"changes {fmt_changes(d['changes'])}")
    for k in d.get("comments") or []:
        if k.get("sent_turn") is None:
            text = esc(oneline(k.get("text"), 200))
            c.print(f"[yellow]comment {k['id']}:[/] {esc(k['path'], False)}:{k['line']} {text}")


def _turn(
    c: Any, t: dict[str, Any], now: float, shown: str | None = None, source: str | None = None
) -> None:
    """One turn of ``show``; ``shown``: the status shown for it instead of ``running``
    (``queued (slurm: Resources)``: the session's ``launcher_status``); ``source``: the
    session's ``cost_source`` (an estimate from token prices is shown ``~$``, as the total;
    nothing billed is exactly ``$0``)."""
    u = t.get("usage") or {}
    code, sig = t.get("exit_code"), t.get("signal")
    ended = f"exit {code}" if code is not None else (f"signal {sig}" if sig else "")
    running = t["status"] in RUNS
    status = shown if shown and running else t["status"]
    c.rule(f"turn {t['n']} {esc(status)} {ended}".strip())
    secs = took(t.get("started_at"), t.get("ended_at"), now)
    word = status.split(" ", 1)[0] if status.startswith("queued") else "running"
    span = f"took {fmt_duration(secs)}" if t.get("ended_at") else f"{word} for {fmt_duration(secs)}"
    c.print(f"[dim]started {fmt_local(t['started_at'])}  {span}  context {t['context']}[/]")
    if t.get("launcher") not in (None, "local"):  # e.g. "slurm job 1234"
        held = " ".join(f"{k} {v}" for k, v in sorted((t.get("handle") or {}).items()))
        runs = oneline(f"{t['launcher']} {held}", 200)
        c.print(f"[dim]{esc(runs)}[/]")
    if t.get("account"):
        c.print(f"[dim]account {esc(t['account'], False)}[/]")
    if t.get("switched_from"):
        note = step_text.switched_text(t["n"], t.get("account"), t["switched_from"])
        c.print(f"[yellow]{esc(note, False)}[/]")
    c.print(
        f"[dim]tokens in {u.get('input_tokens', 0)} (cached {u.get('cached_input_tokens', 0)}) "
        f"out {u.get('output_tokens', 0)} (reasoning {u.get('reasoning_tokens', 0)})  "
        f"cost {fmt_cost(t.get('cost_usd'), source if t.get('cost_usd') else None)}[/]"
    )
    # a turn zwarm ran always has one; zwarm 3.x kept only the first turn's (the task)
    prompt = esc(oneline(t.get("message"), 300)) if t.get("message") else "[dim](not recorded)[/]"
    c.print(f"[cyan]prompt:[/] {prompt}")
    if t.get("limits"):  # how its sandbox's limits held, each one that did not saying why
        c.print(f"[dim]limits: {esc(oneline(t['limits'], 300))}[/]")
    if t.get("changes"):
        c.print(f"[blue]changes:[/] {fmt_changes(t['changes'])}")
    if t.get("error"):
        c.print(f"[red]error:[/] {esc(t['error'])}")
    if t.get("final_message"):
        c.print(f"[green]final:[/] {esc(t['final_message'])}")


# ---------------------------------------------------------------------- trajectories
def trajectory_header(d: dict[str, Any], live_tokens: int | None = None) -> str:
    """Two short lines naming the session: its id and name; then its adapter, model, status,
    turns and tokens (so far, for an active session: ``live_tokens`` when known)."""
    name = f" ({esc(oneline(d.get('name'), 40))})" if d.get("name") else ""
    total = (d.get("usage") or {}).get("total_tokens")
    active = d.get("status") not in IDLE | {None}
    if active and live_tokens is not None:
        total = live_tokens
    tokens = f"{fmt_tokens(total)} tokens" + (" so far" if active else "")
    n = d.get("turns", 0)
    queued = len(d.get("queued") or [])
    parts = [
        esc(d.get("adapter") or "-"),
        esc(oneline(d.get("model") or "default", 40)),
        status_markup(d.get("status") or "-"),
        f"{n} turn{'s' if n != 1 else ''}" + (f" (+{queued} queued)" if queued else ""),
        tokens,
    ]
    return f"[bold]session {d['id']}[/]{name}\n" + " · ".join(parts)


def steps(items: Iterable[Step], full: bool = False, header: str | None = None) -> None:
    """Print steps as they stream in (a 200 MB log never sits in memory)."""
    c = console()
    if header:
        c.print(header, soft_wrap=True)
    turn = None
    for s in items:
        if s.get("turn") != turn:
            turn = s.get("turn")
            c.rule(f"turn {turn}")
        c.print(step_line(s, full))


# a step kind's style in a trajectory (the label's; the whole line's for reasoning)
_STEP_STYLES = {
    "message": "bold green",
    "reasoning": "dim",
    "file_change": "blue",
    "tool_call": "magenta",
    "tool_result": "magenta",
    "web_search": "blue",
    "todo": "blue",
    "error": "bold red",
}


def step_line(s: Step, full: bool) -> str:
    """One step as rich markup (possibly several lines): its label (``steps.label``) styled,
    then its text (``steps.text``), long ones shortened unless ``full``."""
    kind = s.get("kind")
    if kind == "command":
        style = "green" if s.get("exit_code") == 0 else "red"
        out = _short(str(s.get("output") or ""), full)
        body = f"\n{esc(out)}" if out.strip() else ""
        ended = esc(step_text.exit_text(s))
        command = esc(step_text.command_text(s.get("command")))
        return f"[bold]$ {command}[/] [{style}]({ended})[/]{body}"
    name, said = esc(step_text.label(s)), esc(_short(step_text.text(s), full))
    look = _STEP_STYLES.get(kind) if isinstance(kind, str) else None
    if kind == "tool_result" and s.get("is_error"):
        look = "red"
    if look is None:
        return f"{name} {said}"
    if kind == "reasoning":
        return f"[{look}]{name} {said}[/]"
    return f"[{look}]{name}[/] {said}"


def activity(s: Step | None, width: int = 80) -> str:
    """A step as one plain line (live views): ``$ pytest -q (exit 1)``, ``message Done…``."""
    return "" if s is None else oneline(step_text.line(s), width)


def _short(text: str, full: bool) -> str:
    return text if full else brief(text, _SHORT_LINES, _SHORT_CHARS)
