"""The orchestrator commands: ``zwarm tools``, ``zwarm mcp`` (and ``zwarm mcp install``) and
``zwarm orchestrate``.

Loaded lazily by ``zwarm.cli`` (``LAZY_COMMANDS``), as the attributes ``tools_command``,
``mcp_command`` and ``orchestrate_command``. Owns only argument parsing and output; the work is
``orchestrator.tools``, ``orchestrator.mcp_server``, ``zwarm.mcp_install`` and
``orchestrator.loop``. Must stay true:
- ``mcp``, ``openai`` and ``rich`` are imported inside the command that needs them; a missing
  optional extra is one line naming the ``pip install`` to run, exit 1, never a traceback;
- errors are ``ZwarmError``s, which ``zwarm.cli`` turns into one line and exit 1;
- ``orchestrate`` makes its process non-dumpable, re-executes itself without
  ``ZWARM_ORCH_API_KEY`` in its environment block (zwarm's own process only: the key comes
  back on a pipe) and removes it from ``os.environ`` before anything else runs
  (``orchestrator.guard``), so the key stays in this process's memory: no session, bash
  command or file gets it;
- it imports shared helpers from ``zwarm.cli.common``, never from ``zwarm.cli`` (no cycle);
- ``orchestrate`` is a group whose default is ``run`` (``zwarm orchestrate TASK``): ``ls`` and
  ``show`` are subcommands only as the first argument (``cli.runs`` prints them); a run stops
  on SIGINT or SIGTERM with exit 130 or 143 and the command that resumes it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from zwarm.cli import output
from zwarm.cli.common import get_api
from zwarm.cli.fast import read_task
from zwarm.env.children import SOURCE_VAR
from zwarm.errors import InvalidInput
from zwarm.mcp_install import DEFAULT_HTTP_URL

if TYPE_CHECKING:
    from zwarm.api import Zwarm

FORMATS = ("openai", "anthropic", "mcp")


@click.command("tools")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="openai",
    show_default=True,
    help="Shape of the tool definitions.",
)
def tools_command(fmt: str) -> None:
    """Print the orchestrator tool schemas (JSON), for your own LLM loop.

    Run them with zwarm.orchestrator.tools.dispatch(name, arguments, api=zwarm.api.Zwarm()).

    \b
    Example:
      zwarm tools --format anthropic > tools.json
    """
    from zwarm.orchestrator.tools import schemas

    # indented, not emit_json: a schema is read by people and pasted into configs
    click.echo(json.dumps(schemas(fmt), indent=2, ensure_ascii=False))


def _need(module: str, extra: str, command: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise click.ClickException(
            f"zwarm {command} needs the {module} package: pip install 'zwarm[{extra}]'"
        )


@click.group("mcp", invoke_without_command=True)
@click.option(
    "--source",
    metavar="NAME",
    envvar=SOURCE_VAR,
    help="Name this server's caller (else ZWARM_SOURCE; else each connection is one of its "
    "own: mcp:<client name>/<id>).",
)
@click.pass_context
def mcp_command(ctx: click.Context, source: str | None) -> None:
    """Serve zwarm's orchestrator tools over MCP on stdin/stdout.

    Register it with an MCP client (zwarm mcp install claude|codex writes the client's
    configuration). It serves the state dir found from where the client starts it (a .zwarm
    here or in a parent), or the one given (--state-dir, ZWARM_DIR); with none found and none
    given it refuses to start. Sessions it starts are marked with source
    mcp:<client name>/<connection id>, or NAME.

    \b
    Examples:
      zwarm mcp install claude      # .mcp.json + .claude/settings.json here
      zwarm mcp install codex --user
    """
    if ctx.invoked_subcommand is not None:
        return
    _need("mcp", "mcp", "mcp")
    api = get_api(ctx)
    _check_served_dir(api, given=(ctx.find_root().obj or {}).get("state_dir") is not None)
    api.setting("tools", "allowed_roots")  # loads config.toml: an invalid one is reported now
    if source is not None:
        source = _check_source(source)
    from zwarm.orchestrator import mcp_server

    mcp_server.serve(api, source)


def _check_served_dir(api: Zwarm, given: bool) -> None:
    """Refuse, in one line, a state dir ``zwarm mcp`` cannot find or use: none found from the
    working directory and none given (the client started the server elsewhere, or did not
    pass ZWARM_DIR: it would serve an empty dir and never say so), one that is not a
    directory, or one this user cannot read and write. A dir given that does not exist yet
    is made by the first delegate, as for every command that writes."""
    path = api.state_dir
    if not os.path.lexists(path):
        if not given:
            raise InvalidInput(
                f"no zwarm state dir found from {api.env.cwd} (no .zwarm there or in a "
                "parent): run 'zwarm init' in the project, or give it with --state-dir or "
                "ZWARM_DIR in the MCP client's server entry"
            )
        if not path.parent.is_dir():
            raise InvalidInput(f"state dir {path}: {path.parent} is not a directory")
        return
    if not path.is_dir():
        raise InvalidInput(f"state dir {path} is not a directory")
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise InvalidInput(f"state dir {path} cannot be read and written by this user")
    api.has_sessions()  # a sessions entry that is not a directory: a one-line StoreError


def _check_source(source: str) -> str:
    name = source.strip()
    if not name or len(name) > 100 or not name.isprintable():
        raise InvalidInput(
            "--source (or ZWARM_SOURCE) must be 1 to 100 printable characters, "
            f"not {source[:120]!r}"
        )
    return name


@mcp_command.command("install", short_help="Wire zwarm's tools into Claude Code or Codex.")
@click.argument("client", type=click.Choice(["claude", "codex"]))
@click.option("--user", is_flag=True, help="The client's user-wide config (else this project's).")
@click.option(
    "--http",
    "http_url",
    is_flag=False,
    flag_value=DEFAULT_HTTP_URL,
    metavar="URL",
    help=f"Use zwarm serve's MCP endpoint (default {DEFAULT_HTTP_URL}) instead of stdio.",
)
@click.option("--print", "printing", is_flag=True, help="Only show what would be written.")
@click.pass_context
def mcp_install_command(
    ctx: click.Context, client: str, user: bool, http_url: str | None, printing: bool
) -> None:
    """Write CLIENT's MCP configuration so that a plain headless run uses zwarm's tools.

    Adds the zwarm server (this zwarm, on this state dir), the client's permission for
    zwarm's tools only, and what loads them upfront; other content is kept, and running it
    again changes nothing. Project scope (the default) writes .mcp.json and
    .claude/settings.json, or .codex/config.toml, in the current directory.

    \b
    Examples:
      zwarm mcp install claude && claude -p "delegate the failing test to codex"
      zwarm mcp install codex --user --print
    """
    from pathlib import Path

    from zwarm import mcp_install

    api = get_api(ctx)
    state_dir = Path(os.path.abspath(api.state_dir))
    environ = api.env.environ
    p = mcp_install.plan(
        client,
        user=user,
        state_dir=state_dir,
        cwd=api.env.cwd,
        environ=environ,
        command=mcp_install.zwarm_command(),
        http_url=http_url,
        printing=printing,
    )
    if not printing:
        api.ensure_state_dir()  # the server refuses a state dir that is not there
        mcp_install.apply(p)
    for line in mcp_install.describe(p, printing):
        click.echo(line)


class _RunGroup(click.Group):
    """``zwarm orchestrate TASK`` runs (the ``run`` command); ``ls`` and ``show`` are words of
    their own only as the first argument, alone (a task is a sentence)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands or args[0] == "run":
            args = ["run", *args]
        return super().parse_args(ctx, args)


class _Run(click.Command):
    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("zwarm orchestrate", "[OPTIONS] [TASK] | ls | show RUN [--all]")


@click.group("orchestrate", cls=_RunGroup)
def orchestrate_command() -> None:
    """Run the built-in orchestrator (see: zwarm orchestrate --help)."""


@orchestrate_command.command("run", cls=_Run)
@click.argument("task", required=False)
@click.option("--resume", metavar="RUN", help="Continue a run: its id, a prefix, or 'last'.")
@click.option(
    "--compact", "compact", metavar="RUN", help="Compact a run's transcript now, then stop."
)
@click.option("--model", "-m", help="Orchestrator model (else ZWARM_ORCH_MODEL, config).")
@click.option("--base-url", help="Chat Completions base URL (else ZWARM_ORCH_BASE_URL, config).")
@click.option("--max-steps", type=click.IntRange(min=1), help="LLM calls in this invocation.")
@click.option("--max-tokens", type=click.IntRange(min=0), help="Token budget for the run.")
@click.option(
    "--max-cost",
    "max_cost_usd",
    type=click.FloatRange(min=0),
    help="Cost budget for the run (USD, orchestrator + agents).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print the run record as JSON.")
@click.pass_context
def run_command(
    ctx: click.Context,
    /,
    task: str | None,
    resume: str | None,
    compact: str | None,
    quiet: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    """Let an LLM delegate TASK to coding agents, check and verify their work, and summarize.

    Works with any OpenAI-compatible Chat Completions endpoint (OpenAI, OpenRouter, vLLM,
    Ollama). The key comes from $ZWARM_ORCH_API_KEY, which no agent or bash command gets,
    else from $OPENAI_API_KEY (or [orchestrator] api_key_env), which agents share. The run is
    kept in .zwarm/orchestrator.db, one insert per message; --resume RUN continues it, with
    TASK as a follow-up instruction if given. TASK - reads stdin. Past [orchestrator]
    compact_at of the model's context, its oldest messages are summarized into one (--compact
    RUN does it now). Transient endpoint errors are retried, with backoff. SIGINT or SIGTERM
    stops the run cleanly. `zwarm orchestrate ls` lists the runs; `zwarm orchestrate show RUN`
    prints one (--all: with the compacted messages, compactions and failed requests).

    Exit status: 0 finished, 1 error, 3 stopped by the step limit or a budget, 130 interrupted
    (SIGINT), 143 terminated (SIGTERM).

    \b
    Examples:
      zwarm orchestrate "add a --verbose flag and tests; verify the suite passes" -m gpt-5
      zwarm orchestrate --resume last "now also update the changelog"
      zwarm orchestrate show last --all
    """
    _need("openai", "orchestrate", "orchestrate")
    from zwarm.orchestrator import guard
    from zwarm.orchestrator import loop as orch

    guard.make_undumpable()  # before the key is read: it is in this process's memory
    if output.is_own_process():  # then /proc/<this pid>/environ does not show it, even to root
        why = guard.reexec_without_key(sys.argv[1:])
        if why:
            click.echo(f"zwarm: warning: {guard.ORCH_KEY_VAR} stays in this process's "
                       f"environment block, which root can read ({why})", err=True)  # fmt: skip
    guard.take_handed_key()
    api = get_api(ctx)
    os.environ.pop(guard.ORCH_KEY_VAR, None)  # no child started without an explicit env gets it
    if compact is not None:
        _compact(ctx, api, compact, quiet, as_json, flags)
        return
    with orch.stop_on_signals():
        p = orch.start(api, read_task(task) if task else None, resume, flags)
        llm = orch.OpenAIChat(p.settings)
        progress: orch.Progress = orch.Quiet() if quiet else orch.RichProgress()
        try:
            run = orch.execute(api, p, llm, progress)
        except KeyboardInterrupt as e:
            signum = e.signum if isinstance(e, orch.Stopped) else 2
            what = "interrupted" if signum == 2 else "terminated (SIGTERM); the run is saved"
            click.echo(f"{what}; continue with: zwarm orchestrate --resume {p.run.id}", err=True)
            ctx.exit(128 + signum)
        finally:
            p.rs.close()
    _report(run, as_json)
    ctx.exit(orch.EXIT.get(run.status, 1))


def _compact(
    ctx: click.Context, api: Any, ref: str, quiet: bool, as_json: bool, flags: dict[str, Any]
) -> None:
    from zwarm.orchestrator import loop as orch

    p = orch.start_compaction(api, ref, flags)
    progress: orch.Progress = orch.Quiet() if quiet else orch.RichProgress()
    with p.rs:
        out = orch.compact_now(api, orch.OpenAIChat(p.settings), p, progress)
    if as_json:
        output.emit_json({"run_id": p.run.id, **out.__dict__})
    elif out.compacted:
        click.echo(f"run {p.run.id}: {orch.compacted_text(out)}")
    else:
        click.echo(f"run {p.run.id}: {out.reason}")


@orchestrate_command.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def ls_command(ctx: click.Context, as_json: bool) -> None:
    """List the orchestrator's runs, oldest first: status, steps, tokens, cost, task.

    \b
    Example:
      zwarm orchestrate ls --json
    """
    from zwarm.cli import runs

    runs.list_runs(get_api(ctx), as_json)


@orchestrate_command.command("show")
@click.argument("run")
@click.option("--all", "everything", is_flag=True, help="Also the compacted messages, etc.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def show_command(ctx: click.Context, run: str, everything: bool, as_json: bool) -> None:
    """A run and its transcript: RUN is its id, a unique prefix, or 'last'.

    The transcript is what the model is sent now; with --all, also the messages compacted
    out (marked, each where it was), every compaction (which messages became which summary,
    tokens before and after, the model) and every failed model request (with the text a cut
    reply had sent).

    \b
    Example:
      zwarm orchestrate show last --all
    """
    from zwarm.cli import runs

    runs.show_run(get_api(ctx), run, everything, as_json)


def _report(run: Any, as_json: bool) -> None:
    if as_json:
        output.emit_json(run.to_dict())
    elif run.status == "finished":
        from zwarm.text import clean

        click.echo(clean(run.summary or "(the orchestrator finished without a summary)"))
    lines = [] if run.status == "finished" else [f"stopped: {run.stop_reason}"]
    running = [s["id"] for s in run.sessions if s["status"] == "running"]
    if running:  # finished or not, the user must know what it left running
        what = "session is" if len(running) == 1 else "sessions are"
        lines.append(f"{len(running)} {what} still running: {', '.join(running)}")
        lines.append(f"  stop them with: zwarm kill {' '.join(running)}")
    if run.status != "finished":
        lines.append(f"continue with: zwarm orchestrate --resume {run.id} [--max-steps N]")
    if lines:
        click.echo("\n".join(lines), err=True)
        sys.stderr.flush()
