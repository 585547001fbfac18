"""Fleet control on the command line: spawn's scheduling and budget options, ``zwarm resume``
and ``zwarm retry``.

Owns the click layer of ``engine.scheduler`` and ``engine.limits``: ``fleet_options`` (what
``spawn`` adds: ``--after``, ``--after-any``, ``--group``, ``--priority``, ``--max-cost``,
``--max-tokens``, ``--stall``) and the two commands, each a thin call into ``zwarm.api.Zwarm``.
Must stay true: importing this module imports only click and ``zwarm.cli.common`` (``spawn``'s
options are built from it on every start of ``zwarm``); errors are ``ZwarmError``s, turned into
one line and exit 1 by ``zwarm.cli``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from zwarm.cli.common import get_api

F = Callable[..., Any]


def _ids(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """``--after a,b --after c`` -> (a, b, c) (``fast.split_refs``: as the fast path reads it)."""
    from zwarm.cli.fast import split_refs

    return split_refs(value)


def fleet_options(f: F) -> F:
    """``spawn``'s fleet options (passed to ``Zwarm.spawn`` under the same names)."""
    options = [
        click.option(
            "--after",
            multiple=True,
            callback=_ids,
            metavar="ID[,ID...]",
            help="Start once these sessions have finished (all completed, else it fails).",
        ),
        click.option(
            "--after-any", is_flag=True, help="With --after: start whatever their outcome."
        ),
        click.option("--group", help="Its group: [groups.NAME] caps and budgets apply."),
        click.option(
            "--priority", type=int, default=0, help="Higher starts first when queued (default 0)."
        ),
        click.option("--max-cost", type=float, help="Budget in USD: over it, it is stopped."),
        click.option("--max-tokens", type=int, help="Budget in tokens: over it, it is stopped."),
        click.option("--stall", type=float, help="Mark it stalled after this many silent seconds."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _print(as_json: bool, s: Any, what: str) -> None:
    if as_json:
        from zwarm.api import row
        from zwarm.cli.output import emit_json

        emit_json(row(s))
        return
    t = s.current
    click.echo(f"{s.id} {what} (turn {t.n}, {t.status.value})")


@click.command(name="resume")
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def resume_command(ctx: click.Context, session: str, as_json: bool) -> None:
    """Resume a parked SESSION now, without waiting for its limit to reset.

    A session parked on a usage or rate limit ([limits] on_usage_limit = "wait") resumes by
    itself at its reset time; this runs its parked turn again now, as a new turn (natively
    where the agent reported its session). SESSION is a session id, a unique prefix of it
    (4+ characters), or its name.

    \b
    Example:
      zwarm resume 9bc1
    """
    _print(as_json, get_api(ctx).resume(session), "resumed")


@click.command(name="retry")
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def retry_command(ctx: click.Context, session: str, as_json: bool) -> None:
    """Run SESSION's failed or killed last turn again (the same prompt, natively resumed
    where the agent allows): e.g. after its machine or supervisor died.

    With caps configured ([limits] max_running...) the new turn is queued like any start.
    SESSION is a session id, a unique prefix of it (4+ characters), or its name.

    \b
    Example:
      zwarm retry 3f2a
    """
    _print(as_json, get_api(ctx).retry(session), "retried")
