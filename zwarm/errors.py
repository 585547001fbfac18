"""zwarm's exceptions: the only way the core reports a problem to its callers.

Every error carries the fields a caller needs (the session ref, the file, the exit code) and a
one-line message fit to show a user as-is. The CLI maps ``ZwarmError`` to a one-line message and
exit code 1 in exactly one place (``zwarm.cli.output.error_line``, for the click commands and
the fast path alike); the tool layer maps it to a tool error result.

An error about a request's fields (``zwarm.model.requests``) is made by ``naming``: its
``str`` names each field as the field itself (the JSON key of the HTTP API and the tools, the
keyword of the Python API) and ``spelled`` as a front end names it (the CLI: its option, from
``zwarm.cli.options``), so no front end reads another's spelling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

Spell = Callable[[str], str]  # a front end's name for a request field


class ZwarmError(Exception):
    """Base of every error zwarm raises on purpose. ``str(e)`` is one line for a user."""

    exit_code = 1
    say: Callable[[Spell], str] | None = None  # set by ``naming``

    def spelled(self, spell: Spell) -> str:
        """The message with each request field it names spelled by ``spell``; ``str(e)``
        spells them as the fields themselves."""
        return str(self) if self.say is None else self.say(spell)


E = TypeVar("E", bound=ZwarmError)


def naming(cls: Callable[[str], E], say: Callable[[Spell], str]) -> E:
    """``cls``'s error whose message ``say`` writes, naming request fields through the
    ``Spell`` it is given (``say(lambda: ...)``: ``f"{n('after_any')} needs {n('after')}"``)."""
    e = cls(say(str))
    e.say = say
    return e


class ConfigError(ZwarmError):
    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class SessionNotFound(ZwarmError):
    def __init__(self, ref: str, hint: str | None = None) -> None:
        self.ref = ref
        super().__init__(f"no session matches {ref!r}" + (f" ({hint})" if hint else ""))


class AmbiguousSession(ZwarmError):
    """``ref`` names several sessions: ``candidates`` (ids); ``named`` is the one whose name it
    is, if any (the others' ids start with it)."""

    def __init__(self, ref: str, candidates: list[str], named: str | None = None) -> None:
        self.ref = ref
        self.candidates = candidates
        self.named = named
        labels = [f"{c} (named {ref!r})" if c == named else c for c in candidates[:10]]
        shown = ", ".join(labels) + (" ..." if len(candidates) > 10 else "")
        super().__init__(
            f"{ref!r} matches {len(candidates)} sessions: {shown}; use a longer prefix or the id"
        )


class PartlyFailed(ZwarmError):
    """An operation on several sessions did what it could and failed for some: ``done`` is
    what it would have returned, ``failed`` the (reference, error) of each one that failed."""

    def __init__(self, done: list[Any], failed: list[tuple[str, ZwarmError]]) -> None:
        self.done = done
        self.failed = failed
        first = failed[0][1] if failed else ""
        super().__init__(f"{len(failed)} of {len(done) + len(failed)} failed: {first}")


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


class SandboxUnavailable(ZwarmError):
    """zwarm's sandbox cannot hold on this machine (``zwarm.sandbox.check``): nothing started."""


class ChecksRefused(ZwarmError):
    """Checks (commands that run code the agents wrote) cannot run here: zwarm's sandbox is off
    or cannot hold, and the user did not opt in to unsandboxed checks (``zwarm.sandbox.run``).
    The message says how to opt in; nothing ran."""


class StoreError(ZwarmError):
    """The state directory could not be read or written (permissions, disk full)."""


class WriteFailed(StoreError):
    """A state file could not be written (a full disk, a quota, a file size limit): the old
    file is intact, nothing of the write is left."""


class OrchestratorError(ZwarmError):
    """The built-in orchestrator cannot run (configuration, endpoint, its run store)."""


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


class LoosenedLimit(ZwarmError):
    """A config file loosens a limit (a cap, a budget, a depth, a price) past the value the
    user trusted, or past the default when nothing was trusted (see ``zwarm.trust``). The
    values come rendered (``zwarm.trust.shown``)."""

    def __init__(self, path: str, key: str, trusted: str, new: str, more: list[str]) -> None:
        import os
        import shlex

        self.path = path
        self.key = key
        self.keys = [key, *more]
        fix = f"zwarm --state-dir {shlex.quote(os.path.dirname(path))} trust"
        also = f" (and {', '.join(more)})" if more else ""
        super().__init__(
            f"{path}: {key} = {new} loosens the trusted {trusted}{also}; "
            f"if you meant it, `{fix}` accepts it"
        )


class UnsafeStateDir(ZwarmError):
    """A state dir that another user could have written (not yours, group/world-writable, a
    symlink) and that the user has not allowed (see ``zwarm.trust``)."""

    def __init__(self, path: str, owner: int | None, problems: list[str], fix: str) -> None:
        self.path = path
        self.owner = owner
        self.problems = problems
        super().__init__(f"refusing state dir {path}: {'; '.join(problems)}; {fix}")


class WorkspaceError(ZwarmError):
    """A session's git workspace cannot do what was asked (no repository, a bad branch or
    base, a worktree that is gone, a target checkout with changes in the way ...)."""


class GitError(WorkspaceError):
    """A git command failed: ``command`` (git's argv after ``git``), ``code``, ``stderr``."""

    def __init__(
        self, what: str, command: list[str] | None = None, code: int = 1, stderr: str = ""
    ) -> None:
        self.command = command or []
        self.code = code
        self.stderr = stderr
        super().__init__(what)


class WouldLoseWork(WorkspaceError):
    """Removing a session's worktree and branch would lose work: ``commits`` not merged
    anywhere (one line each) and ``files`` changed but not committed."""

    def __init__(self, session_id: str, commits: list[str], files: list[str]) -> None:
        self.session_id = session_id
        self.commits = commits
        self.files = files
        what = []
        if commits:
            what.append(f"{len(commits)} unmerged commit(s): " + "; ".join(commits[:5]))
        if files:
            what.append(f"{len(files)} uncommitted file(s): " + ", ".join(files[:10]))
        lost = (
            f"worktree has work that would be lost ({' / '.join(what)}); "
            "merge it (zwarm merge) or use --force"
        )
        self.why = f"its {lost}"  # what ``rm --finished`` says after "kept ID: " (the id once)
        super().__init__(f"session {session_id}'s {lost}")


class MergeConflict(WorkspaceError):
    """A merge stopped on conflicts and was aborted (nothing merged): ``files`` conflicted;
    ``after``: what was committed on the session's branch and what to do next."""

    def __init__(self, branch: str, into: str, files: list[str], after: str = "") -> None:
        self.branch = branch
        self.into = into
        self.files = files
        super().__init__(
            f"merging {branch} into {into} conflicts in {', '.join(files) or 'some files'}; "
            "nothing was merged" + (f", {after}" if after else "")
        )


class TrustFileError(ConfigError):
    """The per-user trust file is unreadable, malformed or unsafe (``path``: the file)."""
