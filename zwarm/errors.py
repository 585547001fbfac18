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


class UntrustedConfig(ZwarmError):
    """A config file sets security-relevant keys (agent command, env, ...) to non-default
    values and the user has not trusted that file, or it changed since (see ``zwarm.trust``)."""

    def __init__(self, path: str, keys: list[str], changed: bool = False) -> None:
        import os
        import shlex

        self.path = path
        self.keys = keys
        self.changed = changed
        fix = f"review it, then run: zwarm --state-dir {shlex.quote(os.path.dirname(path))} trust"
        sets = ", ".join(keys)
        if changed:
            what = f"{path} changed since you trusted it (it sets {sets})"
        else:
            what = f"{path} sets {sets}, which zwarm uses only from a config file you trust"
        super().__init__(f"{what}; {fix}")


class UnsafeStateDir(ZwarmError):
    """A state dir that another user could have written (not yours, group/world-writable, a
    symlink) and that the user has not allowed (see ``zwarm.trust``)."""

    def __init__(self, path: str, owner: int | None, problems: list[str], fix: str) -> None:
        self.path = path
        self.owner = owner
        self.problems = problems
        super().__init__(f"refusing state dir {path}: {'; '.join(problems)}; {fix}")


class TrustFileError(ConfigError):
    """The per-user trust file is unreadable, malformed or unsafe (``path``: the file)."""
