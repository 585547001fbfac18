"""The session record as kept in ``meta.json``: typed ``msgspec`` structs with their limits.

Owns the one schema of every field zwarm stores about a session, and the order listing rows
come in (``order_key``, which relies on the patterns of times and ids). Every reader decodes through
it (``zwarm.model.schema``), so a file either yields a valid ``Session`` or is reported damaged.
Must stay true:
- every field has a type and, where it matters, bounds (lengths, ranges, patterns): numbers are
  finite, ids and agent session ids match strict patterns (they reach argv and paths), times are
  ISO 8601, paths are absolute, so nothing a file says can crash or mislead a reader;
- derived fields (``status``, ``usage``, ``cost_usd``, ``cost_complete``, ``last_message``,
  ``error``, ``reason``) are recomputed from ``turns`` (and, for turns moved to the session's
  history file, from the ``archive`` summary kept with them) by ``refresh()`` on every load:
  what a file claims for them is never believed;
- turn ``n`` is found by ``Session.turn(n)`` and the number of turns is ``Session.count``, never
  by list position: a session loaded without its history (``head``) holds turn 1 and the turns
  after the archived ones only (``Archive``);
- this module imports only the standard library, msgspec and ``zwarm.system.boot`` (which
  declares ``ProcRef``, a process identity: it is on every command's path);
- its annotations are objects, not postponed strings (no ``from __future__ import
  annotations``), as in every module that defines a ``Struct``: msgspec would compile and
  evaluate each string when it first decodes the type, ~30 µs each, on every command's path.
"""

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from zwarm.model.status import REASON_CODE, RUNS, Reason, Status
from zwarm.system.boot import ProcRef

# ASCII digits only (``\d`` is any Unicode digit, which no time parser takes); no capture groups:
# a time is checked ~15 times per meta.json read, and this form is checked ~25% faster
ISO = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-9]{2})?\Z"
)
SESSION_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z"
AGENT_SESSION_ID = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z"
NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"
RUN_ID = r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{4}\Z"  # a built-in orchestrator run (zwarm.orchestrator)
MAX_DEPTH = 1000  # spawn_depth's bound in a file; [limits] max_spawn_depth refuses far sooner
AGENT_NAME = r"^[a-z][a-z0-9_-]{0,31}\Z"

Count = Annotated[int, Meta(ge=0, le=2**53)]
Money = Annotated[float, Meta(ge=0, le=1e9)]
Seconds = Annotated[float, Meta(gt=0, le=1e9)]
When = Annotated[str, Meta(pattern=ISO, max_length=40)]
Text = Annotated[str, Meta(max_length=4 * 1024 * 1024)]
Short = Annotated[str, Meta(max_length=4096)]
AbsPath = Annotated[str, Meta(pattern=r"^/[^\x00]*\Z", max_length=4096)]
AgentSessionId = Annotated[str, Meta(pattern=AGENT_SESSION_ID)]
Context = Literal["task", "summary", "native"]
Priority = Annotated[int, Meta(ge=-1_000_000, le=1_000_000)]
SessionId = Annotated[str, Meta(pattern=SESSION_ID)]
Sha = Annotated[str, Meta(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?\Z")]  # a git object id
# why a turn did not complete: a ``Reason``, or its launcher's own (``status.REASON_CODE``)
ReasonCode = Annotated[str, Meta(pattern=REASON_CODE)]


def out_of_bounds(value: Any, typ: Any, positive: bool = False) -> str | None:
    """What ``value`` must be to pass the bounded number type ``typ`` (``Count``, ``Money``,
    ``Seconds``, ``Priority``; greater than 0 too if ``positive``, as a type bounded by ``gt``
    is), e.g. "a whole number from 1 to 9007199254740992"; None if it passes. Every number a
    caller gives that a session keeps (spawn's options through the CLI, HTTP and tools, the
    config's defaults) is checked here, against the bounds this schema declares, before
    anything is written: a value the schema would refuse to read back never makes a
    damaged session."""
    base, meta = typ.__origin__, typ.__metadata__[0]
    try:
        ok = msgspec.convert(value, typ, strict=True) is not None
    except msgspec.ValidationError:
        ok = False
    if ok and not (positive and value <= 0):
        return None
    num = _figure
    if base is int:
        low = 1 if positive and meta.ge is not None and meta.ge < 1 else meta.ge
        return f"a whole number from {num(low)} to {num(meta.le)}"
    if positive or meta.gt is not None:
        return f"a positive number up to {num(meta.le)}"
    return f"a number from {num(meta.ge)} to {num(meta.le)}"


def _figure(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# a git branch name as ``git check-ref-format --branch`` accepts it (checked again at creation)
Branch = Annotated[
    str, Meta(pattern=r"^(?!-)(?!.*\.\.)(?!.*@\{)(?!.*//)[^\x00-\x20\x7f~^:?*\[\\]{1,200}\Z")
]
RelPath = Annotated[str, Meta(pattern=r"^(?!/)[^\x00]+\Z", max_length=4096)]  # in a repository
Handle = Annotated[
    dict[Annotated[str, Meta(max_length=64)], Annotated[str, Meta(max_length=1024)]],
    Meta(max_length=32),
]


def order_key(row: Mapping[str, Any]) -> str:
    """Where a listing row (``model.rows.row``) comes in a listing: oldest first, then by id; a row
    with no creation time (a damaged session) first. One string, compared faster than a
    tuple (sorting 50,000 rows: 1.0 against 1.4 us a row): a creation time is ISO 8601
    (``When``) and an id a UUID (``SessionId``), so neither holds the NUL that parts them,
    and NUL sorts before every other character: the order is exactly that of
    ``(created_at or "", id)``."""
    key: str = (row["created_at"] or "") + "\0" + row["id"]
    return key


class Usage(Struct, kw_only=False):
    """Token usage. ``input_tokens`` includes the cached part (OpenAI convention).

    ``total_tokens`` is input + output, recomputed whatever a file says.
    """

    input_tokens: Count = 0
    cached_input_tokens: Count = 0
    output_tokens: Count = 0
    reasoning_tokens: Count = 0
    total_tokens: Count = 0

    def __post_init__(self) -> None:
        self.total_tokens = self.input_tokens + self.output_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.input_tokens + other.input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def minus(self, other: "Usage") -> "Usage":
        """``self - other``, floored at zero per field (a cumulative counter never goes back)."""
        return Usage(
            max(0, self.input_tokens - other.input_tokens),
            max(0, self.cached_input_tokens - other.cached_input_tokens),
            max(0, self.output_tokens - other.output_tokens),
            max(0, self.reasoning_tokens - other.reasoning_tokens),
        )

    def to_dict(self) -> dict[str, int]:
        return msgspec.structs.asdict(self)


class QueuedMessage(Struct):
    message: Text
    context: Context
    queued_at: When
    timeout: Seconds | None = None

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


class Changes(Struct, kw_only=False):
    """What changed in a working tree: files, lines added, lines removed (git's numstat)."""

    files: Count = 0
    added: Count = 0
    removed: Count = 0


# zwarm's own sandbox of a turn (``zwarm.sandbox``): none, or bubblewrap
SandboxMode = Literal["off", "bwrap"]


class Workspace(Struct):
    """The git repository a session works in (``zwarm.engine.workspace``). In ``worktree``
    mode ``tree`` is the session's own worktree on ``branch``, made from commit ``base``; in
    ``shared`` mode ``tree`` is the checkout the session's directory is in. What runs git
    there comes from the session's launch pin, never from these fields alone."""

    mode: Literal["shared", "worktree"]
    repo: AbsPath  # the repository's main working tree (on ``host``, if set)
    tree: AbsPath  # the working tree the agent writes (and zwarm snapshots)
    branch: Branch | None = None
    base: Sha | None = None
    removed: bool = False  # the worktree and branch were removed (setup failed, rm)
    squashed_tip: Sha | None = None  # the branch tip a ``merge --squash`` brought in
    # the ssh host (``[hosts.NAME]``) whose repository and worktree these are; None: here
    host: Annotated[str, Meta(pattern=r"^[a-z][a-z0-9_-]{0,63}\Z")] | None = None


class Comment(Struct):
    """A review comment on a session's diff, sent to the agent with the next follow-up."""

    id: Annotated[int, Meta(ge=1, le=1_000_000)]
    path: RelPath
    line: Annotated[int, Meta(ge=1, le=2**31)]
    text: Annotated[str, Meta(max_length=65536)]
    created_at: When
    context: Annotated[str, Meta(max_length=16384)] = ""  # diff lines around it, when made
    sent_turn: Annotated[int, Meta(ge=1, le=1_000_000)] | None = None  # sent with this turn


class Resumable(Struct, kw_only=False):
    """What a later turn that resumes an agent session natively needs of that session's
    latest archived turn: what the agent had reported (maybe cumulative) by then."""

    reported_usage: Usage | None = None
    reported_cost_usd: Money | None = None


class Spend(Struct, array_like=True):
    """When an archived turn ended and what it cost (what ``max_cost_per_day`` counts)."""

    ended_at: When
    cost_usd: Money
    account: Annotated[str, Meta(pattern=NAME)] | None = None  # the account it ran on


class Archive(Struct):
    """The finished turns moved out of ``meta.json`` into the session's history file
    (``zwarm.store.history``): turns 2 .. ``turns`` + 1, in ``bytes`` bytes of it, and what
    ``refresh`` and the engine need of them without reading it (their sums, the latest final
    message, each one's change stats, what a native resume needs). Turn 1 is never archived.
    Kept so that a turn's cost to its supervisor does not grow with the turns before it."""

    turns: Annotated[int, Meta(ge=0, le=1_000_000)] = 0
    bytes: Count = 0
    usage: Usage = msgspec.field(default_factory=Usage)
    cost_usd: Money = 0.0  # the priced finished turns' costs
    priced: Count = 0  # finished turns that ran and have a cost
    unpriced: Count = 0  # finished turns that ran and have no cost
    last_message: Text | None = None
    changes: Annotated[list[Changes | None], Meta(max_length=1_000_000)] = msgspec.field(
        default_factory=list
    )
    resumes: Annotated[dict[AgentSessionId, Resumable], Meta(max_length=1000)] = msgspec.field(
        default_factory=dict
    )
    first_before: Sha | None = None  # the earliest before-snapshot among them
    recent: Annotated[list[Spend], Meta(max_length=100_000)] = msgspec.field(
        default_factory=list
    )  # the costs of those that ended in the 2 days before they were archived


class Turn(Struct):
    """One turn: one agent process run, from prompt to exit."""

    n: Annotated[int, Meta(ge=1, le=1_000_000)]
    status: Status
    message: Text  # the user's message for this turn (the task, for turn 1)
    context: Context  # "task" for turn 1, else "summary" or "native"
    started_at: When
    ended_at: When | None = None
    exit_code: Annotated[int, Meta(ge=-(2**31), le=2**31)] | None = None
    signal: Annotated[int, Meta(ge=0, le=128)] | None = None
    timeout: Seconds | None = None
    usage: Usage = msgspec.field(default_factory=Usage)  # this turn only (a delta)
    reported_usage: Usage | None = None  # as the agent reported it (maybe cumulative)
    cost_usd: Money | None = None  # this turn only
    reported_cost_usd: Money | None = None  # as reported (claude: cumulative on resume)
    final_message: Text | None = None
    error: Text | None = None
    reason: ReasonCode | None = None  # why it did not complete (typed; ``error`` says more)
    agent_session_id: AgentSessionId | None = None
    launcher: Annotated[str, Meta(pattern=AGENT_NAME)] = "local"  # what runs it (runtime)
    supervisor: ProcRef | None = None  # the local launcher's supervisor process
    agent: ProcRef | None = None  # the agent process, as its supervisor started it
    handle: Handle | None = None  # other launchers' facts (e.g. a cluster job id); opaque here
    before: Sha | None = None  # snapshot of the session's tree before the turn (its git repo)
    after: Sha | None = None  # ... and after it
    changes: Changes | None = None  # what the turn changed (before -> after)
    # fleet control (zwarm.engine.scheduler); ``started_at`` of a queued turn is when it was
    # made, and becomes when it started
    started: bool = True  # its agent was started (False while queued, or ended unstarted)
    queued_at: When | None = None  # when it was queued (FIFO order among equal priorities)
    wait: Short | None = None  # why a queued turn waits (written by the scheduler)
    parked_until: When | None = None  # a parked turn is resumed after this
    quiet_since: When | None = None  # a stalled turn's agent has written nothing since
    retry_of: Annotated[int, Meta(ge=1, le=1_000_000)] | None = None  # re-runs that turn
    # how its sandbox's limits held (zwarm.sandbox.limits: "memory 2G via cgroup v1, ..."),
    # each one that did not saying why; None: no limit was set
    limits: Short | None = None
    # the account of its agent it ran on ([accounts.<agent>.<name>]: zwarm.engine.accounts),
    # and, for a turn re-run on another account after a usage limit, the account it left
    account: Annotated[str, Meta(pattern=NAME)] | None = None
    switched_from: Annotated[str, Meta(pattern=NAME)] | None = None

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


SET_ID = r"^set-[0-9a-f]{8}\Z"  # a best-of set (``zwarm.model.sets``)
MAX_ATTEMPTS = 16
AttemptNo = Annotated[int, Meta(ge=1, le=MAX_ATTEMPTS)]


class Attempt(Struct, forbid_unknown_fields=True):
    """A session's place in a best-of set (``zwarm.model.sets``; rows: ``set``, ``attempt``,
    distinct from ``group``, the ``[groups.NAME]`` caps)."""

    set: Annotated[str, Meta(pattern=SET_ID)]
    n: AttemptNo


class Session(Struct):
    """A session's whole state, as kept in ``meta.json``.

    ``status``, ``usage``, ``cost_usd``, ``cost_complete``, ``last_message``, ``error`` and
    ``reason`` are derived from ``turns`` by ``refresh()``; they are stored so that a listing
    reads one small file. ``cost_usd`` is the sum of the finished turns' known costs (None
    when none is known) and ``cost_complete`` whether every finished turn's cost is known:
    when it is not, ``cost_usd`` is a lower bound (shown ``≥ $X``), never the whole cost. A
    session that ended without any turn having started (a failed dependency, killed while
    queued) cost exactly 0.
    """

    id: Annotated[str, Meta(pattern=SESSION_ID)]
    adapter: Annotated[str, Meta(pattern=AGENT_NAME)]
    task: Text  # the first turn's prompt, possibly cut (``task_truncated``); full text on disk
    cwd: AbsPath
    created_at: When
    updated_at: When
    name: Annotated[str, Meta(pattern=NAME)] | None = None
    model: Short | None = None
    requested_model: Short | None = None
    context_mode: Literal["summary", "native"] = "summary"
    source: Short = "cli"
    # read just now from a zwarm 3.x meta.json (schema 0, ``zwarm.legacy``): never written as
    # it is (``Store.transaction`` refuses it); the first inject, confirmed, migrates it
    imported: Literal["zwarm3"] | None = None
    dangerous: bool = False  # the agent runs without sandbox/permission checks (shown in ls)
    bypass: bool = False  # as recorded; launches use the trusted grant (``engine``), not this
    permissions: Short = ""  # the sandbox/permission flags the agent runs with, for show
    sandbox: SandboxMode = "off"  # zwarm's own sandbox its turns run in (zwarm.sandbox)
    task_truncated: bool = False
    notify: bool = False  # a desktop notification when it ends (spawn --notify; runtime.hooks)
    agent_session_id: AgentSessionId | None = None
    turns: Annotated[list[Turn], Meta(max_length=1_000_000)] = msgspec.field(default_factory=list)
    queue: Annotated[list[QueuedMessage], Meta(max_length=100_000)] = msgspec.field(
        default_factory=list
    )
    workspace: Workspace | None = None  # its git repository, worktree and branch, if any
    changes: Changes | None = None  # what the whole session changed so far (see engine.review)
    comments: Annotated[list[Comment], Meta(max_length=10_000)] = msgspec.field(
        default_factory=list
    )
    # fleet control (zwarm.engine.scheduler), fixed at spawn
    group: Annotated[str, Meta(pattern=NAME)] | None = None  # [groups.NAME] caps and budgets
    priority: Priority = 0  # higher starts first among queued sessions
    after: Annotated[list[SessionId], Meta(max_length=100)] = msgspec.field(default_factory=list)
    after_any: bool = False  # start when ``after`` finish whatever their outcome
    max_cost_usd: Money | None = None  # budget: the whole session's cost
    max_tokens: Count | None = None  # budget: the whole session's total tokens
    stall_s: Seconds | None = None  # a turn silent this long is stalled
    auto_resumes: Count = 0  # times a parked turn was resumed by zwarm ([limits] wait)
    # the account its turns run on (zwarm.engine.accounts): chosen by a scheduler pass, or
    # spawn --account (``account_pinned``); what its agent's env comes from is its launch pin's
    account: Annotated[str, Meta(pattern=NAME)] | None = None
    account_pinned: bool = False
    # delegation (zwarm.engine.tree), fixed at spawn: the session whose agent started this
    # one (verified running then), or the orchestrator run that did; depth 1 is a root (the
    # user's or a run's), a child is its parent's + 1; a linked child is killed and removed
    # with its parent, a detached one is not
    parent_session_id: SessionId | None = None
    parent_run_id: Annotated[str, Meta(pattern=RUN_ID)] | None = None
    spawn_depth: Annotated[int, Meta(ge=1, le=MAX_DEPTH)] = 1
    lifecycle: Literal["linked", "detached"] = "linked"
    attempt: Attempt | None = None  # its place in a best-of set (spawn --best-of)
    # derived (see refresh)
    status: Status = Status.RUNNING
    usage: Usage = msgspec.field(default_factory=Usage)
    cost_usd: Money | None = None
    cost_complete: bool = True  # every finished turn's cost is known (else cost_usd: a part)
    cost_source: Literal["reported", "estimated", "unknown"] = "unknown"
    last_message: Text | None = None
    error: Text | None = None
    reason: ReasonCode | None = None
    archive: Archive | None = None  # turns moved to the history file (``zwarm.store.history``)
    schema_version: int = 3

    @property
    def current(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    @property
    def count(self) -> int:
        """How many turns the session has (archived ones included)."""
        if self.turns:
            return self.turns[-1].n
        return self.archive.turns + 1 if self.archive and self.archive.turns else 0

    @property
    def head_only(self) -> bool:
        """Whether archived turns are left out of ``turns`` (loaded without the history)."""
        a = self.archive
        return a is not None and a.turns > 0 and (len(self.turns) < 2 or self.turns[1].n != 2)

    def turn(self, n: int) -> Turn | None:
        """Turn ``n``, or None if the session has no such turn in memory (an archived turn
        of a session loaded without its history is not)."""
        turns = self.turns
        if 0 < n <= len(turns) and turns[n - 1].n == n:
            return turns[n - 1]
        for t in reversed(turns):
            if t.n == n:
                return t
            if t.n < n:
                break
        return None

    def resumed(self, t: Turn, agent_session_id: str | None) -> Resumable | None:
        """What the latest turn before ``t`` of the agent session ``agent_session_id``
        reported (usage, cost: cumulative for some agents), archived turns included."""
        if not agent_session_id:
            return None
        archived = self.archive.resumes if self.archive and self.head_only else {}
        for prev in reversed(self.turns):
            if prev.n >= t.n:
                continue
            if prev.n == 1 and agent_session_id in archived:
                return archived[agent_session_id]
            if prev.agent_session_id == agent_session_id:
                return Resumable(prev.reported_usage, prev.reported_cost_usd)
        return None

    def spent(self) -> tuple[int, float]:
        """(total tokens, known cost in USD) of every turn, archived ones included; a
        running turn's cost counts once it is recorded."""
        a = self.archive if self.archive is not None and self.head_only else None
        tokens = a.usage.total_tokens if a else 0
        cost = a.cost_usd if a else 0.0
        for t in self.turns:
            tokens += t.usage.total_tokens
            cost += t.cost_usd or 0.0
        return tokens, cost

    def account_costs(self) -> list[tuple[str, float, str | None]]:
        """(ended_at, cost, account) of the finished turns with a cost, latest first (as
        ``ended_costs``): what an account's ``budget_daily`` counts."""
        out = [
            (t.ended_at, t.cost_usd, t.account)
            for t in reversed(self.turns[1:])
            if t.ended_at is not None and t.cost_usd is not None and t.status is not Status.QUEUED
        ]
        if self.archive is not None and self.head_only:
            out += [(r.ended_at, r.cost_usd, r.account) for r in reversed(self.archive.recent)]
        first = self.turns[0] if self.turns else None
        ok = first is not None and first.ended_at and first.cost_usd is not None
        if first is not None and ok and first.status is not Status.QUEUED:
            assert first.ended_at is not None and first.cost_usd is not None
            out.append((first.ended_at, first.cost_usd, first.account))
        return out

    def ended_costs(self) -> list[tuple[str, float]]:
        """(ended_at, cost) of the finished turns with a cost, latest first: the archived
        ones' of the last days (``Archive.recent``) included, in their place."""
        out = [
            (t.ended_at, t.cost_usd)
            for t in reversed(self.turns[1:])
            if t.ended_at is not None and t.cost_usd is not None and t.status is not Status.QUEUED
        ]
        if self.archive is not None and self.head_only:
            out += [(r.ended_at, r.cost_usd) for r in reversed(self.archive.recent)]
        first = self.turns[0] if self.turns else None
        ok = first is not None and first.ended_at and first.cost_usd is not None
        if first is not None and ok and first.status is not Status.QUEUED:
            assert first.ended_at is not None and first.cost_usd is not None
            out.append((first.ended_at, first.cost_usd))
        return out

    def check_numbers(self) -> str | None:
        """What is wrong with the turn numbers, if anything: turn 1 first, then consecutive
        (after the archived ones, when the history is left out)."""
        turns = self.turns
        archived = self.archive.turns if self.archive else 0
        if archived and not turns:
            return "it archives turns but has no turn 1"
        if not turns:  # every session is created with its turn 1: this record lost its turns
            return "it has no turns (every session has its turn 1)"
        expect = 1
        for i, t in enumerate(turns):
            if i == 1 and archived and t.n != 2:
                expect += archived
            if t.n != expect:
                return f"turn {t.n} is where turn {expect} should be"
            expect += 1
        return None

    def refresh(self) -> None:
        """Recompute the derived fields from ``turns`` (and the archive's sums when the
        history is left out), in one pass (every load runs this: ``ls`` once per session)."""
        turns = self.turns
        last = turns[-1] if turns else None
        self.status = last.status if last else Status.FAILED
        a = self.archive if self.archive is not None and self.head_only else None
        i = c = o = r = 0
        costs: list[float] = []
        priced = True  # every finished turn has a cost
        msg = None
        if a is not None:
            u = a.usage
            i, c, o, r = u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens
            costs = [a.cost_usd] if a.priced else []
            priced, msg = not a.unpriced, a.last_message
        for t in turns:
            u = t.usage
            i, c = i + u.input_tokens, c + u.cached_input_tokens
            o, r = o + u.output_tokens, r + u.reasoning_tokens
            if t.started and t.status not in RUNS:
                if t.cost_usd is None:
                    priced = False
                else:
                    costs.append(t.cost_usd)
            if t.final_message and (t.n > 1 or msg is None):
                msg = t.final_message
        if a is None and turns and all(t.status.finished and not t.started for t in turns):
            costs.append(0.0)  # it never ran (a failed dependency, killed queued): nothing billed
        self.usage = Usage(i, c, o, r)
        # the known parts add up; None when no part is known (never shown as zero), and a
        # lower bound (``cost_complete`` False) while some finished turn's cost is unknown
        self.cost_usd = round(sum(costs), 8) if costs else None
        self.cost_complete = priced
        self.last_message = msg
        failed = last is not None and last.status is not Status.COMPLETED
        self.error = last.error if failed and last else None
        self.reason = last.reason if failed and last else None

    def to_dict(self) -> dict[str, Any]:
        """The JSON view of the record (what ``meta.json`` holds)."""
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


class TurnOutcome(Struct):
    """What an agent's parser read from one turn's event stream (see ``Agent.scan_outcome``).

    ``status`` is None when the stream has no terminal event (agent killed, crashed, cut off).
    ``usage`` and ``cost_usd`` are exactly as the agent reported them; whether they are
    cumulative over a resumed session is the agent's knowledge, applied by the engine.
    ``reason`` types a failure from the agent's own output (rate or usage limit, overload,
    auth, context overflow; None: an ordinary agent error); ``retry_after_s`` and ``reset_at``
    (epoch seconds) are when the agent says to try again, if it says.
    """

    status: Status | None = None
    final_message: str | None = None
    error: str | None = None
    agent_session_id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    reason: Reason | None = None
    retry_after_s: float | None = None
    reset_at: float | None = None
    # the stream shows the model never answered: the agent reported the failure before any
    # output of the model (no message, reasoning or tool call), so nothing was billed
    unanswered: bool = False
