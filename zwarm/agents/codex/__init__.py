"""The Codex CLI agent: ``codex exec --json`` argv, config table, prices, and its events.

Owns everything Codex-specific but the event parsing (``zwarm.agents.codex.events``, imported
only when a log is read). Must stay true: the prompt is never in argv (codex reads it from stdin
via the trailing ``-``); ``-c`` values are TOML-encoded (tomli-w) with tables flattened to
dotted keys; the sandbox defaults to ``workspace-write`` and the bypass flag appears only when
the session is explicitly dangerous; usage reported on a resumed thread is cumulative; codex
reports no cost, so it is estimated from ``DEFAULT_PRICES`` or ``[codex.prices]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from zwarm.agents.base import Agent, AgentOptions, ConformanceSamples, Price, Setting
from zwarm.model import TurnOutcome, Usage
from zwarm.model.steps import Step

if TYPE_CHECKING:
    from zwarm.engine.manager import BaseSessionManager

SANDBOXES = ("read-only", "workspace-write", "danger-full-access")

# USD per 1M tokens. Shipped defaults (public list prices); override under [codex.prices.MODEL].
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "gpt-5": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gpt-5-codex": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gpt-5-mini": {"input": 0.25, "cached_input": 0.025, "output": 2.0},
    "gpt-5-nano": {"input": 0.05, "cached_input": 0.005, "output": 0.4},
    "gpt-5.1": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gpt-5.1-codex": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gpt-5.1-codex-mini": {"input": 0.25, "cached_input": 0.025, "output": 2.0},
    "gpt-4.1": {"input": 2.0, "cached_input": 0.5, "output": 8.0},
    "o3": {"input": 2.0, "cached_input": 0.5, "output": 8.0},
    "o4-mini": {"input": 1.1, "cached_input": 0.275, "output": 4.4},
}

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")  # \Z: "$" allows a trailing newline
_SAMPLES = Path(__file__).resolve().parent / "samples"


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (what ``codex -c key=value`` expects), via tomli-w."""
    import tomli_w

    text = tomli_w.dumps({"v": value})
    if not text.startswith("v = "):  # pragma: no cover - tables are flattened before this
        raise ValueError(f"cannot encode {value!r} as an inline TOML value")
    return text[4:].rstrip("\n")


def _key(part: str) -> str:
    return part if _BARE_KEY.match(part) else toml_value(part)


def flatten_config(config: Iterable[tuple[str, Any]], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested tables become dotted keys: {"a": {"b": 1}} -> [("a.b", 1)]."""
    out: list[tuple[str, Any]] = []
    for k, v in config:
        key = f"{prefix}.{_key(k)}" if prefix else _key(k)
        if isinstance(v, dict):
            out += flatten_config(v.items(), key)
        else:
            out.append((key, v))
    return out


def codex_argv(opts: AgentOptions, resume_id: str | None = None) -> list[str]:
    """The argv of one ``codex exec`` turn; the trailing ``-`` reads the prompt from stdin."""
    argv = [*opts.command, "exec", "--json", "--skip-git-repo-check", "-C", opts.cwd]
    if opts.model:
        argv += ["--model", opts.model]
    for key, value in flatten_config(dict(opts.settings.get("config", {})).items()):
        argv += ["-c", f"{key}={toml_value(value)}"]
    if opts.dangerous:
        argv.append("--dangerously-bypass-approvals-and-sandbox")
    else:
        argv += ["-s", opts.settings.get("sandbox", "workspace-write")]
    argv += list(opts.extra_args)
    if resume_id:
        argv += ["resume", resume_id]
    argv.append("-")
    return argv


class CodexAgent(Agent):
    name: ClassVar[str] = "codex"
    native_resume: ClassVar[bool] = True
    usage_cumulative_on_resume: ClassVar[bool] = True
    reports_cost: ClassVar[bool] = False
    model_pattern: ClassVar[str | None] = r"gpt-.*|o\d.*|codex-.*|.*-codex.*|codex"
    settings: ClassVar[Mapping[str, Setting]] = {
        "sandbox": Setting((str,), "workspace-write", SANDBOXES),
        "config": Setting((dict,), {}),  # -c overrides
    }
    default_prices: ClassVar[Mapping[str, Price]] = DEFAULT_PRICES

    def build_argv(self, opts: AgentOptions, resume_id: str | None) -> list[str]:
        return codex_argv(opts, resume_id)

    def permissions(self, table: Mapping[str, Any], bypass: bool) -> tuple[str, bool]:
        if bypass:
            return "--dangerously-bypass-approvals-and-sandbox", True
        sandbox = table["sandbox"]
        return f"-s {sandbox}", sandbox == "danger-full-access"

    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        from zwarm.agents.codex import events

        return events.iter_steps(lines)

    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        from zwarm.agents.codex import events

        return events.scan_outcome(lines)

    def manager_class(self) -> type[BaseSessionManager]:
        from zwarm.agents.codex.manager import CodexSessionManager

        return CodexSessionManager

    def conformance_samples(self) -> ConformanceSamples:
        def read(name: str) -> bytes:
            return (_SAMPLES / f"{name}.jsonl").read_bytes()

        return ConformanceSamples(
            completed=read("completed"),
            failed=read("failed"),
            failed_error=(
                "We’re currently experiencing high demand, which may cause temporary errors."
            ),
            models=("gpt-5", "gpt-5.1-codex-max", "o3", "o4-mini", "codex-mini-latest"),
            resumed=(read("resume_1"), read("resume_2")),
            resumed_usage=Usage(300, 250, 8, 0),  # reported 760/450/38 after 460/200/30
        )
