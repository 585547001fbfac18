"""Fleet control on the command line: ``zwarm resume``, ``zwarm retry``, ``zwarm accounts``
and ``zwarm usage``.

Owns the click layer of ``engine.scheduler`` and ``engine.limits`` but spawn's scheduling and
budget options (``--after``, ``--group``, ``--priority``, ``--max-cost``...: ``SpawnRequest``
fields, offered by ``zwarm.cli.options``): the four commands, each a thin call into
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


@click.command(name="accounts")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def accounts_command(ctx: click.Context, as_json: bool) -> None:
    """Each account of each agent ([accounts.<agent>.<name>]) and its state now.

    ready; cooling down until HH:MM, after a usage limit (new work goes to another account
    of its agent); over budget (its budget_daily spent today); or full (max_running). With
    its spend today, its running sessions and the last limit it hit.

    \b
    Example:
      zwarm accounts --json
    """
    rows = get_api(ctx).accounts()
    if as_json:
        from zwarm.cli.output import emit_json

        emit_json(rows)
        return
    if not rows:
        click.echo("no accounts configured ([accounts.<agent>.<name>] in config.toml)")
        return
    from zwarm.cli.render import fmt_cost
    from zwarm.text import oneline

    for r in rows:
        state = r["why"] or "ready"
        budget = f" of {fmt_cost(r['budget_daily_usd'], None)}" if r["budget_daily_usd"] else ""
        most = f"/{r['max_running']}" if r["max_running"] else ""
        click.echo(
            f"{r['agent']}.{r['name']}  {state}  running {r['running']}{most}  "
            f"today {fmt_cost(r['spent_today_usd'], None)}{budget}"
        )
        if r["last_limit"]:
            last = r["last_limit"]
            click.echo(f"  last limit {last['at']}: {oneline(last['why'], 160)}")


@click.command(name="usage")
@click.option(
    "--by",
    type=click.Choice(["account", "agent", "model", "day", "group", "set"]),
    default="account",
    show_default=True,
    help="What to total by.",
)
@click.option("--since", metavar="YYYY-MM-DD", help="Only turns from this local day on.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def usage_command(ctx: click.Context, by: str, since: str | None, as_json: bool) -> None:
    """Tokens and cost of every recorded turn, totalled by account, agent, model, day, group
    ([groups.NAME]) or set (a best-of set's attempts): the sum of the turns' own figures.

    A turn whose cost is unknown (its agent reports none and its model has no price) adds
    nothing to the cost and is counted: the cost is then shown "≥ $X", the known part.

    \b
    Example:
      zwarm usage --by day --since 2026-11-01
    """
    got = get_api(ctx).usage(by, since)
    if as_json:
        from zwarm.cli.output import emit_json

        emit_json(got)
        return
    from zwarm.cli.render import fmt_cost, fmt_tokens

    for r in [*got["rows"], got["total"]]:
        source = "estimated" if r["estimated_turns"] else None  # "~$": from token prices
        cost = fmt_cost(r["cost_usd"], source, r["cost_complete"])
        unpriced = f"  ({r['unpriced_turns']} turns unpriced)" if r["unpriced_turns"] else ""
        click.echo(
            f"{r['key']:<24} {r['turns']:>6} turns  {fmt_tokens(r['total_tokens']):>8} tokens  "
            f"{cost}{unpriced}"
        )
    if got["damaged"]:
        click.echo(f"({got['damaged']} damaged sessions not counted)")
