"""The Codex CLI agent: ``codex exec --json`` argv, config table, prices, and its events.

Owns everything Codex-specific but the event parsing (``zwarm.agents.codex.events``, imported
only when a log is read). Must stay true: the prompt is never in argv (codex reads it from stdin
via the trailing ``-``); ``-c`` values are TOML-encoded (as tomli-w writes them) with tables
flattened to dotted keys; the sandbox defaults to ``workspace-write`` and the bypass flag
appears only when the session is explicitly dangerous; usage reported on a resumed thread is
cumulative; codex reports no cost, so it is estimated from ``DEFAULT_PRICES`` or
``[codex.prices]``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from zwarm.agents.base import (
    Agent,
    AgentOptions,
    ConformanceSamples,
    Price,
    Setting,
    url_endpoint,
)
from zwarm.model import TurnOutcome, Usage
from zwarm.model.steps import Step
from zwarm.rules import Rule

SANDBOXES = ("read-only", "workspace-write", "danger-full-access")  # tightest first
# what the CLI reaches (zwarm's sandbox allows these): the API (an API key); ChatGPT's backend
# (/backend-api/codex) and its token refresh (auth.openai.com/oauth/token) for a ChatGPT login
API_HOSTS = ("api.openai.com:443", "chatgpt.com:443", "auth.openai.com:443")

# USD per 1M tokens. Shipped defaults (public list prices); override under [codex.prices.MODEL].
# Standard tier, requests up to 272K input tokens (longer ones and the Fast tier cost more).
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    # The models the pinned codex (0.169.0) offers: `codex debug models`, visibility "list".
    # gpt-6-astra: OpenAI's price table as quoted by apidog.com/blog/what-is-gpt-6-1-terra
    # (Oct 2026): $10 / $1.00 cached / $50.
    "gpt-6-astra": {"input": 10.0, "cached_input": 1.0, "output": 50.0},
    # gpt-6.1-sol: docs.litellm.ai/blog/gpt_6_1_sol and the release notes citing
    # developers.openai.com/api/docs/models/gpt-6.1-sol (Sep 29 2026): $2 / $0.10 / $10.
    "gpt-6.1-sol": {"input": 2.0, "cached_input": 0.1, "output": 10.0},
    # gpt-6.1-terra: docs.litellm.ai/blog/gpt-6-1-terra (Oct 26 2026): $1 / $0.05 / $5.
    "gpt-6.1-terra": {"input": 1.0, "cached_input": 0.05, "output": 5.0},
    # gpt-6-sol, gpt-6-luna: OpenAI's Sep 22 2026 pricing as quoted in codexometer v0.18.4's
    # release notes (github.com/merefield/codexometer): $2 / $0.20 / $10, $0.10 / $0.01 / $0.50.
    "gpt-6-sol": {"input": 2.0, "cached_input": 0.2, "output": 10.0},
    "gpt-6-luna": {"input": 0.1, "cached_input": 0.01, "output": 0.5},
    # gpt-5.6-*: OpenAI's GPT-5.6 preview (Jun 26 2026) as quoted by apimaster.ai and
    # calcaas.com: Sol $5 / $30, Luna $1 / $6, cached input at the stated 90% discount.
    "gpt-5.6-sol": {"input": 5.0, "cached_input": 0.5, "output": 30.0},
    "gpt-5.6-luna": {"input": 1.0, "cached_input": 0.1, "output": 6.0},
    # gpt-5.6-terra: $2.50 / $15 at the preview; $2 / $12 since (docs.litellm.ai/blog/
    # gpt-6-1-terra, Oct 2026, the later figure used), cached input at the 90% discount.
    "gpt-5.6-terra": {"input": 2.0, "cached_input": 0.2, "output": 12.0},
    # gpt-5.5: $5 / $30 on developers.openai.com/pricing as re-read by benchr.org/pricing/
    # gpt-5-6 (Jun 28 2026); cached input at the 90% discount.
    "gpt-5.5": {"input": 5.0, "cached_input": 0.5, "output": 30.0},
    # Hidden models it also knows (gpt-daybreak-blue-latest, gpt-daybreak-red-latest,
    # codex-auto-review) have no public price: they stay unpriced ("?"), never guessed.
    # Earlier models, still accepted by the API: OpenAI's list prices of their time.
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

# a TOML bare key: one or more of these (no regex: compiling one costs more than a turn uses)
_BARE_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (what ``codex -c key=value`` expects), via tomli-w; a bool,
    an int or a string that tomli-w writes as it is (no quote, backslash or control
    character to escape) is written here, without importing it, exactly as tomli-w would."""
    kind = type(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is str and '"' not in value and "\\" not in value and value.isprintable():
        return f'"{value}"'
    import tomli_w

    text = tomli_w.dumps({"v": value})
    if not text.startswith("v = "):  # pragma: no cover - tables are flattened before this
        raise ValueError(f"cannot encode {value!r} as an inline TOML value")
    return text[4:].rstrip("\n")


def _key(part: str) -> str:
    return part if part and _BARE_KEY_CHARS.issuperset(part) else toml_value(part)


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
        "sandbox": Setting(
            (str,),
            "workspace-write",
            SANDBOXES,
            "Sandbox passed as -s: read-only, workspace-write or danger-full-access.",
            trust=Rule("at_most", order=SANDBOXES),  # a limit: only loosening needs trust
        ),
        "config": Setting(
            (dict,),
            {},
            doc="-c key=value overrides, one per key (TOML values; nested tables: dotted keys).",
        ),
    }
    default_prices: ClassVar[Mapping[str, Price]] = DEFAULT_PRICES

    def build_argv(self, opts: AgentOptions, resume_id: str | None) -> list[str]:
        return codex_argv(opts, resume_id)

    def api_hosts(self, table: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, ...]:
        """The OpenAI API (an API key), ChatGPT's backend and its login's token refresh (a
        ChatGPT login), and the ``base_url`` of each provider ``[codex.config]`` declares
        (its ``-c model_providers.NAME.base_url``, and ``openai_base_url``/``chatgpt_base_url``)."""
        config = dict(table.get("config") or {})
        urls = [config.get("openai_base_url"), config.get("chatgpt_base_url")]
        providers = config.get("model_providers")
        if isinstance(providers, Mapping):
            urls += [p.get("base_url") for p in providers.values() if isinstance(p, Mapping)]
        found = [url_endpoint(u) for u in urls if isinstance(u, str)]
        return (*API_HOSTS, *(h for h in found if h is not None and h not in API_HOSTS))

    def login_paths(self, env: Mapping[str, str]) -> tuple[str, ...]:
        home = env.get("CODEX_HOME") or os.path.join(env.get("HOME", "/"), ".codex")
        return (home,)

    def permissions(self, table: Mapping[str, Any], bypass: bool) -> tuple[str, bool]:
        if bypass:
            return "--dangerously-bypass-approvals-and-sandbox", True
        sandbox = table["sandbox"]
        return f"-s {sandbox}", sandbox == "danger-full-access"

    def asked_model(self, opts: AgentOptions) -> str | None:
        """``--model``/``-m``, else a ``model`` override in ``[codex.config]`` (``-c``): codex
        never reports the model it used, so this is what the session shows and is priced at."""
        flagged = super().asked_model(opts)
        configured = dict(opts.settings.get("config") or {}).get("model")
        return flagged or (configured if isinstance(configured, str) and configured else None)

    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        from zwarm.agents.codex import events

        return events.iter_steps(lines)

    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        from zwarm.agents.codex import events

        return events.scan_outcome(lines)

    def conformance_samples(self) -> ConformanceSamples:
        samples = Path(__file__).resolve().parent / "samples"  # resolved only here

        def read(name: str) -> bytes:
            return (samples / f"{name}.jsonl").read_bytes()

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
