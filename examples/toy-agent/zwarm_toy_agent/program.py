"""The toy agent CLI: reads a prompt on stdin, writes JSON events on stdout, one a line.

Run as ``zwarm-toy-agent [--model M] [--mode safe|yolo]`` (or ``python -m
zwarm_toy_agent.program``). It does no real work: it "thinks", pretends to run ``wc -c`` on
the prompt, answers with the prompt's first line, and reports word counts as token usage. A
prompt containing ``FAIL`` makes it report an error and exit 1, so both endings can be tried.
Events (key ``event``, not ``type``):

    {"event": "hello", "session": ..., "model": ..., "mode": ..., "argv": [...]}
    {"event": "think", "text": ...}
    {"event": "shell", "command": ..., "exit": 0, "output": ...}
    {"event": "say", "text": ...}
    {"event": "bye", "usage": {"in": N, "out": M}}       the run completed
    {"event": "oops", "message": ...}                    the run failed (exit 1)
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid


def emit(**event: object) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toy-agent")
    parser.add_argument("--model", default="toy-1")
    parser.add_argument("--mode", choices=("safe", "yolo"), default="safe")
    args = parser.parse_args(argv)
    prompt = sys.stdin.buffer.read().decode("utf-8", "replace")
    emit(
        event="hello",
        session=f"toy-{uuid.uuid4().hex[:12]}",
        model=args.model,
        mode=args.mode,
        argv=sys.argv,
    )
    emit(event="think", text=f"The prompt is {len(prompt)} characters long.")
    if "FAIL" in prompt:
        emit(event="oops", message="toy agent refused: the prompt asks it to fail")
        return 1
    emit(event="shell", command="wc -c", exit=0, output=f"{len(prompt.encode())}\n")
    first = prompt.strip().splitlines()[0][:200] if prompt.strip() else ""
    answer = f"You said: {first}"
    emit(event="say", text=answer)
    emit(event="bye", usage={"in": len(prompt.split()), "out": len(answer.split())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
