"""A built-in scripted coding agent for ``zwarm demo``: speaks ``codex exec --json``.

It stands in for the Codex CLI on a machine with no agent and no API key: it reads the prompt
on stdin, really runs a shell command and really writes a file in its working directory, and
prints the events Codex would print. It is a fake agent binary (like the test fakes), so it may
know Codex's output format; zwarm itself still reads that output only through its adapter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path


def _emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")  # compact, as codex
    sys.stdout.flush()


def _item(n: int, kind: str, **fields: object) -> dict[str, object]:
    return {"type": "item.completed", "item": {"id": f"item_{n}", "type": kind, **fields}}


def main(argv: list[str]) -> int:
    prompt = sys.stdin.read()
    thread = argv[argv.index("resume") + 1] if "resume" in argv else str(uuid.uuid4())
    cwd = Path(argv[argv.index("-C") + 1]) if "-C" in argv else Path.cwd()
    followup = "## New message" in prompt
    ask = prompt.rsplit("## New message", 1)[-1].strip() if followup else prompt.strip()
    _emit({"type": "thread.started", "thread_id": thread})
    _emit({"type": "turn.started"})
    _emit(_item(0, "reasoning", text=f"The user asks: {ask[:80]!r}. I'll look around first."))
    time.sleep(0.3)
    cmd = "ls -1"
    _emit(
        {
            "type": "item.started",
            "item": {
                "id": "item_1",
                "type": "command_execution",
                "command": cmd,
                "aggregated_output": "",
                "exit_code": None,
                "status": "in_progress",
            },
        }
    )
    res = subprocess.run(["/bin/sh", "-c", cmd], cwd=cwd, capture_output=True, text=True)
    _emit(
        _item(
            1,
            "command_execution",
            command=cmd,
            aggregated_output=res.stdout,
            exit_code=res.returncode,
            status="completed",
        )
    )
    name = "NOTES-2.md" if followup else "NOTES.md"
    kind = "update" if (cwd / name).exists() else "add"
    (cwd / name).write_text(f"# Demo agent notes\n\nTask: {ask}\n")
    _emit(_item(2, "file_change", changes=[{"path": name, "kind": kind}], status="completed"))
    time.sleep(0.3)
    verb = "Followed up on" if followup else "Handled"
    _emit(_item(3, "agent_message", text=f"{verb}: {ask[:120]}. Wrote {name}."))
    tokens_in = max(1, len(prompt) // 4)
    _emit(
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": tokens_in,
                "cached_input_tokens": 0,
                "output_tokens": 42,
                "reasoning_output_tokens": 8,
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
