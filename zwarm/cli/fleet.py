"""Fleet control on the command line: ``zwarm resume`` and ``zwarm retry``.

Owns the click layer of ``engine.scheduler`` and ``engine.limits`` but spawn's scheduling and
budget options (``--after``, ``--group``, ``--priority``, ``--max-cost``...: ``SpawnRequest``
fields, offered by ``zwarm.cli.options``): the two commands, each a thin call into
``zwarm.api.Zwarm``. Must stay true: importing this module imports only click and
``zwarm.cli.common``; errors are ``ZwarmError``s, turned into one line and exit 1 by
``zwarm.cli``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from zwarm.cli.common import get_api

F = Callable[..., Any]


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
