"""``zwarm diff``, ``comment``, ``merge`` and ``apply``: reviewing what a session changed.

A thin click layer over ``Zwarm.diff``/``diff_text``/``comment``/``merge``/``apply`` (the work
is in ``zwarm.engine.review``). Must stay true: loaded only when one of these commands runs
(``LAZY_COMMANDS``); every problem is a ``ZwarmError`` (one line, exit 1, mapped by the group);
``diff`` writes git's bytes unchanged on stdout (pipe it to ``git apply``), anything else it
has to say goes to stderr; ``--json`` output is one compact JSON value.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from zwarm.cli.common import get_api, json_option
from zwarm.errors import InvalidInput


def _emit(data: Any) -> None:
    from zwarm.cli.output import emit_json

    emit_json(data)


def _note(text: str | None) -> None:
    if text:
        from zwarm.text import clean

        click.echo(f"note: {clean(text, newlines=False)}", err=True)


@click.command(name="diff")
@click.argument("session")
@click.option("--turn", type=click.IntRange(min=1), help="Only what this turn changed.")
@click.option("--stat", is_flag=True, help="Files and line counts only.")
@json_option
@click.pass_context
def diff_command(
    ctx: click.Context, session: str, turn: int | None, stat: bool, as_json: bool
) -> None:
    """What SESSION changed: the whole session, or one --turn (exact snapshots of its tree).

    As a unified diff (coloured on a terminal), --stat, or --json: files with status,
    added/removed lines and hunks. For a session sharing its tree with others, a note says
    when another session ran there at the same time (its writes may be in the diff).
    SESSION is a session id, a unique prefix of it (4+ characters), or its name.

    \b
    Examples:
      zwarm diff verbose --stat
      zwarm diff 3f2a --turn 2 --json
    """
    api = get_api(ctx)
    if as_json:
        _emit(api.diff(session, turn, hunks=not stat))
        return
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    text, note = api.diff_text(session, turn, color=color, stat=stat)
    _note(note)
    if not text:
        click.echo("no changes", err=True)
        return
    sys.stdout.buffer.write(text)
    sys.stdout.buffer.flush()


@click.command(name="comment")
@click.argument("session")
@click.argument("target", required=False, metavar="PATH:LINE")
@click.argument("text", required=False)
@click.option(
    "--file",
    "file_",
    type=click.Path(dir_okay=False, allow_dash=True),
    help='Many comments: a JSON array of {"path", "line", "text"} (- reads stdin).',
)
@click.option("--send", is_flag=True, help="Send the open comments to the agent now.")
@click.option("--message", "-m", help="With --send: the message after the comments.")
@json_option
@click.pass_context
def comment_command(
    ctx: click.Context,
    session: str,
    target: str | None,
    text: str | None,
    file_: str | None,
    send: bool,
    message: str | None,
    as_json: bool,
) -> None:
    """Attach a review comment on PATH:LINE of SESSION's current diff.

    Open comments go to the agent with the next `zwarm inject` (or now, with --send): each
    with its file, line and the diff lines around it, then the message. `zwarm show` lists
    them. SESSION is a session id, a unique prefix of it (4+ characters), or its name.

    \b
    Examples:
      zwarm comment verbose cli.py:42 "this flag needs a test"
      zwarm comment verbose --file review.txt --send
    """
    from zwarm.engine.review import parse_target

    items: list[tuple[str, int, str]] = []
    if (target is None) != (text is None):
        raise click.UsageError("give PATH:LINE and the comment's TEXT")
    if target is not None and text is not None:
        items.append((*parse_target(target), text))
    if file_ is not None:
        items += _read_comments(file_)
    if not items and not send:
        raise click.UsageError("give PATH:LINE TEXT, --file F, or --send")
    res = get_api(ctx).comment(session, items, send=send, message=message)
    if as_json:
        _emit(res)
        return
    for c in res["comments"]:
        click.echo(f"comment {c['id']} on {c['path']}:{c['line']}")
    if "sent" in res:
        click.echo(f"{res['session_id']} {res['sent']['state']} (turn {res['sent']['turn']})")


def _read_comments(path: str) -> list[tuple[str, int, str]]:
    from zwarm.engine.review import parse_comments

    try:
        data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()  # noqa: SIM115
    except OSError as e:
        raise InvalidInput(f"cannot read {path}: {e.strerror or e}") from None
    return parse_comments(data, path)


@click.command(name="merge")
@click.argument("sessions", nargs=-1, required=True, metavar="SESSION...")
@click.option("--into", help="The branch to merge into (default: the main worktree's).")
@click.option("--squash", is_flag=True, help="One commit on the target, not a merge.")
@click.option("--message", "-m", help="The commit message (default: from the task and answer).")
@click.option("--queue", is_flag=True, help="Through the merge queue: rebased, checked, merged.")
@click.option("--target", help="With --queue: the target branch (default: the main worktree's).")
@click.option("--priority", type=int, default=0, help="With --queue: higher goes first.")
@click.option("--check", "checks", multiple=True, help="With --queue: a check (over [merge]).")
@click.option("--no-check", is_flag=True, help="With --queue: merge without any check.")
@click.option("--send", is_flag=True, help="With --queue: send an ejection's comment now.")
@click.option("--depth", type=int, default=1, help="With --queue: entries tested at once, stacked.")
@json_option
@click.pass_context
def merge_command(
    ctx: click.Context,
    sessions: tuple[str, ...],
    into: str | None,
    squash: bool,
    message: str | None,
    queue: bool,
    target: str | None,
    priority: int,
    checks: tuple[str, ...],
    no_check: bool,
    send: bool,
    depth: int,
    as_json: bool,
) -> None:
    """Merge a worktree SESSION's branch (after committing what its agent left uncommitted).

    Refused while the session runs, and when the merge would write a file of the target
    checkout that has uncommitted changes or that git does not track (ignored ones too); a
    conflict is refused (nothing merged) naming the files, what was committed and what to do
    next. No hook or filter runs. SESSION is a session id, a unique prefix of it (4+
    characters), or its name.

    With --queue, the SESSIONs join the merge queue of --target instead (see `zwarm
    merges`), which then runs: each is rebased onto the latest target in a temporary
    worktree, checked there ([merge] check or --check; none is refused unless --no-check),
    and the target moved to exactly that commit; a conflict or a red check ejects it with a
    review comment (sent as its next turn with --send). Exits 1 when the queue stopped
    blocked or held (nothing more merged until that is resolved).

    \b
    Examples:
      zwarm merge verbose
      zwarm merge 3f2a --into main --squash --message "Add --verbose"
      zwarm merge --queue a b c --check "pytest -q"
    """
    api = get_api(ctx)
    if queue:
        if into is not None or squash or message is not None:
            raise click.UsageError("--into, --squash and --message are not for --queue")
        res = api.enqueue_merge(list(sessions), target=target, priority=priority,
                                checks=list(checks), no_check=no_check, send=send,
                                depth=depth)  # fmt: skip
        from zwarm.cli.mergeq import exit_if_stuck, print_run

        if as_json:
            _emit(res)
        else:
            for e in res["queued"]:
                click.echo(f"queued {e['branch']} for {res['target']} (entry {e['id']})")
            if res["run"] is not None:
                print_run(res["run"])
        exit_if_stuck(ctx, [res["run"]] if res["run"] is not None else [])
        return
    if target is not None or priority or checks or no_check or send or depth != 1:
        raise click.UsageError(
            "--target, --priority, --check, --no-check, --send and --depth need --queue"
        )
    if len(sessions) != 1:
        raise click.UsageError("merge takes one SESSION (several only with --queue)")
    res = api.merge(sessions[0], into=into, squash=squash, message=message)
    if as_json:
        _emit(res)
        return
    if res.get("committed"):
        click.echo(f"committed the agent's uncommitted work on {res['branch']}")
    if not res["merged"]:
        click.echo(f"{res['into']} already has {res['branch']}: nothing to merge")
        return
    how = "squashed" if res["squash"] else "merged"
    click.echo(f"{how} {res['branch']} into {res['into']} ({res['commit'][:12]})")


@click.command(name="apply")
@click.argument("session")
@click.option("--turn", type=click.IntRange(min=1), help="Only what this turn changed.")
@json_option
@click.pass_context
def apply_command(ctx: click.Context, session: str, turn: int | None, as_json: bool) -> None:
    """Apply SESSION's diff (or one --turn's) to the checkout here, without committing.

    All or nothing: if any part does not apply, nothing changes. SESSION is a session id,
    a unique prefix of it (4+ characters), or its name.

    \b
    Examples:
      zwarm apply verbose
      zwarm apply 3f2a --turn 2
    """
    res = get_api(ctx).apply(session, turn)
    if as_json:
        _emit(res)
        return
    if not res["applied"]:
        click.echo("nothing to apply", err=True)
        return
    click.echo(f"applied {len(res['files'])} file(s) to {res['into']}")
    for f in res["files"]:
        click.echo(f"  {f['status']:<10} {f['path']}")
