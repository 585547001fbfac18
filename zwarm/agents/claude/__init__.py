"""The Claude Code agent: ``claude -p --output-format stream-json`` argv, config table, events.

Owns everything Claude-specific but the event parsing (``zwarm.agents.claude.events``,
imported only when a log is read). Must stay true: the prompt is never in argv (claude reads it
from stdin), so variadic flags in ``extra_args`` cannot swallow it; permissions default to
``--permission-mode acceptEdits`` and ``--dangerously-skip-permissions`` appears only when the
session is explicitly dangerous; ``total_cost_usd`` is cumulative over a resumed session while
``usage`` covers one run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from zwarm.agents.base import Agent, AgentOptions, ConformanceSamples, Setting, UsageFeed
from zwarm.model import TurnOutcome, Usage
from zwarm.model.steps import Step
from zwarm.rules import Rule

# what the CLI reaches (zwarm's sandbox allows these): the Messages API, and the OAuth token
# endpoint a Claude subscription login refreshes at (platform.claude.com/v1/oauth/token)
API_HOSTS = ("api.anthropic.com:443", "platform.claude.com:443")
PERMISSION_MODES = ("acceptEdits", "bypassPermissions", "default", "dontAsk", "plan", "auto")
# the same, tightest first, as a headless run (-p) meets them: plan reads only; dontAsk and
# default run reads and pre-approved tools (a prompt is a denial); acceptEdits adds edits; auto
# lets a classifier approve the rest; bypassPermissions asks nothing (Claude Code's
# permission-modes docs)
PERMISSION_ORDER = ("plan", "dontAsk", "default", "acceptEdits", "auto", "bypassPermissions")


def claude_argv(opts: AgentOptions, resume_id: str | None = None) -> list[str]:
    """The argv of one ``claude -p`` turn (the prompt is read from stdin)."""
    argv = [*opts.command, "-p", "--output-format", "stream-json", "--verbose"]
    if opts.model:
        argv += ["--model", opts.model]
    if opts.dangerous:
        argv.append("--dangerously-skip-permissions")
    else:
        argv += ["--permission-mode", opts.settings.get("permission_mode", "acceptEdits")]
    if resume_id:
        argv += ["--resume", resume_id]
    argv += list(opts.extra_args)
    return argv


class ClaudeAgent(Agent):
    name: ClassVar[str] = "claude"
    native_resume: ClassVar[bool] = True
    usage_cumulative_on_resume: ClassVar[bool] = False
    cost_cumulative_on_resume: ClassVar[bool] = True
    reports_cost: ClassVar[bool] = True
    model_pattern: ClassVar[str | None] = (
        r"sonnet|opus|haiku|opusplan|claude-.*|(sonnet|opus|haiku)\[.*\]"
    )
    settings: ClassVar[Mapping[str, Setting]] = {
        "permission_mode": Setting(
            (str,),
            "acceptEdits",
            PERMISSION_MODES,
            "Passed as --permission-mode: acceptEdits, default, plan, dontAsk, auto, ...",
            trust=Rule("at_most", order=PERMISSION_ORDER),  # a limit: only loosening needs trust
        ),
    }

    def build_argv(self, opts: AgentOptions, resume_id: str | None) -> list[str]:
        return claude_argv(opts, resume_id)

    def sandboxed_env(self, env: dict[str, str]) -> dict[str, str]:
        # Claude Code refuses to skip its permission checks as root unless told it runs in a
        # sandbox: zwarm's is one
        return {**env, "IS_SANDBOX": "1"}

    def api_hosts(self, table: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, ...]:
        return API_HOSTS

    def login_paths(self, env: Mapping[str, str]) -> tuple[str, ...]:
        return (env.get("CLAUDE_CONFIG_DIR") or os.path.join(env.get("HOME", "/"), ".claude"),)

    def login_files(self, env: Mapping[str, str]) -> tuple[str, ...]:
        if env.get("CLAUDE_CONFIG_DIR"):  # its .claude.json is in that directory then
            return ()
        return (os.path.join(env.get("HOME", "/"), ".claude.json"),)

    def permissions(self, table: Mapping[str, Any], bypass: bool) -> tuple[str, bool]:
        if bypass:
            return "--dangerously-skip-permissions", True
        mode = table["permission_mode"]
        return f"--permission-mode {mode}", mode == "bypassPermissions"

    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        from zwarm.agents.claude import events

        return events.iter_steps(lines)

    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        from zwarm.agents.claude import events

        return events.scan_outcome(lines)

    def live_usage(self) -> UsageFeed | None:
        """Claude reports each model call's usage as it streams."""
        from zwarm.agents.claude import events

        return events.LiveUsage()

    def usage_so_far(self, lines: Iterable[bytes]) -> Usage | None:
        from zwarm.agents.claude import events

        return events.usage_so_far(lines)

    def conformance_samples(self) -> ConformanceSamples:
        samples = Path(__file__).resolve().parent / "samples"  # resolved only here

        def read(name: str) -> bytes:
            return (samples / f"{name}.jsonl").read_bytes()

        return ConformanceSamples(
            completed=read("completed"),
            failed=read("failed"),
            failed_error=(
                "API Error: 500 fake internal server error. This is a server-side issue, "
                "usually temporary — try again in a moment. If it persists, check your "
                "inference gateway (127.0.0.1:41757)."
            ),
            models=("sonnet", "opus", "haiku", "claude-sonnet-4-5", "sonnet[1m]"),
            resumed=(read("resume_1"), read("resume_2")),
            resumed_usage=Usage(550, 250, 8, 0),  # usage is per run
            resumed_cost=0.00141,  # reported 0.00389 after 0.00248: cost is cumulative
        )
