"""The click commands: every ``zwarm`` command, its options, its help and its usage errors.

Owns argument parsing, exit codes and choosing JSON or human output, over ``zwarm.api.Zwarm``.
Must stay true:
- every ``ZwarmError`` (and ``OSError``, ``MemoryError``) becomes one line on stderr and exit
  1, Ctrl-C exit 130, in one place (``_Group.invoke``, through ``output.ending``, which the
  click-free fast path uses too); click usage errors keep exit 2; no traceback reaches a user;
- ``ls``, ``trajectory --json``, ``show --json`` and ``logs`` run the bodies in
  ``zwarm.cli.fast``, so their answer is the same whichever path parsed argv;
- heavy modules (rich, the API's process machinery) are imported inside commands, so
  ``zwarm --help`` costs little more than importing click.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from zwarm.cli import fast, output
from zwarm.cli.common import get_api as _api
from zwarm.cli.common import json_option, reader_may_go

if TYPE_CHECKING:
    from zwarm.api import Zwarm


# Commands defined in their own modules, imported only when run (keeps --help fast).
LAZY_COMMANDS = {
    "spawn": (
        "zwarm.cli.start",
        "spawn",
        "Start a session with TASK in the background; prints its id.",
    ),
    "inject": (
        "zwarm.cli.start",
        "inject",
        "Continue SESSION with MESSAGE; queued if a turn is running.",
    ),
    "tools": ("zwarm.cli.orchestrator", "tools_command", "Print the orchestrator tool schemas."),
    "mcp": (
        "zwarm.cli.orchestrator",
        "mcp_command",
        "Serve zwarm's tools over MCP; mcp install wires up a client.",
    ),
    "orchestrate": (
        "zwarm.cli.orchestrator",
        "orchestrate_command",
        "Run the built-in orchestrator.",
    ),
    "trust": ("zwarm.cli.trust", "trust_command", "Review and trust this state dir's config."),
    "resume": ("zwarm.cli.fleet", "resume_command", "Resume a parked session now."),
    "accounts": ("zwarm.cli.fleet", "accounts_command", "Each agent account's state now."),
    "usage": ("zwarm.cli.fleet", "usage_command", "Tokens and cost of the recorded turns."),
    "retry": ("zwarm.cli.fleet", "retry_command", "Run a failed or killed last turn again."),
    "top": ("zwarm.cli.live", "top_command", "A live table of sessions and what each does now."),
    "diff": ("zwarm.cli.review", "diff_command", "What a session (or one turn) changed."),
    "comment": ("zwarm.cli.review", "comment_command", "Review comments for a session's agent."),
    "merge": ("zwarm.cli.review", "merge_command", "Merge a worktree session's branch."),
    "compare": ("zwarm.cli.bestof", "compare_command", "A best-of set's attempts, ranked."),
    "pick": ("zwarm.cli.bestof", "pick_command", "Merge the winner of a best-of set."),
    "apply": ("zwarm.cli.review", "apply_command", "Apply a session's diff here, uncommitted."),
    "merges": (
        "zwarm.cli.mergeq",
        "merges_group",
        "The merge queue: list, run, remove, pause, resume.",
    ),
    "sandbox": (
        "zwarm.cli.sandbox",
        "sandbox_group",
        "zwarm's own sandbox of each turn; check proves it holds here.",
    ),
    "hosts": (
        "zwarm.cli.hosts",
        "hosts_group",
        "The ssh hosts sessions may run on; hosts check NAME checks one.",
    ),
    "serve": (
        "zwarm.cli.serve",
        "serve_command",
        "Serve the HTTP API, live event streams and the web dashboard.",
    ),
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS and name not in self.commands:
            import importlib

            module, attr, _ = LAZY_COMMANDS[name]
            cmd = getattr(importlib.import_module(module), attr)
            assert isinstance(cmd, click.Command)
            return cmd
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # the first sentence of each, whole: never cut mid-sentence
        rows = [(n, c.get_short_help_str(1000)) for n, c in self.commands.items() if not c.hidden]
        rows += [(n, help_) for n, (_, _, help_) in LAZY_COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:  # --help and --version print here, before invoke
            return super().parse_args(ctx, args)
        except BrokenPipeError:
            output.reader_gone()
            ctx.exit(0)

    def invoke(self, ctx: click.Context) -> Any:
        from zwarm.errors import ZwarmError

        try:
            return super().invoke(ctx)
        except (KeyboardInterrupt, ZwarmError, OSError, MemoryError) as e:  # no traceback
            end = output.ending(e)
            if end is None:
                raise
            line, code = end
            if line is not None:
                click.echo(line, err=True)
            ctx.exit(code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    envvar=fast.STATE_DIR_ENV,
    help="State directory (default: nearest .zwarm/ up from here, else ./.zwarm).",
)
@click.version_option(package_name="zwarm", message="zwarm %(version)s")
@click.pass_context
def cli(ctx: click.Context, state_dir: Path | None) -> None:
    """Run Codex, Claude Code and Gemini CLI agents as background sessions, every turn on disk."""
    ctx.obj = {"state_dir": state_dir}


@cli.command()
@click.option("--yes", "-y", is_flag=True, help="Write without asking.")
@click.option("--force", is_flag=True, help="Overwrite an existing config.toml.")
@click.option(
    "--upgrade",
    is_flag=True,
    help="Show the config.toml a zwarm 3.x .zwarm/ maps onto; write it with --yes.",
)
@click.pass_context
def init(ctx: click.Context, yes: bool, force: bool, upgrade: bool) -> None:
    """Write .zwarm/config.toml, every key explained in a comment.

    Every key is at its default; with --force an existing file's values are kept.
    With --upgrade: what a zwarm 3.x .zwarm/ (config.toml, codex.toml, claude.toml) maps
    onto, shown; written (the 3.x config.toml kept as config.toml.zwarm3) with --yes or
    when confirmed on a terminal.

    \b
    Example:
      zwarm init -y
      zwarm init --upgrade
    """
    api = _api(ctx)
    if upgrade:
        if force:
            raise click.UsageError("--upgrade and --force do not go together")
        _upgrade(api, yes)
        return
    path = api.config_path
    if not yes and sys.stdin.isatty() and not click.confirm(f"Write {path}?", default=True):
        ctx.exit(1)
    click.echo(f"wrote {api.init(force=force)}")


def _upgrade(api: Zwarm, yes: bool) -> None:
    """``init --upgrade``: the plan shown, written only when asked (``zwarm.upgrade``)."""
    from zwarm import upgrade

    p = upgrade.plan(api.state_dir)
    lines = [f"zwarm 3.x settings in {p.root}: {', '.join(p.found)}"]
    for title, items in (
        ("carries over:", p.carried),
        ("does not carry over:", p.up.dropped),
        ("never applied:", p.up.unsafe),
    ):
        if items:
            lines += [title, *(f"  {x}" for x in items)]
    lines += [f"the new {p.path}:", ""]
    click.echo("\n".join(lines))
    click.echo(p.text)
    kept = f" (zwarm 3.x's kept as {p.backup})" if p.raw is not None else ""
    if not yes:
        terminal = sys.stdin.isatty() and api.env.environ.get("CI", "").lower() != "true"
        if not terminal:
            click.echo(f"not written: pass --yes to write it{kept}")
            return
        if not click.confirm(f"Write {p.path}{kept}?", default=False):
            click.echo("not written")
            return
    upgrade.write(p)
    click.echo(f"wrote {p.path}{kept}")
    if p.needs_trust:
        click.echo(
            f"it sets {', '.join(p.needs_trust)}: review it with `zwarm trust` before zwarm uses it"
        )


@cli.command(name="_turn-result", hidden=True)
@click.argument("session")
@click.argument("turn", type=int)
@json_option
@click.pass_context
def turn_result(ctx: click.Context, session: str, turn: int, as_json: bool) -> None:
    """Wait for TURN of SESSION, print it as spawn/inject --wait do, exit by its outcome."""
    from zwarm.cli.start import turn_result as body

    body(ctx, _api(ctx), session, turn, as_json)


@cli.command(name="ls")
@click.option("--status", type=click.Choice(fast.STATUSES), help="Only sessions in this state.")
@click.option("--name", metavar="PATTERN", help="Only names matching (* ? wildcards).")
@click.option("--adapter", metavar="AGENT", help="Only this agent's sessions.")
@click.option("--source", metavar="PATTERN", help="Only sessions started by (cli, 'mcp:*'...).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the N newest.")
@click.option("--watch", "-w", is_flag=True, help="Refresh live (as zwarm top does).")
@click.option("--tree", "as_tree", is_flag=True, help="The delegation trees, with subtree totals.")
@json_option
@click.pass_context
def ls_cmd(ctx: click.Context, status: str | None, name: str | None, adapter: str | None,
           source: str | None, limit: int | None, watch: bool, as_tree: bool,
           as_json: bool) -> None:  # fmt: skip
    """List sessions: status, model, turns, tokens, cost, age, task.

    Oldest first. On a terminal the table fits its width: the less useful columns go first, the task
    is cut last. A failed session shows why in a word (timeout, exit 3, lost...). With --tree,
    each session started by an agent is shown under its parent (and an orchestrator run's under
    the run, whose totals add the orchestrator's own), with its whole subtree's tokens and cost;
    --tree --json prints those rows.

    \b
    Examples:
      zwarm ls --status running
      zwarm ls --source 'orchestrate:*' --limit 20 --json
    """
    if watch:
        from zwarm.cli import live
        from zwarm.ops.listing import select_rows

        def select(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return select_rows(rows, name, adapter, source, limit)

        live.top(_api(ctx), select=select, status=status)
        return
    output.one_shot()
    fast.ls(_api(ctx), status, name, adapter, source, limit, as_json, as_tree)


@cli.command()
@click.argument("session")
@json_option
@click.pass_context
def show(ctx: click.Context, session: str, as_json: bool) -> None:
    """A session and each of its turns, in detail.

    Each turn's prompt, times, exit code, usage, error and final answer. SESSION is a session id, a
    unique prefix of it (4+ characters), or its name. Times are local (ISO 8601 with --json).

    \b
    Example:
      zwarm show verbose
    """
    api = _api(ctx)
    if as_json:
        fast.show_json(api, session)
        return
    data = api.show(session)
    from zwarm.cli import render, tree

    render.session_detail(data, api.env.clock())
    for line in tree.children_lines(data):
        click.echo(line)


@cli.command()
@click.argument("session")
@click.option("--turn", type=int, help="Only this turn.")
@click.option("--full", is_flag=True, help="Do not shorten long texts and outputs.")
@click.option("--follow", "-f", is_flag=True, help="Live, across queued turns, until idle.")
@json_option
@click.pass_context
def trajectory(ctx: click.Context, session: str, turn: int | None, full: bool, follow: bool,
               as_json: bool) -> None:  # fmt: skip
    """What the agent did, step by step.

    Messages, reasoning, commands with their exit codes, file changes, tool calls. SESSION is a
    session id, a unique prefix of it (4+ characters), or its name. With -f the steps are printed as
    the agent takes them, turn after turn (queued ones too), until the session is idle; Ctrl-C stops
    following and leaves the session running.

    \b
    Examples:
      zwarm trajectory verbose --turn 2 --full
      zwarm trajectory 3f2a -f
    """
    api = _api(ctx)
    if as_json and not follow:  # the live views' modules are not loaded (start-up)
        if fast.trajectory_json(api, session, turn):
            ctx.exit(1)
        return
    from zwarm.cli import live, render

    if follow and as_json:
        sid = api.resolve(session)
        try:
            output.stream_json_array(live.follow_steps(api, sid, turn), flush=True)
        except KeyboardInterrupt:
            live.still_running(api, [sid], "stopped following")
            ctx.exit(130)
        return
    if follow:
        ctx.exit(live.follow_trajectory(api, session, turn, full))
    steps = api.trajectory(session, turn)
    render.steps(steps, full=full, header=live.header(api, session))
    _exit_problems(ctx, steps.problems)


def _exit_problems(ctx: click.Context, problems: list[str]) -> None:
    """After showing what could be read: what could not, one line each on stderr; exit 1."""
    if problems:
        output.problem_lines(problems)
        ctx.exit(1)


@cli.command()
@click.argument("session")
@click.option("--turn", type=int, help="Turn number (default: the latest).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing, into queued turns, until idle.")
@click.pass_context
def logs(ctx: click.Context, session: str, turn: int | None, follow: bool) -> None:
    """The raw JSONL an agent printed for a turn.

    SESSION is a session id, a unique prefix of it (4+ characters), or its name. Piped, the log is
    copied byte for byte; on a terminal, control characters are removed. For a readable live view:
    trajectory -f.

    \b
    Examples:
      zwarm logs verbose --turn 1 > turn1.jsonl
      zwarm logs 3f2a -f
    """
    if fast.logs(_api(ctx), session, turn, follow):
        ctx.exit(1)


@cli.command()
@click.argument("sessions", nargs=-1)
@click.option("--timeout", type=float, help="Give up after this many seconds (exit 124).")
@click.option("--any", "any_", is_flag=True, help="Return when any one finishes.")
@click.option("--all", "all_", is_flag=True, help="Also every session running now.")
@json_option
@click.pass_context
def wait(ctx: click.Context, sessions: tuple[str, ...], timeout: float | None, any_: bool,
         all_: bool, as_json: bool) -> None:  # fmt: skip
    """Wait for sessions to finish; the exit status says how.

    Exit status 0: all completed; 1: any failed or was killed; 124: timed out. Each SESSION is a
    session id, a unique prefix of it (4+ characters), or its name. On a terminal, each running
    session's time and latest step show while waiting; Ctrl-C stops waiting, never the sessions.

    \b
    Examples:
      zwarm wait verbose 3f2a --timeout 600
      zwarm wait --all --any
    """
    from zwarm.cli import live
    from zwarm.ops.waiting import WAIT_EXIT

    if not sessions and not all_:
        raise click.UsageError("give session ids or --all")
    api = _api(ctx)
    ids = _Ids(api, sessions, all_)
    try:
        with live.progress(api, ids):
            res = api.wait(list(sessions), timeout, any_=any_, all_running=all_)
    except KeyboardInterrupt:
        live.still_running(api, ids())
        ctx.exit(130)
    if not res["statuses"] and not as_json:
        click.echo("no session is running", err=True)
    with reader_may_go():
        if as_json:
            output.emit_json(res)
        else:
            for sid, st in res["statuses"].items():
                click.echo(f"{sid} {st}")
    if res["timed_out"]:
        if not as_json:  # stdout lists every status; stderr says what still runs, and why
            late = [sid for sid in res["statuses"] if sid not in res["finished"]]
            live.still_running(api, late, f"timed out after {timeout:g} s")
        ctx.exit(WAIT_EXIT["timeout"])
    finished = [res["statuses"][s] for s in res["finished"]]
    ctx.exit(0 if all(st == "completed" for st in finished) else 1)


class _Ids:
    """The sessions a ``wait`` waits for, resolved once (for its progress and its Ctrl-C)."""

    def __init__(self, api: Zwarm, refs: tuple[str, ...], all_: bool) -> None:
        self.api, self.refs, self.all = api, refs, all_
        self.ids: list[str] | None = None

    def __call__(self) -> list[str]:
        if self.ids is None:
            from zwarm.errors import ZwarmError

            ids = []
            for ref in self.refs:
                with contextlib.suppress(ZwarmError):
                    ids.append(self.api.resolve(ref))
            if self.all and self.api.has_sessions():
                ids += [r["id"] for r in self.api.sessions("running")]
            self.ids = list(dict.fromkeys(ids))
        return self.ids


@cli.command()
@click.argument("sessions", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Kill every running session.")
@json_option
@click.pass_context
def kill(ctx: click.Context, sessions: tuple[str, ...], all_: bool, as_json: bool) -> None:
    """Kill sessions: each agent's whole process tree.

    The session ends killed, its queued messages dropped, and its linked child sessions (started
    by its agent) are killed too, also when it had already finished; detached ones run on. Each
    SESSION is a session id, a unique prefix of it (4+ characters), or its name. Every one given
    is tried; each outcome is one line, and the exit status is 1 if any failed.

    \b
    Examples:
      zwarm kill verbose 3f2a
      zwarm kill --all
    """
    if not sessions and not all_:
        raise click.UsageError("give session ids or --all")
    from zwarm.errors import PartlyFailed

    try:
        killed, failed = _api(ctx).kill(list(sessions), all_=all_), []
    except PartlyFailed as e:
        killed, failed = e.done, e.failed
    if as_json:
        output.emit_json(killed)
    else:
        from zwarm.cli.tree import kill_line

        for r in killed:
            click.echo(kill_line(r))
    _exit_failed(ctx, failed)


def _exit_failed(ctx: click.Context, failed: list[Any]) -> None:
    """After a command on several sessions did the rest: each failure on its own line, exit 1."""
    from zwarm.text import clean

    for _, err in failed:
        click.echo(f"Error: {clean(str(err), newlines=False)}", err=True)
    if failed:
        ctx.exit(1)


@cli.command()
@click.argument("sessions", nargs=-1)
@click.option("--finished", is_flag=True, help="Remove every finished session.")
@click.option("--force", is_flag=True, help="Also remove running (killed first) or damaged ones.")
@json_option
@click.pass_context
def rm(ctx: click.Context, sessions: tuple[str, ...], finished: bool, force: bool,
       as_json: bool) -> None:  # fmt: skip
    """Delete sessions and their files.

    Each SESSION is a session id, a unique prefix of it (4+ characters), or its name. Its linked
    child sessions (started by its agent) are removed with it; detached ones are kept.
    --finished keeps a session whose worktree holds work that would be lost, saying so on
    stderr ("kept ID: why"), and exits 1 then, as when a removal failed.

    \b
    Examples:
      zwarm rm verbose
      zwarm rm --finished
    """
    if not sessions and not finished:
        raise click.UsageError("give session ids or --finished")
    api = _api(ctx)
    # without a state dir, --finished removes nothing; a given id is still "not found"
    exists = api.has_sessions() or bool(sessions)
    from zwarm.errors import PartlyFailed, ZwarmError

    try:
        removed = api.rm(list(sessions), finished, force, detail=True) if exists else []
        failed: list[Any] = []
    except PartlyFailed as e:
        removed, failed = e.done, e.failed
    failed += [(c, ZwarmError(f"child {c} of {d['id']} not removed: {why}"))
               for d in removed for c, why in d["children_failed"]]  # fmt: skip
    if as_json:
        output.emit_json([sid for d in removed for sid in (d["id"], *d["children_removed"])])
    else:
        from zwarm.cli.tree import rm_line

        for d in removed:
            click.echo(rm_line(d))
    if finished:  # what --finished kept is no error: said so, and exit 1 all the same
        from zwarm.errors import WorkspaceError, WouldLoseWork
        from zwarm.text import clean

        kept = [f for f in failed if isinstance(f[1], WorkspaceError)]
        for sid, err in kept:
            why = err.why if isinstance(err, WouldLoseWork) else str(err)
            click.echo(f"kept {sid}: {clean(why, newlines=False)}", err=True)
        _exit_failed(ctx, [f for f in failed if f not in kept])
        ctx.exit(1 if kept else 0)
    _exit_failed(ctx, failed)


@cli.command()
@click.option(
    "--keep",
    type=click.Path(path_type=Path, file_okay=False),
    help="Run the demo in DIR and keep it (default: a temporary directory, removed).",
)
@click.pass_context
def demo(ctx: click.Context, keep: Path | None) -> None:
    """A tour of zwarm on a built-in scripted agent.

    No agent CLI or API key is needed. It runs in a temporary directory, removed at the end, unless
    --keep DIR.

    \b
    Example:
      zwarm demo --keep /tmp/zwarm-tour
    """
    from zwarm.cli.demo import run_demo

    obj = ctx.find_root().obj or {}
    ctx.exit(run_demo(obj.get("state_dir"), keep=keep))
