"""``zwarm sandbox``: zwarm's own sandbox of a turn (``zwarm.sandbox``), ``check`` its
preflight. Owns the command and its table; the probes are ``zwarm.sandbox.check``'s."""

import click

from zwarm.cli import output


@click.group(name="sandbox")
def sandbox_group() -> None:
    """zwarm's own sandbox of each turn ([sandbox] mode = "bwrap", spawn --sandbox): each
    turn in bubblewrap, writing only its worktree and reaching only its model endpoint.

    \b
    Example:
      zwarm sandbox check
    """


@sandbox_group.command(name="check")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def check_command(as_json: bool) -> None:
    """Prove the sandbox holds on this machine: a scripted agent in it tries to write outside
    its worktree, read the state dir, reach a port that is not its endpoint and see the
    processes outside (each must fail), and to write its worktree and reach its endpoint (each
    must work). Exits 1 with the reason when the sandbox cannot hold.

    \b
    Example:
      zwarm sandbox check
    """
    from zwarm.sandbox import check

    report = check.run()
    if as_json:
        output.emit_json(
            {
                "holds": report.holds,
                "reason": report.reason or None,
                "probes": [r._asdict() for r in report.rows],
                "limits": report.limits,
            }
        )
    else:
        width = max(len(r.what) for r in report.rows)
        click.echo(f"{'PROBE'.ljust(width)}  MUST  GOT      OK")
        for r in report.rows:
            mark = "yes" if r.holds else "NO"
            click.echo(f"{r.what.ljust(width)}  {r.must.ljust(4)}  {r.got.ljust(7)}  {mark}")
        click.echo(f"limits: {report.limits}")
        if report.holds:
            click.echo("the sandbox holds on this machine")
    if not report.holds:
        from zwarm.errors import SandboxUnavailable

        raise SandboxUnavailable(
            f"the sandbox cannot hold on this machine: {check.refusal(report)}"
        )
