"""Record real CLI output against the fake LLM servers, as test fixtures.

Owns the fixture files in ``tests/fixtures/recorded/``: runs the pinned ``codex``
and ``claude`` binaries (``.ci/install-agents``) against ``tests/fakes/llm.py``
for a fixed set of scenarios and writes each run's stdout JSONL to
``<adapter>_<scenario>.jsonl``, plus ``index.json`` with every run's exit code
and the CLI versions. Re-run it whenever the pinned CLIs change::

    .venv/bin/python tests/record_fixtures.py [--out DIR] [--adapter codex|claude]

Everything runs on 127.0.0.1 in temporary directories; nothing else is touched.
Token usage per reply is the same for both CLIs, so the recorded totals match:
the tool-call scenarios report input 460 / cached 200 / output 30.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.llm import (  # noqa: E402
    CliRun,
    FakeMessagesServer,
    FakeResponsesServer,
    Reply,
    Usage,
    binary,
    broken_stream,
    claude_argv,
    claude_setup,
    codex_argv,
    codex_setup,
    http_error,
    reasoning,
    run_cli,
    shell,
    text,
    write_file,
)

DEFAULT_OUT = ROOT / "tests" / "fixtures" / "recorded"
ADAPTERS = ("codex", "claude")
TIMEOUT = 120.0


@dataclass(frozen=True)
class Scenario:
    """Replies (built for a workdir) and one prompt per turn; >1 prompt = native resume."""

    name: str
    script: Callable[[Path], list[Reply]]
    prompts: tuple[str, ...]
    claude_args: tuple[str, ...] = ()
    adapters: tuple[str, ...] = ADAPTERS


def _tool_turn(wd: Path) -> list[Reply]:
    return [
        Reply(
            [
                reasoning("I should create the file with a shell command."),
                text("I'll create out.txt now."),
                shell("echo hello > out.txt && cat out.txt"),
            ],
            Usage(200, 0, 20),
        ),
        Reply([text("Done: wrote hello to out.txt.")], Usage(260, 200, 10)),
    ]


SCENARIOS = (
    Scenario(
        "simple",
        lambda wd: [Reply([text("Hi there! This is the fake server.")], Usage(100, 40, 9, 0, 10))],
        ("Say hi.",),
    ),
    Scenario("toolcall", _tool_turn, ("Create out.txt containing hello.",)),
    Scenario(
        "shell_fail",
        lambda wd: [
            Reply([shell("echo oops >&2; exit 3")], Usage(200, 0, 20)),
            Reply([text("The command failed with exit code 3.")], Usage(260, 200, 10)),
        ],
        ("Run a failing command.",),
    ),
    Scenario(
        "file_write",
        lambda wd: [
            Reply([write_file(str(wd / "hello.txt"), "hello\n")], Usage(200, 0, 20)),
            Reply([text("Wrote hello.txt.")], Usage(260, 200, 10)),
        ],
        ("Write hello.txt containing hello.",),
    ),
    Scenario(
        "error_500",
        lambda wd: [http_error(500, "fake internal server error")],
        ("Say hi.",),
    ),
    Scenario(
        "max_turns",
        _tool_turn,
        ("Create out.txt containing hello.",),
        claude_args=("--max-turns", "1"),
        adapters=("claude",),  # codex exec has no turn limit
    ),
    Scenario(
        "broken_stream",
        # claude retries a broken stream once without streaming: break that one too
        lambda wd: [broken_stream(text("Partial answer")), broken_stream()],
        ("Say hi.",),
    ),
    Scenario(
        "resume",
        lambda wd: [
            *_tool_turn(wd),
            Reply([text("Follow-up answer: the file contains hello.")], Usage(300, 250, 8)),
        ],
        ("Create out.txt containing hello.", "What does out.txt contain?"),
    ),
)


def _session_id(adapter: str, run: CliRun) -> str:
    key = "thread_id" if adapter == "codex" else "session_id"
    for event in run.events:
        if key in event:
            return str(event[key])
    raise RuntimeError(f"{adapter}: no {key} in the first turn's output:\n{run.stderr[-2000:]}")


def record(adapter: str, exe: str, scenario: Scenario) -> list[CliRun]:
    """Run every turn of ``scenario`` with one fake server and isolated dirs; return the runs."""
    with tempfile.TemporaryDirectory(prefix=f"zwarm-rec-{adapter}-") as tmp_name:
        tmp = Path(tmp_name)
        workdir = tmp / "work"
        workdir.mkdir()
        script = scenario.script(workdir)
        if adapter == "codex":
            with FakeResponsesServer(script) as srv:
                env, overrides = codex_setup(srv.base_url, tmp)

                def argv(resume: str | None) -> list[str]:
                    return codex_argv(exe, workdir, overrides, resume=resume)

                return _turns(adapter, scenario, argv, env, workdir)
        with FakeMessagesServer(script) as claude_srv:
            env = claude_setup(claude_srv.url, tmp)

            def argv(resume: str | None) -> list[str]:
                return claude_argv(exe, *scenario.claude_args, resume=resume)

            return _turns(adapter, scenario, argv, env, workdir)


def _turns(
    adapter: str,
    scenario: Scenario,
    argv: Callable[[str | None], list[str]],
    env: dict[str, str],
    workdir: Path,
) -> list[CliRun]:
    runs: list[CliRun] = []
    resume: str | None = None
    for prompt in scenario.prompts:
        run = run_cli(argv(resume), env, workdir, prompt, TIMEOUT)
        runs.append(run)
        resume = resume or _session_id(adapter, run)
    return runs


def fixture_names(adapter: str, scenario: Scenario) -> list[str]:
    if len(scenario.prompts) == 1:
        return [f"{adapter}_{scenario.name}.jsonl"]
    return [f"{adapter}_{scenario.name}_turn{i}.jsonl" for i in range(1, len(scenario.prompts) + 1)]


def cli_version(exe: str) -> str:
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    return proc.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--adapter", choices=ADAPTERS, action="append", help="default: both")
    args = parser.parse_args(argv)
    adapters = args.adapter or list(ADAPTERS)
    exes = {a: binary(a) for a in adapters}
    missing = [a for a, exe in exes.items() if exe is None]
    if missing:
        print(f"missing binaries: {', '.join(missing)} (run .ci/install-agents)", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    index_path = args.out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    index["generated_by"] = "tests/record_fixtures.py"
    versions = index.setdefault("cli_versions", {})
    fixtures = index.setdefault("fixtures", {})
    for adapter in adapters:
        exe = exes[adapter]
        assert exe is not None
        versions[adapter] = cli_version(exe)
        for scenario in SCENARIOS:
            if adapter not in scenario.adapters:
                continue
            runs = record(adapter, exe, scenario)
            for name, prompt, run in zip(
                fixture_names(adapter, scenario), scenario.prompts, runs, strict=True
            ):
                (args.out / name).write_text(run.stdout)
                fixtures[name] = {
                    "adapter": adapter,
                    "scenario": scenario.name,
                    "prompt": prompt,
                    "exit_code": run.returncode,
                    "events": len(run.events),
                }
                print(f"{name:40} rc={run.returncode} events={len(run.events)}")
    index["fixtures"] = dict(sorted(fixtures.items()))
    index_path.write_text(json.dumps(index, indent=2, sort_keys=False) + "\n")
    print(f"wrote {len(fixtures)} fixtures + index.json to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
