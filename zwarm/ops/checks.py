"""Checks before a turn starts: what ``spawn``, ``inject``, ``retry`` and the waits refuse
in one line, before anything is created or started.

Owns the checks of a request (``request``: its prompt, time limit and context mode; a request
built in Python was checked by nothing, one a front end decoded is checked again), of a
session that is to take a new turn (``worktree``: its own worktree still there; ``workdir``:
its working directory still there, and a zwarm 3.x record only once confirmed; ``budget``: no
budget of its own or of a subtree it is in passed), and of a time limit (``timeout``). Must
stay true: each raises a ``ZwarmError`` subclass whose message is one line naming what is
wrong; none writes, starts or signals anything.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from zwarm import legacy
from zwarm.errors import InvalidInput, SessionStateError
from zwarm.model import Session

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.model.requests import MessageRequest, SpawnRequest


def budget(api: Zwarm, s: Session) -> None:
    """A session past its budget, or in a subtree past one (``engine.tree``), takes no new
    turn (spawn a new one)."""
    from zwarm.engine import limits, tree

    over = limits.over_budget(s) or tree.over_budget(api.store, s)
    if over is not None:
        raise SessionStateError(f"session {s.id}: {over}; it takes no new turn")


def worktree(s: Session) -> None:
    """A session whose own worktree is gone cannot run another turn (one on a host: removed
    by ``rm``; its path is the host's, not looked for here)."""
    ws = s.workspace
    gone = ws is not None and (ws.removed or (ws.host is None and not os.path.isdir(ws.tree)))
    if ws is not None and ws.mode == "worktree" and gone:
        from zwarm.errors import WorkspaceError

        raise WorkspaceError(
            f"session {s.id}'s worktree {ws.tree} was removed: it cannot run again "
            "(start a new session)"
        )


def prompt(text: str) -> str:
    """``text`` if an agent can take it as a prompt, else ``InvalidInput`` saying why."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the prompt is empty")
    if "\x00" in text:
        raise InvalidInput("the prompt contains NUL bytes, which no agent accepts")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: a byte like 0xff in argv, or JSON's
        raise InvalidInput(f"the prompt is not valid UTF-8 (character {e.start})") from None
    return text


def workdir(s: Session) -> None:
    """A follow-up's working directory is still there (its removal is named now, not as an
    agent that could not start); one removed after this is named by its supervisor. A zwarm
    3.x record is continued only once confirmed (``legacy.continuable``)."""
    legacy.continuable(s)
    if not os.path.isdir(s.cwd):
        raise InvalidInput(
            f"session {s.id}: its working directory {s.cwd!r} no longer exists: nothing started"
        )


def timeout(timeout: float | None) -> float | None:
    """``timeout`` in seconds, within the bounds ``meta.json``'s schema keeps (``Seconds``)."""
    if timeout is None:
        return None
    from zwarm.engine import limits
    from zwarm.model.records import Seconds

    return float(limits.need("timeout", timeout, Seconds))


def request(req: SpawnRequest | MessageRequest) -> None:
    """``req``'s prompt, time limit and context mode, or ``InvalidInput`` saying what is
    wrong: a request built in Python was checked by nothing (a Struct's constructor checks
    no bound), and one a front end decoded is checked again here."""
    from zwarm.model.requests import CONTEXT_MODES, SpawnRequest

    prompt(req.task if isinstance(req, SpawnRequest) else req.message)
    timeout(req.timeout)
    if req.context is not None and req.context not in CONTEXT_MODES:
        modes = " or ".join(CONTEXT_MODES)
        raise InvalidInput(f"unknown context mode {req.context!r} (use {modes})")
