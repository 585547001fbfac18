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
- where ``[sandbox] mode`` is on, the command runs in zwarm's sandbox (``bash_policy``:
  ``zwarm.sandbox.run.confine``): the allowed roots readable and read-only unless the trusted
  ``[orchestrator] bash_writable`` says otherwise, their git metadata read-only, no network,
  the state dir, zwarm's per-user files and the home hidden; where it is on but cannot hold,
  the tool refuses rather than run unsandboxed. Where it is off, this is a working-directory
  and time confinement only, as the tool's result (``sandboxed``) and the run's first note
  (``sandbox_line``) say: the system prompt asks for read-only commands, nothing enforces it.
  A process started on the command's behalf by a daemon that was already running (``at``, a
  tmux server) is not found.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.sandbox import Policy

OUTPUT_HEAD = 6000
OUTPUT_TAIL = 4000


def bash_env(environ: Mapping[str, str], token: str) -> dict[str, str]:
    """The command's environment: the allowlisted variables of ``environ`` and the token."""
    return {**allowed_env(environ), TOKEN_VAR: token}


def run_bash(
    command: str,
    cwd: str,
    timeout: float,
    environ: Mapping[str, str],
    policy: Policy | None = None,
) -> Result:
    """Run ``command`` with bash; its exit code, bounded output, and whether it timed out.

    ``environ`` is zwarm's environment, of which only the allowlisted variables are passed;
    with ``policy`` the command runs in zwarm's sandbox under it (``bash_policy``).
    """
    token = secrets.token_hex(16)
    out = Output(OUTPUT_HEAD, OUTPUT_TAIL)
    argv = ["/bin/bash", "-c", command]
    if policy is not None:
        from zwarm.sandbox import bwrap

        argv = bwrap.command(argv, policy, None)
    try:
        ran = run_tree(argv, cwd, bash_env(environ, token), timeout, out, token, True)
    except OSError as e:
        raise ToolError(f"cannot run bash in {cwd}: {e.strerror or e}") from None
    return _result(ran, timeout, out)


def bash_policy(api: Zwarm, cwd: Path) -> Policy | None:
    """The sandbox of a bash command run in ``cwd`` (confined already): None where
    ``[sandbox] mode`` is off; else the allowed roots readable, the one holding ``cwd``
    writable only with ``[orchestrator] bash_writable`` (trusted), their git metadata and
    that of the repository ``cwd`` is in read-only, the state dir hidden, no network.
    ``ToolError`` where the sandbox is on but cannot hold here: the command does not run
    unsandboxed."""
    from zwarm.orchestrator.tools.confine import allowed_roots
    from zwarm.sandbox import OFF
    from zwarm.sandbox import run as sbx

    mode = str(api.setting("sandbox", "mode"))
    if mode == OFF:
        return None
    why = sbx.holds(mode)
    if why:
        raise ToolError(f"{why}: the bash tool does not run unsandboxed (see zwarm sandbox check)")
    roots = allowed_roots(api)
    tree = min((r for r in roots if cwd == r or cwd.is_relative_to(r)), key=lambda r: len(r.parts))
    others = [str(r) for r in roots if not (r == tree or r.is_relative_to(tree))]
    # the git metadata of the roots and of the repository the command runs in (a directory
    # between cwd and its root): read-only
    up = [cwd, *(p for p in cwd.parents if p.is_relative_to(tree))]
    return sbx.confine(
        cwd,
        tree,
        writable=bool(api.setting("orchestrator", "bash_writable")),
        repos=[*roots, *up],
        hidden=[api.state_dir],
        read_only=[*others, *(str(p) for p in api.setting("sandbox", "read_only"))],
        env=allowed_env(api.env.environ),
    )


def sandbox_line(api: Zwarm) -> str:
    """How the bash tool runs, in one line (the run's first note)."""
    from zwarm.sandbox import OFF

    mode = str(api.setting("sandbox", "mode"))
    if mode == OFF:
        return (
            'bash tool: unsandboxed ([sandbox] mode = "off"): its commands can do whatever you '
            "can; only the prompt asks them to read"
        )
    project = "writable" if api.setting("orchestrator", "bash_writable") else "read-only"
    return f"bash tool: in zwarm's sandbox ({mode}): the project {project}, no network"


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
    policy = bash_policy(tb.api, cwd)
    result = run_bash(a["command"], str(cwd), timeout, tb.api.env.environ, policy)
    return {"cwd": str(cwd), "sandboxed": policy is not None, **result}


BASH_TOOL = Tool(
    "bash",
    "Run a shell command (bash) to verify the agents' work yourself: run the tests, read "
    "files, git diff/status, grep. Use it for read-only checks; delegate any change to an "
    "agent. Runs in the working directory (or cwd, which must be inside the allowed roots), "
    "with a time limit and a minimal environment (PATH, HOME, locale; no API keys). A "
    "command leaves nothing running: anything it started in the background is killed when "
    "it returns. Long output is shortened to its head and tail. Where zwarm's sandbox is on "
    "(sandboxed: true in the result) the project is read-only, there is no network and "
    "zwarm's state dir is not visible; otherwise (sandboxed: false) nothing but this "
    "request keeps a command from changing things.",
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
