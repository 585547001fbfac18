"""Statuses and failure reasons: the words zwarm uses for where a turn or a session stands.

Owns ``Status``, the state groups (defined once, here), zwarm's own typed failure ``Reason``
codes and the shape of any reason a record holds (``REASON_CODE``): one of ``Reason``, or a
launcher's own, ``<launcher>_<word>``, declared by that launcher (``Launcher.reasons``, e.g.
``slurm_timeout``; ``zwarm.launchers`` says what each means and how ``ls`` labels it; one no
installed launcher declares, its launcher since uninstalled, is kept as it is and shown as its
words). Must stay true: this module imports only the standard library; a session's status is the
status of its latest turn; every finished status is final (``engine.transitions`` enforces it).

The groups: ``RUNS`` (an agent process runs, or is meant to: it holds a slot under the caps
and its launcher is checked for life), ``WAITING`` (no process: the scheduler starts it later,
``zwarm.engine.scheduler``), ``ACTIVE`` (either: not finished), ``FINISHED`` (final).
A listed row may also say ``DAMAGED`` (its session record cannot be read; not a ``Status``):
``ROW_STATUSES`` are the words a row's status can be, ``IDLE`` those with nothing to watch.
Every other module uses these groups, never a spelled-out set of status words (the web
dashboard, ``serve/static/app.js``, mirrors ``ACTIVE`` and ``RUNS`` and says so).
"""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """State of a turn, and of a session (the state of its latest turn)."""

    RUNNING = "running"
    STALLED = "stalled"  # running, but its agent has written nothing for [limits] stall_s
    QUEUED = "queued"  # waiting for a slot under a cap, or for the sessions it runs after
    PARKED = "parked"  # stopped by a usage or rate limit; resumed after ``parked_until``
    COMPLETED = "completed"
    FAILED = "failed"
    KILLED = "killed"

    @property
    def finished(self) -> bool:
        return self in FINISHED


RUNS = frozenset({Status.RUNNING, Status.STALLED})
WAITING = frozenset({Status.QUEUED, Status.PARKED})
ACTIVE = RUNS | WAITING
FINISHED = frozenset({Status.COMPLETED, Status.FAILED, Status.KILLED})
DAMAGED = "damaged"  # a listed row's status when its session record cannot be read
ROW_STATUSES = (*(s.value for s in Status), DAMAGED)  # in Status's order, for --status
IDLE: frozenset[str] = FINISHED | {DAMAGED}  # listed rows with nothing to watch


class Reason(enum.StrEnum):
    """Why a turn did not complete: a code a program can branch on (the message says more)."""

    AGENT_ERROR = "agent_error"  # the agent reported a failure, or exited without a result
    TIMEOUT = "timeout"  # the turn's time limit ran out; the agent was stopped
    KILLED = "killed"  # stopped by the user (zwarm kill, rm --force)
    SUPERVISOR_LOST = "supervisor_lost"  # the process that ran the turn died, or never started
    START_FAILED = "start_failed"  # the agent program could not be started
    SETUP_FAILED = "setup_failed"  # preparing the session's worktree ([workspace]) failed
    # read from the agent's own output by its adapter (``zwarm.agents``):
    RATE_LIMITED = "rate_limited"  # the API refused requests for now (429); retry after a while
    USAGE_LIMIT = "usage_limit"  # the plan's usage limit, quota or credit is used up
    OVERLOADED = "overloaded"  # the API was overloaded or failed on its side (529, 5xx)
    AUTH_FAILED = "auth_failed"  # the API refused the credentials (401, 403, not logged in)
    CONTEXT_OVERFLOW = "context_overflow"  # the conversation no longer fits the model's context
    # zwarm's fleet control:
    BUDGET_EXCEEDED = "budget_exceeded"  # the session used more than its --max-cost/--max-tokens
    STALLED = "stalled"  # the agent wrote nothing for stall_s and [limits] on_stall = "kill"
    DEPENDENCY_FAILED = "dependency_failed"  # a session it runs --after did not complete
    # zwarm's sandbox (zwarm.sandbox.limits):
    OUT_OF_MEMORY = "out_of_memory"  # the kernel killed its processes at its memory limit


# any reason a record holds: a ``Reason``, or a launcher's own ``<launcher>_<word>``
REASON_CODE = r"^[a-z][a-z0-9_-]{0,63}\Z"
