"""An example zwarm agent plugin: the toy agent (``zwarm_toy_agent.program``) as a zwarm Agent.

Everything zwarm needs to run an agent CLI as background sessions is here: its name, the model
names that imply it, its config table (``[toy]``), its argv, its permission flags, how to read
its output (steps and outcome), and sample output for zwarm's conformance kit. It is found by
zwarm through the ``zwarm.agents`` entry point in this package's ``pyproject.toml``.

The toy parser decodes every line (``scan_outcome`` is a full parse): the simplest way to give
the same answer whatever the JSON spacing. Lines are decoded with ``zwarm.agents.jsonl``, so
bad bytes never raise and every string is valid Unicode.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from zwarm.agents import jsonl
from zwarm.agents.base import Agent, AgentOptions, ConformanceSamples, Price, Setting
from zwarm.model import Status, TurnOutcome, Usage
from zwarm.model.steps import Step

_SAMPLES = Path(__file__).resolve().parent / "samples"


class ToyAgent(Agent):
    name: ClassVar[str] = "toy"
    model_pattern: ClassVar[str | None] = r"toy-.*"
    settings: ClassVar[Mapping[str, Setting]] = {
        # The package's console script (found on PATH, like any agent CLI).
        "command": Setting((str, list), ["zwarm-toy-agent"]),
        "mode": Setting((str,), "safe", ("safe", "yolo"), "--mode for every turn: safe or yolo."),
    }
    default_prices: ClassVar[Mapping[str, Price]] = {
        "toy-1": {"input": 1.0, "cached_input": 0.1, "output": 2.0},
    }

    def build_argv(self, opts: AgentOptions, resume_id: str | None) -> list[str]:
        argv = [*opts.command]
        if opts.model:
            argv += ["--model", opts.model]
        argv += ["--mode", "yolo" if opts.dangerous else opts.settings.get("mode", "safe")]
        return argv + list(opts.extra_args)  # no prompt: the toy reads it on stdin

    def permissions(self, table: Mapping[str, Any], bypass: bool) -> tuple[str, bool]:
        mode = "yolo" if bypass else table["mode"]
        return f"--mode {mode}", mode == "yolo"

    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        for line in lines:
            event = jsonl.decode(line) or {}
            kind = event.get("event")
            if kind == "think":
                yield {"kind": "reasoning", "text": jsonl.str_(event.get("text"))}
            elif kind == "say":
                yield {"kind": "message", "text": jsonl.str_(event.get("text"))}
            elif kind == "shell":
                yield _command(event)
            elif kind == "oops":
                yield {"kind": "error", "message": _oops(event), "fatal": True}

    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        outcome = TurnOutcome()
        for line in lines:
            event = jsonl.decode(line) or {}
            kind = event.get("event")
            if kind == "hello":
                outcome.model = jsonl.str_(event.get("model")) or None
            elif kind == "say":
                outcome.final_message = jsonl.str_(event.get("text"))
            elif kind == "bye":
                usage = jsonl.dict_(event.get("usage"))
                outcome.status = Status.COMPLETED
                outcome.usage = Usage(
                    jsonl.count(usage.get("in")), 0, jsonl.count(usage.get("out"))
                )
            elif kind == "oops":
                outcome.status, outcome.error = Status.FAILED, _oops(event)
        return outcome

    def conformance_samples(self) -> ConformanceSamples:
        return ConformanceSamples(
            completed=(_SAMPLES / "completed.jsonl").read_bytes(),
            failed=(_SAMPLES / "failed.jsonl").read_bytes(),
            failed_error="toy agent refused: the prompt asks it to fail",
            models=("toy-1", "toy-large"),
        )


def _command(event: dict[str, Any]) -> Step:
    code = jsonl.int_(event.get("exit"))
    return {
        "kind": "command",
        "command": jsonl.str_(event.get("command")),
        "exit_code": code,
        "output": jsonl.str_(event.get("output")),
        "status": "completed" if code == 0 else "failed",
    }


def _oops(event: dict[str, Any]) -> str:
    return jsonl.str_(event.get("message")) or "the toy agent failed"
