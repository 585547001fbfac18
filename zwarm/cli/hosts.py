"""``zwarm hosts``: the machines sessions may run on over ssh (``[hosts.NAME]``), and
``hosts check NAME``. A thin layer over ``Zwarm.hosts`` and ``Zwarm.host_check``. Must stay
true: every problem is one line and a non-zero exit; a host that does not answer is a row
saying so, never a wait longer than its timeout."""

from __future__ import annotations

from typing import Any

import click

from zwarm.cli import output
from zwarm.cli.common import get_api


@click.group(name="hosts", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--timeout", type=click.FloatRange(min=0.5), help="Seconds each host has to answer.")
@click.pass_context
def hosts_group(ctx: click.Context, as_json: bool, timeout: float | None) -> None:
    """The configured ssh hosts ([hosts.NAME] in config.toml): whether each answers, the
    zwarm it runs and what one command costs over its shared connection.

    \b
    Examples:
      zwarm hosts
      zwarm hosts --json
      zwarm hosts check box
    """
    if ctx.invoked_subcommand is not None:
        return
    rows = get_api(ctx).hosts(timeout)
    if as_json:
        output.emit_json(rows)
        return
    if not rows:
        click.echo("no hosts configured ([hosts.NAME] in config.toml; see docs/hosts.md)")
        return
    _table(rows)


def _table(rows: list[dict[str, Any]]) -> None:
    from zwarm.text import oneline

    head = ("HOST", "SSH", "STATUS", "ZWARM", "LATENCY")
    lines = []
    for r in rows:
        state = "reachable" if r["reachable"] else "unreachable"
        latency = f"{r['latency_ms']:.0f} ms" if r["latency_ms"] is not None else "-"
        lines.append((r["name"], oneline(r["ssh"], 40), state, r["version"] or "-", latency))
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    for line in [head, *lines]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    for r in rows:
        if r["error"]:
            output.warn(r["error"])


@hosts_group.command(name="check")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--timeout", type=click.FloatRange(min=0.5), help="Seconds each step may take.")
@click.pass_context
def check_command(ctx: click.Context, name: str, as_json: bool, timeout: float | None) -> None:
    """Check host NAME: it answers, runs this zwarm, has git and its cwd, and which agent CLIs
    are on its PATH. Exits 1 when it cannot run sessions.

    \b
    Example:
      zwarm hosts check box
    """
    from zwarm.errors import ZwarmError
    from zwarm.text import oneline

    report = get_api(ctx).host_check(name, timeout)
    if as_json:
        output.emit_json(report)
    else:
        width = max(len(s["what"]) for s in report["steps"])
        for s in report["steps"]:
            mark = "ok" if s["ok"] else ("NO" if s["needed"] else "--")
            click.echo(f"{s['what'].ljust(width)}  {mark.ljust(2)}  {oneline(s['detail'], 160)}")
    if not report["ok"]:
        first = next(s for s in report["steps"] if s["needed"] and not s["ok"])
        detail = first["detail"]
        if detail.startswith(f"host {name!r}"):  # unreachable, another zwarm: it says it all
            raise ZwarmError(detail)
        raise ZwarmError(f"host {name!r} cannot run sessions: {first['what']}: {detail}")
