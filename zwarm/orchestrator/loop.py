"""``zwarm orchestrate``: the built-in orchestrator loop over an OpenAI-compatible endpoint.

Owns the loop (LLM call -> tool calls -> results -> ... -> final summary), its system prompt,
its limits (steps per invocation; tokens and cost over the whole run), when it compacts its
transcript (``compaction``) and how it stops on a signal. A run lives in the run store
(``runstore``: ``.zwarm/orchestrator.db``) that ``--resume`` continues from; the endpoint and
its retries are ``chat``'s. Must stay true:
- every tool call goes through ``tools.Toolbox`` (the shared tools plus ``bash``), with
  ``source = "orchestrate:<run>"`` and the run as its sessions' root; a failing tool is a
  result the LLM reads, never a crash;
- every LLM reply and every tool result is one insert into the store as it happens (the run's
  row with it, in the same transaction), so a crash, SIGKILL or Ctrl-C loses at most the call
  in flight; ``--resume`` answers tool calls left unanswered;
- SIGINT and SIGTERM stop a run cleanly (``Stopped``): the run is marked ``interrupted``, the
  bash command in flight is killed, and the command exits 130 or 143 saying how to resume;
- one process runs or compacts a run at a time (``RunStore.lock``);
- the run's token and cost budgets are kept in the store and apply on ``--resume`` unless a
  flag sets them anew; a total cost with unpriced parts is a lower bound and says so
  (``cost_parts``: ``total_cost_usd`` with ``unpriced_parts``), never a partial sum as a total;
- the API key is read from the environment once, when the run starts (``start``), held only in
  memory (``Settings.api_key``, never in a repr or a file), and ``ZWARM_ORCH_API_KEY`` is then
  removed from the API's environment, so no session or bash command started by the run gets
  it (``guard`` says why and what happens to a shared ``OPENAI_API_KEY``);
- every value zwarm knows to be secret (``guard.Secrets``: the key, the ``api_key_env``
  variable's, secret-looking variables and agents' configured ``env``) is redacted from each
  message before it is sent or stored, from failed requests' errors and the run's stop reason
  and summary;
- it reaches the API through ``Zwarm``'s public methods only (never its store or config);
- ``openai`` and ``rich`` are imported only when a run starts (``zwarm --help`` and the other
  commands never import them).
What a run shows while it goes (progress lines, the cost text) is ``progress``'s.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import secrets
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from zwarm import agents
from zwarm.agents import list_price
from zwarm.errors import InvalidInput, OrchestratorError, ZwarmError
from zwarm.orchestrator import compaction
from zwarm.orchestrator.bash import BASH_TOOL, sandbox_line
from zwarm.orchestrator.chat import ChatLLM, Completion, OpenAIChat, Retry, Retrying
from zwarm.orchestrator.guard import ORCH_KEY_VAR, Secrets, without_key
from zwarm.orchestrator.progress import Progress, Quiet, RichProgress, compacted_text, cost_text
from zwarm.orchestrator.runstore import Run, RunStore
from zwarm.orchestrator.tools import Toolbox, allowed_roots, schemas, short, to_json
from zwarm.text import plural

if TYPE_CHECKING:
    from zwarm.api import Zwarm

__all__ = [
    "ChatLLM",
    "Completion",
    "OpenAIChat",
    "OrchestratorError",
    "Progress",
    "Quiet",
    "RichProgress",
    "Run",
    "RunStore",
    "compacted_text",
    "cost_text",
]

EXIT = {"finished": 0, "step_limit": 3, "budget": 3}
INTERRUPTED_RESULT = (
    "this tool call was interrupted before it returned (the run was stopped); check "
    "list_sessions before repeating it"
)


# ---------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Settings:
    model: str
    base_url: str | None
    api_key: str = field(repr=False)
    max_steps: int
    max_tokens: int
    max_cost_usd: float
    price: dict[str, float] | None
    window: int = compaction.DEFAULT_WINDOW
    compact_at: float = 0.7
    compact_keep: int = 10
    compact_model: str = ""
    compact_price: dict[str, float] | None = None
    max_attempts: int = 5
    retry_backoff_s: float = 1.0
    api_key_name: str = ""  # the variable the key came from ("" when there is no key)

    def policy(self) -> compaction.Policy:
        model = self.compact_model or self.model
        return compaction.Policy(
            self.window, self.compact_at, self.compact_keep, model, self.compact_price
        )


def resolve_settings(
    api: Zwarm, flags: Mapping[str, Any], run: Run | None = None, url_flag: str = "--base-url"
) -> Settings:
    """Flags > (when resuming) the run's own model, URL and budgets > ZWARM_ORCH_* env >
    config. A run's token and cost budgets are kept in the run: a resumed run keeps them
    unless a flag sets them anew. ``url_flag``: how the caller's user points at an endpoint
    (a command without ``--base-url``, such as ``pick --judge``, names the config's)."""
    api.check_limits()  # a loosened budget or price is never used: say so, and refuse
    cfg = functools.partial(api.setting, "orchestrator")
    env = api.env.environ
    model = _pick(flags.get("model"), run and run.model, env.get("ZWARM_ORCH_MODEL"), cfg("model"))
    if not model:
        raise OrchestratorError(
            "no orchestrator model: pass --model, set ZWARM_ORCH_MODEL, or set "
            "[orchestrator] model in .zwarm/config.toml"
        )
    base_url = _pick(
        flags.get("base_url"),
        run and run.base_url,
        env.get("ZWARM_ORCH_BASE_URL"),
        cfg("base_url"),
    )
    key_var = cfg("api_key_env")
    key_name = ORCH_KEY_VAR if env.get(ORCH_KEY_VAR) else key_var if env.get(key_var) else ""
    key = env.get(key_name, "") if key_name else ""
    if not key and not base_url:
        raise OrchestratorError(
            f"no API key: set {key_var} (or {ORCH_KEY_VAR}), or point "
            f"{url_flag} at an endpoint that needs none"
        )
    compact_model = cfg("compact_model") or model
    return Settings(
        model=model,
        base_url=base_url or None,
        api_key=key or "not-needed",
        max_steps=_limit(flags.get("max_steps"), cfg("max_steps")),
        max_tokens=_limit(flags.get("max_tokens"), _kept(run, "max_tokens", cfg)),
        max_cost_usd=float(_pick(flags.get("max_cost_usd"), _kept(run, "max_cost_usd", cfg)) or 0),
        price=_price(cfg, model),
        window=compaction.window_for(model, cfg("context_window")),
        compact_at=float(cfg("compact_at")),
        compact_keep=int(cfg("compact_keep")),
        compact_model=compact_model,
        compact_price=_price(cfg, compact_model),
        max_attempts=int(cfg("max_attempts")),
        retry_backoff_s=float(cfg("retry_backoff_s")),
        api_key_name=key_name,
    )


def known_secrets(api: Zwarm, s: Settings) -> Secrets:
    """What a run redacts: its key, the ``api_key_env`` variable's value, the secret-looking
    variables of the API's environment and of each agent's configured ``env`` (a table that is
    not trusted is skipped: no agent gets it)."""
    key_var = str(api.setting("orchestrator", "api_key_env"))
    keys = [(s.api_key_name, s.api_key)] if s.api_key_name else []
    if api.env.environ.get(key_var):
        keys.append((key_var, api.env.environ[key_var]))
    configured: list[tuple[str, str]] = []
    for name in agents.names():
        with contextlib.suppress(ZwarmError, KeyError):
            configured += dict(api.setting(name, "env") or {}).items()
    return Secrets.known(api.env.environ, keys, configured)


def _price(cfg: Callable[[str], Any], model: str) -> dict[str, float] | None:
    got: dict[str, float] | None = cfg("prices").get(model) or list_price(model)
    return got


def _forget_key(api: Zwarm) -> None:
    """Drop the orchestrator-only key from the environment the API gives its children."""
    api.env.environ = without_key(api.env.environ)


def _pick(*values: Any) -> Any:
    for v in values:
        if v not in (None, ""):
            return v
    return None


def _limit(flag: int | None, configured: int) -> int:
    return int(flag if flag is not None else configured)


def _kept(run: Run | None, key: str, cfg: Callable[[str], Any]) -> Any:
    """The budget ``key`` the run was started (or last resumed) with, else the configured one.
    The store is read back from disk: a value that is not a non-negative number is refused."""
    value = getattr(run, key, None) if run is not None else None
    if value is None:
        return cfg(key)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < 0:
        raise OrchestratorError(f"run {run.id if run else '?'} is damaged: {key} is {value!r}")
    return value


# ---------------------------------------------------------------------------- the run store
def open_store(api: Zwarm, create: bool) -> RunStore | None:
    """The state dir's run store (created if ``create``; None if there is none)."""
    if create:
        api.ensure_state_dir()
    elif not api.state_dir.is_dir():
        return None
    return RunStore.open(api.state_dir, create=create)


def find_run(api: Zwarm, ref: str) -> tuple[RunStore, str]:
    """The store and the run named by a full id, a unique prefix, or ``last`` (the newest)."""
    rs = open_store(api, create=False)
    if rs is None:
        if ref == "last":
            raise OrchestratorError("there is no orchestrator run yet")
        if not re.match(r"^[0-9a-f-]{1,40}\Z", ref):
            raise InvalidInput(f"invalid run id {ref!r}")
        raise OrchestratorError(f"no run matches {ref!r} (there are no runs in {api.state_dir})")
    try:
        return rs, rs.find(ref)
    except BaseException:
        rs.close()
        raise


def new_run_id(api: Zwarm, taken: list[str]) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(api.env.clock()))
    for _ in range(1000):
        rid = f"{stamp}-{secrets.token_hex(2)}"
        if rid not in taken:
            return rid
    raise OrchestratorError("could not choose a run id")  # pragma: no cover


def repair(messages: list[dict[str, Any]]) -> int:
    """Answer the tool calls of the last assistant message that have no result. Returns count."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            break
    else:
        return 0
    answered = {m.get("tool_call_id") for m in messages[i + 1 :] if m.get("role") == "tool"}
    missing = [c for c in messages[i].get("tool_calls") or [] if c.get("id") not in answered]
    for c in missing:
        content = to_json({"ok": False, "error": INTERRUPTED_RESULT})
        messages.append({"role": "tool", "tool_call_id": c.get("id"), "content": content})
    return len(missing)


# ---------------------------------------------------------------------------- signals
class Stopped(KeyboardInterrupt):
    """SIGINT or SIGTERM during a run: a ``KeyboardInterrupt`` (what cleans up the bash tool
    and the loop), carrying which signal (the exit status is 128 + it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def why(self) -> str:
        return "interrupted by the user" if self.signum == signal.SIGINT else "stopped by SIGTERM"


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Stopped`` in the loop (once: a second signal while it
    stops is ignored, so the state is saved); the old handlers are back afterwards."""
    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            return
        fired.append(signum)
        raise Stopped(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


# ---------------------------------------------------------------------------- the prompt
SYSTEM_PROMPT = """\
You are an orchestrator. You do not write code or edit files yourself: you hand work to coding \
agents (OpenAI Codex, Claude Code or Gemini CLI) that run as background sessions, keep several \
going at once when tasks are independent, check on them, steer them, verify their work, and \
report.

How to work:
1. Plan. Split the task into self-contained subtasks. An agent sees only the task text you \
give it: include the goal, the files involved, constraints, and how to check the result.
2. delegate each subtask; it returns a session_id at once. Start independent subtasks together; \
in a git repository pass worktree=true so parallel agents each get their own worktree and branch.
3. wait instead of polling: it returns as soon as one of your sessions finishes (call it again \
while others still run). Never call check_session in a loop to wait.
4. When a session finishes, look at what it did: check_session for its final message and \
error, get_trajectory for the commands it ran and the files it changed. Do not take an agent's \
word for it.
5. Verify with the bash tool: run the tests, read the files, git diff. Use bash only for \
read-only checks; any change goes to an agent.
6. If a result is wrong or incomplete, converse with that session (it keeps its context), then \
wait and verify again.
7. Review the diff of each finished session (get_diff) before merging: exactly what it \
changed. Put what must change on the lines concerned (comment) and converse to send the \
comments back; merge a worktree session's branch only once its diff is right.
8. end_session any session you started that is still running and no longer needed.
9. Finish: when the work is done and verified (or cannot be done), reply with a final summary \
and NO tool call: what was done, by which sessions, how you verified it, what is left open.

Working directory: {cwd}. Agents run there unless you pass cwd, which must be inside: {roots}.
Tool results are JSON. "ok": false means the call failed and "error" says why: fix the call \
rather than repeating it.
"""

NUDGE = (
    "You replied without a tool call, which ends the run, but these sessions you started are "
    "still running: {ids}. Wait for them (wait) and verify their work, or end them "
    "(end_session); then reply with your final summary and no tool call."
)


def system_prompt(api: Zwarm) -> str:
    roots = ", ".join(str(r) for r in allowed_roots(api)) or "(none)"
    return SYSTEM_PROMPT.format(cwd=api.env.cwd, roots=roots)


# ---------------------------------------------------------------------------- the loop
class Orchestrator:
    def __init__(
        self,
        api: Zwarm,
        rs: RunStore,
        run: Run,
        messages: list[dict[str, Any]],
        llm: ChatLLM,
        settings: Settings,
        progress: Progress,
    ) -> None:
        self.api, self.rs, self.run, self.messages = api, rs, run, messages
        self.s, self.progress = settings, progress
        self.policy = settings.policy()
        self.llm = Retrying(llm, settings.max_attempts, settings.retry_backoff_s, self._retried)
        self.toolbox = Toolbox(api, run.source, extra=[BASH_TOOL], run=run.id)
        self.secrets = known_secrets(api, settings)
        messages[:] = self.secrets.redact(messages)  # a run stored before redaction existed
        self.tool_defs = schemas("openai", self.toolbox.tools.values())
        self._calling = ("step", settings.model)
        self._said_no_compaction = False

    def go(self) -> str:
        """Run until the LLM finishes, a limit is reached, or an error; returns the status."""
        self.run.status, self.run.stop_reason = "running", None
        self.run.invocations += 1
        self._save()
        try:
            return self._loop()
        except KeyboardInterrupt as e:
            why = e.why if isinstance(e, Stopped) else "interrupted by the user"
            self._stop("interrupted", why)
            raise
        except ZwarmError as e:
            self._stop("error", str(e))
            raise

    def _loop(self) -> str:
        for _ in range(self.s.max_steps):
            over = self._over_budget()
            if over:
                return self._stop("budget", over)
            if self._step():
                return self._stop("finished", None)
        return self._stop("step_limit", f"step limit reached ({plural(self.s.max_steps, 'step')})")

    def _step(self) -> bool:
        if compaction.due(self.run, self.policy):
            self.compact("auto")
        self._calling = ("step", self.s.model)
        with self.progress.busy(f"step {self.run.steps + 1}: waiting for the model…"):
            c = self.llm.complete(self.messages, self.tool_defs)
        self.run.steps += 1
        cost = self._account(c)
        self._context(c)
        self._round(c, cost)
        self._append(c.message)
        calls = c.message.get("tool_calls") or []
        if calls and c.message.get("content"):
            self.progress.said(str(c.message["content"]))
        for call in calls:
            self._call(call)
        if calls:
            return False
        if self._nudge():
            return False
        self.run.summary = self.secrets.redact(str(c.message.get("content") or ""))
        return True

    def _call(self, call: Mapping[str, Any]) -> None:
        fn = call.get("function") or {}
        name, args = str(fn.get("name")), fn.get("arguments")
        with self.progress.busy(f"{name} running…"):
            result = self.secrets.redact(self.toolbox.dispatch(name, args))
        self._append({"role": "tool", "tool_call_id": call.get("id"), "content": to_json(result)})
        self.progress.tool(name, str(args or ""), result)

    def _nudge(self) -> bool:
        running = self.own_sessions("running")
        if not running or self.run.nudged:
            return False
        self.run.nudged = True
        ids = ", ".join(r["id"] for r in running)
        self._append({"role": "user", "content": NUDGE.format(ids=ids)})
        return True

    # ----- compaction
    def compact(self, trigger: str) -> compaction.Outcome:
        """Compact the transcript now (the run's lock is held by ``execute``)."""
        self._calling = ("compaction", self.policy.model)
        with self.progress.busy("compacting the transcript…"):
            out = compaction.compact(
                self.rs, self.run, self.llm, self.policy, trigger, self.api.env.now_iso()
            )
        if out.compacted:
            self.messages[:] = self.secrets.redact(self.rs.transcript(self.run.id))
            self.progress.note(compacted_text(out))
        elif not self._said_no_compaction:
            self._said_no_compaction = True  # said once; checked again each step
            self.progress.note(f"no compaction: {out.reason}")
        return out

    def _context(self, c: Completion) -> None:
        """The run's context now: what the endpoint reported for this call, else an estimate."""
        if c.prompt_tokens is not None:
            self.run.context_tokens = c.prompt_tokens + (c.completion_tokens or 0)
            self.run.context_estimated = False
        else:
            self.run.context_tokens = compaction.estimate([*self.messages, c.message])
            self.run.context_estimated = True

    # ----- accounting
    def _account(self, c: Completion) -> float | None:
        """Add the call's tokens (and cost) to the run's; the call's cost, if priced."""
        p, o = c.prompt_tokens or 0, c.completion_tokens or 0
        self.run.prompt_tokens += p
        self.run.completion_tokens += o
        if self.s.price is None or c.prompt_tokens is None:
            self.run.cost_usd = None
            return None
        pr = self.s.price
        fresh, cached = max(p - c.cached_tokens, 0), min(c.cached_tokens, p)
        cost = (fresh * pr["input"] + cached * pr["cached_input"] + o * pr["output"]) / 1_000_000
        if self.run.cost_usd is not None:
            self.run.cost_usd = round(self.run.cost_usd + cost, 8)
        return round(cost, 8)

    def _round(self, c: Completion, cost: float | None) -> None:
        r = {
            "kind": "step",
            "model": self.s.model,
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens,
            "cached_tokens": c.cached_tokens,
            "cost_usd": cost,
        }
        self.rs.add_round(self.run.id, r, self.api.env.now_iso())

    def _retried(self, r: Retry) -> None:
        """A failed model request: recorded (with any text a cut stream had sent), and said."""
        kind, model = self._calling
        row = {"kind": f"{kind} failed", "model": model, "attempt": r.attempt,
               "error": self.secrets.redact(r.error[:4000]),
               "partial": self.secrets.redact(r.partial)}  # fmt: skip
        self.rs.add_round(self.run.id, row, self.api.env.now_iso())
        self.progress.retry(r)

    def _over_budget(self) -> str | None:
        if self.s.max_tokens and self.run.tokens >= self.s.max_tokens:
            return f"token budget reached ({self.run.tokens} of {self.s.max_tokens} tokens)"
        cost = self.total_cost()
        if self.s.max_cost_usd and cost is not None and cost >= self.s.max_cost_usd:
            return f"cost budget reached (${cost:.4f} of ${self.s.max_cost_usd:g})"
        return None

    def total_cost(self) -> float | None:
        """The orchestrator's cost plus its sessions' (the known parts: a lower bound when
        ``cost_parts`` counts unpriced ones), or None when no part is priced."""
        return self.cost_parts()[0]

    def cost_parts(self, rows: list[dict[str, Any]] | None = None) -> tuple[float | None, int]:
        """(the sum of the priced parts or None if none is, how many parts are unpriced): the
        orchestrator's own tokens and each session it started are one part each."""
        rows = self.own_sessions() if rows is None else rows
        costs = [self.run.cost_usd] + [r.get("cost_usd") for r in rows]
        known = [c for c in costs if isinstance(c, (int, float))]
        total = round(sum(known), 8) if known else None
        partial = sum(1 for r in rows if r.get("cost_complete") is False and r.get("cost_usd"))
        return total, len(costs) - len(known) + partial

    def own_sessions(self, status: str | None = None) -> list[dict[str, Any]]:
        if not self.api.has_sessions():
            return []
        return [r for r in self.api.sessions(status) if r.get("source") == self.run.source]

    def _stop(self, status: str, reason: str | None) -> str:
        self.run.status, self.run.stop_reason = status, self.secrets.redact(reason)
        rows = self.own_sessions()
        self.run.sessions = [
            {
                "id": r["id"],
                "name": r.get("name"),
                "status": r["status"],
                "cost_usd": r.get("cost_usd"),
                "task": short(r.get("task"), 120),
            }
            for r in rows
        ]
        self.run.total_cost_usd, self.run.unpriced_parts = self.cost_parts(rows)
        self._save()
        return status

    def _append(self, message: dict[str, Any]) -> None:
        """One message onto the transcript (secrets redacted): in memory and, in one insert,
        in the store."""
        message = self.secrets.redact(message)
        self.messages.append(message)
        self.run.updated_at = self.api.env.now_iso()
        self.rs.append(self.run, message)

    def _save(self) -> None:
        self.run.updated_at = self.api.env.now_iso()
        self.rs.save_run(self.run)


# ---------------------------------------------------------------------------- entry point
def start(api: Zwarm, task: str | None, resume: str | None, flags: Mapping[str, Any]) -> Prepared:
    """Create or reopen a run (not yet locked) with its settings and transcript.

    Takes the API key out of ``api``'s environment: call it once per ``api``.
    """
    try:
        return _start(api, task, resume, flags)
    finally:
        _forget_key(api)


def _start(api: Zwarm, task: str | None, resume: str | None, flags: Mapping[str, Any]) -> Prepared:
    if resume is None:
        if not task or not task.strip():
            raise InvalidInput("give a TASK, or --resume RUN")
        s = resolve_settings(api, flags)
        rs = open_store(api, create=True)
        assert rs is not None
        now = api.env.now_iso()
        rid = new_run_id(api, rs.run_ids())
        run = Run(rid, task, s.model, s.base_url, str(api.env.cwd), now, now)
        _keep_settings(run, s)
        messages = [
            {"role": "system", "content": system_prompt(api)},
            {"role": "user", "content": task},
        ]
        rs.create(run, messages)
        return Prepared(rs, run, messages, s, resumed=False)
    rs, rid = find_run(api, resume)
    run = rs.load(rid)
    if run.status == "finished" and not task:
        raise OrchestratorError(
            f"run {run.id} already finished; give a TASK to continue it with a new instruction"
        )
    s = resolve_settings(api, flags, run)
    _keep_settings(run, s)
    return Prepared(rs, run, rs.transcript(rid), s, resumed=True, follow_up=task)


def _keep_settings(run: Run, s: Settings) -> None:
    """What a resumed run keeps unless flags change it: model, endpoint, budgets."""
    run.model, run.base_url = s.model, s.base_url
    run.max_tokens, run.max_cost_usd = s.max_tokens, s.max_cost_usd


@dataclass
class Prepared:
    rs: RunStore
    run: Run
    messages: list[dict[str, Any]]
    settings: Settings
    resumed: bool
    follow_up: str | None = None


def execute(api: Zwarm, p: Prepared, llm: ChatLLM, progress: Progress) -> Run:
    """Run ``p`` to its end (holding its lock); the final ``Run``."""
    with p.rs.lock(p.run.id):
        if p.resumed:
            p.run, p.messages = p.rs.load(p.run.id), p.rs.transcript(p.run.id)  # under the lock
            _keep_settings(p.run, p.settings)
            before = len(p.messages)
            repair(p.messages)
            if p.follow_up:
                p.messages.append({"role": "user", "content": p.follow_up})
            for m in p.messages[before:]:
                p.rs.append(p.run, m)
        progress.start(p.run, p.settings, p.resumed)
        progress.note(sandbox_line(api))
        orch = Orchestrator(api, p.rs, p.run, p.messages, llm, p.settings, progress)
        orch.go()
        progress.end(p.run, p.run.total_cost_usd)
        return p.run


def start_compaction(api: Zwarm, ref: str, flags: Mapping[str, Any]) -> Prepared:
    """The run ``ref`` and the settings to compact it with (its model and endpoint, as a
    resume would use); takes the API key out of ``api``'s environment, as ``start`` does."""
    try:
        rs, rid = find_run(api, ref)
        run = rs.load(rid)
        return Prepared(rs, run, [], resolve_settings(api, flags, run), resumed=True)
    finally:
        _forget_key(api)


def compact_now(api: Zwarm, llm: ChatLLM, p: Prepared, progress: Progress) -> compaction.Outcome:
    """``zwarm orchestrate --compact RUN``: compact run ``p`` now, by hand (its lock held:
    refused while it runs)."""
    with p.rs.lock(p.run.id):
        p.run, p.messages = p.rs.load(p.run.id), p.rs.transcript(p.run.id)
        orch = Orchestrator(api, p.rs, p.run, p.messages, llm, p.settings, progress)
        return orch.compact("manual")
