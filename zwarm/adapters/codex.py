"""The Codex CLI adapter: ``codex exec --json`` argv and its event stream.

Owns everything Codex-specific. Must stay true: the prompt is never in argv (it is read from
stdin via the trailing ``-``); ``-c`` values are TOML-encoded (tomli-w) with tables flattened
to dotted keys; the sandbox defaults to ``workspace-write`` and the bypass flag appears only
when the session is explicitly dangerous; usage reported on a resumed thread is cumulative.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from zwarm.adapters import codex_events
from zwarm.adapters.base import AgentOptions, BaseSessionManager
from zwarm.models import TurnOutcome
from zwarm.steps import Step

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")  # \Z: "$" allows a trailing newline


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
    argv = [*opts.command, "exec", "--json", "--skip-git-repo-check", "-C", opts.cwd]
    if opts.model:
        argv += ["--model", opts.model]
    for key, value in flatten_config(opts.config):
        argv += ["-c", f"{key}={toml_value(value)}"]
    if opts.dangerous:
        argv.append("--dangerously-bypass-approvals-and-sandbox")
    else:
        argv += ["-s", opts.sandbox]
    argv += list(opts.extra_args)
    if resume_id:
        argv += ["resume", resume_id]
    argv.append("-")
    return argv


class CodexSessionManager(BaseSessionManager):
    name: ClassVar[str] = "codex"
    usage_cumulative_on_resume: ClassVar[bool] = True
    reports_cost: ClassVar[bool] = False

    @staticmethod
    def build_argv(opts: AgentOptions, resume_id: str | None = None) -> list[str]:
        return codex_argv(opts, resume_id)

    def permissions(self, bypass: bool) -> tuple[str, bool]:
        if bypass:
            return "--dangerously-bypass-approvals-and-sandbox", True
        sandbox = self.config.get("codex", "sandbox")
        return f"-s {sandbox}", sandbox == "danger-full-access"

    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        return codex_events.iter_steps(lines)

    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        return codex_events.scan_outcome(lines)
