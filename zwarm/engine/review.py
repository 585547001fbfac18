"""Reviewing a session's work: its diffs, review comments back to the agent, merge and apply.

Owns which two snapshots a diff compares (``span``), the shared-tree warning (``overlaps``),
making comments with their diff context (``make_comments``) and the text that sends them to
the agent (``render_comments``), committing and merging a worktree session's branch
(``merge``) and applying a diff to another checkout (``apply``). Must stay true:
- everything here acts on a workspace the caller took from the session's launch pin
  (``workspace.pinned``), never on paths or branches read from meta.json alone;
- git acts on the session's worktree and the target checkout only as checked ``git.Tree``s
  (``workspace.checked``, ``git.checked``): a ``.git`` pointed elsewhere is refused;
- ``merge`` runs only while its caller holds the session lock on a session that is not
  running; everything that can refuse it is checked, before anything is committed, against
  what the branch will hold: the agent's leftovers as a commit no ref holds yet, which is
  then exactly what the branch is put on (no ``add``/``commit`` runs in the agent's tree).
  Refused: a path the merge writes that has uncommitted changes or holds a file git does
  not track, ignored or not (``in_the_way``), and a predicted conflict; a conflict the real
  merge still meets is aborted (``merge --abort`` / ``reset --merge``), so the target is
  left exactly as it was; every refusal names the files, what was committed on the
  session's branch, and what to do next;
- ``apply`` is all or nothing (``git apply`` checks every hunk before writing), refuses the
  same paths ``merge`` does, and never commits or stages.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zwarm.engine import diffs, git, workspace
from zwarm.env import parse_iso
from zwarm.errors import GitError, InvalidInput, MergeConflict, WorkspaceError
from zwarm.model import Session, Status
from zwarm.model.records import Comment, Workspace

COMMENT_PROMPT = "Please address these review comments."
MESSAGE_CHARS = 4000


# ---------------------------------------------------------------------------- what to compare
@dataclass(frozen=True)
class Span:
    """A diff's two ends: ``a`` -> ``b`` (commit ids); ``live``: ``b`` was taken just now, as
    the turn (or session) is still running, or its end snapshot is missing."""

    a: str
    b: str
    live: bool
    turn: int | None


def span(
    s: Session, ws: Workspace, turn: int | None, environ: Mapping[str, str], state_dir: Path
) -> Span:
    """What turn ``turn`` (None: the whole session) changed, as two snapshots (one taken now
    if needed: ``state_dir`` is left out of it)."""
    if turn is not None:
        if not 1 <= turn <= len(s.turns):
            raise InvalidInput(f"session {s.id} has no turn {turn} (it has 1..{len(s.turns)})")
        t = s.turns[turn - 1]
        if t.before is None:
            raise WorkspaceError(f"turn {turn} of session {s.id} has no snapshot to compare")
        if t.after is not None:
            return Span(t.before, t.after, False, turn)
        return Span(t.before, _live(s, ws, environ, state_dir), True, turn)
    start = workspace.start_of(s, ws)
    if start is None:
        raise WorkspaceError(f"session {s.id} has no snapshot to compare yet")
    cur = s.current
    end = cur.after if cur is not None and cur.status is not Status.RUNNING else None
    if end is not None:
        return Span(start, end, False, None)
    return Span(start, _live(s, ws, environ, state_dir), True, None)


def _live(s: Session, ws: Workspace, environ: Mapping[str, str], state_dir: Path) -> str:
    """A snapshot of the tree as it is now (kept by no ref), or the latest one on record."""
    if not ws.removed and os.path.isdir(ws.tree):
        return workspace.take(ws, environ, f"session {s.id} now", state_dir)
    done = [t.after for t in s.turns if t.after]
    if not done:
        raise WorkspaceError(f"session {s.id}'s tree is gone and no snapshot was taken")
    return done[-1]


def overlaps(s: Session, others: Iterable[Session], turn: int | None) -> list[dict[str, Any]]:
    """Turns of other sessions that ran in the same working tree as ``s`` at the same time as
    turn ``turn`` (None: any turn) of ``s``: their writes may be in its diff."""
    ws = s.workspace
    if ws is None or ws.mode != "shared":
        return []
    mine = [s.turns[turn - 1]] if turn else s.turns
    spans = [_interval(t.started_at, t.ended_at) for t in mine]
    found = []
    for o in others:
        if o.id == s.id or o.workspace is None or o.workspace.tree != ws.tree:
            continue
        for t in o.turns:
            a0, a1 = _interval(t.started_at, t.ended_at)
            if any(a0 < b1 and b0 < a1 for b0, b1 in spans):
                found.append({"session_id": o.id, "name": o.name, "turn": t.n})
    return found


def _interval(start: str, end: str | None) -> tuple[float, float]:
    import time

    return parse_iso(start), parse_iso(end) if end else time.time()


def overlap_note(found: Sequence[Mapping[str, Any]]) -> str | None:
    if not found:
        return None
    names = ", ".join(f"{o['name'] or o['session_id'][:8]} (turn {o['turn']})" for o in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return (
        f"other sessions ran in the same working tree at the same time: {names}{more}; "
        "their changes may be part of this diff"
    )


def diff_json(tree: git.Where, environ: Mapping[str, str], sp: Span, hunks: bool) -> dict[str, Any]:
    files = diffs.files(tree, environ, sp.a, sp.b)
    totals = diffs.stats(tree, environ, sp.a, sp.b)
    return {
        "turn": sp.turn,
        "from": sp.a,
        "to": sp.b,
        "live": sp.live,
        "changes": {"files": totals.files, "added": totals.added, "removed": totals.removed},
        "files": [f.to_dict(hunks=hunks) for f in files],
    }


# ---------------------------------------------------------------------------- comments
def make_comments(
    s: Session,
    ws: Workspace,
    items: Sequence[tuple[str, int, str]],
    environ: Mapping[str, str],
    now: str,
    state_dir: Path,
) -> list[Comment]:
    """Comments on the session's current diff, each with its diff context; a path the diff
    does not touch is refused (naming the files it does)."""
    sp = span(s, ws, None, environ, state_dir)
    tree = workspace.git_dir_tree(ws, environ)
    changed = {f.path: f for f in diffs.files(tree, environ, sp.a, sp.b)}
    first = max((c.id for c in s.comments), default=0) + 1
    out = []
    for k, (path, line, text) in enumerate(items):
        path = _clean_path(path)
        f = changed.get(path)
        if f is None:
            shown = ", ".join(sorted(changed)[:10]) or "none"
            raise InvalidInput(f"{path} is not changed by session {s.id} (changed: {shown})")
        if not text.strip():
            raise InvalidInput(f"the comment on {path}:{line} is empty")
        lines = diffs.context(f, line) or _file_lines(tree, environ, sp.b, f, line)
        ctx = "\n".join(lines)[:16000]
        out.append(Comment(first + k, path, line, text[:65536], now, ctx))
    return out


def _clean_path(path: str) -> str:
    p = path.strip().removeprefix("./")
    if not p or p.startswith("/") or "\x00" in p or ".." in p.split("/"):
        raise InvalidInput(f"invalid path {path!r}: give it relative to the repository's top")
    return p


def _file_lines(
    tree: git.Where, environ: Mapping[str, str], b: str, f: diffs.FileDiff, line: int
) -> list[str]:
    """A few lines of the file around ``line`` as the diff's end has it (no hunk shows it)."""
    if f.binary or f.status == "deleted":
        return []
    proc = git.run(
        ["cat-file", "blob", f"{git.check_sha(b)}:{f.path}"],
        tree,
        environ,
        check=False,
    )
    if proc.returncode != 0:
        return []
    text = proc.stdout[: 4 << 20].decode("utf-8", "replace").splitlines()
    lo, hi = max(1, line - 2), min(len(text), line + 2)
    return [f" {text[i - 1]}" for i in range(lo, hi + 1)]


def render_comments(comments: Sequence[Comment]) -> str:
    """The review comments as the start of a follow-up message."""
    parts = ["Review comments on your changes:"]
    for i, c in enumerate(comments, 1):
        block = f"{i}. {c.path}:{c.line}"
        if c.context:
            block += "\n```diff\n" + c.context + "\n```"
        parts.append(block + "\n" + c.text.strip())
    return "\n\n".join(parts)


def parse_target(target: str) -> tuple[str, int]:
    """``PATH:LINE`` (the path may itself contain ':')."""
    path, sep, line = target.rpartition(":")
    if not sep or not path or not line.isdigit() or int(line) < 1:
        raise InvalidInput(f"expected PATH:LINE (line 1 or more), not {target!r}")
    return path, int(line)


def parse_comments(data: bytes, where: str) -> list[tuple[str, int, str]]:
    """Comments from a JSON array of ``{"path", "line", "text"}`` objects (a ``--file``)."""
    import json

    if len(data) > 16 << 20:
        raise InvalidInput(f"{where}: too large for a comments file")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise InvalidInput(f"{where}: not valid JSON ({str(e)[:200]})") from None
    if not isinstance(doc, list):
        raise InvalidInput(f'{where}: expected a JSON array of {{"path", "line", "text"}}')
    out = []
    for i, c in enumerate(doc):
        ok = isinstance(c, dict) and isinstance(c.get("path"), str)
        ok = ok and type(c.get("line")) is int and isinstance(c.get("text"), str)
        if not ok or c["line"] < 1:
            raise InvalidInput(f"{where}: item {i} needs a path, a line (1 or more) and a text")
        out.append((c["path"], c["line"], c["text"]))
    return out


# ---------------------------------------------------------------------------- merge
def merge(
    s: Session,
    ws: Workspace,
    environ: Mapping[str, str],
    *,
    into: str | None,
    squash: bool,
    message: str | None,
) -> dict[str, Any]:
    """Commit what the agent left uncommitted in its worktree, then merge its branch into
    ``into`` (default: the branch checked out in the main worktree). Caller holds the lock.
    Everything that can refuse (changes in the way, a predicted conflict) is checked
    against what the branch will hold before anything is committed."""
    if s.status is Status.RUNNING:
        raise WorkspaceError(f"session {s.id} is running: wait for it (or kill it) first")
    _check_worktree(s, ws)
    assert ws.branch is not None
    own = workspace.checked(ws, environ)  # its .git still the pinned repository's
    repo = workspace.repo_tree(ws, environ)
    target, where_path = _target(ws, repo, environ, into)
    where = git.checked(where_path, ws.repo, environ)
    pending = _pending(s, ws, own, environ)
    tip = pending or git.resolve_commit(f"refs/heads/{ws.branch}", repo, environ)
    head = git.resolve_commit("HEAD", where, environ)
    out: dict[str, Any] = {
        "session_id": s.id,
        "branch": ws.branch,
        "into": target,
        "worktree": where_path,
        "squash": squash,
        "committed": None,
    }
    if _is_ancestor(tip, head, where, environ):
        return {**out, "merged": False, "commit": head, "note": f"{target} already has it"}
    _check_clean(ws, environ, where, head, tip)
    clash = _predict_conflicts(where, environ, head, tip)
    if clash:
        raise MergeConflict(ws.branch, target, clash, _next_step(s, ws, target, pending))
    committed = _commit_pending(ws, own, repo, environ, pending) if pending else None
    out["committed"] = committed
    tip = git.resolve_commit(f"refs/heads/{ws.branch}", repo, environ)
    after = _next_step(s, ws, target, committed, done=True)
    text = message or commit_message(s, ws, squash)
    if squash:
        _squash(where, environ, tip, text, ws.branch, target, after)
        ws.squashed_tip = tip
    else:
        _merge(where, environ, ws.branch, text, target, after)
    return {**out, "merged": True, "commit": git.resolve_commit("HEAD", where, environ)}


def settle(s: Session, ws: Workspace, environ: Mapping[str, str]) -> str:
    """The commit of ``s``'s branch with what its agent left uncommitted in its worktree
    committed on it (the branch put there, as ``merge`` does: the merge queue takes this
    commit in). Caller holds the session lock; refused while the session runs."""
    if s.status is Status.RUNNING:
        raise WorkspaceError(f"session {s.id} is running: wait for it (or kill it) first")
    _check_worktree(s, ws)
    assert ws.branch is not None
    own = workspace.checked(ws, environ)
    repo = workspace.repo_tree(ws, environ)
    pending = _pending(s, ws, own, environ)
    if pending:
        _commit_pending(ws, own, repo, environ, pending)
    return git.resolve_commit(f"refs/heads/{ws.branch}", repo, environ)


def _next_step(
    s: Session, ws: Workspace, target: str, commit: str | None, done: bool = False
) -> str:
    """What a refused merge left behind on the session's side, and what to do next."""
    who = s.name or s.id[:8]
    if commit is None:
        return (
            f"nothing was committed; next: zwarm inject {who} 'rebase your branch on {target} "
            f"and resolve the conflicts', or do it yourself: git -C {ws.tree} rebase {target}"
        )
    if done:
        return (
            f"the agent's uncommitted work was committed on {ws.branch} ({commit[:12]}); next: "
            f"zwarm inject {who} 'rebase your branch on {target} and resolve the conflicts', "
            f"or do it yourself: git -C {ws.tree} rebase {target}"
        )
    return (
        f"nothing was committed (the agent's work is still uncommitted in {ws.tree}); next: "
        f"zwarm inject {who} 'commit your work, rebase it on {target} and resolve the "
        "conflicts', or do that yourself there"
    )


def _check_worktree(s: Session, ws: Workspace) -> None:
    if ws.mode != "worktree" or ws.branch is None:
        raise WorkspaceError(f"session {s.id} has no worktree of its own: nothing to merge")
    if ws.removed or not os.path.isdir(ws.tree):
        raise WorkspaceError(f"session {s.id}'s worktree {ws.tree} is gone: nothing to merge")


def _pending(s: Session, ws: Workspace, own: git.Tree, environ: Mapping[str, str]) -> str | None:
    """The commit of what the agent left uncommitted in its worktree, on top of its branch
    (made in a private index, kept by no ref yet: ``_commit_pending`` puts the branch on
    it, so what was checked is exactly what is merged), or None if there is nothing."""
    from zwarm.engine import snapshots

    if not workspace.dirty(own, environ):
        return None
    head = git.run(["symbolic-ref", "-q", "HEAD"], own, environ, check=False)
    on = head.stdout.decode("utf-8", "replace").strip()
    if on != f"refs/heads/{ws.branch}":
        raise WorkspaceError(
            f"the worktree {ws.tree} has uncommitted work but is not on its branch {ws.branch} "
            f"({on or 'detached HEAD'}): commit it there or switch back; nothing was merged"
        )
    msg = commit_message(s, ws, squash=True)
    who = identity(own, environ)
    return snapshots.take(own, environ, "leftovers", message=msg, identity=who)


def _commit_pending(
    ws: Workspace, own: git.Tree, repo: git.Tree, environ: Mapping[str, str], commit: str
) -> str:
    """Put the session's branch on ``commit`` (``_pending``'s, whose parent is its tip: the
    update fails if the branch moved meanwhile) and the worktree's index on it (its files
    are what the commit holds). No hook, filter or signing program runs."""
    parent = git.resolve_commit(f"{commit}^", repo, environ)
    ref = f"refs/heads/{ws.branch}"
    git.run(
        ["update-ref", "-m", "zwarm merge: the agent's leftovers", ref, commit, parent],
        repo,
        environ,
    )
    git.run(["reset", "-q"], own, environ, check=False)  # (index only; files stay)
    return commit


def identity(tree: git.Where, environ: Mapping[str, str]) -> dict[str, str]:
    """zwarm's commit identity, only when the repository has none configured."""
    proc = git.run(["config", "--get", "user.email"], tree, environ, check=False)
    return {} if proc.returncode == 0 and proc.stdout.strip() else dict(git.IDENTITY)


def commit_message(s: Session, ws: Workspace, squash: bool) -> str:
    first = (s.task.strip().splitlines() or ["(no task)"])[0][:120]
    body = f"zwarm session {s.id} ({s.name or ws.branch})"
    if s.last_message:
        body += "\n\n" + s.last_message.strip()[:MESSAGE_CHARS]
    return f"{'' if squash else 'Merge: '}{first}\n\n{body}"


def _target(
    ws: Workspace, repo: git.Tree, environ: Mapping[str, str], into: str | None
) -> tuple[str, str]:
    """(the target branch, the worktree where it is checked out)."""
    listed = git.worktrees(repo, environ)
    if into is None:
        main = listed[0] if listed else {}
        ref = main.get("branch", "")
        if not ref.startswith("refs/heads/"):
            raise WorkspaceError(
                f"the main worktree {ws.repo} has no branch checked out (detached HEAD): "
                "pass --into BRANCH"
            )
        into = ref.removeprefix("refs/heads/")
    git.check_branch(into, repo, environ)
    if into == ws.branch:
        raise WorkspaceError(f"cannot merge {ws.branch} into itself")
    for w in listed:
        if w.get("branch") == f"refs/heads/{into}" and "prunable" not in w:
            return into, os.path.realpath(w["worktree"])
    if not git.branch_exists(into, repo, environ):
        raise WorkspaceError(f"there is no branch {into!r} in {ws.repo}")
    raise WorkspaceError(
        f"branch {into!r} is not checked out in any worktree; check it out (git switch "
        f"{into}) and merge again"
    )


def _is_ancestor(a: str, b: str, cwd: git.Where, environ: Mapping[str, str]) -> bool:
    proc = git.run(["merge-base", "--is-ancestor", a, b], cwd, environ, check=False)
    return proc.returncode == 0


def _check_clean(
    ws: Workspace, environ: Mapping[str, str], where: git.Tree, head: str, tip: str
) -> None:
    """Refuse if the merge would write a path of the target checkout that holds something
    git would lose (``in_the_way``)."""
    base = git.run(["merge-base", head, tip], where, environ, check=False)
    mb = base.stdout.decode("ascii", "replace").strip()
    if base.returncode != 0 or not git.SHA.match(mb):
        raise WorkspaceError(f"{ws.branch} and the target share no history: not merged")
    raw = git.run(
        ["diff", "--no-ext-diff", "--name-only", "-z", "--no-renames", mb, tip, "--"],
        where,
        environ,
    ).stdout
    touched = {p.decode("utf-8", "surrogateescape") for p in raw.split(b"\0") if p}
    why = in_the_way(where, where.top, environ, touched)
    if why:
        raise WorkspaceError(f"{where.top} has {why}; nothing was merged")


def in_the_way(
    where: git.Where | None,
    top: str,
    environ: Mapping[str, str],
    paths: Iterable[str],
    what: str = "the merge",
) -> str | None:
    """What writing ``paths`` into the checkout ``top`` (``where`` to run git there; None:
    not a git checkout, nothing is tracked) would lose, said for an error (None: nothing):
    uncommitted changes in them, or files git does not track there (ignored or not: git
    itself overwrites an ignored file), at a path or in place of a folder above it. A merge
    or apply is refused before anything is written."""
    paths = set(paths)
    tracked: set[str] = set()
    if where is not None:
        dirty = sorted(paths.intersection(workspace.dirty(where, environ)))
        if dirty:
            return (
                f"uncommitted changes in files {what} touches ({_few(dirty)}): commit or "
                "stash them first"
            )
        raw = git.run(["ls-files", "-z", "--full-name"], where, environ).stdout
        tracked = {p.decode("utf-8", "surrogateescape") for p in raw.split(b"\0") if p}
    found: set[str] = set()
    for path in paths:
        parts = path.split("/")
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            full = os.path.join(top, sub)
            if not os.path.lexists(full):
                break
            if k < len(parts) and os.path.isdir(full) and not os.path.islink(full):
                continue  # a real folder: what matters is further down
            if sub not in tracked:
                found.add(sub)
            break
    if found:
        return (
            f"files git does not track where {what} writes ({_few(sorted(found))}): move "
            "them away first, they would be overwritten"
        )
    return None


def _few(paths: Sequence[str]) -> str:
    return ", ".join(paths[:10]) + (" ..." if len(paths) > 10 else "")


def _predict_conflicts(
    where: git.Where, environ: Mapping[str, str], head: str, tip: str
) -> list[str]:
    """The files merging ``tip`` into ``head`` would conflict in, found without touching any
    checkout (``merge-tree --write-tree``); [] when it merges cleanly or git cannot tell (then
    a conflict in the real merge is still aborted)."""
    proc = git.run(
        ["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", head, tip],
        where,
        environ,
        check=False,
    )
    if proc.returncode != 1:
        return []
    names = proc.stdout.split(b"\0")[1:]
    return sorted({n.decode("utf-8", "replace") for n in names if n})


def _merge(
    where: git.Tree, environ: Mapping[str, str], branch: str, text: str, into: str, after: str
) -> None:
    proc = git.run(
        ["merge", "--no-edit", "--no-verify", "-m", text, f"refs/heads/{branch}"],
        where,
        environ,
        check=False,
        extra_env=identity(where, environ),
    )
    if proc.returncode != 0:
        files = conflict_files(where, environ)
        git.run(["merge", "--abort"], where, environ, check=False)
        _raise_failed(proc, branch, into, files, after)


def _squash(
    where: git.Tree,
    environ: Mapping[str, str],
    tip: str,
    text: str,
    branch: str,
    into: str,
    after: str,
) -> None:
    who = identity(where, environ)
    proc = git.run(["merge", "--squash", tip], where, environ, check=False, extra_env=who)
    if proc.returncode != 0:
        files = conflict_files(where, environ)
        git.run(["reset", "--merge"], where, environ, check=False)
        _raise_failed(proc, branch, into, files, after)
    staged = git.run(["diff", "--cached", "--quiet"], where, environ, check=False)
    if staged.returncode == 0:
        return  # nothing to commit: the target already had every change
    commit = git.run(
        ["commit", "--no-verify", "--no-gpg-sign", "-q", "-m", text],
        where,
        environ,
        check=False,
        extra_env=who,
    )
    if commit.returncode != 0:
        git.run(["reset", "--merge"], where, environ, check=False)
        raise GitError(
            f"git commit failed: {git.last_line(commit.stderr)}; nothing was merged, {after}"
        )


def conflict_files(where: git.Where, environ: Mapping[str, str]) -> list[str]:
    raw = git.run(
        ["diff", "--name-only", "-z", "--diff-filter=U", "--"],
        where,
        environ,
        check=False,
    ).stdout
    return sorted({p.decode("utf-8", "replace") for p in raw.split(b"\0") if p})


def _raise_failed(proc: Any, branch: str, into: str, files: list[str], after: str) -> None:
    if files:
        raise MergeConflict(branch, into, files, after)
    raise GitError(f"git merge failed: {git.last_line(proc.stderr)}; nothing was merged, {after}")


# ---------------------------------------------------------------------------- apply
def apply(ws: Workspace, sp: Span, environ: Mapping[str, str], cwd: Path) -> dict[str, Any]:
    """Apply the diff ``sp`` to the checkout ``cwd`` is in (or to ``cwd``), uncommitted."""
    tree = workspace.git_dir_tree(ws, environ)
    patch = diffs.text(tree, environ, sp.a, sp.b, binary=True)
    found = diffs.files(tree, environ, sp.a, sp.b)
    changed = [f.to_dict(hunks=False) for f in found]
    if not patch.strip():
        return {"applied": False, "files": [], "into": str(cwd), "note": "nothing to apply"}
    repo = git.toplevel(cwd, environ)
    top = repo or cwd
    if os.path.realpath(top) == os.path.realpath(ws.tree) and ws.mode == "worktree":
        raise WorkspaceError("that is the session's own worktree: it already has these changes")
    touched = {f.path for f in found} | {f.old_path for f in found if f.old_path}
    why = in_the_way(repo, str(top), environ, touched, "the diff")
    if why:
        raise WorkspaceError(f"the diff does not apply to {top}: it has {why}; nothing changed")
    proc = git.run(
        ["apply", "--binary", "--whitespace=nowarn", "-"],
        top,
        environ,
        input=patch,
        check=False,
    )
    if proc.returncode != 0:
        raise WorkspaceError(
            f"the diff does not apply to {top}: {git.last_line(proc.stderr)}; nothing changed"
        )
    return {"applied": True, "files": changed, "into": str(top)}
