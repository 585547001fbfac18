"""Statuses and failure reasons: the words zwarm uses for where a turn or a session stands.

Owns ``Status``, the state groups (defined once, here) and the typed failure ``Reason`` codes.
Must stay true: this module imports only the standard library; a session's status is the
status of its latest turn; every finished status is final (``engine.transitions`` enforces it).
"""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """State of a turn, and of a session (the state of its latest turn)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    KILLED = "killed"

    @property
    def finished(self) -> bool:
        return self in FINISHED


ACTIVE = frozenset({Status.RUNNING})
FINISHED = frozenset({Status.COMPLETED, Status.FAILED, Status.KILLED})


class Reason(enum.StrEnum):
    """Why a turn did not complete: a code a program can branch on (the message says more)."""

    AGENT_ERROR = "agent_error"  # the agent reported a failure, or exited without a result
    TIMEOUT = "timeout"  # the turn's time limit ran out; the agent was stopped
    KILLED = "killed"  # stopped by the user (zwarm kill, rm --force)
    SUPERVISOR_LOST = "supervisor_lost"  # the process that ran the turn died, or never started
    START_FAILED = "start_failed"  # the agent program could not be started
    SETUP_FAILED = "setup_failed"  # preparing the session's worktree ([workspace]) failed
