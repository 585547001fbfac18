"""What ``zwarm orchestrate`` shows while a run goes: the ``Progress`` interface the loop
reports through, ``Quiet`` (nothing but retries, on stderr) and ``RichProgress`` (live lines
on stderr), and the texts they and ``orchestrate ls/show`` print (``describe``, ``retry_text``,
``compacted_text``, ``cost_text``).

Owns the orchestrator's terminal output. Must stay true: what an LLM or an agent wrote is
passed through ``zwarm.text.clean`` (and rich's escape) before it reaches the terminal; a cost
with unpriced parts reads as a lower bound (``≥``) or ``?``, never as a total; ``rich`` is
imported only when a ``RichProgress`` is made.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Protocol

from zwarm.orchestrator import compaction
from zwarm.orchestrator.chat import Retry
from zwarm.orchestrator.runstore import Run
from zwarm.orchestrator.tools import Result, short
from zwarm.text import plural

if TYPE_CHECKING:
    from zwarm.orchestrator.loop import Settings


class Progress(Protocol):
    def start(self, run: Run, s: Settings, resumed: bool) -> None: ...
    def busy(self, what: str) -> contextlib.AbstractContextManager[Any]: ...
    def said(self, text: str) -> None: ...
    def tool(self, name: str, arguments: str, result: Result) -> None: ...
    def retry(self, r: Retry) -> None: ...
    def note(self, text: str) -> None: ...
    def end(self, run: Run, total_cost: float | None) -> None: ...


def retry_text(r: Retry) -> str:
    """One line about a failed model request: what failed, and what happens next."""
    from zwarm.text import clean

    head = f"model request failed (attempt {r.attempt} of {r.attempts}): {clean(r.error)}"
    if r.partial:
        head += f" [{len(r.partial)} characters of a cut reply kept in the run store]"
    return head + (f"; retrying in {r.wait:.1f} s" if r.wait is not None else "")


class Quiet:
    """No progress; what the user must know anyway (retries) still goes to stderr."""

    def start(self, run: Run, s: Settings, resumed: bool) -> None:
        pass

    def busy(self, what: str) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def said(self, text: str) -> None:
        pass

    def tool(self, name: str, arguments: str, result: Result) -> None:
        pass

    def retry(self, r: Retry) -> None:
        if r.wait is not None:
            print(f"zwarm: {retry_text(r)}", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        pass

    def end(self, run: Run, total_cost: float | None) -> None:
        pass


def compacted_text(out: compaction.Outcome) -> str:
    return (
        f"compacted {plural(out.compacted, 'message')} into one summary: context "
        f"{out.tokens_before:,} -> ~{out.tokens_after:,} tokens"
    )


def describe(name: str, r: Result) -> str:
    """One line saying what a tool call returned."""
    if not r.get("ok"):
        return f"error: {r.get('error')}"
    sid = str(r.get("session_id") or "")[:8]
    if name == "delegate":
        return f"session {sid} started ({r.get('adapter')})"
    if name == "converse":
        return f"session {sid}: turn {r.get('turn')} {r.get('state')}"
    if name == "check_session":
        return f"session {sid}: {r.get('status')}, {r.get('turns')} turn(s)"
    if name == "list_sessions":
        return f"{r.get('total')} sessions, {len(r.get('finished_since_last_look') or [])} new"
    if name == "get_trajectory":
        return f"session {sid}: {len(r.get('steps') or [])} of {r.get('total_steps')} steps"
    if name == "wait":
        done = ", ".join(f"{f['session_id'][:8]} {f['status']}" for f in r.get("finished") or [])
        state = "timed out" if r.get("timed_out") else "done"
        return f"{state}; finished: {done or 'none'}; running: {len(r.get('running') or [])}"
    if name == "end_session":
        return f"session {sid}: killed={r.get('killed')} deleted={r.get('deleted')}"
    if name == "bash":
        extra = " (timed out)" if r.get("timed_out") else ""
        return f"exit {r.get('exit_code')}{extra}, {len(str(r.get('output') or ''))} chars"
    return "ok"


class RichProgress:
    """Live progress on stderr (rich); the final summary goes to stdout, separately."""

    def __init__(self) -> None:
        from rich.console import Console

        self.c = Console(stderr=True, highlight=False, soft_wrap=True)

    @staticmethod
    def _esc(text: Any) -> str:
        from rich.markup import escape

        from zwarm.text import clean  # what an LLM wrote never drives the terminal

        return str(escape(clean(text)))

    def start(self, run: Run, s: Settings, resumed: bool) -> None:
        verb = "resuming run" if resumed else "run"
        where = s.base_url or "api.openai.com"
        self.c.print(
            f"[bold]zwarm orchestrate[/] {verb} [cyan]{run.id}[/] · model "
            f"{self._esc(s.model)} · {self._esc(where)} · up to {plural(s.max_steps, 'step')}"
        )

    def busy(self, what: str) -> contextlib.AbstractContextManager[Any]:
        return self.c.status(what)

    def said(self, text: str) -> None:
        self.c.print(f"[dim]{self._esc(short(text.strip(), 600))}[/]")

    def tool(self, name: str, arguments: str, result: Result) -> None:
        style = "green" if result.get("ok") else "red"
        from zwarm.text import oneline

        args = oneline(arguments, 140)
        self.c.print(
            f"  [magenta]{name}[/] [dim]{self._esc(args)}[/] [{style}]→ "
            f"{self._esc(describe(name, result))}[/]"
        )

    def retry(self, r: Retry) -> None:
        self.c.print(f"[yellow]{self._esc(retry_text(r))}[/]")

    def note(self, text: str) -> None:
        self.c.print(f"[dim]{self._esc(text)}[/]")

    def end(self, run: Run, total_cost: float | None) -> None:
        style = "green" if run.status == "finished" else "yellow"
        self.c.print(
            f"[{style}]{_ENDED.get(run.status, run.status)}[/] after {plural(run.steps, 'step')}"
            f" · {plural(run.tokens, 'orchestrator token')} · cost "
            f"{self._esc(cost_text(total_cost, run.unpriced_parts))} (orchestrator + agents)"
            f" · {plural(len(run.sessions), 'session')}"
        )


_ENDED = {
    "finished": "finished",
    "step_limit": "stopped by the step limit",
    "budget": "stopped by a budget",
    "error": "stopped by an error",
    "interrupted": "interrupted",
}


def cost_text(total: float | None, unpriced: int) -> str:
    """A total that says when it is a lower bound: ``$0.0123``, ``≥ $0.0075, 2 parts unpriced``,
    or ``? (3 parts unpriced)`` when no part has a price."""
    if total is None:
        return f"? ({plural(unpriced, 'part')} unpriced)" if unpriced else "?"
    if not unpriced:
        return f"${total:.4f}"
    return f"≥ ${total:.4f}, {plural(unpriced, 'part')} unpriced"
