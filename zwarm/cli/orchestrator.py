"""The orchestrator commands: ``zwarm tools``, ``zwarm mcp`` and ``zwarm orchestrate``.

Loaded lazily by ``zwarm.cli`` (``LAZY_COMMANDS``), as the attributes ``tools_command``,
``mcp_command`` and ``orchestrate_command``. Owns only argument parsing and output; the work is
``orchestrator.tools``, ``orchestrator.mcp_server`` and ``orchestrator.loop``. Must stay true:
- ``mcp``, ``openai`` and ``rich`` are imported inside the command that needs them; a missing
  optional extra is one line naming the ``pip install`` to run, exit 1, never a traceback;
- errors are ``ZwarmError``s, which ``zwarm.cli`` turns into one line and exit 1;
- ``orchestrate`` makes its process non-dumpable and removes ``ZWARM_ORCH_API_KEY`` from
  ``os.environ`` before anything else runs (``orchestrator.guard``), so the key stays in this
  process's memory: no session, bash command or file gets it;
- it imports shared helpers from ``zwarm.cli.common``, never from ``zwarm.cli`` (no cycle).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

import click

from zwarm.cli.common import get_api, read_task

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

    click.echo(json.dumps(schemas(fmt), indent=2, ensure_ascii=False))


def _need(module: str, extra: str, command: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise click.ClickException(
            f"zwarm {command} needs the {module} package: pip install 'zwarm[{extra}]'"
        )


@click.command("mcp")
@click.pass_context
def mcp_command(ctx: click.Context) -> None:
    """Serve zwarm's orchestrator tools over MCP on stdin/stdout.

    Register it with an MCP client. Sessions it starts are marked with source
    mcp:<client name>.

    \b
    Examples:
      claude mcp add zwarm -- zwarm mcp
      codex mcp add zwarm -- zwarm mcp
    """
    _need("mcp", "mcp", "mcp")
    api = get_api(ctx)
    api.setting("tools", "allowed_roots")  # loads config.toml: an invalid one is reported now
    from zwarm.orchestrator import mcp_server

    mcp_server.serve(api)


@click.command("orchestrate")
@click.argument("task", required=False)
@click.option("--resume", metavar="RUN", help="Continue a run: its id, a prefix, or 'last'.")
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
def orchestrate_command(
    ctx: click.Context,
    /,
    task: str | None,
    resume: str | None,
    quiet: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    """Let an LLM delegate TASK to coding agents, check and verify their work, and summarize.

    Works with any OpenAI-compatible Chat Completions endpoint (OpenAI, OpenRouter, vLLM,
    Ollama). The key comes from $ZWARM_ORCH_API_KEY, which no agent or bash command gets,
    else from $OPENAI_API_KEY (or [orchestrator] api_key_env), which agents share. The run is
    kept in .zwarm/orchestrator/RUN/ (run.json, messages.json); --resume RUN continues it,
    with TASK as a follow-up instruction if given. TASK - reads stdin.

    Exit status: 0 finished, 1 error, 3 stopped by the step limit or a budget, 130 interrupted.

    \b
    Examples:
      zwarm orchestrate "add a --verbose flag and tests; verify the suite passes" -m gpt-5
      zwarm orchestrate --resume last "now also update the changelog"
    """
    _need("openai", "orchestrate", "orchestrate")
    from zwarm.orchestrator import guard
    from zwarm.orchestrator import loop as orch

    guard.make_undumpable()  # before the key is read: /proc/<this pid>/environ holds it
    api = get_api(ctx)
    os.environ.pop(guard.ORCH_KEY_VAR, None)  # no child started without an explicit env gets it
    p = orch.start(api, read_task(task) if task else None, resume, flags)
    llm = orch.OpenAIChat(p.settings)
    progress: orch.Progress = orch.Quiet() if quiet else orch.RichProgress()
    try:
        run = orch.execute(api, p, llm, progress)
    except KeyboardInterrupt:
        click.echo(f"interrupted; continue with: zwarm orchestrate --resume {p.run.id}", err=True)
        ctx.exit(130)
    _report(run, as_json)
    ctx.exit(orch.EXIT.get(run.status, 1))


def _report(run: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(run.to_dict(), ensure_ascii=False, separators=(",", ":")))
    elif run.status == "finished":
        from zwarm.cli.text import clean

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
