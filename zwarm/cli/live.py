"""The live views: ``zwarm top`` (and ``ls --watch``), ``trajectory -f``, and the progress line
``wait``, ``spawn --wait`` and ``inject --wait`` show while they block.

Owns what refreshes on screen. Must stay true:
- turn logs are read incrementally (``Zwarm.turn_watch``, ``Zwarm.follow``: ``ops.following``):
  a refresh costs what the agents wrote since the last one, never a re-parse of a whole log;
- an idle view costs nothing: it sleeps on the state dir (``system.notify``) and reads again
  only what changed (and everything every ``FULL_EVERY_S``); ``top`` paints each distinct
  cell once (``_Painter``) and redraws only a frame that changed, so a second in which only
  the clocks moved reads no file and renders no markup;
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
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from zwarm.cli import render
from zwarm.cli.common import get_api
from zwarm.cli.render import activity
from zwarm.env import parse_iso
from zwarm.model import RUNS, Status
from zwarm.model.status import IDLE
from zwarm.ops import following as follow
from zwarm.text import cells, oneline

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.model import Session
    from zwarm.system import notify

REFRESH_S = 1.0
FULL_EVERY_S = 5.0  # top reads every session again this often even when no file changed
WATCHED_ROWS = 200  # top watches the running sessions and this many of the latest others
PAINTED_CELLS = 4096  # cells kept painted (see ``_Painter``)
LAST_MIN = 12  # top's last column (what the agent does) keeps this many cells if it can
SPIN_FPS = 1  # the spinner's steps per second while ``wait`` blocks (each redraw costs CPU)


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
    paint = _Painter(c)
    if not sys.stdout.isatty():
        board.refresh()
        sys.stdout.write("".join(x + "\n" for x in board.lines(paint, c.size.width, None)))
        return
    try:
        with _Keys() as keys, _Screen(sys.stdout) as screen, board:
            pause = interval
            while True:
                size = c.size
                screen.show(board.lines(paint, size.width, size.height))
                if keys.wait(pause) in ("q", "Q"):
                    return
                spent = board.update()  # a huge state dir: refresh less often
                pause = max(interval, 3 * spent)
    except KeyboardInterrupt:
        return


class Board:
    """The sessions ``top`` shows, refreshed: rows, and a ``TurnWatch`` per running turn.

    Used as a context manager it watches the state dir (``system.notify``): ``update`` reads
    the sessions again only when a watched session (or the set of sessions) changed, reads
    the turn logs that grew, and does everything every ``FULL_EVERY_S`` whatever changed."""

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
        self.notify: notify.Watcher | None = None
        self._dirs: dict[Path, str] = {}  # watched session dirs (and turns/ dirs): their ids
        self._full = 0.0  # when everything was last read

    def __enter__(self) -> Board:
        from zwarm.system import notify

        self.notify = notify.Watcher()
        self.notify.add(self.api.sessions_dir)  # sessions added or removed
        self.refresh()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.notify is not None:
            self.notify.close()
            self.notify = None

    def update(self) -> float:
        """What changed since the last look, read again (see the class); the seconds spent."""
        began = time.monotonic()
        self.now = self.api.env.clock()
        changed = self.notify.wait(0) if self.notify is not None else set()
        logs = {p for p in changed if p.name == "turns"}
        if changed - logs or began - self._full >= FULL_EVERY_S:  # a meta.json replaced, a
            self.refresh()  # session added or removed; or a process died (writing nothing)
            return time.monotonic() - began
        grew = {self._dirs.get(p) for p in logs}
        for (sid, _), w in self.watches.items():
            if sid in grew:
                w.poll()
        return time.monotonic() - began

    def refresh(self) -> None:
        """List the sessions again, and read what each active turn wrote since last time."""
        api = self.api
        self._full = time.monotonic()
        self.now = api.env.clock()
        self.rows = self.select(api.sessions(self.status) if api.has_sessions() else [])
        self.running = self._active()
        live = {(sid, s.turns[-1].n) for sid, s in self.running.items()}
        for key in [k for k in self.watches if k not in live]:
            del self.watches[key]
        for sid, n in live:
            w = self.watches.get((sid, n))
            if w is None:
                w = self.watches[(sid, n)] = api.turn_watch(self.running[sid], n)
            w.poll()
        if self._watch_dirs():
            self._full = 0.0  # read again at the next update what changed before its watch

    def _active(self) -> dict[str, Session]:
        from zwarm.errors import ZwarmError

        active = {}
        for r in self.rows:
            if r["status"] in IDLE:
                continue
            try:
                s = self.api.read(r["id"])  # reconciled just now
            except ZwarmError:
                continue  # removed or damaged since it was listed: shown as listed
            if s.current is not None and not s.status.finished:
                active[s.id] = s
        return active

    def _watch_dirs(self) -> bool:
        """Watch the running sessions (their turn logs too) and the latest others; whether
        a directory was added."""
        if self.notify is None:
            return False
        wanted: dict[Path, str] = {}
        for sid in [*self.running, *(r["id"] for r in self.rows[-WATCHED_ROWS:])]:
            wanted[self.api.session_dir(sid)] = sid
            if sid in self.running:
                wanted[self.api.session_dir(sid) / "turns"] = sid
        for p in [p for p in self._dirs if p not in wanted]:
            self.notify.discard(p)
        added = [p for p in wanted if p not in self._dirs]
        for p in added:
            self.notify.add(p, content=p.name == "turns")
        self._dirs = wanted
        return bool(added)

    def lines(self, paint: _Painter, width: int, height: int | None) -> list[str]:
        """The screen: title, a blank line, the table cut to ``width`` cells and, with
        ``height``, to the rows that fit."""
        running = sorted(self.running.values(), key=lambda s: s.turns[-1].started_at)
        done = [r for r in reversed(self.rows) if r["id"] not in self.running]
        room = None if height is None else max(1, height - 5)
        rows = [self._running_row(s) for s in running[:room]]
        left = None if room is None else max(0, room - len(rows))
        rows += [self._finished_row(r) for r in done[:left]]
        columns = _TOP_COLUMNS
        if not any(r.get("host") for r in self.rows):  # as ls: HOST once a session runs on one
            columns = tuple(c for c in columns if c[0] != "HOST")
            rows = [(*r[:_HOST], *r[_HOST + 1 :]) for r in rows]
        head = tuple(f"[bold]{name}[/]" for name, _ in columns)
        table = _table(paint, [head, *rows], width, columns)
        return [paint.cell(self._title(), width)[0], "", *table]

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
        doing = activity(w.latest if w else None, 200) or ("" if waiting else "starting…")
        if s.queue:
            doing = f"(+{len(s.queue)} queued) {doing}"
        listed = next((r for r in self.rows if r["id"] == s.id), None)  # its launcher's word
        host = listed.get("host") if listed else None
        if listed is None or listed["status"] != s.status.value:
            listed = {"status": s.status.value}
        return (
            s.id[:8],
            render.esc(oneline(s.name or "-", 16)),
            render.shown_markup(listed),
            _host_cell(host),
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
            _host_cell(r.get("host")),
            str(r.get("turns", 0)),
            render.fmt_ago(r.get("updated_at"), self.now),
            render.fmt_tokens(usage.get("total_tokens")) if usage else "-",
            render.esc(oneline(what or r.get("task"), 200)),
        )


_TOP_COLUMNS: tuple[tuple[str, str], ...] = (  # name, justify (the last column fills the rest)
    ("ID", "left"),
    ("NAME", "left"),
    ("STATUS", "left"),
    ("HOST", "left"),  # shown only when a session runs on a host (as ls)
    ("TURN", "right"),
    ("TIME", "right"),
    ("TOKENS", "right"),
    ("NOW / LAST", "left"),
)
_HOST = 3  # HOST's place in _TOP_COLUMNS
_GAP = "  "


def _host_cell(host: Any) -> str:
    """A row's HOST cell: the host its latest turn ran on (ssh), else "-"."""
    return render.esc(oneline(host, 24)) if isinstance(host, str) and host else "-"


def _table(
    paint: _Painter,
    rows: list[tuple[str, ...]],
    width: int,
    columns: tuple[tuple[str, str], ...] = _TOP_COLUMNS,
) -> list[str]:
    """``rows`` of markup cells (one per ``columns``) as terminal lines of at most ``width``
    cells: each column as wide as its widest cell (the widest shrunk, cells cut with …, when
    they do not fit), the last one filling what is left."""
    painted = [[paint.cell(c) for c in r[:-1]] for r in rows]
    natural = [max((p[i][1] for p in painted), default=0) for i in range(len(columns) - 1)]
    widths = _fit(natural, width - len(_GAP) * len(natural) - LAST_MIN)
    rest = max(1, width - sum(widths) - len(_GAP) * len(widths))
    out = []
    for r, row in zip(rows, painted, strict=True):
        parts = []
        for i, ((text, used), w) in enumerate(zip(row, widths, strict=True)):
            if used > w:
                text, used = paint.cell(r[i], w)
            parts.append(_pad(text, w - used, columns[i][1]))
        parts.append(paint.cell(r[-1], rest)[0])
        out.append(_GAP.join(parts))
    return out


def _fit(widths: list[int], room: int) -> list[int]:
    """``widths`` shrunk, one cell at a time, until they fit in ``room``: the widest of NAME,
    STATUS and HOST (when shown: the 4th column of 7) first (down to a few cells), then the
    widest of all but ID (the handle one types), then ID too."""
    widths = list(widths)
    room = max(room, len(widths))
    first = (1, 2, _HOST) if len(widths) == len(_TOP_COLUMNS) - 1 else (1, 2)
    steps = ((first, 4), (range(1, len(widths)), 1), (range(len(widths)), 1))
    for cols, least in steps:
        while sum(widths) > room:
            i = max(cols, key=lambda i: widths[i])
            if widths[i] <= least:
                break
            widths[i] -= 1
    return widths


def _pad(text: str, room: int, justify: str) -> str:
    return " " * room + text if justify == "right" else text + " " * room


class _Painter:
    """Rich markup as terminal text (ANSI styles, or plain where the console has no color),
    with its width in cells; each distinct cell is rendered once, so a refresh in which only
    the clocks moved costs almost nothing."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self._cache: dict[tuple[str, int | None], tuple[str, int]] = {}

    def cell(self, markup: str, width: int | None = None) -> tuple[str, int]:
        """``markup`` painted, and its width; with ``width``, cut to it (ending in …)."""
        key = (markup, width)
        got = self._cache.get(key)
        if got is None:
            if len(self._cache) >= PAINTED_CELLS:
                self._cache.clear()
            got = self._cache[key] = self._paint(markup, width)
        return got

    def _paint(self, markup: str, width: int | None) -> tuple[str, int]:
        if "[" not in markup and width is None:  # plain (cells are cleaned by their makers)
            return markup, cells(markup)
        text = self.console.render_str(markup)
        if width is not None:
            text.truncate(width, overflow="ellipsis")
        with self.console.capture() as cap:
            self.console.print(text, end="", soft_wrap=True)
        return cap.get(), int(text.cell_len)


class _Screen:
    """The terminal's alternate screen, redrawn a frame at a time and only when the frame
    changed; the cursor hidden meanwhile. Restored however the block ends."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.shown = ""

    def __enter__(self) -> _Screen:
        self._write("\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J")
        return self

    def __exit__(self, *exc: object) -> None:
        self._write("\x1b[?25h\x1b[?1049l")

    def show(self, lines: list[str]) -> None:
        frame = "\x1b[H" + "\x1b[K\r\n".join(lines) + "\x1b[K\x1b[J"
        if frame != self.shown:
            self._write(frame)
            self.shown = frame

    def _write(self, data: str) -> None:
        self.out.write(data)
        self.out.flush()


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
        c.print(render.trajectory_header(row(s), _live_tokens(api, s)), soft_wrap=True)
        for item in api.follow(s.id, turn):
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
    for item in api.follow(sid, turn):
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
    return render.trajectory_header(row(s), _live_tokens(api, s))


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
    w = api.turn_watch(s, t.n)
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
                refresh_per_second=SPIN_FPS, redirect_stdout=False,
                redirect_stderr=False)  # fmt: skip

    def poll() -> None:
        look: set[str] | None = None  # the sessions to read again (None: every one)
        logs = True  # whether their turn logs may have grown
        try:
            while not stop.is_set():
                try:
                    watcher.poll(look, logs)
                    live.update(watcher.view())
                    look, logs = watcher.pause(0.5)
                except Exception:  # a view must never break the wait
                    look, logs = None, True
                    stop.wait(0.5)
        finally:
            watcher.close()

    thread = threading.Thread(target=poll, name="zwarm-progress", daemon=True)
    with live:
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=2)


class _Progress:
    """What ``progress`` shows: read when the sessions' files change (``system.notify``);
    only the clocks move otherwise, at no cost."""

    def __init__(self, api: Zwarm, ids: Callable[[], list[str]]) -> None:
        from rich.spinner import Spinner

        self.api = api
        self.ids = ids
        self.spinner = Spinner("dots", text="waiting…", speed=SPIN_FPS * 0.08)  # a frame a step
        self.lines: list[str] = []
        self.sessions: dict[str, Session] = {}
        self.watches: dict[tuple[str, int], follow.TurnWatch] = {}
        self.started = time.monotonic()
        self.watch: notify.Sessions | None = None

    def pause(self, timeout: float) -> tuple[set[str], bool]:
        """Sleep until a session's files change or ``timeout``; the sessions to read again,
        and whether any file changed (a turn log may have grown)."""
        if self.watch is None:
            # never a look at everything: ``wait`` itself finds a lost session, and its
            # reconciling rewrites that session's meta.json, which wakes this watch
            self.watch = self.api.watch_sessions(self.ids(), turns=True, wake=False)
        look = self.watch.pause(timeout)
        return look, bool(look) or self.watch.woke

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

    def poll(self, look: set[str] | None = None, logs: bool = True) -> None:
        """Read again the sessions in ``look`` (None: every one) and, with ``logs``, what
        their turn logs added; then the lines shown."""
        from zwarm.errors import ZwarmError

        for sid in self.ids():
            if look is None or sid in look or sid not in self.sessions:
                try:
                    self.sessions[sid] = self.api.get(sid, history=False)
                except ZwarmError:
                    self.sessions.pop(sid, None)
        running = [s for s in self.sessions.values() if s.current and not s.status.finished]
        for s in running:
            assert s.current is not None
            w = self.watches.get((s.id, s.current.n))
            if w is None:
                w = self.api.turn_watch(s, s.current.n)
                self.watches[(s.id, s.current.n)] = w
                w.poll()
            elif logs:
                w.poll()
        self._compose(running, len(self.sessions) - len(running))

    def _compose(self, running: list[Session], done: int) -> None:
        now = self.api.env.clock()
        lines = []
        for s in running[:8]:
            t = s.current
            assert t is not None
            w = self.watches[(s.id, t.n)]
            doing = activity(w.latest, 120) or "starting…"
            clock = render.fmt_clock(now - parse_iso(t.started_at))
            tokens = render.fmt_tokens(follow.tokens_so_far(s, w))
            state = "" if s.status is Status.RUNNING else f"{s.status.value} · "
            lines.append(f"{s.id[:8]} turn {t.n} · {state}{clock} · {tokens} tokens · {doing}")
        waited = render.fmt_clock(time.monotonic() - self.started)
        more = f", {done} finished" if done else ""
        self.spinner.update(text=f"waiting {waited}{more}")
        self.lines = lines

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
