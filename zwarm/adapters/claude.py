"""The Claude Code adapter: ``claude -p --output-format stream-json`` argv and its events.

Owns everything Claude-specific. Must stay true: the prompt is never in argv (claude reads it
from stdin), so variadic flags in ``extra_args`` cannot swallow it; permissions default to
``--permission-mode acceptEdits`` and ``--dangerously-skip-permissions`` appears only when the
session is explicitly dangerous; ``total_cost_usd`` is cumulative over a resumed session while
``usage`` covers one run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import ClassVar

from zwarm.adapters import claude_events
from zwarm.adapters.base import AgentOptions, BaseSessionManager
from zwarm.models import TurnOutcome
from zwarm.steps import Step


def claude_argv(opts: AgentOptions, resume_id: str | None = None) -> list[str]:
    argv = [*opts.command, "-p", "--output-format", "stream-json", "--verbose"]
    if opts.model:
        argv += ["--model", opts.model]
    if opts.dangerous:
        argv.append("--dangerously-skip-permissions")
    else:
        argv += ["--permission-mode", opts.permission_mode]
    if resume_id:
        argv += ["--resume", resume_id]
    argv += list(opts.extra_args)
    return argv


class ClaudeSessionManager(BaseSessionManager):
    name: ClassVar[str] = "claude"
    usage_cumulative_on_resume: ClassVar[bool] = False
    cost_cumulative_on_resume: ClassVar[bool] = True
    reports_cost: ClassVar[bool] = True

    @staticmethod
    def build_argv(opts: AgentOptions, resume_id: str | None = None) -> list[str]:
        return claude_argv(opts, resume_id)

    def permissions(self, bypass: bool) -> tuple[str, bool]:
        if bypass:
            return "--dangerously-skip-permissions", True
        mode = self.config.get("claude", "permission_mode")
        return f"--permission-mode {mode}", mode == "bypassPermissions"

    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        return claude_events.iter_steps(lines)

    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        return claude_events.scan_outcome(lines)
