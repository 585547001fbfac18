"""The agents' outcome scans against a bare ``json.loads`` loop over the same lines.

Run: ``.venv/bin/python bench/scan.py``. For codex and claude, a turn of n typical lines
(command started + completed; tool_use + tool_result), in the CLI's own compact layout and
re-encoded with spaces (the slower, layout-independent path), and through ``Agent.outcome``
reading a file (the bounded line reader the engine uses). Prints best-of-``repeat`` times.
Information only: nothing here is asserted.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zwarm import agents

OUTPUT = "........................ [100%]\n" * 8


def codex_events(n: int) -> list[dict[str, Any]]:
    item = {
        "id": "item_1",
        "type": "command_execution",
        "command": "/bin/bash -lc 'pytest -q tests/unit'",
        "aggregated_output": OUTPUT,
        "exit_code": 0,
        "status": "completed",
    }
    started = {**item, "aggregated_output": "", "exit_code": None, "status": "in_progress"}
    return [
        {"type": kind, "item": body}
        for _ in range(n // 2)
        for kind, body in (("item.started", started), ("item.completed", item))
    ]


def claude_events(n: int) -> list[dict[str, Any]]:
    session = {"session_id": "03f9693c-9b91-442a-8d50-c2baf6bdb463", "parent_tool_use_id": None}
    block = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "pytest"}}
    use = {
        "type": "assistant",
        "message": {"id": "msg_0", "role": "assistant", "model": "m", "content": [block]},
        **session,
    }
    res = {"tool_use_id": "toolu_1", "type": "tool_result", "content": OUTPUT, "is_error": False}
    result = {
        "type": "user",
        "message": {"role": "user", "content": [res]},
        **session,
        "tool_use_result": {"stdout": OUTPUT, "stderr": "", "interrupted": False},
    }
    return [use, result] * (n // 2)


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run(name: str, events: list[dict[str, Any]], repeat: int) -> None:
    agent = agents.get(name)
    for layout, seps in (("compact", (",", ":")), ("spaced", (", ", ": "))):
        lines = [
            json.dumps(e, separators=seps, ensure_ascii=False).encode() + b"\n" for e in events
        ]
        floor = best(lambda lines=lines: [json.loads(x) for x in lines], repeat)
        scan = best(lambda lines=lines: agent.scan_outcome(lines), repeat)
        with tempfile.TemporaryFile() as f:
            f.writelines(lines)

            def from_file(f: Any = f) -> object:
                f.seek(0)
                return agent.outcome(f)

            whole = best(from_file, repeat)
        size = sum(map(len, lines)) // len(lines)
        print(
            f"{name:6} {layout:7} {len(lines)} lines, {size} B avg: json.loads "
            f"{floor * 1e3:6.1f} ms  scan_outcome {scan * 1e3:6.1f} ms ({scan / floor:.3f}x)  "
            f"outcome(file) {whole * 1e3:6.1f} ms ({whole / floor:.3f}x)"
        )


def main(n: int = 20_000, repeat: int = 15) -> None:
    run("codex", codex_events(n), repeat)
    run("claude", claude_events(n), repeat)


if __name__ == "__main__":
    main()
