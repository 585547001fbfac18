"""zwarm's data model: statuses, usage, turn outcomes, and the session record.

Owns the shape of everything zwarm stores and prints. Must stay true:
- this module imports only the standard library (it is on every command's start-up path);
- ``to_dict``/``from_dict`` round-trip exactly, and ``from_dict`` raises ``ValueError``
  (never ``KeyError``/``TypeError``) on anything malformed, so a damaged meta.json is reported,
  not crashed on;
- a meta.json whose ``schema_version`` is newer than ``SCHEMA_VERSION`` is refused, never
  rewritten.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 1


class Status(enum.StrEnum):
    """State of a turn, and of a session (the state of its latest turn)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    KILLED = "killed"

    @property
    def finished(self) -> bool:
        return self is not Status.RUNNING


USAGE_KEYS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "total_tokens",
)


@dataclass(frozen=True)
class Usage:
    """Token usage. ``input_tokens`` includes the cached part (OpenAI convention).

    ``total_tokens`` is input + output.
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def minus(self, other: Usage) -> Usage:
        """``self - other``, floored at zero per field (a cumulative counter never goes back)."""
        return Usage(
            max(0, self.input_tokens - other.input_tokens),
            max(0, self.cached_input_tokens - other.cached_input_tokens),
            max(0, self.output_tokens - other.output_tokens),
            max(0, self.reasoning_tokens - other.reasoning_tokens),
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "total_tokens": self.total_tokens,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Usage:
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ValueError("usage is not an object")
        vals = []
        for key in USAGE_KEYS[:4]:
            v = data.get(key, 0)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"usage.{key} is not a non-negative integer")
            vals.append(v)
        return cls(*vals)


@dataclass
class TurnOutcome:
    """What an adapter read from one turn's event stream (see ``scan_outcome``).

    ``status`` is None when the stream has no terminal event (agent killed, crashed, cut off).
    ``usage`` and ``cost_usd`` are exactly as the agent reported them; whether they are
    cumulative over a resumed session is the adapter's knowledge (``BaseSessionManager``
    flags), applied by the manager when it computes per-turn deltas.
    """

    status: Status | None = None
    final_message: str | None = None
    error: str | None = None
    agent_session_id: str | None = None
    model: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class QueuedMessage:
    message: str
    context: str
    queued_at: str
    timeout: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "context": self.context,
            "queued_at": self.queued_at,
            "timeout": self.timeout,
        }

    @classmethod
    def from_dict(cls, d: Any) -> QueuedMessage:
        if not isinstance(d, dict):
            raise ValueError("queued message is not an object")
        return cls(
            message=_str(d, "message"),
            context=_str(d, "context"),
            queued_at=_str(d, "queued_at"),
            timeout=_opt_num(d, "timeout"),
        )


@dataclass
class ProcRef:
    """A process identity: pid plus its start time (psutil ``create_time``), never a bare pid."""

    pid: int
    create_time: float

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "create_time": self.create_time}

    @classmethod
    def from_dict(cls, d: Any) -> ProcRef | None:
        if d is None:
            return None
        if not isinstance(d, dict):
            raise ValueError("process reference is not an object")
        pid, ct = d.get("pid"), d.get("create_time")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise ValueError("process pid is not a positive integer")
        if not isinstance(ct, (int, float)) or isinstance(ct, bool):
            raise ValueError("process create_time is not a number")
        return cls(pid, float(ct))


@dataclass
class Turn:
    """One turn: one agent process run, from prompt to exit."""

    n: int
    status: Status
    message: str  # the user's message for this turn (the task, for turn 1)
    context: str  # "task" for turn 1, else "summary" or "native"
    started_at: str
    ended_at: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    timeout: float | None = None
    usage: Usage = field(default_factory=Usage)  # this turn only (a delta)
    reported_usage: Usage | None = None  # as the agent reported it (maybe cumulative)
    cost_usd: float | None = None  # this turn only
    reported_cost_usd: float | None = None  # as reported (claude: cumulative on resume)
    final_message: str | None = None
    error: str | None = None
    agent_session_id: str | None = None
    supervisor: ProcRef | None = None
    agent: ProcRef | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "status": self.status.value,
            "message": self.message,
            "context": self.context,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timeout": self.timeout,
            "usage": self.usage.to_dict(),
            "reported_usage": self.reported_usage.to_dict() if self.reported_usage else None,
            "cost_usd": self.cost_usd,
            "reported_cost_usd": self.reported_cost_usd,
            "final_message": self.final_message,
            "error": self.error,
            "agent_session_id": self.agent_session_id,
            "supervisor": self.supervisor.to_dict() if self.supervisor else None,
            "agent": self.agent.to_dict() if self.agent else None,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Turn:
        if not isinstance(d, dict):
            raise ValueError("turn is not an object")
        n = d.get("n")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError("turn number is not a positive integer")
        rep = d.get("reported_usage")
        return cls(
            n=n,
            status=_status(d.get("status")),
            message=_str(d, "message"),
            context=_str(d, "context"),
            started_at=_str(d, "started_at"),
            ended_at=_opt_str(d, "ended_at"),
            exit_code=_opt_int(d, "exit_code"),
            signal=_opt_int(d, "signal"),
            timeout=_opt_num(d, "timeout"),
            usage=Usage.from_dict(d.get("usage")),
            reported_usage=Usage.from_dict(rep) if rep is not None else None,
            cost_usd=_opt_num(d, "cost_usd"),
            reported_cost_usd=_opt_num(d, "reported_cost_usd"),
            final_message=_opt_str(d, "final_message"),
            error=_opt_str(d, "error"),
            agent_session_id=_opt_str(d, "agent_session_id"),
            supervisor=ProcRef.from_dict(d.get("supervisor")),
            agent=ProcRef.from_dict(d.get("agent")),
        )


@dataclass
class Session:
    """A session's whole state, as kept in ``meta.json``.

    ``status``, ``usage``, ``cost_usd``, ``last_message`` and ``error`` are derived from
    ``turns`` by ``refresh()``; they are stored so that ``ls`` reads one small file per session.
    """

    id: str
    adapter: str
    task: str  # the first turn's prompt, possibly cut (``task_truncated``); full text on disk
    cwd: str
    created_at: str
    updated_at: str
    name: str | None = None
    model: str | None = None
    requested_model: str | None = None
    context_mode: str = "summary"
    source: str = "cli"
    dangerous: bool = False  # the agent runs without sandbox/permission checks (shown in ls)
    bypass: bool = False  # pass the agent's bypass flag (explicit --dangerous or config)
    permissions: str = ""  # the sandbox/permission flags the agent runs with, for show
    task_truncated: bool = False
    agent_session_id: str | None = None
    turns: list[Turn] = field(default_factory=list)
    queue: list[QueuedMessage] = field(default_factory=list)
    # derived (see refresh)
    status: Status = Status.RUNNING
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    cost_source: str = "unknown"  # reported | estimated | unknown
    last_message: str | None = None
    error: str | None = None

    @property
    def current(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def refresh(self) -> None:
        """Recompute the derived fields from ``turns``."""
        last = self.current
        self.status = last.status if last else Status.FAILED
        total = Usage()
        for t in self.turns:
            total = total + t.usage
        self.usage = total
        finished = [t for t in self.turns if t.status is not Status.RUNNING]
        if finished and all(t.cost_usd is not None for t in finished):
            self.cost_usd = round(sum(t.cost_usd or 0.0 for t in finished), 8)
        else:
            self.cost_usd = None  # unknown: never shown as zero
        msgs = [t.final_message for t in self.turns if t.final_message]
        self.last_message = msgs[-1] if msgs else None
        self.error = last.error if last and last.status is not Status.COMPLETED else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "name": self.name,
            "adapter": self.adapter,
            "model": self.model,
            "requested_model": self.requested_model,
            "status": self.status.value,
            "task": self.task,
            "task_truncated": self.task_truncated,
            "cwd": self.cwd,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "context_mode": self.context_mode,
            "source": self.source,
            "dangerous": self.dangerous,
            "bypass": self.bypass,
            "permissions": self.permissions,
            "agent_session_id": self.agent_session_id,
            "usage": self.usage.to_dict(),
            "cost_usd": self.cost_usd,
            "cost_source": self.cost_source,
            "last_message": self.last_message,
            "error": self.error,
            "queue": [q.to_dict() for q in self.queue],
            "turns": [t.to_dict() for t in self.turns],
        }

    @classmethod
    def from_dict(cls, d: Any) -> Session:
        if not isinstance(d, dict):
            raise ValueError("meta.json is not a JSON object")
        version = d.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError("meta.json has no schema_version")
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"meta.json has schema_version {version}, newer than this zwarm "
                f"understands ({SCHEMA_VERSION}); upgrade zwarm"
            )
        turns = d.get("turns")
        queue = d.get("queue", [])
        if not isinstance(turns, list) or not isinstance(queue, list):
            raise ValueError("meta.json turns/queue are not lists")
        s = cls(
            id=_str(d, "id"),
            adapter=_str(d, "adapter"),
            task=_str(d, "task"),
            cwd=_str(d, "cwd"),
            created_at=_str(d, "created_at"),
            updated_at=_str(d, "updated_at"),
            name=_opt_str(d, "name"),
            model=_opt_str(d, "model"),
            requested_model=_opt_str(d, "requested_model"),
            context_mode=_str(d, "context_mode"),
            source=_str(d, "source"),
            dangerous=bool(d.get("dangerous", False)),
            bypass=bool(d.get("bypass", False)),
            permissions=str(d.get("permissions", "")),
            task_truncated=bool(d.get("task_truncated", False)),
            agent_session_id=_opt_str(d, "agent_session_id"),
            turns=[Turn.from_dict(t) for t in turns],
            queue=[QueuedMessage.from_dict(q) for q in queue],
            cost_source=_str(d, "cost_source"),
        )
        _status(d.get("status"))  # an unknown stored status marks the file damaged
        s.refresh()
        return s


SESSION_FIELDS = tuple(f.name for f in fields(Session))


def _status(v: Any) -> Status:
    try:
        return Status(v)
    except ValueError:
        raise ValueError(f"unknown status {v!r}") from None


def _str(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise ValueError(f"field {key!r} is missing or not a string")
    return v


def _opt_str(d: dict[str, Any], key: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise ValueError(f"field {key!r} is not a string")
    return v


def _opt_int(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise ValueError(f"field {key!r} is not an integer")
    return v


def _opt_num(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise ValueError(f"field {key!r} is not a number")
    return float(v)
