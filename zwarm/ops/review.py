"""Review verbs: what a session changed (``diff``, ``diff_text``), comments on it
(``comment``), and bringing it home (``merge``, ``apply``).

Owns the front of review: finding the session's workspace as its launch pin confirms it
(``workspace_of``), the other sessions that wrote the same tree (``overlaps``), and the locking
around a comment or a merge; the git work itself is ``engine.review``'s and
``engine.diffs``'s. Must stay true:
- a workspace is believed only as the session's launch pin confirms it, never from
  meta.json alone;
- no turn starts while a merge runs (it holds the session's lock), and a workspace changed
  meanwhile is refused; ``apply`` is all or nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from zwarm.errors import (
    InvalidInput,
    WorkspaceError,
)
from zwarm.model import Session, Status
from zwarm.model.records import Workspace

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.ops.hostws import OnHost

T = TypeVar("T")


def workspace_of(api: Zwarm, s: Session) -> Workspace:
    """``s``'s git workspace as its launch pin confirms it; ``WorkspaceError`` if none."""
    from zwarm.engine import workspace

    ws = workspace.pinned(s, api.env.environ, api.store.root)
    if ws is None:
        from zwarm.model.schema import ZWARM3_SOURCE

        if s.imported is not None or s.source.startswith(ZWARM3_SOURCE):  # kept none
            raise WorkspaceError(
                f"session {s.id} was made by zwarm 3.x, which recorded no git workspace: "
                "zwarm cannot tell what it changed"
            )
        raise WorkspaceError(
            f"session {s.id} has no git workspace (it was not started in a git repository)"
        )
    return ws


def diff(
    api: Zwarm, ref: str, turn: int | None = None, *, hunks: bool = True, text: bool = False
) -> dict[str, Any]:
    """What turn ``turn`` (default: the whole session) changed: files with status,
    added/removed lines and hunks, totals, and the other sessions that wrote the same
    tree meanwhile (``overlaps``, with a ``note``); with ``text``, the unified diff too."""
    from zwarm.engine import diffs, review, workspace

    s = api.get(ref)
    ws = workspace_of(api, s)
    there = _on_host(api, s, ws, turn)
    if there is not None:
        d, raw = there.diff(s.id, ws, hunks=hunks)
        if text:
            d["text"] = raw.decode("utf-8", "replace")
        return {"session_id": s.id, "branch": ws.branch, **d, "overlaps": []}
    sp = review.span(s, ws, turn, api.env.environ, api.store.root)
    tree = workspace.git_dir_tree(ws, api.env.environ)
    d = review.diff_json(tree, api.env.environ, sp, hunks)
    if text:
        d["text"] = diffs.text(tree, api.env.environ, sp.a, sp.b).decode("utf-8", "replace")
    found = review.overlaps(s, _same_tree(api, ws), turn)
    out = {"session_id": s.id, "branch": ws.branch, **d, "overlaps": found}
    note = review.overlap_note(found)
    if note:
        out["note"] = note
    return out


def diff_text(
    api: Zwarm, ref: str, turn: int | None = None, *, color: bool = False, stat: bool = False
) -> tuple[bytes, str | None]:
    """The unified diff (or its ``--stat``) as git prints it, and the overlap note."""
    from zwarm.engine import diffs, review, workspace

    s = api.get(ref)
    ws = workspace_of(api, s)
    there = _on_host(api, s, ws, turn)
    if there is not None:
        return there.diff(s.id, ws, hunks=False, color=color, stat=stat)[1], None
    sp = review.span(s, ws, turn, api.env.environ, api.store.root)
    tree = workspace.git_dir_tree(ws, api.env.environ)
    text = diffs.text(tree, api.env.environ, sp.a, sp.b, color=color, stat=stat)
    return text, review.overlap_note(review.overlaps(s, _same_tree(api, ws), turn))


def _on_host(api: Zwarm, s: Session, ws: Workspace, turn: int | None = None) -> OnHost | None:
    """Where ``s``'s workspace lives: on its ssh host (``ops.hostws.OnHost``: its zwarm
    does the git work there), or None: here. A host keeps no per-turn snapshots: a diff
    there is the whole session's (the worktree against its base)."""
    from zwarm.ops import hostws

    there = hostws.of(api.env.environ, api.store.root, s, ws)
    if there is not None and turn is not None:
        raise InvalidInput(
            f"session {s.id} works on host {ws.host}, which keeps no per-turn snapshots: "
            "diff the whole session (no --turn)"
        )
    return there


def _same_tree(api: Zwarm, ws: Workspace) -> list[Session]:
    """The sessions that work in ``ws``'s tree (shared mode only: a worktree is its own)."""
    if ws.mode != "shared":
        return []
    found = []
    for sid in api.store.list_ids():
        got = api.store.read(sid)
        if isinstance(got, Session) and got.workspace and got.workspace.tree == ws.tree:
            found.append(got)
    return found


def comment(
    api: Zwarm,
    ref: str,
    items: list[tuple[str, int, str]],
    *,
    send: bool = False,
    message: str | None = None,
) -> dict[str, Any]:
    """Attach review comments ``(path, line, text)`` to the session's current diff; with
    ``send``, send every open one to the agent now (``inject``), else with the next."""
    from zwarm.engine import review

    if not items and not send:
        raise InvalidInput("give at least one comment (PATH:LINE TEXT)")
    s = api.get(ref)
    ws = workspace_of(api, s)
    if ws.host is not None:
        raise WorkspaceError(
            f"session {s.id} works on host {ws.host}: comments on it are not supported yet "
            "(send a follow-up with zwarm inject)"
        )
    with api.store.transaction(s.id) as fresh:
        new = review.make_comments(
            fresh, ws, items, api.env.environ, api.env.now_iso(), api.store.root
        )
        if len(fresh.comments) + len(new) > 10_000:
            raise InvalidInput(f"session {s.id} has too many comments already")
        fresh.comments.extend(new)
    made = [msgspec.to_builtins(c) for c in new]
    out: dict[str, Any] = {"session_id": s.id, "comments": made}
    if send:
        after, state = api.inject(s.id, message or review.COMMENT_PROMPT)
        turn = after.count + (len(after.queue) if state == "queued" else 0)
        out["sent"] = {"state": state, "turn": turn}
    return out


def merge(
    api: Zwarm,
    ref: str,
    *,
    into: str | None = None,
    squash: bool = False,
    message: str | None = None,
) -> dict[str, Any]:
    """Commit what the agent left uncommitted in its worktree and merge its branch into
    ``into`` (default: the main worktree's branch); never while the session runs."""
    from zwarm.engine import review, workspace

    s = api.get(ref)
    ws = workspace_of(api, s)
    with api.store.transaction(s.id) as fresh:  # no turn starts while we merge
        if fresh.workspace is None or not workspace.same(fresh.workspace, ws):
            raise WorkspaceError(f"session {s.id}'s workspace changed meanwhile: refused")
        there = _on_host(api, fresh, ws)
        if there is not None:
            if fresh.status is Status.RUNNING:
                raise WorkspaceError(f"session {s.id} is running: wait for it (or kill it) first")
            got = there.merge(fresh, ws, into=into, squash=squash, message=message)
            if got.squashed_tip is not None:
                fresh.workspace.squashed_tip = got.squashed_tip
            out = msgspec.to_builtins(got)
            out.pop("squashed_tip", None)
            return {"session_id": s.id, **out}
        return review.merge(fresh, fresh.workspace, api.env.environ, into=into,
                            squash=squash, message=message)  # fmt: skip


def apply(
    api: Zwarm, ref: str, turn: int | None = None, cwd: str | Path | None = None
) -> dict[str, Any]:
    """Apply the session's (or turn ``turn``'s) diff to the checkout ``cwd`` (default:
    where zwarm runs) is in, without committing; all or nothing."""
    from zwarm.engine import review

    s = api.get(ref)
    ws = workspace_of(api, s)
    if ws.host is not None:
        raise WorkspaceError(f"session {s.id} works on host {ws.host}: apply is not supported "
                             "for it yet (merge it there)")  # fmt: skip
    sp = review.span(s, ws, turn, api.env.environ, api.store.root)
    where = Path(cwd) if cwd is not None else api.env.cwd
    return {"session_id": s.id, "turn": turn, **review.apply(ws, sp, api.env.environ, where)}
