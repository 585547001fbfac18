"""Google's Gemini CLI agent: ``gemini --output-format stream-json`` argv, config table, prices.

Owns everything Gemini-specific but the event parsing (``events``), the session's home and
settings (``home``) and the tool facts read from gemini's own record (``tools``), which its
turn hooks tie to the engine: before a turn the session's home
(``sessions/<id>/gemini-home``) and the environment pointing at it (``launch_env``), after a
turn the facts its stream leaves out kept in the turn's sidecar (``after_turn``), joined to
its steps when the turn is read (``reader``). Must stay true: the prompt is never in
argv (gemini reads it from stdin when no ``-p`` is given); ``--yolo`` appears only when the
session is explicitly dangerous, otherwise ``--approval-mode`` (default ``auto_edit``: file
edits, no shell; ``yolo`` in the config counts as dangerous); as gemini forces the mode to
``default`` in the working folder zwarm never trusts (``home``), ``auto_edit`` and yolo are
carried by ``--policy`` files of zwarm's own (``policies/``: read from the installed package,
never from a folder an agent writes; ``plan`` then runs as ``default``, read-only); usage
is per run, also over ``--resume`` (not cumulative); gemini reports no cost, so it is estimated from
``DEFAULT_PRICES`` or ``[gemini.prices]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from zwarm.agents.base import (
    Agent,
    AgentOptions,
    ConformanceSamples,
    Price,
    Setting,
    TurnFiles,
)
from zwarm.agents.gemini.home import AUTH_TYPES
from zwarm.model import TurnOutcome, Usage
from zwarm.model.steps import Step
from zwarm.rules import FREE, Rule

APPROVAL_MODES = ("auto_edit", "default", "plan", "yolo")
# the same, tightest first: plan reads only; default asks (headless: denies) for each tool;
# auto_edit approves edits; yolo approves everything
APPROVAL_ORDER = ("plan", "default", "auto_edit", "yolo")
# the modes a policy file of zwarm's carries (gemini runs them in its "default" mode)
POLICIES = ("auto_edit", "yolo")

# USD per 1M tokens, prompts up to 200K tokens (longer ones cost more on the Pro models).
# Google's list prices (ai.google.dev/gemini-api/docs/pricing) as quoted by the gemini-cost
# crate (docs.rs/gemini-cost, 2.5 family) and the ai-wish-generator v3.2.0 release notes
# (Apr 2026: 2.5 Flash $0.30/$2.50, Flash-Lite $0.10/$0.40, Pro $1.25/$10, 3 Flash Preview
# $0.50/$3, 3.1 Pro Preview $2/$12); cached input at Google's 90% caching discount.
# what the CLI reaches (zwarm's sandbox allows these): the Gemini API (an API key), Code Assist
# (a Google login) and the OAuth token refresh; Vertex AI's regional hosts are not listed
# ([sandbox] hosts adds them)
API_HOSTS = (
    "generativelanguage.googleapis.com:443",
    "cloudcode-pa.googleapis.com:443",
    "oauth2.googleapis.com:443",
)
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "gemini-2.5-pro": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
    "gemini-2.5-flash": {"input": 0.30, "cached_input": 0.03, "output": 2.50},
    "gemini-2.5-flash-lite": {"input": 0.10, "cached_input": 0.01, "output": 0.40},
    "gemini-3-flash-preview": {"input": 0.50, "cached_input": 0.05, "output": 3.0},
    "gemini-3-pro-preview": {"input": 2.0, "cached_input": 0.2, "output": 12.0},
    "gemini-3.1-pro-preview": {"input": 2.0, "cached_input": 0.2, "output": 12.0},
    # The models the pinned CLI (0.61.0) routes ``auto`` and its side calls to by default
    # (its DEFAULT_GEMINI_FLASH_MODEL, the flash-lite alias and their GA mappings): Google's
    # list prices as transcribed from ai.google.dev/gemini-api/docs/pricing on 2026-10-07
    # (github.com/api-evangelist/deepmind, plans/deepmind-plans-pricing.yml): 3.5 Flash
    # $1.50/$9, 3.5 Flash-Lite $0.30/$2.50, 3.8 Flash $0.75/$3.75 (an introductory price
    # through Dec 31 2026, $1.50/$7.50 from Jan 1 2027); 3.1 Flash-Lite $0.25/$0.025/$1.50
    # (modelpedia.dev and cloudprice.net, Google AI's standard tier). Cached input at 90% off.
    "gemini-3.5-flash": {"input": 1.50, "cached_input": 0.15, "output": 9.0},
    "gemini-3.5-flash-lite": {"input": 0.30, "cached_input": 0.03, "output": 2.50},
    "gemini-3.8-flash": {"input": 0.75, "cached_input": 0.075, "output": 3.75},
    "gemini-3.1-flash-lite": {"input": 0.25, "cached_input": 0.025, "output": 1.50},
}


def gemini_argv(opts: AgentOptions, resume_id: str | None = None) -> list[str]:
    """The argv of one headless ``gemini`` turn (the prompt is read from stdin)."""
    argv = [*opts.command, "--output-format", "stream-json"]
    if opts.model:
        argv += ["--model", opts.model]
    mode = "yolo" if opts.dangerous else opts.settings.get("approval_mode", "auto_edit")
    if opts.dangerous:
        argv.append("--yolo")
    else:
        argv += ["--approval-mode", mode]
    if mode in POLICIES:
        argv += ["--policy", str(Path(__file__).resolve().parent / "policies" / f"{mode}.toml")]
    if resume_id:
        argv += ["--resume", resume_id]
    argv += list(opts.extra_args)
    return argv


class GeminiAgent(Agent):
    name: ClassVar[str] = "gemini"
    turn_sidecar: ClassVar[str | None] = "tools.json"  # the tool facts (``tools``)
    native_resume: ClassVar[bool] = True
    usage_cumulative_on_resume: ClassVar[bool] = False
    reports_cost: ClassVar[bool] = False
    model_pattern: ClassVar[str | None] = r"gemini-.*"
    settings: ClassVar[Mapping[str, Setting]] = {
        "approval_mode": Setting(
            (str,),
            "auto_edit",
            APPROVAL_MODES,
            "Passed as --approval-mode: auto_edit (file edits, no shell), default, plan, yolo.",
            trust=Rule("at_most", order=APPROVAL_ORDER),  # a limit: only loosening needs trust
        ),
        "auth": Setting(
            (str,),
            "",
            AUTH_TYPES,
            '"" = from the environment (GEMINI_API_KEY, Vertex AI, ADC); keys never on disk.',
        ),
        "max_attempts": Setting(
            (int,),
            0,
            doc="settings general.maxAttempts (tries per request); 0 = gemini's (10).",
            trust=FREE,
        ),
        "user_settings": Setting(
            (bool,), True, doc="Start the session's settings from your ~/.gemini/settings.json."
        ),
        "settings": Setting(
            (dict,), {}, doc="settings.json overrides for every session, merged last."
        ),
    }
    default_prices: ClassVar[Mapping[str, Price]] = DEFAULT_PRICES
    # Tool facts from gemini's session record (``tools``), for the turn being read.
    facts: Mapping[str, Mapping[str, Any]] = MappingProxyType({})

    def build_argv(self, opts: AgentOptions, resume_id: str | None) -> list[str]:
        return gemini_argv(opts, resume_id)

    def api_hosts(self, table: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, ...]:
        return API_HOSTS

    def login_paths(self, env: Mapping[str, str]) -> tuple[str, ...]:
        return tuple(env[k] for k in ("GEMINI_CLI_HOME",) if env.get(k))  # the session's home

    def permissions(self, table: Mapping[str, Any], bypass: bool) -> tuple[str, bool]:
        if bypass:
            return "--yolo", True
        mode = table["approval_mode"]
        return f"--approval-mode {mode}", mode == "yolo"

    def with_facts(self, facts: Mapping[str, Mapping[str, Any]]) -> GeminiAgent:
        """This agent reading a turn whose tool facts are ``facts``."""
        import copy  # not at import: a supervisor of another agent never needs it

        reader = copy.copy(self)
        reader.facts = facts
        return reader

    # ------------------------------------------------------------------ around a turn
    def launch_env(
        self,
        table: Mapping[str, Any],
        env: dict[str, str],
        cwd: str,
        turn: TurnFiles,
        environ: Mapping[str, str],
    ) -> dict[str, str]:
        from zwarm.agents.gemini import home

        return home.launch_env(table, env, cwd, turn.session_dir / home.HOME_DIR, environ)

    def after_turn(self, turn: TurnFiles) -> None:
        from zwarm.agents.gemini import home, tools

        if turn.sidecar is not None:
            tools.save_facts(turn.log, turn.session_dir / home.HOME_DIR, turn.sidecar)

    def reader(self, turn: TurnFiles) -> GeminiAgent:
        from zwarm.agents.gemini import tools

        facts = tools.read_facts(turn.sidecar) if turn.sidecar is not None else {}
        return self.with_facts(facts) if facts else self

    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        from zwarm.agents.gemini import events

        return events.iter_steps(lines, self.facts)

    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        from zwarm.agents.gemini import events

        return events.scan_outcome(lines)

    def conformance_samples(self) -> ConformanceSamples:
        samples = Path(__file__).resolve().parent / "samples"  # resolved only here

        def read(name: str) -> bytes:
            return (samples / f"{name}.jsonl").read_bytes()

        return ConformanceSamples(
            completed=read("completed"),
            failed=read("failed"),
            failed_error="Model stream ended without a finish reason.",
            models=("gemini-2.5-pro", "gemini-2.5-flash", "gemini-3-pro-preview"),
            resumed=(read("resume_1"), read("resume_2")),
            resumed_usage=Usage(300, 0, 6, 0),  # per run: 306 after 497, not cumulative
        )
