"""``zwarm orchestrate``: the built-in orchestrator loop over an OpenAI-compatible endpoint.

Owns the loop (LLM call -> tool calls -> results -> ... -> final summary), its system prompt,
its limits (steps per invocation; tokens and cost over the whole run), and the run directory
``.zwarm/orchestrator/<run>/`` (``run.json``: the run's state; ``messages.json``: the whole
chat transcript) that ``--resume`` continues from. Must stay true:
- every tool call goes through ``tools.Toolbox`` (the shared tools plus ``bash``), with
  ``source = "orchestrate:<run>"``; a failing tool is a result the LLM reads, never a crash;
- both files are rewritten atomically after every LLM reply and every tool result, so a crash
  or Ctrl-C loses at most the call in flight; ``--resume`` answers tool calls left unanswered;
- one process runs a run at a time (``flock`` on the run's ``.lock``);
- the run's token and cost budgets are kept in ``run.json`` and apply on ``--resume`` unless a
  flag sets them anew; a total cost with unpriced parts is a lower bound and says so
  (``cost_parts``: ``total_cost_usd`` with ``unpriced_parts``), never a partial sum as a total;
- the API key is read from the environment once, when the run starts (``start``), held only in
  memory (``Settings.api_key``, never in a repr or a file), and ``ZWARM_ORCH_API_KEY`` is then
  removed from the API's environment, so no session or bash command started by the run gets
  it (``guard`` says why and what happens to a shared ``OPENAI_API_KEY``);
- it reaches the API through ``Zwarm``'s public methods only (never ``store``/``config``);
- ``openai`` and ``rich`` are imported only here, only when a run starts (``zwarm --help`` and
  the other commands never import them).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from zwarm.agents import list_price
from zwarm.errors import InvalidInput, ZwarmError
from zwarm.orchestrator.bash import BASH_TOOL
from zwarm.orchestrator.guard import ORCH_KEY_VAR, without_key
from zwarm.orchestrator.tools import Result, Toolbox, allowed_roots, schemas, short, to_json
from zwarm.store import atomic_write

if TYPE_CHECKING:
    from zwarm.api import Zwarm

_RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")
_RUN_REF = re.compile(r"^[0-9a-f-]{1,40}$")
EXIT = {"finished": 0, "step_limit": 3, "budget": 3}
INTERRUPTED_RESULT = (
    "this tool call was interrupted before it returned (the run was stopped); check "
    "list_sessions before repeating it"
)


class OrchestratorError(ZwarmError):
    """The orchestrator cannot run (configuration, endpoint, run directory)."""


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


def resolve_settings(api: Zwarm, flags: Mapping[str, Any], run: Run | None = None) -> Settings:
    """Flags > (when resuming) the run's own model, URL and budgets > ZWARM_ORCH_* env >
    config. A run's token and cost budgets are kept in the run: a resumed run keeps them
    unless a flag sets them anew."""
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
    key = env.get(ORCH_KEY_VAR) or env.get(key_var) or ""
    if not key and not base_url:
        raise OrchestratorError(
            f"no API key: set {key_var} (or {ORCH_KEY_VAR}), or point "
            "--base-url at an endpoint that needs none"
        )
    return Settings(
        model=model,
        base_url=base_url or None,
        api_key=key or "not-needed",
        max_steps=_limit(flags.get("max_steps"), cfg("max_steps")),
        max_tokens=_limit(flags.get("max_tokens"), _kept(run, "max_tokens", cfg)),
        max_cost_usd=float(_pick(flags.get("max_cost_usd"), _kept(run, "max_cost_usd", cfg)) or 0),
        price=cfg("prices").get(model) or list_price(model),
    )


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
    run.json is read back from disk: a value that is not a non-negative number is refused."""
    value = getattr(run, key, None) if run is not None else None
    if value is None:
        return cfg(key)
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < 0:
        raise OrchestratorError(f"run {run.id if run else '?'} is damaged: {key} is {value!r}")
    return value


# ---------------------------------------------------------------------------- the run on disk
@dataclass
class Run:
    """A run's state (``run.json``). ``steps``/usage/cost add up over every invocation."""

    id: str
    task: str
    model: str
    base_url: str | None
    cwd: str
    created_at: str
    updated_at: str
    status: str = "running"  # running | finished | step_limit | budget | error | interrupted
    steps: int = 0
    invocations: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0  # the orchestrator LLM's own; None once any step is unpriced
    max_tokens: int | None = None  # the run's budgets (0: none), kept for --resume
    max_cost_usd: float | None = None
    total_cost_usd: float | None = None  # orchestrator + sessions, the priced parts (at stop)
    unpriced_parts: int = 0  # parts of that total whose cost is unknown (it is a lower bound)
    nudged: bool = False
    summary: str | None = None
    stop_reason: str | None = None
    sessions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def source(self) -> str:
        return f"orchestrate:{self.id}"

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "source": self.source, "total_tokens": self.tokens}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Run:
        names = cls.__dataclass_fields__
        try:
            return cls(**{k: v for k, v in d.items() if k in names})
        except TypeError as e:
            raise OrchestratorError(f"run.json is damaged: {e}") from None


class RunDir:
    """``.zwarm/orchestrator/<run>/``: run.json, messages.json and a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def run_id(self) -> str:
        return self.path.name

    def load(self) -> tuple[Run, list[dict[str, Any]]]:
        try:
            meta = json.loads((self.path / "run.json").read_bytes())
            messages = json.loads((self.path / "messages.json").read_bytes())
        except (OSError, ValueError) as e:
            raise OrchestratorError(f"cannot read run {self.run_id}: {e}") from None
        if not isinstance(meta, dict) or not isinstance(messages, list):
            raise OrchestratorError(f"run {self.run_id} is damaged")
        return Run.from_dict(meta), messages

    def save(self, run: Run, messages: list[dict[str, Any]]) -> None:
        atomic_write(self.path / "messages.json", _dump(messages))
        atomic_write(self.path / "run.json", _dump(run.to_dict()))

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise OrchestratorError(
                    f"run {self.run_id} is being run by another zwarm process"
                ) from None
            yield
        finally:
            os.close(fd)


def _dump(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8")


def runs_root(api: Zwarm) -> Path:
    return api.state_dir / "orchestrator"


def new_run_dir(api: Zwarm) -> RunDir:
    api.ensure_state_dir()
    root = runs_root(api)
    root.mkdir(mode=0o700, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(api.env.clock()))
    for _ in range(100):
        path = root / f"{stamp}-{secrets.token_hex(2)}"
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return RunDir(path)
    raise OrchestratorError("could not create a run directory")  # pragma: no cover


def list_runs(api: Zwarm) -> list[str]:
    try:
        names = os.listdir(runs_root(api))
    except OSError:
        return []
    return sorted(n for n in names if _RUN_ID.match(n))


def find_run(api: Zwarm, ref: str) -> RunDir:
    """The run named by a full id, a unique prefix, or ``last`` (the newest)."""
    runs = list_runs(api)
    if ref == "last":
        if not runs:
            raise OrchestratorError("there is no orchestrator run to resume")
        return RunDir(runs_root(api) / runs[-1])
    if not _RUN_REF.match(ref):
        raise InvalidInput(f"invalid run id {ref!r}")
    found = [r for r in runs if r.startswith(ref)]
    if len(found) != 1:
        what = "no run matches" if not found else f"{len(found)} runs match"
        raise OrchestratorError(f"{what} {ref!r} (runs are in {runs_root(api)})")
    return RunDir(runs_root(api) / found[0])


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


# ---------------------------------------------------------------------------- the LLM
@dataclass
class Completion:
    message: dict[str, Any]  # the assistant message, chat format
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0


class ChatLLM(Protocol):
    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> Completion: ...


class OpenAIChat:
    """Chat Completions through the official ``openai`` client (any compatible endpoint)."""

    def __init__(self, s: Settings) -> None:
        try:
            import openai
        except ImportError:
            raise OrchestratorError(
                "zwarm orchestrate needs the openai package: pip install 'zwarm[orchestrate]'"
            ) from None
        self.openai = openai
        self.model = s.model
        self.where = s.base_url or "the OpenAI API"
        self.client = openai.OpenAI(
            api_key=s.api_key, base_url=s.base_url, max_retries=2, timeout=600.0
        )

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Completion:
        try:
            resp = self.client.chat.completions.create(
                model=self.model,
                messages=cast(Any, messages),
                tools=cast(Any, tools),
            )
        except self.openai.APIError as e:
            raise OrchestratorError(f"the model request to {self.where} failed: {e}") from None
        if not resp.choices:
            raise OrchestratorError(f"{self.where} returned no choices")
        return _completion(resp)


def _completion(resp: Any) -> Completion:
    msg = resp.choices[0].message
    out: dict[str, Any] = {"role": "assistant", "content": msg.content}
    calls = [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.function.name, "arguments": c.function.arguments or "{}"},
        }
        for c in msg.tool_calls or []
        if getattr(c, "function", None) is not None
    ]
    if calls:
        out["tool_calls"] = calls
    u = resp.usage
    details = getattr(u, "prompt_tokens_details", None) if u else None
    return Completion(
        out,
        u.prompt_tokens if u else None,
        u.completion_tokens if u else None,
        int(getattr(details, "cached_tokens", 0) or 0),
    )


# ---------------------------------------------------------------------------- the prompt
SYSTEM_PROMPT = """\
You are an orchestrator. You do not write code or edit files yourself: you hand work to coding \
agents (OpenAI Codex or Claude Code) that run as background sessions, keep several going at \
once when tasks are independent, check on them, steer them, verify their work, and report.

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


# ---------------------------------------------------------------------------- progress
class Progress(Protocol):
    def start(self, run: Run, s: Settings, resumed: bool) -> None: ...
    def busy(self, what: str) -> contextlib.AbstractContextManager[Any]: ...
    def said(self, text: str) -> None: ...
    def tool(self, name: str, arguments: str, result: Result) -> None: ...
    def end(self, run: Run, total_cost: float | None) -> None: ...


class Quiet:
    def start(self, run: Run, s: Settings, resumed: bool) -> None:
        pass

    def busy(self, what: str) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def said(self, text: str) -> None:
        pass

    def tool(self, name: str, arguments: str, result: Result) -> None:
        pass

    def end(self, run: Run, total_cost: float | None) -> None:
        pass


# ---------------------------------------------------------------------------- the loop
class Orchestrator:
    def __init__(
        self,
        api: Zwarm,
        rd: RunDir,
        run: Run,
        messages: list[dict[str, Any]],
        llm: ChatLLM,
        settings: Settings,
        progress: Progress,
    ) -> None:
        self.api, self.rd, self.run, self.messages = api, rd, run, messages
        self.llm, self.s, self.progress = llm, settings, progress
        self.toolbox = Toolbox(api, run.source, extra=[BASH_TOOL])
        self.tool_defs = schemas("openai", self.toolbox.tools.values())

    def go(self) -> str:
        """Run until the LLM finishes, a limit is reached, or an error; returns the status."""
        self.run.status, self.run.stop_reason = "running", None
        self.run.invocations += 1
        self._save()
        try:
            return self._loop()
        except KeyboardInterrupt:
            self._stop("interrupted", "interrupted by the user")
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
        with self.progress.busy(f"step {self.run.steps + 1}: waiting for the model…"):
            c = self.llm.complete(self.messages, self.tool_defs)
        self.run.steps += 1
        self._account(c)
        self.messages.append(c.message)
        self._save()
        calls = c.message.get("tool_calls") or []
        if calls and c.message.get("content"):
            self.progress.said(str(c.message["content"]))
        for call in calls:
            self._call(call)
        if calls:
            return False
        if self._nudge():
            return False
        self.run.summary = str(c.message.get("content") or "")
        return True

    def _call(self, call: Mapping[str, Any]) -> None:
        fn = call.get("function") or {}
        name, args = str(fn.get("name")), fn.get("arguments")
        with self.progress.busy(f"{name} running…"):
            result = self.toolbox.dispatch(name, args)
        self.messages.append(
            {"role": "tool", "tool_call_id": call.get("id"), "content": to_json(result)}
        )
        self._save()
        self.progress.tool(name, str(args or ""), result)

    def _nudge(self) -> bool:
        running = self.own_sessions("running")
        if not running or self.run.nudged:
            return False
        self.run.nudged = True
        ids = ", ".join(r["id"] for r in running)
        self.messages.append({"role": "user", "content": NUDGE.format(ids=ids)})
        self._save()
        return True

    def _account(self, c: Completion) -> None:
        p, o = c.prompt_tokens or 0, c.completion_tokens or 0
        self.run.prompt_tokens += p
        self.run.completion_tokens += o
        if self.s.price is None or c.prompt_tokens is None:
            self.run.cost_usd = None
        elif self.run.cost_usd is not None:
            pr = self.s.price
            fresh, cached = max(p - c.cached_tokens, 0), min(c.cached_tokens, p)
            cost = fresh * pr["input"] + cached * pr["cached_input"] + o * pr["output"]
            self.run.cost_usd = round(self.run.cost_usd + cost / 1_000_000, 8)

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
        return total, len(costs) - len(known)

    def own_sessions(self, status: str | None = None) -> list[dict[str, Any]]:
        if not self.api.has_sessions():
            return []
        return [r for r in self.api.sessions(status) if r.get("source") == self.run.source]

    def _stop(self, status: str, reason: str | None) -> str:
        self.run.status, self.run.stop_reason = status, reason
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

    def _save(self) -> None:
        self.run.updated_at = self.api.env.now_iso()
        self.rd.save(self.run, self.messages)


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
        rd = new_run_dir(api)
        now = api.env.now_iso()
        run = Run(rd.run_id, task, s.model, s.base_url, str(api.env.cwd), now, now)
        _keep_settings(run, s)
        messages = [
            {"role": "system", "content": system_prompt(api)},
            {"role": "user", "content": task},
        ]
        rd.save(run, messages)
        return Prepared(rd, run, messages, s, resumed=False)
    rd = find_run(api, resume)
    run, messages = rd.load()
    if run.status == "finished" and not task:
        raise OrchestratorError(
            f"run {run.id} already finished; give a TASK to continue it with a new instruction"
        )
    s = resolve_settings(api, flags, run)
    _keep_settings(run, s)
    return Prepared(rd, run, messages, s, resumed=True, follow_up=task)


def _keep_settings(run: Run, s: Settings) -> None:
    """What a resumed run keeps unless flags change it: model, endpoint, budgets."""
    run.model, run.base_url = s.model, s.base_url
    run.max_tokens, run.max_cost_usd = s.max_tokens, s.max_cost_usd


@dataclass
class Prepared:
    rd: RunDir
    run: Run
    messages: list[dict[str, Any]]
    settings: Settings
    resumed: bool
    follow_up: str | None = None


def execute(api: Zwarm, p: Prepared, llm: ChatLLM, progress: Progress) -> Run:
    """Run ``p`` to its end (holding its lock); the final ``Run``."""
    with p.rd.lock():
        if p.resumed:
            p.run, p.messages = p.rd.load()  # re-read under the lock
            _keep_settings(p.run, p.settings)
            repair(p.messages)
            if p.follow_up:
                p.messages.append({"role": "user", "content": p.follow_up})
        progress.start(p.run, p.settings, p.resumed)
        orch = Orchestrator(api, p.rd, p.run, p.messages, llm, p.settings, progress)
        orch.go()
        progress.end(p.run, p.run.total_cost_usd)
        return p.run


# ---------------------------------------------------------------------------- terminal output
def describe(name: str, r: Result) -> str:
    """One line saying what a tool call returned."""
    if not r.get("ok"):
        return f"error: {r.get('error')}"
    sid = str(r.get("session_id") or "")[:8]
    if name == "delegate":
        return f"session {sid} started ({r.get('adapter')})"
    if name == "converse":
        return f"session {sid}: turn {r.get('turn')} {r.get('state')}"
    if name == "check_session":
        return f"session {sid}: {r.get('status')}, {r.get('turns')} turn(s)"
    if name == "list_sessions":
        return f"{r.get('total')} sessions, {len(r.get('finished_since_last_look') or [])} new"
    if name == "get_trajectory":
        return f"session {sid}: {len(r.get('steps') or [])} of {r.get('total_steps')} steps"
    if name == "wait":
        done = ", ".join(f"{f['session_id'][:8]} {f['status']}" for f in r.get("finished") or [])
        state = "timed out" if r.get("timed_out") else "done"
        return f"{state}; finished: {done or 'none'}; running: {len(r.get('running') or [])}"
    if name == "end_session":
        return f"session {sid}: killed={r.get('killed')} deleted={r.get('deleted')}"
    if name == "bash":
        extra = " (timed out)" if r.get("timed_out") else ""
        return f"exit {r.get('exit_code')}{extra}, {len(str(r.get('output') or ''))} chars"
    return "ok"


class RichProgress:
    """Live progress on stderr (rich); the final summary goes to stdout, separately."""

    def __init__(self) -> None:
        from rich.console import Console

        self.c = Console(stderr=True, highlight=False, soft_wrap=True)

    @staticmethod
    def _esc(text: Any) -> str:
        from rich.markup import escape

        from zwarm.cli.text import clean  # what an LLM wrote never drives the terminal

        return str(escape(clean(text)))

    def start(self, run: Run, s: Settings, resumed: bool) -> None:
        verb = "resuming run" if resumed else "run"
        where = s.base_url or "api.openai.com"
        self.c.print(
            f"[bold]zwarm orchestrate[/] {verb} [cyan]{run.id}[/] · model "
            f"{self._esc(s.model)} · {self._esc(where)} · up to {plural(s.max_steps, 'step')}"
        )

    def busy(self, what: str) -> contextlib.AbstractContextManager[Any]:
        return self.c.status(what)

    def said(self, text: str) -> None:
        self.c.print(f"[dim]{self._esc(short(text.strip(), 600))}[/]")

    def tool(self, name: str, arguments: str, result: Result) -> None:
        style = "green" if result.get("ok") else "red"
        args = " ".join(arguments.split())
        args = args if len(args) <= 140 else args[:139] + "…"
        self.c.print(
            f"  [magenta]{name}[/] [dim]{self._esc(args)}[/] [{style}]→ "
            f"{self._esc(describe(name, result))}[/]"
        )

    def end(self, run: Run, total_cost: float | None) -> None:
        style = "green" if run.status == "finished" else "yellow"
        self.c.print(
            f"[{style}]{_ENDED.get(run.status, run.status)}[/] after {plural(run.steps, 'step')}"
            f" · {plural(run.tokens, 'orchestrator token')} · cost "
            f"{self._esc(cost_text(total_cost, run.unpriced_parts))} (orchestrator + agents)"
            f" · {plural(len(run.sessions), 'session')}"
        )


_ENDED = {
    "finished": "finished",
    "step_limit": "stopped by the step limit",
    "budget": "stopped by a budget",
    "error": "stopped by an error",
    "interrupted": "interrupted",
}


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def cost_text(total: float | None, unpriced: int) -> str:
    """A total that says when it is a lower bound: ``$0.0123``, ``≥ $0.0075, 2 parts unpriced``,
    or ``? (3 parts unpriced)`` when no part has a price."""
    if total is None:
        return f"? ({plural(unpriced, 'part')} unpriced)" if unpriced else "?"
    if not unpriced:
        return f"${total:.4f}"
    return f"≥ ${total:.4f}, {plural(unpriced, 'part')} unpriced"
