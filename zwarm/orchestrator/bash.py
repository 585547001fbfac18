"""The built-in orchestrator's ``bash`` tool: run a verification command, bounded.

Owns running one command for the orchestrator LLM (``zwarm orchestrate`` only; MCP clients have
their own shells). Must stay true:
- the command runs as ``["/bin/bash", "-c", command]`` (never ``shell=True``), in a directory
  confined by ``tools.confine_cwd`` (default: where zwarm runs), with stdin closed, in its own
  session and process group;
- its environment is an allowlist (``ENV_ALLOW`` and ``LC_*``) plus the run's token
  (``zwarm.sandbox.run.TOKEN_VAR``), a random marker unique to the call: no API key nor
  anything else of zwarm's environment reaches it;
- it runs through ``zwarm.sandbox.run.run_tree`` (the one runner of a command zwarm does not
  trust): a command leaves nothing running (its group, the processes carrying its token, and
  on Linux every process orphaned while it ran, this process being a child subreaper during
  the call: the loop runs one tool at a time), and its output is drained as it comes with
  only a head and a tail kept (``OUTPUT_HEAD`` + ``OUTPUT_TAIL`` bytes), the bytes dropped in
  between counted and said;
- this is a working-directory and time confinement, not a sandbox: the system prompt asks for
  read-only commands, and nothing here can enforce that. A process started on the command's
  behalf by a daemon that was already running (``at``, a tmux server) is not found.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from zwarm.orchestrator.tools import Result, Tool, Toolbox, ToolError, object_schema
from zwarm.sandbox.run import (
    ENV_ALLOW as ENV_ALLOW,
)
from zwarm.sandbox.run import (
    TOKEN_VAR,
    Output,
    Ran,
    allowed_env,
    run_tree,
)

OUTPUT_HEAD = 6000
OUTPUT_TAIL = 4000


def bash_env(environ: Mapping[str, str], token: str) -> dict[str, str]:
    """The command's environment: the allowlisted variables of ``environ`` and the token."""
    return {**allowed_env(environ), TOKEN_VAR: token}


def run_bash(command: str, cwd: str, timeout: float, environ: Mapping[str, str]) -> Result:
    """Run ``command`` with bash; its exit code, bounded output, and whether it timed out.

    ``environ`` is zwarm's environment, of which only the allowlisted variables are passed.
    """
    token = secrets.token_hex(16)
    out = Output(OUTPUT_HEAD, OUTPUT_TAIL)
    try:
        ran = run_tree(
            ["/bin/bash", "-c", command], cwd, bash_env(environ, token), timeout, out, token, True
        )
    except OSError as e:
        raise ToolError(f"cannot run bash in {cwd}: {e.strerror or e}") from None
    return _result(ran, timeout, out)


def _result(ran: Ran, timeout: float, out: Output) -> Result:
    result: Result = {
        "exit_code": ran.code,
        "timed_out": ran.timed_out,
        "duration_s": round(ran.duration_s, 2),
        "output": out.text(),
    }
    if out.dropped:
        result["output_cut_bytes"] = out.dropped
    notes = []
    if ran.timed_out:
        notes.append(f"killed after {timeout:g} s")
    if ran.left:
        result["killed_leftovers"] = ran.left
        notes.append(f"{ran.left} process(es) it left running were killed")
    if notes:
        result["note"] = "; ".join(notes)
    return result


# ---------------------------------------------------------------------------- the tool
def _bash(tb: Toolbox, a: dict[str, Any]) -> Result:
    cwd = tb.confine(a.get("cwd"))
    cap = float(tb.api.setting("orchestrator", "bash_timeout_s")) or 60.0
    timeout = min(float(a.get("timeout_s", cap)), cap)
    return {"cwd": str(cwd), **run_bash(a["command"], str(cwd), timeout, tb.api.env.environ)}


BASH_TOOL = Tool(
    "bash",
    "Run a shell command (bash) to verify the agents' work yourself: run the tests, read "
    "files, git diff/status, grep. Use it for read-only checks; delegate any change to an "
    "agent. Runs in the working directory (or cwd, which must be inside the allowed roots), "
    "with a time limit and a minimal environment (PATH, HOME, locale; no API keys). A "
    "command leaves nothing running: anything it started in the background is killed when "
    "it returns. Long output is shortened to its head and tail.",
    object_schema(
        {
            "command": {"type": "string", "minLength": 1, "description": "The bash command."},
            "cwd": {
                "type": "string",
                "description": "Directory to run in (default: the working directory).",
            },
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Kill it after this many seconds (capped by the configuration).",
            },
        },
        ["command"],
    ),
    _bash,
)
