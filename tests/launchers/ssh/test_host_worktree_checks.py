"""A session whose worktree is on an ssh host takes follow-ups although its path is not on
this machine (it is the host's); one removed (``rm``) does not."""

from __future__ import annotations

import pytest

from zwarm.errors import WorkspaceError
from zwarm.model import Session
from zwarm.model.records import Workspace
from zwarm.ops import checks

NOW = "2026-11-28T08:00:00Z"


def _session(ws: Workspace) -> Session:
    return Session(id="0f0f0f0f-0000-4000-8000-000000000001", adapter="codex", task="t",
                   cwd=ws.tree, created_at=NOW, updated_at=NOW, workspace=ws)  # fmt: skip


@pytest.mark.unit
def test_a_host_worktree_not_on_this_machine_takes_a_follow_up() -> None:
    ws = Workspace("worktree", "/nowhere/here/repo", "/nowhere/here/wt/x", "zwarm/x", "a" * 40,
                   host="a")  # fmt: skip
    checks.worktree(_session(ws))  # its path is the host's: not looked for here
    ws.removed = True
    with pytest.raises(WorkspaceError, match="was removed"):
        checks.worktree(_session(ws))
    local = Workspace("worktree", "/nowhere/here/repo", "/nowhere/here/wt/x", "zwarm/x", "a" * 40)
    with pytest.raises(WorkspaceError, match="was removed"):
        checks.worktree(_session(local))
