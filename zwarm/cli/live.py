"""The live views: ``zwarm top`` (and ``ls --watch``), ``trajectory -f``, and the progress line
``wait``, ``spawn --wait`` and ``inject --wait`` show while they block.

Owns what refreshes on screen. Must stay true:
- turn logs are read incrementally (``zwarm.cli.follow``): a refresh costs what the agents
  wrote since the last one, never a re-parse of a whole log;
- the progress line goes to stderr and only when stderr is a terminal; stdout carries only
  the command's result, so pipes and ``--json`` see exactly what they did before;
- ``top`` restores the terminal however it ends (q, Ctrl-C, an error); on a non-terminal it
  prints one snapshot and returns;
- interrupting a view never touches a session: the message says the session still runs and
  how to stop it;
- rich is imported only here and in ``render``, and only when a view runs.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from zwarm.cli import follow, render
from zwarm.cli.common import get_api
from zwarm.cli.text import oneline
from zwarm.env import parse_iso
from zwarm.model import RUNS, Status

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.model import Session

REFRESH_S = 1.0
_IDLE = ("completed", "failed", "killed", "damaged")  # listed rows with nothing to watch


# ---------------------------------------------------------------------- top
@click.command("top")
@click.option("--interval", type=click.FloatRange(min=0.2), default=REFRESH_S, show_default=True,
              help="Seconds between refreshes.")  # fmt: skip
@click.pass_context
def top_command(ctx: click.Context, interval: float) -> None:
    """A live table of sessions: what each running agent is doing now.

    For each running session: how long its turn has run, its latest step and its tokens so
    far; then the latest finished sessions. q or Ctrl-C quits (sessions keep running).

    \b
    Example:
      zwarm top --interval 2
    """
    top(get_api(ctx), interval)


Rows = list[dict[str, Any]]


def top(
    api: Zwarm,
    interval: float = REFRESH_S,
    select: Callable[[Rows], Rows] | None = None,
    status: str | None = None,
) -> None:
    """Show the live table until q or Ctrl-C (one snapshot when stdout is not a terminal);
    ``select`` and ``status`` filter the sessions as ``zwarm ls`` does."""
    board = Board(api, select, status)
    c = render.console()
    if not sys.stdout.isatty():
        board.refresh()
        c.print(board.render(height=None))
        return
    from rich.live import Live

    try:
        with _Keys() as keys, Live(console=c, screen=True, auto_refresh=False) as live:
            while True:
                began = time.monotonic()
                board.refresh()
                live.update(board.render(height=c.size.height), refresh=True)
                spent = time.monotonic() - began  # a huge state dir: refresh less often
                if keys.wait(max(interval, 3 * spent)) in ("q", "Q"):
                    return
    except KeyboardInterrupt:
        return


class Board:
    """The sessions ``top`` shows, refreshed: rows, and a ``TurnWatch`` per running turn."""

    def __init__(
        self, api: Zwarm, select: Callable[[Rows], Rows] | None = None, status: str | None = None
    ) -> None:
        self.api = api
        self.select = select or (lambda rows: rows)
        self.status = status
        self.rows: Rows = []
        self.running: dict[str, Session] = {}
        self.watches: dict[tuple[str, int], follow.TurnWatch] = {}
        self.now = time.time()

    def refresh(self) -> None:
        """List the sessions again, and read what each active turn wrote since last time."""
        api = self.api
        self.now = api.env.clock()
        self.rows = self.select(api.sessions(self.status) if api.has_sessions() else [])
        self.running = self._active()
        live = {(sid, s.turns[-1].n) for sid, s in self.running.items()}
        for key in [k for k in self.watches if k not in live]:
            del self.watches[key]
        for sid, n in live:
            w = self.watches.get((sid, n))
            if w is None:
                mgr = api.reader(self.running[sid].adapter)
                w = self.watches[(sid, n)] = follow.TurnWatch(mgr, api.store.turn_path(sid, n))
            w.poll()

    def _active(self) -> dict[str, Session]:
        from zwarm.errors import ZwarmError

        active = {}
        for r in self.rows:
            if r["status"] in _IDLE:
                continue
            try:
                s = self.api.get(r["id"])
            except ZwarmError:
                continue  # removed or damaged since it was listed: shown as listed
            if s.current is not None and not s.status.finished:
                active[s.id] = s
        return active

    def render(self, height: int | None) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        running = sorted(self.running.values(), key=lambda s: s.turns[-1].started_at)
        done = [r for r in reversed(self.rows) if r["id"] not in self.running]
        room = None if height is None else max(1, height - 5)
        t = Table(box=None, pad_edge=False, expand=True, header_style="bold")
        for name, kw in _TOP_COLUMNS:
            t.add_column(name, **kw)
        for s in running[:room]:
            t.add_row(*self._running_row(s))
        left = None if room is None else max(0, room - len(running))
        for r in done[:left]:
            t.add_row(*self._finished_row(r))
        head = Text.from_markup(self._title())
        return Group(head, Text(""), t)

    def _title(self) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(self.now))
        return (
            f"[bold]zwarm top[/] · {len(self.running)} running · {len(self.rows)} sessions · "
            f"{clock} · [dim]q quits[/]"
        )

    def _running_row(self, s: Session) -> tuple[str, ...]:
        t = s.turns[-1]
        w = self.watches.get((s.id, t.n))
        elapsed = self.now - parse_iso(t.started_at)
        waiting = s.status not in RUNS
        doing = render.activity(w.latest if w else None, 200) or ("" if waiting else "starting…")
        if s.queue:
            doing = f"(+{len(s.queue)} queued) {doing}"
        return (
            s.id[:8],
            render.esc(oneline(s.name or "-", 16)),
            render.status_markup(s.status.value),
            str(t.n),
            render.fmt_clock(elapsed),
            render.fmt_tokens(follow.tokens_so_far(s, w)),
            render.esc(doing),
        )

    def _finished_row(self, r: dict[str, Any]) -> tuple[str, ...]:
        status = r["status"]
        label = render.status_markup(status)
        if status == "failed":
            label += f" [dim]({render.esc(render.short_reason(r))})[/]"
        what = r.get("error") if status != "completed" else r.get("last_message")
        usage = r.get("usage") or {}
        return (
            r["id"][:8],
            render.esc(oneline(r.get("name") or "-", 16)),
            label,
            str(r.get("turns", 0)),
            render.fmt_ago(r.get("updated_at"), self.now),
            render.fmt_tokens(usage.get("total_tokens")) if usage else "-",
            render.esc(oneline(what or r.get("task"), 200)),
        )


_TOP_COLUMNS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("ID", {"no_wrap": True}),
    ("NAME", {"no_wrap": True, "max_width": 16}),
    ("STATUS", {"no_wrap": True}),
    ("TURN", {"no_wrap": True, "justify": "right"}),
    ("TIME", {"no_wrap": True, "justify": "right"}),
    ("TOKENS", {"no_wrap": True, "justify": "right"}),
    ("NOW / LAST", {"no_wrap": True, "overflow": "ellipsis", "ratio": 1}),
)


class _Keys:
    """Single key presses from a terminal on stdin (cbreak mode, restored on exit)."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.saved: Any = None

    def __enter__(self) -> _Keys:
        if sys.stdin.isatty():
            import termios
            import tty

            self.fd = sys.stdin.fileno()
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def wait(self, timeout: float) -> str | None:
        """The key pressed within ``timeout`` seconds, or None."""
        if self.fd is None:
            time.sleep(timeout)
            return None
        import os
        import select

        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        data = os.read(self.fd, 32)
        return data[:1].decode("ascii", "replace") if data else "q"  # EOF: the terminal went


# ---------------------------------------------------------------------- trajectory -f
def follow_trajectory(api: Zwarm, ref: str, turn: int | None, full: bool) -> int:
    """Print the session's trajectory as it happens, across queued turns, until the session
    is idle. Returns the exit status (130 when interrupted: the session keeps running)."""
    from zwarm.api import row

    s = api.get(ref)
    c = render.console()
    shown = None
    try:
        c.print(render.trajectory_header(row(s.to_dict()), _live_tokens(api, s)), soft_wrap=True)
        for item in follow.follow(api, s.id, turn):
            if isinstance(item, follow.TurnEnd):
                c.print(_turn_end(item.session, item.n))
                continue
            if item.get("turn") != shown:
                shown = item.get("turn")
                c.rule(f"turn {shown}")
            c.print(render.step_line(item, full))
    except KeyboardInterrupt:
        still_running(api, [s.id], "stopped following")
        return 130
    end = api.get(s.id)
    c.print(f"[dim]session {end.id[:8]} is idle ({end.status.value})[/]")
    return 0


def follow_steps(api: Zwarm, sid: str, turn: int | None) -> Iterator[dict[str, Any]]:
    """The steps alone of ``follow.follow`` (``trajectory -f --json``)."""
    for item in follow.follow(api, sid, turn):
        if not isinstance(item, follow.TurnEnd):
            yield item


def header(api: Zwarm, ref: str) -> str:
    """The line ``trajectory`` starts with (a running session's tokens so far included)."""
    from zwarm.api import row
    from zwarm.errors import ZwarmError

    try:
        s = api.get(ref)
    except ZwarmError:  # damaged: what can be shown follows, the damage said with it
        return f"[bold]session {render.esc(oneline(ref, 80))}[/] · [red]damaged[/]"
    return render.trajectory_header(row(s.to_dict()), _live_tokens(api, s))


def _turn_end(s: Session, n: int) -> str:
    t = s.turns[n - 1]
    parts = [f"turn {n} {render.status_markup(t.status.value)}"]
    secs = render.took(t.started_at, t.ended_at)
    if secs is not None:
        parts.append(f"took {render.fmt_duration(secs)}")
    parts.append(f"{render.fmt_tokens(t.usage.total_tokens)} tokens")
    if t.error:
        parts.append(f"[red]{render.esc(oneline(t.error, 200))}[/]")
    return " · ".join(parts)


def _live_tokens(api: Zwarm, s: Session) -> int | None:
    """A running session's tokens so far (its log read once); None if it is not running."""
    t = s.current
    if t is None or t.status.finished:
        return None
    w = follow.TurnWatch(api.reader(s.adapter), api.store.turn_path(s.id, t.n))
    w.poll()
    return follow.tokens_so_far(s, w)


# ---------------------------------------------------------------------- progress while waiting
@contextlib.contextmanager
def progress(api: Zwarm, ids: Callable[[], list[str]]) -> Iterator[None]:
    """While the body blocks, a spinner on stderr (a terminal only) with each running
    session's elapsed time and latest step. ``ids()`` gives the sessions, once resolved."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.live import Live

    from zwarm.api import Zwarm

    watcher = _Progress(Zwarm(env=api.env), ids)  # its own API object: it runs in a thread
    stop = threading.Event()
    live = Live(watcher.view(), console=render.console(stderr=True), transient=True,
                refresh_per_second=8, redirect_stdout=False, redirect_stderr=False)  # fmt: skip

    def poll() -> None:
        while not stop.wait(0.5):
            with contextlib.suppress(Exception):  # a view must never break the wait
                watcher.poll()
                live.update(watcher.view())

    thread = threading.Thread(target=poll, name="zwarm-progress", daemon=True)
    with live:
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=2)


class _Progress:
    def __init__(self, api: Zwarm, ids: Callable[[], list[str]]) -> None:
        from rich.spinner import Spinner

        self.api = api
        self.ids = ids
        self.spinner = Spinner("dots", text="waiting…")
        self.lines: list[str] = []
        self.watches: dict[tuple[str, int], follow.TurnWatch] = {}
        self.started = time.monotonic()

    def poll(self) -> None:
        from zwarm.errors import ZwarmError

        now = self.api.env.clock()
        lines, done = [], 0
        for sid in self.ids():
            try:
                s = self.api.get(sid)
            except ZwarmError:
                continue
            t = s.current
            if t is None or s.status.finished:
                done += 1
                continue
            w = self.watches.get((sid, t.n))
            if w is None:
                path = self.api.store.turn_path(sid, t.n)
                w = self.watches[(sid, t.n)] = follow.TurnWatch(self.api.reader(s.adapter), path)
            w.poll()
            doing = render.activity(w.latest, 120) or "starting…"
            clock = render.fmt_clock(now - parse_iso(t.started_at))
            tokens = render.fmt_tokens(follow.tokens_so_far(s, w))
            state = "" if s.status is Status.RUNNING else f"{s.status.value} · "
            lines.append(f"{sid[:8]} turn {t.n} · {state}{clock} · {tokens} tokens · {doing}")
        waited = render.fmt_clock(time.monotonic() - self.started)
        more = f", {done} finished" if done else ""
        self.spinner.update(text=f"waiting {waited}{more}")
        self.lines = lines[:8]

    def view(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        return Group(self.spinner, *(Text("  " + oneline(x), no_wrap=True) for x in self.lines))


def still_running(api: Zwarm, ids: list[str], what: str = "interrupted") -> None:
    """After Ctrl-C: say which of ``ids`` still run and how to stop each (stderr)."""
    from zwarm.errors import ZwarmError

    lines = []
    for sid in ids:
        try:
            status = api.get(sid).status
        except ZwarmError:
            continue
        if not status.finished:
            lines.append(f"{sid} is still {status.value}; `zwarm kill {sid}` stops it")
    click.echo("\n".join([what, *lines]), err=True)
