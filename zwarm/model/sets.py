"""A best-of set's records: ``BestOf`` (the task, the base, the checks, the protected paths and
the attempts) and ``Evidence`` (one per attempt's turn: what zwarm's checks found), both kept
where agents cannot write (``zwarm.store.sets``), with
``Attempt`` (a session's place in a set, ``Session.attempt``) declared in ``records``.

Owns the schema of both files and their bounds; every reader decodes through it, so a file
an agent or another process wrote either yields a valid record or is refused. Must stay true:
- no field has a default a file could lean on to smuggle a value; unknown fields are refused;
- a set's id matches ``SET_ID`` (it reaches paths); paths it names are relative and have no
  ``..`` component;
- like every module that defines a Struct here, no postponed annotations (``records``).
"""

from typing import Annotated, Literal

from msgspec import Meta, Struct

from zwarm.model.records import (
    AGENT_NAME,
    MAX_ATTEMPTS,
    SET_ID,
    AbsPath,
    AttemptNo,
    Changes,
    Seconds,
    SessionId,
    Sha,
    When,
)

MAX_CHECKS = 32
MAX_PROTECT = 64
TAIL_CHARS = 4000  # of a check's output, kept in its evidence

SetId = Annotated[str, Meta(pattern=SET_ID)]
Command = Annotated[str, Meta(min_length=1, max_length=4096)]
# a path in the repository, relative, with no ``..`` component and no NUL
Protected = Annotated[
    str, Meta(pattern=r"^(?!/)(?!\.\.(/|\Z))(?!.*/\.\.(/|\Z))[^\x00]+\Z", max_length=4096)
]
_Short = Annotated[str, Meta(max_length=200)]


class Member(Struct, forbid_unknown_fields=True):
    """One attempt as its set records it."""

    n: AttemptNo
    session: SessionId
    adapter: Annotated[str, Meta(pattern=AGENT_NAME)]
    model: _Short | None


class Judgement(Struct, forbid_unknown_fields=True):
    """An LLM's tie-break among attempts whose evidence was equal within the tolerance
    (``pick --judge``): which model, among which attempts, whom it chose and why."""

    model: _Short
    among: Annotated[list[AttemptNo], Meta(max_length=MAX_ATTEMPTS)]
    attempt: AttemptNo
    reason: Annotated[str, Meta(max_length=8000)]
    at: When


class BestOf(Struct, forbid_unknown_fields=True):
    """A best-of set (``zwarm spawn --best-of N``)."""

    schema_version: Literal[1]
    id: SetId
    state_dir: AbsPath  # the state dir it belongs to (its real path)
    task: Annotated[str, Meta(max_length=4 * 1024 * 1024)]
    created_at: When
    repo: AbsPath  # the repository every attempt's worktree belongs to
    base: Sha  # the commit every attempt started from (protected paths come back from it)
    size: AttemptNo  # N, as asked
    checks: Annotated[list[Command], Meta(max_length=MAX_CHECKS)]
    check_timeout_s: Seconds
    protect: Annotated[list[Protected], Meta(max_length=MAX_PROTECT)]
    sandboxed: bool  # where the checks run, settled at spawn (else: opted-in unsandboxed)
    budget_usd: Annotated[float, Meta(gt=0, le=1e9)] | None
    attempts: Annotated[list[Member], Meta(max_length=MAX_ATTEMPTS)]
    picked: AttemptNo | None
    picked_at: When | None
    judge: Judgement | None  # the tie-break that chose the picked attempt, if one did


class CheckRun(Struct, forbid_unknown_fields=True):
    """One check's run, as ``zwarm.sandbox.run.CheckResult`` reported it."""

    command: Command
    exit_code: Annotated[int, Meta(ge=-(2**31), le=2**31)] | None
    duration_s: Annotated[float, Meta(ge=0, le=1e9)]
    timed_out: bool
    output_tail: Annotated[str, Meta(max_length=4 * TAIL_CHARS)]
    sandboxed: bool

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Evidence(Struct, forbid_unknown_fields=True):
    """What zwarm found when one attempt's turn ended: its checks, the protected paths it had
    changed (restored from the base before the checks ran), the change stats, and how long
    zwarm's own bookkeeping took (``overhead_s``, the checks' run time aside)."""

    schema_version: Literal[1]
    session: SessionId
    turn: Annotated[int, Meta(ge=1, le=1_000_000)]
    recorded_at: When
    checks: Annotated[list[CheckRun], Meta(max_length=MAX_CHECKS)]
    protect_changed: Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(max_length=1000)]
    changes: Changes | None
    overhead_s: Annotated[float, Meta(ge=0, le=1e9)]
