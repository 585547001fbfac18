"""``zwarm spawn`` and ``zwarm inject``: the commands that start turns.

Owns their arguments, ``--wait`` (``after_start``; ``turn_result``, the body of the hidden
``_turn-result`` command too) and ``--json``; every other option is a field of the request
they send (``SpawnRequest``, ``MessageRequest``), made by ``zwarm.cli.options`` from its one
table (which the click-free fast path's ``spawn`` grammar is made from too). Loaded only when
one of them runs (``commands.LAZY_COMMANDS``): the request module, and msgspec with it, stay
out of ``zwarm --help``. Must stay true: what a spawn without ``--wait`` does and prints is
``fast.spawn``'s, whichever path parsed its argv.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from zwarm.cli import fast, output
from zwarm.cli.common import get_api, json_option, reader_may_go
from zwarm.cli.options import click_options

if TYPE_CHECKING:
    from zwarm.api import Zwarm


@click.command()
@click.argument("task")
@click_options("spawn")
@click.option("--wait", "wait_", is_flag=True, help="Wait for the turn to finish.")
@json_option
@click.pass_context
def spawn(ctx: click.Context, /, task: str, as_json: bool, wait_: bool, **opts: Any) -> None:
    """Start a session with TASK in the background; prints its id.

    TASK - reads the task from stdin. With --wait the id is printed first, then the command
    blocks (showing progress on a terminal) and exits 0 if the turn completed, 1 if not.
    Without it, a queued session's place and what it waits for are said on stderr, and a
    session that can never start (an --after session already failed) is said as an error,
    exit 1; stdout is the id either way.
    Run by an agent of a session (ZWARM_PARENT_SESSION), it starts a child of that session,
    killed and removed with it unless --detached; [limits] max_spawn_depth bounds the depth.
    An agent runs zwarm as "$ZWARM" (a login shell's PATH may not reach zwarm).

    \b
    Examples:
      zwarm spawn "add a --verbose flag to cli.py" --name verbose
      zwarm spawn "write tests for parser.py" -m sonnet -C ~/proj --wait
      echo "a very long prompt..." | zwarm spawn - --timeout 1800 --notify
      zwarm spawn "run the benchmark and fix regressions" --launcher slurm --timeout 3600
    """
    api = get_api(ctx)
    if not wait_:  # the fast path's body (``fast.spawn``)
        ctx.exit(fast.spawn(api, task, as_json, **opts))
    if opts.get("best_of") is not None:
        raise click.UsageError("--wait waits for one session: wait for a set with zwarm compare")
    s = api.spawn(fast.spawn_request(task, opts))
    if not as_json:
        click.echo(s.id)  # first: the wait may be long, and may be interrupted
    after_start(ctx, api, s.id, 1, wait_, as_json, argv_task=task != "-")


@click.command()
@click.argument("session")
@click.argument("message")
@click_options("inject")
@click.option("--wait", "wait_", is_flag=True, help="Wait for the turn to finish.")
@click.option(
    "--confirm-dir", metavar="DIR", help="A zwarm 3.x session: the folder it continues in."
)
@click.option("--confirm-agent", metavar="AGENT", help="A zwarm 3.x session: its agent.")
@json_option
@click.pass_context
def inject(ctx: click.Context, /, session: str, message: str, as_json: bool, wait_: bool,
           confirm_dir: str | None, confirm_agent: str | None, **opts: Any) -> None:  # fmt: skip
    """Continue SESSION with MESSAGE; queued if a turn is running.

    SESSION is a session id, a unique prefix of it (4+ characters), or its name, or a
    best-of set's id (set-...: every attempt still in the running); MESSAGE - reads the
    message from stdin. With --wait the command blocks until this turn ends and
    exits 0 if it completed, 1 if not. A session made by zwarm 3.x is continued once you
    confirm its folder and agent (asked on a terminal, or --confirm-dir and --confirm-agent).

    \b
    Examples:
      zwarm inject verbose "also update the README"
      zwarm inject 3f2a "now fix the tests" --context native --wait
      zwarm inject 0563 "carry on" --confirm-dir ~/proj --confirm-agent codex
    """
    from zwarm import legacy
    from zwarm.model.requests import MessageRequest

    api = get_api(ctx)
    if api.is_set(session):  # a best-of set: every attempt still in the running
        if wait_:
            raise click.UsageError("--wait waits for one session, not a set")
        done = api.inject_set(session, MessageRequest(message=fast.read_task(message), **opts))
        if as_json:
            output.emit_json(done)
        for d in [] if as_json else done:
            click.echo(f"{d['session']} {d['state']} (attempt {d['attempt']})")
        return
    tty = message != "-" and sys.stdin.isatty()
    ask = (lambda q: click.confirm(q, default=False, err=True)) if tty else None
    legacy.confirm(api, session, confirm_dir, confirm_agent, ask)
    s, state = api.inject(session, MessageRequest(message=fast.read_task(message), **opts))
    turn = s.count + (len(s.queue) if state == "queued" else 0)  # queue holds ours
    if not as_json:
        click.echo(f"{s.id} {state} (turn {turn})")  # with --wait: first
    if not wait_:
        return
    after_start(ctx, api, s.id, turn, wait_, as_json, argv_task=message != "-")


def after_start(
    ctx: click.Context, api: Zwarm, sid: str, n: int, wait_: bool, as_json: bool, argv_task: bool
) -> None:
    """Print what a start did; with --wait, wait for turn ``n`` and exit by its outcome. A
    prompt given as an argument is in this process's argv: we re-exec without it first, as
    every Python process zwarm starts, isolated (``env.python``: ``python_argv``, in
    ``NEUTRAL_CWD``): the working directory is the agent's, and nothing it wrote there may be
    imported."""
    if wait_ and argv_task and sys.executable:
        from zwarm.env.python import NEUTRAL_CWD, python_argv

        sys.stdout.flush()
        args = ["--state-dir", str(api.state_dir), "_turn-result", sid, str(n)]
        argv = python_argv(sys.executable, "zwarm", *args, *(["--json"] * as_json))
        os.chdir(NEUTRAL_CWD)
        os.execv(sys.executable, argv)
    if wait_:
        turn_result(ctx, api, sid, n, as_json)
    else:
        fast.started(api, sid, as_json)


def turn_result(ctx: click.Context, api: Zwarm, sid: str, n: int, as_json: bool) -> None:
    """Wait for turn ``n`` of ``sid``, print it, exit by its outcome (``--wait``)."""
    from zwarm.api import row
    from zwarm.cli import live
    from zwarm.ops.waiting import WAIT_EXIT, resumed_as

    sid = api.resolve(sid)
    try:
        with live.progress(api, lambda: [sid]):
            s, _ = api.wait_turn(sid, n)
    except KeyboardInterrupt:
        live.still_running(api, [sid])
        ctx.exit(130)
    n = resumed_as(s, n)  # a parked turn resumed, or retried: how its last run ended
    t = s.turns[n - 1]
    r = {**row(s), "turn": n, "status": t.status.value, "error": t.error}
    r["last_message"] = t.final_message  # this turn's, never an earlier turn's answer
    with reader_may_go():
        if as_json:
            output.emit_json(r)
        else:
            from zwarm.cli import render

            render.session_result(r)
    ctx.exit(WAIT_EXIT["completed" if t.status.value == "completed" else "failed"])
