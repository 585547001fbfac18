"""``zwarm compare`` and ``zwarm pick``: a best-of set's evidence, ranking and winner.

A thin click layer over ``Zwarm.compare``/``compare_diff``/``pick`` (the work is in
``zwarm.ops.bestof`` and ``zwarm.engine.bestof``). Must stay true: loaded only when one of
them runs (``LAZY_COMMANDS``); every problem is a ``ZwarmError`` (one line, exit 1); ``--json``
output is one compact JSON value; the table shows what an agent wrote (its model's name, a
check's command) through ``zwarm.text.clean``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from zwarm.cli.common import get_api, json_option

RANK_HELP = (
    "The ranking's order: keys from checks, flags, lines, cost, time, comma-separated "
    "(the rest follow in that default order)."
)


@click.command(name="compare")
@click.argument("set_ref", metavar="SET")
@click.option("--rank", metavar="ORDER", help=RANK_HELP)
@click.option("--diff", "diff_", nargs=2, type=click.IntRange(min=1), metavar="A B",
              help="How attempt B's tree differs from attempt A's (a unified diff).")  # fmt: skip
@json_option
@click.pass_context
def compare_command(
    ctx: click.Context, set_ref: str, rank: str | None, diff_: tuple[int, int] | None,
    as_json: bool,
) -> None:  # fmt: skip
    """The attempts of best-of SET, ranked on zwarm's evidence.

    One row per attempt: its agent and model, each check (✓ passed, ✗ failed, ⧗ timed out),
    files and lines changed, cost, time, its status (picked: the one pick merged) and flags
    (a protected path it changed, a turn that did not complete). Default order: every check
    passes (and the turn completed), then not flagged, then fewer changed lines, then lower
    cost, then shorter time; attempts still running last. An ended attempt whose checks were
    not recorded (its supervisor died) has them run now. SET is the set's id (set-...) or a
    unique prefix of it.

    \b
    Examples:
      zwarm compare set-3f2a9b1c
      zwarm compare set-3f2a --rank cost,checks --json
      zwarm compare set-3f2a --diff 1 3
    """
    api = get_api(ctx)
    if diff_ is not None:
        text = api.compare_diff(set_ref, *diff_)
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
        if not text:
            click.echo("no difference", err=True)
        return
    v = api.compare(set_ref, rank)
    if as_json:
        from zwarm.cli.output import emit_json

        emit_json(v)
        return
    _table(v)


def _table(v: dict[str, Any]) -> None:
    from zwarm.cli.render import fmt_cost
    from zwarm.text import clean

    where = "sandboxed" if v["checks_sandboxed"] else "unsandboxed (opted in)"
    click.echo(f"{v['set']}  base {v['base'][:12]}  checks {where}  rank: {','.join(v['rank'])}")
    for i, c in enumerate(v["checks"], 1):
        click.echo(f"  check {i}: {clean(c, newlines=False)}")
    if v["protect"]:
        click.echo(f"  protected: {clean(', '.join(v['protect']), newlines=False)}")
    cols = ("#", "att", "agent", "model", "checks", "files", "lines", "cost", "time")
    head = f"{cols[0]:>2} {cols[1]:>3} {cols[2]:<8} {cols[3]:<18} {cols[4]:<8} {cols[5]:>5} "
    head += f"{cols[6]:>6} {cols[7]:>8} {cols[8]:>7}  status / flags"
    click.echo(head)
    for a in v["attempts"]:
        marks = "".join(
            "⧗" if c["timed_out"] else ("✓" if c["passed"] else "✗") for c in a["checks"]
        )
        marks = "…" if a["pending"] else (marks or "-")
        cost = fmt_cost(a["cost_usd"], a["cost_source"])
        model = clean(a["model"] or "-", newlines=False)[:18]
        picked = ["picked"] if v["picked"] == a["attempt"] else []
        notes = "; ".join([a["status"], *picked, *a["flags"]])
        click.echo(
            f"{a['place']:>2} {a['attempt']:>3} {a['adapter']:<8} {model:<18} {marks:<8} "
            f"{a['files']:>5} {a['lines']:>6} {cost:>8} {a['wall_s']:>6.1f}s  "
            f"{clean(notes, newlines=False)}"
        )


@click.command(name="pick")
@click.argument("set_ref", metavar="SET")
@click.argument("attempt", required=False, type=click.IntRange(min=1))
@click.option(
    "--into", metavar="BRANCH", help="The branch to merge into (default: the checked-out one)."
)
@click.option("--squash", is_flag=True, help="Squash the attempt's branch into one commit.")
@click.option("--message", "-m", metavar="M", help="The merge (or squash) commit's message.")
@click.option("--judge", metavar="MODEL", help="Break a tie on the evidence with this model.")
@click.option("--queue", is_flag=True, help="Through the merge queue: rebased, checked, merged.")
@click.option("--target", help="With --queue: the target branch (default: the main worktree's).")
@click.option("--priority", type=int, default=0, help="With --queue: higher goes first.")
@click.option("--check", "checks", multiple=True, help="With --queue: a check (over [merge]).")
@click.option("--no-check", is_flag=True, help="With --queue: merge without any check.")
@json_option
@click.pass_context
def pick_command(
    ctx: click.Context, set_ref: str, attempt: int | None, into: str | None, squash: bool,
    message: str | None, judge: str | None, queue: bool, target: str | None, priority: int,
    checks: tuple[str, ...], no_check: bool, as_json: bool,
) -> None:  # fmt: skip
    """Merge the winner of best-of SET: the top-ranked attempt, or ATTEMPT.

    Without ATTEMPT it is refused while an attempt still runs, or when none passes its
    checks. The merge is zwarm merge's (every rule of merge holds: refused on a dirty
    target, a conflict, a running session). Then the other attempts' worktrees are removed;
    their branches and snapshots stay (zwarm diff works) until zwarm rm.

    \b
    With --judge MODEL, when attempts tie on the evidence (all pass, none flagged, changed
    lines within 10% of the best's), MODEL reads their diffs and chooses among them, through
    the orchestrator's endpoint ([orchestrator] base_url and key); its reason is recorded
    with the set (compare --json: judge). It never overrides the evidence.

    With --queue the winner joins the merge queue instead (zwarm merge --queue: rebased onto
    the latest --target, its checks run, merged only if green; a queue with no check is
    refused unless --no-check); the other worktrees are removed once it is queued.

    \b
    Examples:
      zwarm pick set-3f2a9b1c
      zwarm pick set-3f2a9b1c --queue --check "pytest -q"
      zwarm pick set-3f2a 2 --squash -m "Add rate limiting"
      zwarm pick set-3f2a --judge gpt-5
    """
    api = get_api(ctx)
    plan = None
    if queue:
        if into is not None or squash or message is not None:
            raise click.UsageError("--into, --squash and --message are not for --queue")
        plan = {"target": target, "priority": priority, "checks": list(checks),
                "no_check": no_check}  # fmt: skip
    elif target is not None or priority or checks or no_check:
        raise click.UsageError("--target, --priority, --check and --no-check need --queue")
    verdict = None
    if judge is not None:
        if attempt is not None:
            raise click.UsageError("--judge chooses the attempt: do not name one")
        from zwarm.orchestrator.judge import decide

        verdict = decide(api, set_ref, judge)
        if verdict is not None and not as_json:
            click.echo(f"judge {judge} chose attempt {verdict['attempt']} among "
                       f"{', '.join(map(str, verdict['among']))}: {verdict['reason']}")  # fmt: skip
    res = api.pick(
        set_ref, attempt, into=into, squash=squash, message=message, judge=verdict, queue=plan
    )
    run = [res["queue"]["run"]] if plan is not None and res["queue"]["run"] is not None else []
    if as_json:
        from zwarm.cli.mergeq import exit_if_stuck
        from zwarm.cli.output import emit_json

        emit_json(res)
        exit_if_stuck(ctx, run)
        return
    if plan is not None:
        from zwarm.cli.mergeq import print_run

        q = res["queue"]
        click.echo(f"picked attempt {res['picked']} ({res['session']}): queued for {q['target']}")
        if q["run"] is not None:
            print_run(q["run"])
    else:
        m = res["merge"]
        how = "squashed" if m.get("squash") else "merged"
        what = f"{how} {m['branch']} into {m['into']}" if m.get("merged") else "nothing to merge"
        click.echo(f"picked attempt {res['picked']} ({res['session']}): {what}")
    if res["worktrees_removed"]:
        shown = ", ".join(str(n) for n in res["worktrees_removed"])
        which = (
            "the worktree of attempt"
            if len(res["worktrees_removed"]) == 1
            else ("the worktrees of attempts")
        )
        click.echo(f"removed {which} {shown} (branches kept until rm)")
    for k in res["not_removed"]:
        click.echo(f"attempt {k['attempt']}: worktree kept: {k['error']}", err=True)
    if run:
        from zwarm.cli.mergeq import exit_if_stuck

        exit_if_stuck(ctx, run)
