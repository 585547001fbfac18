"""The built-in orchestrator's ``bash`` tool: run a verification command, bounded.

Owns running one command for the orchestrator LLM (``zwarm orchestrate`` only; MCP clients have
their own shells). Must stay true:
- the command runs as ``["/bin/bash", "-c", command]`` (never ``shell=True``), in a directory
  confined by ``zwarm.tools.confine_cwd`` (default: where zwarm runs), with stdin closed, in
  its own process group that is killed whole on timeout and when the command returns;
- the orchestrator's API key variable is removed from the command's environment;
- the output reaching the LLM is bounded (head and tail kept, the cut said); the full output is
  spooled to an anonymous temporary file, never held in memory;
- this is a working-directory and time confinement, not a sandbox: the system prompt asks for
  read-only commands, and nothing here can enforce that.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from typing import IO, Any

from zwarm.tools import Result, Tool, Toolbox, object_schema

OUTPUT_HEAD = 6000
OUTPUT_TAIL = 4000


def run_bash(command: str, cwd: str, timeout: float, env: dict[str, str]) -> dict[str, Any]:
    """Run ``command`` with bash; its exit code, bounded output, and whether it timed out."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            ["/bin/bash", "-c", command],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        timed_out = False
        code: int | None = None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also on Ctrl-C: nothing the command started outlives it
            _kill_group(proc.pid)
            proc.wait()
        text, cut = _read_bounded(out)
    result: dict[str, Any] = {
        "exit_code": code,
        "timed_out": timed_out,
        "duration_s": round(time.monotonic() - started, 2),
        "output": text,
    }
    if cut:
        result["output_cut_bytes"] = cut
    if timed_out:
        result["note"] = f"killed after {timeout:g} s"
    return result


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _read_bounded(f: IO[bytes]) -> tuple[str, int]:
    size = f.seek(0, os.SEEK_END)
    f.seek(0)
    if size <= OUTPUT_HEAD + OUTPUT_TAIL:
        return f.read().decode("utf-8", "replace"), 0
    head = f.read(OUTPUT_HEAD)
    f.seek(size - OUTPUT_TAIL)
    tail = f.read()
    cut = size - OUTPUT_HEAD - OUTPUT_TAIL
    text = (
        head.decode("utf-8", "replace")
        + f"\n[... {cut} bytes of output cut ...]\n"
        + tail.decode("utf-8", "replace")
    )
    return text, cut


def _bash(tb: Toolbox, a: dict[str, Any]) -> Result:
    cwd = tb.confine(a.get("cwd"))
    cfg = tb.api.config.table("orchestrator")
    cap = float(cfg["bash_timeout_s"]) or 60.0
    timeout = min(float(a.get("timeout_s", cap)), cap)
    env = dict(tb.api.env.environ)
    env.pop(cfg["api_key_env"], None)
    env.pop("ZWARM_ORCH_API_KEY", None)
    return {"cwd": str(cwd), **run_bash(a["command"], str(cwd), timeout, env)}


BASH_TOOL = Tool(
    "bash",
    "Run a shell command (bash) to verify the agents' work yourself: run the tests, read "
    "files, git diff/status, grep. Use it for read-only checks; delegate any change to an "
    "agent. Runs in the working directory (or cwd, which must be inside the allowed roots), "
    "with a time limit; long output is shortened to its head and tail.",
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
