"""``zwarm trust``: review and trust the current state dir's config.toml (and the dir itself).

A thin layer over ``zwarm.trust``. Must stay true: it never trusts anything without showing
it first and getting a confirmation on a terminal, or ``--yes`` (required when stdin is not a
terminal or ``CI=true``); it finds the state dir by the usual rule but without the safety
check (allowing an unsafe dir is its job); every problem is one line and a non-zero exit.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from zwarm import trust, trust_plan
from zwarm.cli import output
from zwarm.env import Env
from zwarm.errors import InvalidInput


@click.command(name="trust")
@click.option("--yes", "-y", is_flag=True, help="Trust without asking.")
@click.option(
    "--state-dir-only",
    is_flag=True,
    help="Only allow the state dir (not yours, group/world-writable, or a symlink).",
)
@click.option("--revoke", is_flag=True, help="Forget this state dir's trust (and its config's).")
@click.option("--list", "list_", is_flag=True, help="Every trusted file and dir, and its status.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def trust_command(ctx: click.Context, yes: bool, state_dir_only: bool, revoke: bool,
                  list_: bool, as_json: bool) -> None:  # fmt: skip
    """Trust this state dir's config.toml as it is now: its agent commands, env, limits...

    A setting that executes or decides (in an agent's table every key but model, prices and
    max_running: command, env, extra_args, config, sandbox, permission_mode, dangerous;
    [orchestrator] base_url, api_key_env; [tools] allowed_roots; [hooks] on_finish, on_fail;
    [workspace] root, setup, copy, link; [launcher] default; [slurm] account, extra_args,
    env, python) is used only if it is the default or the value you trusted. A limit
    ([limits], [groups.NAME], max_running, budgets, prices, timeout) may be tightened
    freely; loosening it past the trusted value needs this. Other keys never need it. A state
    dir that is not yours, is group/world-writable or is a symlink is refused until allowed
    here. Trust is kept in $XDG_CONFIG_HOME/zwarm/trust.json (default
    ~/.config/zwarm/trust.json). Values are shown with secrets (env values) masked.

    \b
    Examples:
      zwarm trust            # shows what you would trust, then asks
      zwarm trust --list
    """
    if list_ and (revoke or state_dir_only or yes):
        raise click.UsageError("--list takes no other option but --json")
    env = Env(state_dir=(ctx.find_root().obj or {}).get("state_dir"))
    if list_:
        _show_listing(trust_plan.listing(env.environ), as_json)
        return
    root = env.locate_state_dir()
    if revoke:
        gone = trust.revoke(root, config=not state_dir_only, environ=env.environ)
        _emit(as_json, {"revoked": gone}, [f"revoked {p}" for p in gone] or [
            f"nothing was trusted for {root}"])  # fmt: skip
        return
    plan = trust_plan.plan(root, dir_only=state_dir_only, environ=env.environ)
    if plan.empty:
        why = "" if state_dir_only else " and has no config.toml"
        raise InvalidInput(f"nothing to trust: {plan.state_dir} is yours and safe{why}")
    from zwarm.text import visible  # what is trusted is shown exactly, never interpreted

    review = "\n".join(visible(line) for line in _describe(plan))
    click.echo(review, err=as_json)  # --json: stdout is the result only
    _confirm(yes, env)
    trust_plan.apply(plan, env.environ)
    done = [f"allowed {plan.dir.path}"] if plan.dir is not None else []
    done += [f"trusted {plan.config.path}"] if plan.config is not None else []
    _emit(as_json, _plan_json(plan), done)


def _confirm(yes: bool, env: Env) -> None:
    if yes:
        return
    if env.environ.get("CI", "").lower() == "true" or not sys.stdin.isatty():
        raise InvalidInput("not trusted: pass --yes to trust without a terminal to confirm on")
    if not click.confirm("Trust this?", default=False, err=True):
        raise InvalidInput("not trusted")


def _describe(plan: trust_plan.Plan) -> list[str]:
    lines: list[str] = []
    if plan.dir is not None:
        note = " (already allowed)" if plan.dir_allowed else ""
        lines.append(f"state dir {plan.dir.path}: {'; '.join(plan.dir.problems)}{note}")
    c = plan.config
    if c is not None:
        was = {trust.TRUSTED: " (already trusted)", trust.CHANGED: " (changed since trusted)"}
        if c.status == trust.CHANGED and not c.needs:
            was[trust.CHANGED] = " (edited since trusted: nothing in it needs new trust)"
        what = "" if c.exists else ", which does not exist: the defaults"
        lines.append(f"config {c.path}{what} (sha256 {c.sha256[:16]}){was.get(c.status, '')}:")
        lines += _settings(c.settings, c.was)
    return lines


def _settings(settings: dict[str, Any], was: dict[str, Any] | None) -> list[str]:
    """Each value that is not free nor the default (secrets masked: ``trust.shown``); where a
    trusted value was recorded, what changes: ``(trusted: ...)``, ``(new)``."""
    lines = []
    for key in sorted(set(settings) | set(was or {})):
        now = trust.shown(key, settings[key]) if key in settings else "(the default)"
        note = ""
        if was is not None and key not in was:
            note = "  (new)"
        elif was is not None and json.dumps(was[key]) != json.dumps(settings.get(key)):
            note = f"  (trusted: {trust.shown(key, was[key])})"
        lines.append(f"  {key} = {now}{note}")
    if not lines:
        lines.append("  (every setting that executes or limits is the default)")
    return lines


def _plan_json(plan: trust_plan.Plan) -> dict[str, Any]:
    d, c = plan.dir, plan.config
    out: dict[str, Any] = {"state_dir": plan.state_dir, "dir": None, "config": None}
    if d is not None:
        out["dir"] = {"problems": list(d.problems), "uid": d.uid, "realpath": d.realpath}
    if c is not None:
        out["config"] = {
            "path": c.path,
            "sha256": c.sha256,
            "settings": {k: trust.masked(k, v) for k, v in c.settings.items()},
            "was": c.status,
        }
    return out


def _show_listing(data: dict[str, Any], as_json: bool) -> None:
    lines = [f"trust file: {data['trust_file']}"]
    lines += [f"config  {c['status']:<9}  {c['path']}" for c in data["configs"]]
    lines += [f"dir     {d['status']:<9}  {d['path']} ({d['owner']})" for d in data["state_dirs"]]
    _emit(as_json, data, lines)


def _emit(as_json: bool, data: Any, lines: list[str]) -> None:
    if as_json:
        output.emit_json(data)
    else:
        from zwarm.text import visible

        click.echo("\n".join(visible(line) for line in lines))
