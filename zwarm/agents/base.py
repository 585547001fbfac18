"""The agent plugin interface: everything zwarm knows about one agent CLI.

Owns ``Agent`` (what a plugin implements: name, model routing, config table, argv, permission
flags, event parsing, usage/cost rules, what it does around a turn, conformance samples),
``AgentOptions`` (what argv building gets), ``TurnFiles`` (where a turn's files are, for the
hooks) and the checks at the boundary
between an agent's output and zwarm. Must stay true:
- the prompt reaches an agent only on stdin: ``build_argv`` is never given it, and every agent
  declares so (``prompt_on_stdin``; the registry refuses an agent that does not);
- a resume id (read back from a turn log or meta.json, which an agent can write) reaches argv
  only through ``argv``, which refuses one that does not match ``RESUME_ID`` (so it never
  starts with '-');
- a model (asked by a caller, an untrusted config's free ``model`` key, or meta.json's
  ``requested_model``) reaches argv only through ``options``, which refuses one that starts
  with '-' or holds a control character (``check_model``): an agent CLI could read it as an
  option (gemini's parser takes ``--model --yolo`` as ``--yolo``);
- ``steps`` and ``outcome`` read any bytes in memory bounded by ``jsonl.LINE_CAP`` and never
  raise: an over-long line is skipped with a non-fatal error step, a parser that fails is
  reported as an error, and every outcome value fits what ``meta.json`` may hold;
- importing this module is cheap (no parser, no engine): the registry and config import it;
- an agent never imports the engine: what one needs around its turns (a home of its own, facts
  its stream leaves out) are the hooks the engine calls (``launch_env`` before a turn starts,
  ``after_turn`` once its agent exited, ``reader`` when its log is read), with the turn's
  files (``TurnFiles``) as the store names them.
"""

import abc
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal, NamedTuple, Protocol

import msgspec

from zwarm.agents import jsonl
from zwarm.errors import InvalidInput
from zwarm.model import Reason, TurnOutcome, Usage
from zwarm.model.records import AGENT_NAME, AGENT_SESSION_ID
from zwarm.model.steps import Step
from zwarm.rules import CAP, DANGEROUS, FREE, PRICES
from zwarm.rules import Setting as Setting  # where a plugin has always found it

RESUME_ID = re.compile(AGENT_SESSION_ID)
NAME = re.compile(AGENT_NAME)
# ``Agent.turn_sidecar``: a plain extension, never one of zwarm's own turn files (the digest)
SIDECAR = re.compile(r"^(?!digest\.json\Z)[a-z][a-z0-9_-]{0,31}\.json\Z")

Price = Mapping[str, float]  # USD per 1M tokens: input, cached_input, output

# Bounds on what an agent's output may put in meta.json (see zwarm.model.records).
_MAX_ERROR = 16_000
_MAX_FINAL = 1 << 20
_MAX_MODEL = 200
_MAX_COUNT = 1 << 40
_MAX_COST = 1e9


def url_endpoint(url: str) -> str | None:
    """The ``host:port`` an ``http(s)://`` URL reaches (its scheme's port by default), or
    None if it is not one."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        return None
    host = (parts.hostname or "").rstrip(".")
    if not host or port is None or parts.scheme not in ("http", "https"):
        return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class UnknownAgent(InvalidInput, ValueError):
    """No agent of that name is installed (or its plugin failed to load)."""

    def __init__(self, name: str, known: Iterable[str], why: str | None = None) -> None:
        self.name = name
        self.known = tuple(known)
        if why:
            super().__init__(f"adapter {name!r} is installed but failed to load: {why}")
        else:
            listed = ", ".join(self.known) or "none installed"
            super().__init__(f"unknown adapter {name!r} (use {listed})")


class UnsafeResumeId(InvalidInput, ValueError):
    """A resume id that must not reach argv (refused, never quoted or cut)."""


def check_model(value: str) -> str:
    """``value`` if it can follow ``--model`` in argv as a value, else ``InvalidInput``."""
    if value.startswith("-") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise InvalidInput(f"invalid model {value[:80]!r}: a model name never starts with '-'")
    return value


def check_resume_id(value: object) -> str:
    """``value`` if it is a safe agent session id to resume, else ``UnsafeResumeId``."""
    if not isinstance(value, str) or not RESUME_ID.match(value):
        raise UnsafeResumeId(f"refusing to resume agent session id {str(value)[:80]!r}")
    return value


class AgentSetupError(Exception):
    """An agent's ``launch_env`` could not set its turn up; says why in one line (the turn then
    fails to start with it, ``start_failed``)."""


class TurnFiles(NamedTuple):
    """Where one turn's files are, as the store names them, for an agent's hooks: the
    session's own directory (an agent may keep per-session state under it: gemini's home),
    the turn's log (its stdout), and the agent's own file beside the log (``turns/turn_N.EXT``
    for its ``turn_sidecar`` EXT; None if it declares none)."""

    session_dir: Path
    log: Path
    sidecar: Path | None = None


# Every agent's table has these; ``command`` defaults to the agent's name.
COMMON_SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {
        "command": Setting((str, list), []),
        "model": Setting((str,), "", trust=FREE),
        "dangerous": Setting((bool,), False, trust=DANGEROUS),
        "extra_args": Setting((list,), []),
        "env": Setting((dict,), {}),
        "prices": Setting((dict,), {}, trust=PRICES),
        # this agent's sessions running at once; 0 = any
        "max_running": Setting((int,), 0, trust=CAP),
    }
)


class AgentOptions(msgspec.Struct, frozen=True):
    """Everything argv building gets: config table plus session. Never the prompt."""

    command: tuple[str, ...]
    cwd: str
    model: str | None = None
    extra_args: tuple[str, ...] = ()
    dangerous: bool = False
    settings: Mapping[str, Any] = msgspec.field(default_factory=dict)  # the whole config table


class ConformanceSamples(NamedTuple):
    """Real output of an agent, for the conformance kit (``tests/agents``).

    Each stream is a whole turn's stdout whose last line is its terminal event. ``failed``
    ends with the agent's own error event, ``failed_error`` is the message zwarm must report.
    ``resumed`` is a turn and the same agent session resumed natively (agents that can);
    ``resumed_usage``/``resumed_cost`` are what the second run alone used and cost.
    ``models`` are model names that must route to this agent.
    """

    completed: bytes
    failed: bytes
    failed_error: str
    models: tuple[str, ...] = ()
    resumed: tuple[bytes, bytes] | None = None
    resumed_usage: Usage | None = None
    resumed_cost: float | None = None


class UsageFeed(Protocol):
    """Reads a turn's usage while it streams (``Agent.live_usage``): ``feed`` each output line
    as it is written; ``usage`` is what the turn has used so far, as the agent reports it, and
    ``model`` the model it names (None if it names none)."""

    usage: Usage | None
    model: str | None

    def feed(self, line: bytes) -> bool:
        """Take one output line; True if ``usage`` changed."""
        ...


class Agent(abc.ABC):
    """One agent CLI. A plugin subclasses this and registers it in the ``zwarm.agents``
    entry-point group under its ``name`` (see ``zwarm.agents``)."""

    name: ClassVar[str]
    # The prompt is delivered on the agent's stdin, never in argv (visible to every user in
    # ps). The engine only delivers it that way: an agent must declare it.
    prompt_on_stdin: ClassVar[Literal[True]] = True
    # Can continue its own session (``--context native``). An agent that cannot reports no
    # agent session id, so a native follow-up falls back to a summary.
    native_resume: ClassVar[bool] = False
    usage_cumulative_on_resume: ClassVar[bool] = False  # usage covers the whole resumed session
    cost_cumulative_on_resume: ClassVar[bool] = False  # cost covers the whole resumed session
    reports_cost: ClassVar[bool] = False  # else cost is estimated from prices
    model_pattern: ClassVar[str | None] = None  # model names that imply it (fullmatch, any case)
    settings: ClassVar[Mapping[str, Setting]] = {}  # its table's keys besides COMMON_SETTINGS
    default_prices: ClassVar[Mapping[str, Price]] = {}

    # ------------------------------------------------------------------ routing, config
    def claims_model(self, model: str) -> bool:
        """True if ``model`` names one of this agent's models."""
        pattern = self.model_pattern
        return pattern is not None and re.fullmatch(pattern, model, re.IGNORECASE) is not None

    def config_schema(self) -> dict[str, Setting]:
        """Every key of the ``[name]`` config table."""
        command = Setting((str, list), [self.name])
        return {**COMMON_SETTINGS, "command": command, **self.settings}

    def default_table(self) -> dict[str, Any]:
        import copy  # not at import: a supervisor never needs it

        return {k: copy.deepcopy(s.default) for k, s in self.config_schema().items()}

    def options(
        self, table: Mapping[str, Any], *, cwd: str, model: str | None, dangerous: bool
    ) -> AgentOptions:
        """Argv inputs for one turn, from the agent's validated config table; a ``model`` that
        argv could read as an option is refused (``check_model``)."""
        values = dict(table)  # each value read once (a trust-checked table checks each read)
        command = values["command"]
        return AgentOptions(
            command=tuple([command] if isinstance(command, str) else command),
            cwd=cwd,
            model=check_model(model) if model else None,
            extra_args=tuple(values["extra_args"]),
            dangerous=dangerous,
            settings=MappingProxyType(values),
        )

    # ------------------------------------------------------------------ argv, permissions
    @abc.abstractmethod
    def build_argv(self, opts: AgentOptions, resume_id: str | None) -> list[str]:
        """The agent's argv for one turn; ``resume_id`` is already checked (or None)."""

    def argv(self, opts: AgentOptions, resume_id: str | None = None) -> list[str]:
        """The argv for one turn, resuming ``resume_id`` natively if given (checked first)."""
        if resume_id is not None:
            if not self.native_resume:
                raise UnsafeResumeId(f"the {self.name} agent cannot resume its own sessions")
            check_resume_id(resume_id)
        return self.build_argv(opts, resume_id)

    def sandboxed_env(self, env: dict[str, str]) -> dict[str, str]:
        """The environment of a turn run in zwarm's sandbox (``zwarm.sandbox``), where the
        agent's own sandbox stands down: what tells the CLI it is sandboxed; ``env`` as it is
        by default."""
        return env

    def api_hosts(self, table: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, ...]:
        """The ``host:port`` endpoints the agent's CLI reaches in zwarm's sandbox
        (``zwarm.sandbox``: allowed by its filtering proxy), given its config table and the
        environment its turn runs with: its vendor's API and login hosts, and any endpoint
        its table configures. A URL variable of its environment (``*_BASE_URL``) is added by
        the sandbox itself. Nothing by default."""
        return ()

    def login_paths(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """The agent's own login, config and session directories, as its CLI needs them in
        zwarm's sandbox (``zwarm.sandbox``: bound writable, where the CLI refreshes its tokens
        and keeps the sessions it resumes; made, 0700, if missing), given the environment its
        turn runs with: nothing by default. Files: ``login_files``."""
        return ()

    def login_files(self, env: Mapping[str, str]) -> tuple[str, ...]:
        """The agent's own login or config files outside ``login_paths``, bound writable in
        zwarm's sandbox where they exist: nothing by default."""
        return ()

    @abc.abstractmethod
    def permissions(self, table: Mapping[str, Any], bypass: bool) -> tuple[str, bool]:
        """(the permission flags a turn runs with, whether they disable the agent's checks)."""

    # ------------------------------------------------------------------ reading output
    @abc.abstractmethod
    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        """Normalized steps (``zwarm.model.steps``) of one turn, from its stdout lines.
        Must not raise on any line (decode with ``zwarm.agents.jsonl.decode``)."""

    @abc.abstractmethod
    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        """The turn's outcome as reported (usage/cost raw), in one pass over its lines: the
        same answer as decoding every line, whatever the JSON spacing. ``status`` None when
        there is no terminal event."""

    def steps(self, source: Any) -> Iterator[Step]:
        """``iter_steps`` over a turn log (binary file or lines) in bounded memory; an
        over-long line becomes a non-fatal error step where it was, a parser failure a last
        error step."""
        skipped: list[jsonl.Skipped] = []

        def lines() -> Iterator[bytes]:
            for line in jsonl.read_lines(source):
                if isinstance(line, jsonl.Skipped):
                    skipped.append(line)
                else:
                    yield line

        try:
            for step in self.iter_steps(lines()):
                while skipped:
                    yield _skip_step(skipped.pop(0))
                yield step
        except Exception as e:  # a plugin's parser bug: reported, never raised
            skipped.clear()
            yield _error_step(f"the {self.name} parser failed: {type(e).__name__}: {e}")
        for line in skipped:
            yield _skip_step(line)

    def outcome(self, source: Any) -> TurnOutcome:
        """``scan_outcome`` over a turn log in bounded memory, with values fit to store."""
        skipped: list[jsonl.Skipped] = []

        def lines() -> Iterator[bytes]:
            for line in jsonl.read_lines(source):
                if isinstance(line, jsonl.Skipped):
                    skipped.append(line)
                else:
                    yield line

        try:
            o = self.scan_outcome(lines())
        except Exception as e:  # a plugin's parser bug: reported, never raised
            o = TurnOutcome(error=f"the {self.name} parser failed: {type(e).__name__}: {e}")
        if o.status is None and o.error is None and skipped:
            o.error = skipped[-1].note
        return self._storable(o)

    def usage_so_far(self, lines: Iterable[bytes]) -> Usage | None:
        """The usage the agent had reported when its turn ended without a terminal event
        (killed, timed out, crashed): what its model calls used so far. None (the default)
        for an agent that reports usage only at the end. One pass, like ``scan_outcome``."""
        return None

    def live_usage(self) -> UsageFeed | None:
        """A reader of the usage a turn reports while it streams, or None (the default) for an
        agent that reports usage only when the turn ends: a budget is then enforced at the end
        of each turn (``zwarm.runtime.watch``)."""
        return None

    def partial_usage(self, source: Any) -> Usage | None:
        """``usage_so_far`` over a turn log in bounded memory, never raising, fit to store."""

        def lines() -> Iterator[bytes]:
            for line in jsonl.read_lines(source):
                if not isinstance(line, jsonl.Skipped):
                    yield line

        try:
            u = self.usage_so_far(lines())
        except Exception:  # a plugin's parser bug: no partial usage, never a crash
            return None
        return None if u is None else Usage(*(min(n, _MAX_COUNT) for n in _counts(u)))

    def asked_model(self, opts: AgentOptions) -> str | None:
        """The model a turn with ``opts`` asks the agent for, as zwarm passes it (``--model``,
        or an agent's own way such as a config override), or None: the agent's default. The
        session records it until the agent reports the model it used."""
        return opts.model or _flag_value(opts.extra_args, ("--model", "-m"))

    def _storable(self, o: TurnOutcome) -> TurnOutcome:
        sid = o.agent_session_id
        if sid is not None and (not self.native_resume or not RESUME_ID.match(sid)):
            o.agent_session_id = None
        if o.model is not None and not 0 < len(o.model) <= _MAX_MODEL:
            o.model = None
        o.error = _cut(o.error, _MAX_ERROR)
        o.final_message = _cut(o.final_message, _MAX_FINAL)
        if o.cost_usd is not None and not (
            math.isfinite(o.cost_usd) and 0 <= o.cost_usd <= _MAX_COST
        ):
            o.cost_usd = None
        if o.usage is not None:
            o.usage = Usage(*(min(n, _MAX_COUNT) for n in _counts(o.usage)))
        o.reason = o.reason if isinstance(o.reason, Reason) else None
        o.retry_after_s = _finite(o.retry_after_s, 7 * 86400)
        o.reset_at = _finite(o.reset_at, 1e11)
        return o

    # ------------------------------------------------------------------ cost
    def price(self, table: Mapping[str, Any], model: str | None) -> Price | None:
        """USD per 1M tokens for ``model``: the config table's ``prices``, else the agent's."""
        if not model:
            return None
        configured = table.get("prices") or {}
        if model in configured:
            return dict(configured[model])
        found = self.default_prices.get(model)
        return dict(found) if found is not None else None

    def estimate_cost(
        self, usage: Usage, model: str | None, table: Mapping[str, Any]
    ) -> float | None:
        """Cost of ``usage`` at ``model``'s price; None when the price is unknown."""
        price = self.price(table, model)
        if price is None:
            return None
        fresh = usage.input_tokens - usage.cached_input_tokens
        cost = (
            fresh * price["input"]
            + usage.cached_input_tokens * price["cached_input"]
            + usage.output_tokens * price["output"]
        ) / 1_000_000
        return round(cost, 8)

    def cost_source(self, model: str | None, table: Mapping[str, Any]) -> str:
        if self.reports_cost:
            return "reported"
        return "estimated" if self.price(table, model) else "unknown"

    # ------------------------------------------------------------------ around a turn
    # The extension of a file of the agent's own beside each turn's log (``TurnFiles.sidecar``,
    # ``turns/turn_N.EXT``, matching ``SIDECAR``), which ``after_turn`` may write and
    # ``reader`` read; None: it keeps none.
    turn_sidecar: ClassVar[str | None] = None

    def launch_env(
        self,
        table: Mapping[str, Any],
        env: dict[str, str],
        cwd: str,
        turn: TurnFiles,
        environ: Mapping[str, str],
    ) -> dict[str, str]:
        """The environment turn ``turn``'s agent runs with, given the one zwarm made for it
        (``env``: the config's, the session's markers, ``"$ZWARM"``): by default ``env``.
        Called where the turn runs (its supervisor), each time before it starts, with the
        agent's validated config table, the working directory it runs in and the user's own
        environment (``environ``); an agent that needs a per-session setup makes it here (under
        ``turn.session_dir``). ``AgentSetupError`` (one line) if the turn must not start."""
        return env

    def after_turn(self, turn: TurnFiles) -> None:
        """Once turn ``turn``'s agent has exited, before its end is recorded: keep what the
        agent's own records say of the turn that its output leaves out (in ``turn.sidecar``).
        Best effort: a failure here leaves the turn as its log tells it (the engine reports
        an exception on the supervisor's log and carries on). By default nothing."""
        return None

    def reader(self, turn: TurnFiles) -> "Agent":
        """The agent that reads turn ``turn``'s log (``steps``): by default this one; one that
        keeps a sidecar returns itself joined with what the sidecar holds."""
        return self

    # ------------------------------------------------------------------ conformance kit
    @abc.abstractmethod
    def conformance_samples(self) -> ConformanceSamples:
        """Sample streams of this agent for the conformance kit."""


def _flag_value(args: Iterable[str], flags: tuple[str, ...]) -> str | None:
    """The value of the last of ``flags`` in ``args`` (``--model X`` or ``--model=X``)."""
    found = None
    items = list(args)
    for i, arg in enumerate(items):
        if arg in flags and i + 1 < len(items):
            found = items[i + 1]
        elif arg.startswith(tuple(f"{f}=" for f in flags if f.startswith("--"))):
            found = arg.split("=", 1)[1]
    return found or None


def _finite(value: Any, most: float) -> float | None:
    """``value`` if it is a number in (0, ``most``], else None (a plugin's, or a parse's)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) and 0 < value <= most else None


def _counts(u: Usage) -> tuple[int, int, int, int]:
    return (u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens)


def _cut(text: str | None, limit: int) -> str | None:
    """``zwarm.text.clip`` (characters: a bound on what meta.json keeps), imported only when a
    text is that long: a supervisor's turn does not pay for the terminal's regexes."""
    if text is None or len(text) <= limit:
        return text
    from zwarm.text import clip

    return clip(text, limit)


def _error_step(message: str) -> Step:
    return {"kind": "error", "message": message, "fatal": False}


def _skip_step(line: jsonl.Skipped) -> Step:
    return _error_step(line.note)
