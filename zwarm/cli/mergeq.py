"""``zwarm merges``: the merge queue (list, run, remove, pause, resume).

A thin click layer over ``Zwarm.merge_queues``/``run_merge_queues``/``unqueue_merge``/
``pause_merge_queue`` (the work is in ``zwarm.engine.mergeq``); ``zwarm merge --queue``
(``cli.review``) fills it. Must stay true: loaded only when these commands run
(``LAZY_COMMANDS``); every problem is a ``ZwarmError`` (one line, exit 1, mapped by the
group); ``--json`` output is one compact JSON value; what an agent wrote (a branch name, a
check's output) is shown through ``zwarm.text.clean``.
"""

from __future__ import annotations

from typing import Any

import click

from zwarm.cli.common import get_api, json_option


def _emit(data: Any) -> None:
    from zwarm.cli.output import emit_json

    emit_json(data)


def _line(text: str) -> str:
    from zwarm.text import clean

    return clean(text, newlines=False)


STUCK = ("blocked", "held")  # a run stopped with work waiting that no rerun alone can do


def exit_if_stuck(ctx: click.Context, runs: list[dict[str, Any]]) -> None:
    """Exit 1 (after the output) when a run stopped ``STUCK``: a red target, a checkout in
    the way. Scripts tell that from a queue that drained (0) without parsing."""
    if any(r.get("stopped") in STUCK for r in runs):
        ctx.exit(1)


def print_run(res: dict[str, Any]) -> None:
    """What a run did, one line per entry, and why it stopped."""
    for d in res.get("done", []):
        why = f": {_line(d['why'].splitlines()[0])}" if d.get("why") else ""
        click.echo(f"{d['state']:<8} {_line(d['branch'])}{why}")
        if "sent" in d:
            sent = d["sent"]
            click.echo(f"         sent: {sent.get('state') or _line(sent.get('error', ''))}")
    stopped = res.get("stopped", "")
    if stopped not in ("", "empty"):
        q = res.get("queue") or {}
        extra = f": {_line(q['blocked'].splitlines()[0])}" if q.get("blocked") else ""
        click.echo(f"{res['target']}: stopped ({stopped}){extra}")


@click.group(name="merges", invoke_without_command=True)
@click.option("--target", help="Only the queue of this branch.")
@json_option
@click.pass_context
def merges_group(ctx: click.Context, target: str | None, as_json: bool) -> None:
    """The merge queue: what is being tested, what waits, what was merged, ejected and why.

    Sessions join with `zwarm merge --queue SESSION...`. Each entry is rebased (or merged,
    [merge] mode) onto the latest target in a temporary worktree zwarm owns, checked there,
    and the target moved to exactly that commit; a checkout of the target is updated only if
    nothing the update writes has uncommitted changes or is a file git does not track
    (else the entry is held, the target unmoved). The record lives in
    ~/.local/state/zwarm/merges, out of the agents' reach.

    \b
    Examples:
      zwarm merges
      zwarm merges run --check "pytest -q"
      zwarm merges remove verbose
    """
    if ctx.invoked_subcommand is not None:
        return
    queues = get_api(ctx).merge_queues(target)
    if as_json:
        _emit(queues)
        return
    if not queues:
        click.echo("no merge queue", err=True)
        return
    for q in queues:
        flags = " (paused)" if q["paused"] else ""
        click.echo(f"{_line(q['target'])} in {_line(q['repo'])}{flags}")
        if q["blocked"]:
            click.echo(f"  blocked: {_line(q['blocked'].splitlines()[0])}")
        for e in q["entries"]:
            why = f": {_line(e['why'].splitlines()[0])}" if e["why"] else ""
            prio = f" p{e['priority']}" if e["priority"] else ""
            click.echo(f"  {e['id']:>4} {e['state']:<8} {_line(e['branch'])}{prio}{why}")


@merges_group.command(name="run")
@click.option("--target", help="Only the queue of this branch.")
@click.option("--check", "checks", multiple=True, help="A check (instead of [merge] check).")
@click.option("--no-check", is_flag=True, help="Merge without any check.")
@click.option("--depth", type=int, default=1, help="Entries tested at once, each on the last.")
@json_option
@click.pass_context
def run_command(
    ctx: click.Context,
    target: str | None,
    checks: tuple[str, ...],
    no_check: bool,
    depth: int,
    as_json: bool,
) -> None:
    """Process the queues now, to completion (a second run waits for the first); exit 1
    when a queue stopped blocked (its target fails its check) or held (a checkout in the way).

    A run killed at any step is resumed by the next: the target is at its old commit or a
    tested one, and the temporary worktree is removed. --depth K tests the next K entries at
    once, each rebased onto the one before (speculative): the target still moves one tested
    commit at a time, and the entries after a red one are tried again.
    """
    api = get_api(ctx)
    res = api.run_merge_queues(target, checks=list(checks), no_check=no_check, depth=depth)
    if as_json:
        _emit(res)
    else:
        if not res:
            click.echo("no merge queue", err=True)
        for r in res:
            print_run(r)
    exit_if_stuck(ctx, res)


@merges_group.command(name="remove")
@click.argument("session")
@click.option("--target", help="The queue of this branch.")
@json_option
@click.pass_context
def remove_command(ctx: click.Context, session: str, target: str | None, as_json: bool) -> None:
    """Take SESSION out of its merge queue (nothing is merged or deleted)."""
    res = get_api(ctx).unqueue_merge(session, target)
    if as_json:
        _emit(res)
        return
    click.echo(f"removed {_line(res['removed']['branch'])} from the queue of {res['target']}")


@merges_group.command(name="pause")
@click.option("--target", help="The queue of this branch.")
@json_option
@click.pass_context
def pause_command(ctx: click.Context, target: str | None, as_json: bool) -> None:
    """Pause a queue: a run stops before its next entry."""
    _pause(ctx, True, target, as_json)


@merges_group.command(name="resume")
@click.option("--target", help="The queue of this branch.")
@json_option
@click.pass_context
def resume_command(ctx: click.Context, target: str | None, as_json: bool) -> None:
    """Resume a paused queue (`zwarm merges run` then processes it)."""
    _pause(ctx, False, target, as_json)


def _pause(ctx: click.Context, paused: bool, target: str | None, as_json: bool) -> None:
    res = get_api(ctx).pause_merge_queue(paused, target)
    if as_json:
        _emit(res)
        return
    click.echo(f"{res['target']}: {'paused' if res['paused'] else 'resumed'}")
