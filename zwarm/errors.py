"""zwarm's exceptions: the only way the core reports a problem to its callers.

Every error carries the fields a caller needs (the session ref, the file, the exit code) and a
one-line message fit to show a user as-is. The CLI maps ``ZwarmError`` to a one-line message and
exit code 1 in exactly one place (``zwarm.cli``); the tool layer maps it to a tool error result.
"""

from __future__ import annotations


class ZwarmError(Exception):
    """Base of every error zwarm raises on purpose. ``str(e)`` is one line for a user."""

    exit_code = 1


class ConfigError(ZwarmError):
    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class SessionNotFound(ZwarmError):
    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(f"no session matches {ref!r}")


class AmbiguousSession(ZwarmError):
    def __init__(self, ref: str, candidates: list[str]) -> None:
        self.ref = ref
        self.candidates = candidates
        shown = ", ".join(candidates[:10]) + (" ..." if len(candidates) > 10 else "")
        super().__init__(f"{ref!r} matches {len(candidates)} sessions: {shown}")


class InvalidRef(ZwarmError):
    def __init__(self, ref: str, why: str) -> None:
        self.ref = ref
        super().__init__(f"invalid session id or name {ref!r}: {why}")


class DamagedSession(ZwarmError):
    def __init__(self, session_id: str, problem: str) -> None:
        self.session_id = session_id
        self.problem = problem
        super().__init__(f"session {session_id} is damaged: {problem}")


class SessionStateError(ZwarmError):
    """An operation that the session's current state does not allow (e.g. rm of a running one)."""


class AgentNotFound(ZwarmError):
    def __init__(self, adapter: str, command: str, why: str = "not found on PATH") -> None:
        self.adapter = adapter
        self.command = command
        super().__init__(f"{adapter} agent binary {command!r} {why}")


class InvalidInput(ZwarmError):
    """Bad user input that is not a session reference (prompt, cwd, name, option value)."""


class StoreError(ZwarmError):
    """The state directory could not be read or written (permissions, disk full)."""
