"""The merge queue's mechanics: each entry rebased (or merged) onto the latest target in a
temporary worktree zwarm owns, checked there, and the target advanced to exactly that commit.

Owns enqueueing sessions (``enqueue``), processing a queue (``run``: one entry after another,
the target's own check first when it changed outside the queue), the journal of each step
(``store.mergeq.Flight``, written before the step starts) and resuming from it after a crash
(``recover``), ejecting an entry with a review comment on its session (``_eject``) and
holding one (``held``) when the user's checkout of the target is in the way, and the
speculative ``--depth`` (``_batch``: the next entries stacked, checked at once, taken in
order, the target still moved one tested commit at a time). Must stay true:
- the target moves only by a compare-and-swap (``update-ref T NEW OLD``) to a commit whose
  checks passed in the temporary worktree (or, with no check asked, was made there), and is
  read back afterwards; a checkout of the target (the user's, or any worktree's) is updated
  only when nothing the update writes holds uncommitted changes or a file git does not track
  there (``review.in_the_way``, the merge rule), else the entry is held and the target left
  as it was; a checkout that fails to update puts the target back (compare-and-swap again);
- the session's branch is never rewritten: a rebase makes new commits in the temporary
  worktree only; the agent's uncommitted leftovers are committed on its branch first, as
  ``zwarm merge`` does (``review.settle``), and the tip taken in is recorded on the entry;
- every step is journaled before it starts, so a run killed at any instant leaves the
  target at its old commit or at the tested one, and the next run (``recover``) finishes or
  undoes the step: a target already moved is finished (its checkout updated, the entry
  marked merged), anything before that is retried from scratch; the temporary worktree the
  journal names is removed (only that path, under ``.mergeq/`` of the repository's worktrees
  folder, never through a link), and nothing else is deleted;
- git runs only as ``engine.git`` runs it (hardened, checked trees); the checks are run by
  the caller's ``Checker`` (``zwarm.sandbox.run``: sandboxed, or by the user's opt-in), in
  the temporary worktree, never by anything read from the queue record or the session;
- a test may kill the running process at a step by ``ZWARM_TEST_MERGEQ_KILL=<step>`` in
  zwarm's own environment (``KILL_ENV``; never read from a file): it only makes this
  process die, which every step is built to survive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from zwarm.engine import git, review, workspace
from zwarm.errors import (
    DamagedSession,
    GitError,
    InvalidInput,
    SessionNotFound,
    WorkspaceError,
    ZwarmError,
)
from zwarm.model import Session, Status
from zwarm.model.records import Comment, Workspace
from zwarm.store import Store
from zwarm.store.mergeq import Entry, Flight, Queue, Records, Step

KILL_ENV = "ZWARM_TEST_MERGEQ_KILL"
TAIL_CHARS = 6000  # a failing check's output kept in the entry and its comment
MAX_RETARGETS = 5  # a target that keeps moving under one entry: held after this many tries
MODES = ("rebase", "merge")


class CheckResult(Protocol):
    """What a checker reports of one command (``zwarm.sandbox.run.CheckResult``)."""

    @property
    def command(self) -> str: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def output_tail(self) -> str: ...
    def passed(self) -> bool: ...


Checker = Callable[[Sequence[str], Path], Sequence[CheckResult]]


@dataclass
class Ctx:
    """What a queue run needs: the sessions store and the queue records, zwarm's
    environment, the clock, the worktrees root, the mode (``rebase`` or ``merge``), the
    checks and who runs them (None and no checks: ``--no-check``), and where progress goes."""

    store: Store
    records: Records
    environ: Mapping[str, str]
    now: Callable[[], str]
    root: Path
    mode: str = "rebase"
    checks: Sequence[str] = ()
    checker: Checker | None = None
    depth: int = 1  # entries tested at once, stacked (``_batch``)
    say: Callable[[str], None] = lambda _: None
    done: list[dict[str, Any]] = field(default_factory=list)  # what this run did, per entry


# ---------------------------------------------------------------------------- enqueue
def target_of(ws: Workspace, environ: Mapping[str, str], target: str | None) -> str:
    """The target branch: ``target``, else the branch checked out in the main worktree."""
    repo = workspace.repo_tree(ws, environ)
    if target is None:
        listed = git.worktrees(repo, environ)
        ref = listed[0].get("branch", "") if listed else ""
        if not ref.startswith("refs/heads/"):
            raise WorkspaceError(
                f"the main worktree {ws.repo} has no branch checked out (detached HEAD): "
                "pass --target BRANCH"
            )
        target = ref.removeprefix("refs/heads/")
    git.check_branch(target, repo, environ)
    if not git.branch_exists(target, repo, environ):
        raise WorkspaceError(f"there is no branch {target!r} in {ws.repo}")
    if target == ws.branch:
        raise WorkspaceError(f"cannot merge {ws.branch} into itself")
    return target


def enqueue(
    ctx: Ctx,
    items: Sequence[tuple[Session, Workspace]],
    target: str,
    priority: int,
    send: bool,
) -> list[Entry]:
    """Add each (session, its pinned worktree workspace) to the queue of its repository and
    ``target``, in order; a session already waiting there keeps its place (its priority and
    ``send`` updated); one the queue merged already, its branch not moved since, is refused.
    All must be in one repository."""
    repos = {ws.repo for _, ws in items}
    if len(repos) != 1:
        raise InvalidInput("the sessions of one merge --queue must be in one repository")
    repo = repos.pop()
    out: list[Entry] = []
    with ctx.records.transaction(repo, target, create=True) as q:
        for s, ws in items:
            assert ws.branch is not None
            if ws.branch == target:
                raise WorkspaceError(f"cannot merge {ws.branch} into itself")
            live = [e for e in q.entries if e.session_id == s.id and e.state in _OPEN]
            done = [e for e in q.entries if e.session_id == s.id and e.state == "merged"]
            if not live and done and done[-1].tip is not None:
                rtree = git.checked(repo, repo, ctx.environ)
                tip = git.resolve_commit(f"refs/heads/{ws.branch}", rtree, ctx.environ)
                if tip == done[-1].tip:  # no new commit since: nothing to merge again
                    raise WorkspaceError(
                        f"{s.id} was merged already (at {(done[-1].commit or tip)[:12]})"
                    )
            if live:
                live[0].priority, live[0].send = priority, send
                out.append(live[0])
                continue
            if len(q.entries) >= 10_000:
                q.entries[:] = _trimmed(q.entries)
            e = Entry(q.next_id, s.id, ws.branch, ctx.now(), priority, send=send)
            q.next_id += 1
            q.entries.append(e)
            out.append(e)
    return out


_OPEN = ("waiting", "testing", "held")


def _trimmed(entries: list[Entry]) -> list[Entry]:
    """The oldest finished entries dropped, to make room (a queue keeps at most 10,000)."""
    done = [e for e in entries if e.state not in _OPEN]
    drop = {e.id for e in done[: max(1, len(done) // 2)]}
    return [e for e in entries if e.id not in drop]


def remove(ctx: Ctx, repo: str, target: str, sid: str) -> Entry:
    """Take session ``sid``'s open entry out of the queue (it is not merged)."""
    with ctx.records.transaction(repo, target) as q:
        for e in q.entries:
            if e.session_id == sid and e.state in _OPEN:
                if q.flight is not None and q.flight.entry == e.id:
                    raise WorkspaceError(
                        f"session {sid} is being merged right now: wait for the run to finish"
                    )
                _mark(ctx, e, "removed", "removed by the user")
                return e
    raise InvalidInput(f"session {sid} waits in no merge queue of {target}")


def set_paused(ctx: Ctx, repo: str, target: str, paused: bool) -> Queue:
    with ctx.records.transaction(repo, target) as q:
        q.paused = paused
    return q


def _mark(ctx: Ctx, e: Entry, state: Any, why: str = "") -> None:
    e.state, e.why, e.updated_at = state, why[:65536], ctx.now()


# ---------------------------------------------------------------------------- the run
def run(ctx: Ctx, repo: str, target: str, wait: bool = True) -> dict[str, Any] | None:
    """Process the queue of (``repo``, ``target``) to completion under its runner lock
    (another runner: wait for it, or with ``wait=False`` return None at once): resume a step a
    killed run left, then take the waiting entries in order (priority first, then the order
    they came in) until none is left, the queue is paused, or something blocks it."""
    with ctx.records.runner(repo, target, wait) as mine:
        if not mine:
            return None
        with ctx.records.transaction(repo, target) as q:
            recover(ctx, q)
            for e in q.entries:
                if e.state in ("held", "testing"):  # (testing: no step of it under way)
                    _mark(ctx, e, "waiting", e.why)  # tried again by every run
        stop = ""
        retargets: dict[int, int] = {}
        while not stop:
            stop = _next(ctx, repo, target, retargets)
        snap = ctx.records.read(repo, target)
        assert snap is not None
        return {"repo": repo, "target": target, "stopped": stop, "done": ctx.done,
                "queue": msgspec.to_builtins(snap)}  # fmt: skip


def _next(ctx: Ctx, repo: str, target: str, retargets: dict[int, int]) -> str:
    """Process one entry; why the run stops ("" to go on)."""
    q = ctx.records.read(repo, target)
    if q is None:
        return "no queue"
    if q.paused:
        return "paused"
    waiting = sorted(
        (e for e in q.entries if e.state == "waiting"), key=lambda e: (-e.priority, e.id)
    )
    if not waiting:
        return "empty"
    rtree = git.checked(repo, repo, ctx.environ)
    old = git.resolve_commit(f"refs/heads/{target}", rtree, ctx.environ)
    if ctx.checks and (q.green != old or q.green_checks != list(ctx.checks)):
        why = "it changed outside the queue" if q.green != old else "the checks changed"
        red = _check_target(ctx, repo, target, rtree, old, why)
        if red:
            return "blocked"
    elif q.green != old:
        _update(ctx, repo, target, lambda q: _green(ctx, q, old))
    if ctx.depth > 1 and len(waiting) > 1:
        return _batch(ctx, repo, target, rtree, waiting[: ctx.depth], old, retargets)
    return _entry(ctx, repo, target, rtree, waiting[0], old, retargets)


def _green(ctx: Ctx, q: Queue, commit: str) -> None:
    """``commit`` of the target passed this run's checks (or was made by the queue)."""
    q.green, q.green_checks = commit, list(ctx.checks)


def _update(ctx: Ctx, repo: str, target: str, fn: Callable[[Queue], Any]) -> Any:
    with ctx.records.transaction(repo, target) as q:
        return fn(q)


def _journal(ctx: Ctx, repo: str, target: str, entry: int, step: Step, **kw: Any) -> Flight:
    """Record the step about to start (the journal), then let a test kill us there."""

    def put(q: Queue) -> Flight:
        base = q.flight if q.flight is not None and q.flight.entry == entry else None
        fields = msgspec.structs.asdict(base) if base else {}
        if q.flight is not None and "more" not in kw:
            fields["more"] = q.flight.more  # a batch's other worktrees, until it ends
        fields.update(entry=entry, step=step, **kw)
        q.flight = Flight(**fields)
        return q.flight

    f: Flight = _update(ctx, repo, target, put)
    _maybe_die(ctx, step)
    return f


def _maybe_die(ctx: Ctx, step: str) -> None:
    if ctx.environ.get(KILL_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _check_target(ctx: Ctx, repo: str, target: str, rtree: git.Tree, old: str, reason: str) -> bool:
    """Run the checks on the target itself (``reason``: it changed outside the queue, or it
    last passed other checks); whether it is red (then the queue is blocked, saying why)."""
    ctx.say(f"checking {target} itself at {old[:12]} ({reason})")
    tmp = _tmp_path(ctx, repo, target, "target")
    _journal(ctx, repo, target, 0, "target", worktree=str(tmp))
    try:
        _add_worktree(ctx, rtree, tmp, old)
        _maybe_die(ctx, "target-check")
        failed = _run_checks(ctx, tmp)
    finally:
        _drop_worktree(ctx, rtree, tmp)
    if failed:
        why = f"{target} itself fails its check at {old[:12]}: {failed}"

        def block(q: Queue) -> None:
            q.blocked, q.flight = why, None

        _update(ctx, repo, target, block)
        ctx.say(f"blocked: {why.splitlines()[0]}")
        return True

    def green(q: Queue) -> None:
        _green(ctx, q, old)
        q.blocked, q.flight = "", None

    _update(ctx, repo, target, green)
    return False


def _entry(
    ctx: Ctx,
    repo: str,
    target: str,
    rtree: git.Tree,
    e: Entry,
    old: str,
    retargets: dict[int, int],
) -> str:
    """Rebase (or merge), check and advance one entry. Why the run stops ("" to go on)."""
    ctx.say(f"entry {e.id}: session {e.session_id[:8]} ({e.branch}) onto {target} {old[:12]}")
    try:
        s, ws = _session(ctx, e, repo)
        tip = _settle(ctx, s, ws)
    except ZwarmError as err:
        return _finish(ctx, repo, target, e, "ejected" if _gone(err) else "held", str(err))
    e.tip = tip
    tmp = _tmp_path(ctx, repo, target, str(e.id))

    def testing(q: Queue) -> None:
        for x in q.entries:
            if x.id == e.id:
                x.tip = tip
                _mark(ctx, x, "testing")

    _update(ctx, repo, target, testing)
    _journal(ctx, repo, target, e.id, "prepare", worktree=str(tmp), old=old)
    try:
        return _build(ctx, repo, target, rtree, e, s, ws, old, tip, tmp, retargets)
    except ZwarmError as err:  # (git failed otherwise than by a conflict ...): as after a crash
        why = str(err)
        ctx.say(f"entry {e.id}: {why}")

        def undo(q: Queue) -> None:
            recover(ctx, q)  # finished (the target had moved) or undone
            for x in q.entries:
                if x.id == e.id and x.state == "waiting":
                    _mark(ctx, x, "held", why)

        _update(ctx, repo, target, undo)
        return ""
    finally:
        _drop_worktree(ctx, rtree, tmp)
        _update(ctx, repo, target, lambda q: setattr(q, "flight", None))


def _batch(
    ctx: Ctx,
    repo: str,
    target: str,
    rtree: git.Tree,
    batch: list[Entry],
    old: str,
    retargets: dict[int, int],
) -> str:
    """``--depth``: the first entries stacked, each rebased (or merged) onto the one before
    in its own temporary worktree, their checks run at once, then taken in order: each green
    one moves the target on (as ``_advance`` does), the first red or conflicting one whose
    base is the real target (all before it merged) is ejected, and the rest wait again
    (they were built on something the target never became). Why the run stops."""
    env = ctx.environ
    built: list[tuple[Entry, Session, Workspace, Path, str]] = []
    taken: list[tuple[Entry, Session, Workspace, str]] = []
    for e in batch:
        try:
            s, ws = _session(ctx, e, repo)
            taken.append((e, s, ws, _settle(ctx, s, ws)))
        except ZwarmError as err:
            _finish(ctx, repo, target, e, "ejected" if _gone(err) else "held", str(err))
    if not taken:
        return ""
    tmps = [_tmp_path(ctx, repo, target, str(e.id)) for e, *_ in taken]

    def testing(q: Queue) -> None:
        tips = {e.id: tip for e, _, _, tip in taken}
        for x in q.entries:
            if x.id in tips:
                x.tip = tips[x.id]
                _mark(ctx, x, "testing")

    _update(ctx, repo, target, testing)
    first = taken[0][0]
    _journal(ctx, repo, target, first.id, "prepare", old=old, more=[str(t) for t in tmps])
    try:
        base = old
        for (e, s, ws, tip), tmp in zip(taken, tmps, strict=True):
            e.tip = tip
            if _is_ancestor(tip, base, rtree, env):
                if base == old:
                    _finish(ctx, repo, target, e, "merged", f"{target} already has it", commit=old)
                    continue
                break  # (in what is stacked below it: taken when that is in)
            _add_worktree(ctx, rtree, tmp, tip if ctx.mode == "rebase" else base)
            wt = git.checked(tmp, repo, env)
            _journal(ctx, repo, target, first.id, "rebase")
            conflicts = _combine(ctx, wt, s, ws, base, tip, target)
            if conflicts is not None:
                if base == old:  # onto the real target: its own conflict
                    why = f"conflicts with {target} in {', '.join(conflicts[:20]) or 'some files'}"
                    _comment(ctx, s, ws, e, conflicts, why + _REBASE_HINT.format(target=target))
                    _finish(ctx, repo, target, e, "ejected", why)
                    continue
                break
            base = git.resolve_commit("HEAD", wt, env)
            built.append((e, s, ws, tmp, base))
        _journal(ctx, repo, target, first.id, "check")
        results = _run_many(ctx, [tmp for _, _, _, tmp, _ in built])
        cur = old
        for (e, s, ws, _, new), failed in zip(built, results, strict=True):
            if failed:
                _comment(ctx, s, ws, e, [], f"the merge queue's check failed on your branch "
                         f"rebased onto {target}: {failed}")  # fmt: skip
                _finish(ctx, repo, target, e, "ejected", f"check failed: {failed}")
                return ""
            stop = _advance(ctx, repo, target, rtree, e, ws, cur, new, retargets)
            if stop or _state(ctx, repo, target, e.id) != "merged":
                return stop
            cur = new
        return ""
    finally:
        for tmp in tmps:
            _drop_worktree(ctx, rtree, tmp)

        def end(q: Queue) -> None:
            q.flight = None
            for x in q.entries:
                if x.state == "testing":
                    _mark(ctx, x, "waiting")

        _update(ctx, repo, target, end)


def _state(ctx: Ctx, repo: str, target: str, eid: int) -> str:
    q = ctx.records.read(repo, target)
    return next((x.state for x in q.entries if x.id == eid), "") if q else ""


def _run_many(ctx: Ctx, tmps: list[Path]) -> list[str]:
    """The checks run in each of ``tmps`` at once (one thread each); what failed in each."""
    if not ctx.checks or len(tmps) < 2:
        return [_run_checks(ctx, t) for t in tmps]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(tmps)) as pool:
        return list(pool.map(lambda t: _run_checks(ctx, t), tmps))


def _gone(err: ZwarmError) -> bool:
    return isinstance(err, (SessionNotFound, DamagedSession)) or "no worktree" in str(err)


def _build(
    ctx: Ctx,
    repo: str,
    target: str,
    rtree: git.Tree,
    e: Entry,
    s: Session,
    ws: Workspace,
    old: str,
    tip: str,
    tmp: Path,
    retargets: dict[int, int],
) -> str:
    env = ctx.environ
    if _is_ancestor(tip, old, rtree, env):
        return _finish(ctx, repo, target, e, "merged", f"{target} already has it", commit=old)
    _add_worktree(ctx, rtree, tmp, tip if ctx.mode == "rebase" else old)
    wt = git.checked(tmp, repo, env)
    _journal(ctx, repo, target, e.id, "rebase")
    conflicts = _combine(ctx, wt, s, ws, old, tip, target)
    if conflicts is not None:
        why = f"conflicts with {target} in {', '.join(conflicts[:20]) or 'some files'}"
        _comment(ctx, s, ws, e, conflicts, why + _REBASE_HINT.format(target=target))
        return _finish(ctx, repo, target, e, "ejected", why)
    new = git.resolve_commit("HEAD", wt, env)
    if new == old:
        return _finish(ctx, repo, target, e, "merged", f"{target} already has it", commit=old)
    _journal(ctx, repo, target, e.id, "check", new=new)
    failed = _run_checks(ctx, tmp)
    if failed:
        _comment(ctx, s, ws, e, [], f"the merge queue's check failed on your branch rebased "
                 f"onto {target}: {failed}")  # fmt: skip
        return _finish(ctx, repo, target, e, "ejected", f"check failed: {failed}")
    return _advance(ctx, repo, target, rtree, e, ws, old, new, retargets)


_REBASE_HINT = (
    "; rebase your branch on {target}, resolve the conflicts and commit: the merge queue "
    "takes it again when it is enqueued again"
)


def _advance(
    ctx: Ctx,
    repo: str,
    target: str,
    rtree: git.Tree,
    e: Entry,
    ws: Workspace,
    old: str,
    new: str,
    retargets: dict[int, int],
) -> str:
    """Move the target from ``old`` to the tested ``new`` (and its checkout, if any)."""
    env = ctx.environ
    where = _checkout_of(rtree, target, env)
    if where is not None:
        why = _in_the_way(rtree, where, repo, old, new, env)
        if why:
            _finish(ctx, repo, target, e, "held", why)
            return "held"
    _journal(ctx, repo, target, e.id, "advance", old=old, new=new, checkout=where)
    ref = f"refs/heads/{target}"
    moved = git.run(
        ["update-ref", "-m", "zwarm merge queue", ref, new, old], rtree, env, check=False
    )
    if moved.returncode != 0:
        retargets[e.id] = retargets.get(e.id, 0) + 1
        if retargets[e.id] >= MAX_RETARGETS:
            return _finish(ctx, repo, target, e, "held", f"{target} kept moving while tested")
        ctx.say(f"{target} moved meanwhile: entry {e.id} is tried again on the new {target}")
        _update(ctx, repo, target, lambda q: _reset(ctx, q, e.id))
        return ""
    if where is not None:
        _journal(ctx, repo, target, e.id, "checkout")
        why = _update_checkout(ctx, rtree, repo, where, target, old, new)
        if why:
            return _finish(ctx, repo, target, e, "held", why) or "held"
    _maybe_die(ctx, "done")
    return _merged(ctx, repo, target, rtree, e, ws, new)


def _merged(
    ctx: Ctx, repo: str, target: str, rtree: git.Tree, e: Entry, ws: Workspace, new: str
) -> str:
    """Verify the target holds ``new``; record the entry merged (and, after a rebase, the
    session's tip as brought in, so ``rm`` knows its branch is merged)."""
    now = git.resolve_commit(f"refs/heads/{target}", rtree, ctx.environ)
    if now != new and not _is_ancestor(new, now, rtree, ctx.environ):
        why = f"{target} is at {now[:12]}, not the tested {new[:12]}: it was moved meanwhile"
        return _finish(ctx, repo, target, e, "held", why)
    _brought_in(ctx, rtree, e.session_id, e.tip, new)
    _update(ctx, repo, target, lambda q: _green(ctx, q, new))
    return _finish(ctx, repo, target, e, "merged", "", commit=new)


def _brought_in(ctx: Ctx, rtree: git.Tree, sid: str, tip: str | None, new: str) -> None:
    """Record on session ``sid`` that its branch's ``tip`` is in the target at ``new`` when
    the target does not hold that commit itself (a rebase made new commits of it), as a
    squash merge is recorded: ``rm`` then knows its branch is merged. Never raises."""
    if tip is None or _is_ancestor(tip, new, rtree, ctx.environ):
        return
    with contextlib.suppress(ZwarmError), ctx.store.transaction(sid) as s:
        ws = workspace.pinned(s, ctx.environ, ctx.store.root)
        if ws is not None and ws.mode == "worktree" and s.workspace is not None:
            s.workspace.squashed_tip = tip


def _finish(
    ctx: Ctx, repo: str, target: str, e: Entry, state: Any, why: str, commit: str | None = None
) -> str:
    """Record entry ``e``'s outcome; why the run stops ("" to go on: a hold of the target's
    checkout stops it, the caller returns "held")."""

    def put(q: Queue) -> None:
        for x in q.entries:
            if x.id == e.id:
                _mark(ctx, x, state, why)
                x.tip = e.tip or x.tip
                if commit:
                    x.commit = commit
                if state == "merged":
                    x.checks = list(ctx.checks)
        q.flight = _between(q)

    _update(ctx, repo, target, put)
    ctx.done.append({"entry": e.id, "session_id": e.session_id, "branch": e.branch,
                     "state": state, "why": why, "commit": commit, "send": e.send})  # fmt: skip
    ctx.say(f"entry {e.id}: {state}{': ' + why.splitlines()[0] if why else ''}")
    return ""


def _reset(ctx: Ctx, q: Queue, eid: int) -> None:
    for x in q.entries:
        if x.id == eid and x.state == "testing":
            _mark(ctx, x, "waiting")
    q.flight = _between(q)


def _between(q: Queue) -> Flight | None:
    """The journal once a step is over: nothing, or, within a batch (``--depth``), still its
    temporary worktrees (swept by ``recover`` after a crash)."""
    if q.flight is None or not q.flight.more:
        return None
    return Flight(0, "prepare", more=q.flight.more)


# ---------------------------------------------------------------------------- recovery
def recover(ctx: Ctx, q: Queue) -> None:
    """Finish or undo the step a killed run left (``q.flight``), in ``q``'s transaction and
    under the runner lock: a target already at the step's new commit is finished (its
    checkout updated, the entry merged); anything earlier is undone (the entry waits again);
    the temporary worktree it named is removed."""
    f = q.flight
    if f is None:
        return
    env = ctx.environ
    rtree = git.checked(q.repo, q.repo, env)
    e = next((x for x in q.entries if x.id == f.entry), None)
    ctx.say(f"resuming after an interrupted run: entry {f.entry}, step {f.step}")
    for tmp in [f.worktree, *f.more]:
        if tmp is not None:
            _drop_worktree(ctx, rtree, Path(tmp))
    for x in q.entries:
        if x.state == "testing" and x.id != f.entry:
            _mark(ctx, x, "waiting")  # a batch's other entries: tried again
    q.flight = None
    if e is None:
        return
    state, why, commit = "waiting", "", None
    if f.step in ("advance", "checkout") and f.old and f.new:
        now = git.resolve_commit(f"refs/heads/{q.target}", rtree, env)
        if now == f.new:
            why = ""
            if f.checkout is not None:
                why = _finish_checkout(ctx, rtree, q.repo, f.checkout, q.target, f.old, f.new)
            state, commit = ("held", None) if why else ("merged", f.new)
            if not why:
                _green(ctx, q, f.new)
                _brought_in(ctx, rtree, e.session_id, e.tip, f.new)
        elif now != f.old and _is_ancestor(f.new, now, rtree, env):
            state, commit = "merged", f.new
            _brought_in(ctx, rtree, e.session_id, e.tip, f.new)
    if e.state in _OPEN:
        _mark(ctx, e, state, why)
        e.commit = commit or e.commit


def _finish_checkout(
    ctx: Ctx, rtree: git.Tree, repo: str, where: str, target: str, old: str, new: str
) -> str:
    """The checkout ``where`` of ``target`` after a run killed between moving the target and
    updating it: updated now if its index is still at ``old``; "" when done, else why not."""
    env = ctx.environ
    try:
        wt = git.checked(where, repo, env)
    except GitError as e:
        return str(e)
    if _index_is(wt, new, env):
        return ""
    if not _index_is(wt, old, env):
        return (f"{where}'s index matches neither {old[:12]} nor {new[:12]} after an interrupted "
                f"update of {target}: {target} is at the tested {new[:12]}; see git -C {where} "
                "status")  # fmt: skip
    return _update_checkout(ctx, rtree, repo, where, target, old, new)


def _index_is(wt: git.Tree, commit: str, env: Mapping[str, str]) -> bool:
    proc = git.run(["diff-index", "--cached", "--quiet", commit, "--"], wt, env, check=False)
    return proc.returncode == 0


# ---------------------------------------------------------------------------- the steps
def _session(ctx: Ctx, e: Entry, repo: str) -> tuple[Session, Workspace]:
    s = ctx.store.load(e.session_id, history=False)
    ws = workspace.pinned(s, ctx.environ, ctx.store.root)
    if ws is None or ws.mode != "worktree" or ws.branch is None:
        raise WorkspaceError(f"session {s.id} has no worktree of its own: nothing to merge")
    if ws.repo != repo or ws.branch != e.branch:
        raise WorkspaceError(f"session {s.id}'s launch record names another repository or "
                             "branch than its queue entry: refused")  # fmt: skip
    return s, ws


def _settle(ctx: Ctx, s: Session, ws: Workspace) -> str:
    """The commit of the session's branch to take in, its leftovers committed (session lock
    held meanwhile: no turn starts)."""
    with ctx.store.transaction(s.id, history=False) as fresh:
        if fresh.status is Status.RUNNING:
            raise WorkspaceError(f"session {s.id} is running: it is taken when it has finished")
        if fresh.workspace is None or not workspace.same(fresh.workspace, ws):
            raise WorkspaceError(f"session {s.id}'s workspace changed meanwhile: refused")
        return review.settle(fresh, ws, ctx.environ)


def _combine(
    ctx: Ctx, wt: git.Tree, s: Session, ws: Workspace, old: str, tip: str, target: str
) -> list[str] | None:
    """Rebase ``tip`` onto ``old`` (or merge it into ``old``) in the temporary worktree;
    the conflicting files (the worktree left clean), or None when it went through."""
    env = ctx.environ
    who = review.identity(wt, env)
    no = ["-c", "rerere.enabled=false", "-c", "rebase.autoStash=false"]
    if ctx.mode == "rebase":
        base = git.out(["merge-base", old, tip], wt, env)
        args = ["rebase", "--no-update-refs", "--no-autosquash", "--no-autostash", "--quiet",
                "--onto", old, git.check_sha(base)]  # fmt: skip
        undo = ["rebase", "--abort"]
    else:
        text = review.commit_message(s, ws, squash=False)
        args = ["merge", "--no-ff", "--no-edit", "--no-verify", "-m", text, tip]
        undo = ["merge", "--abort"]
    proc = git.run(args, wt, env, config=no, check=False, extra_env=who)
    if proc.returncode == 0:
        return None
    files = review.conflict_files(wt, env)
    git.run(undo, wt, env, check=False)
    if not files and "conflict" not in proc.stdout.decode("utf-8", "replace").lower():
        raise GitError(f"git {args[0]} onto {target} failed: {git.last_line(proc.stderr)}")
    return files


def _run_checks(ctx: Ctx, tmp: Path) -> str:
    """Run the checks in ``tmp``; "" if they all pass, else what failed and its output."""
    if not ctx.checks:
        return ""
    assert ctx.checker is not None
    for r in ctx.checker(ctx.checks, tmp):
        if not r.passed():
            how = "timed out" if r.timed_out else f"exited with {r.exit_code}"
            from zwarm.text import elide

            tail = elide(r.output_tail, TAIL_CHARS, head=0) if r.output_tail else ""
            return f"`{r.command}` {how}" + (f"\n{tail}" if tail else "")
    return ""


def _checkout_of(rtree: git.Tree, target: str, env: Mapping[str, str]) -> str | None:
    """The worktree where ``target`` is checked out, or None."""
    for w in git.worktrees(rtree, env):
        if w.get("branch") == f"refs/heads/{target}" and "prunable" not in w:
            return os.path.realpath(w["worktree"])
    return None


def _in_the_way(
    rtree: git.Tree, where: str, repo: str, old: str, new: str, env: Mapping[str, str]
) -> str | None:
    """Why the checkout ``where`` of the target cannot follow it from ``old`` to ``new``."""
    try:
        wt = git.checked(where, repo, env)
    except GitError as e:
        return str(e)
    head = git.run(["rev-parse", "--verify", "--quiet", "HEAD"], wt, env, check=False)
    if head.stdout.decode("ascii", "replace").strip() != old:
        return f"{where} is not at {old[:12]} (a commit or an operation under way there)"
    raw = git.run(["diff", "--name-only", "-z", "--no-renames", old, new, "--"], rtree, env).stdout
    touched = {p.decode("utf-8", "surrogateescape") for p in raw.split(b"\0") if p}
    why = review.in_the_way(wt, where, env, touched, "the update")
    if why:
        return f"the checkout {where} has {why}; the target was not moved"
    return None


def _update_checkout(
    ctx: Ctx, rtree: git.Tree, repo: str, where: str, target: str, old: str, new: str
) -> str:
    """Bring the checkout ``where`` from ``old`` to ``new`` (its local changes elsewhere
    kept); "" when done, else why not, the target put back to ``old``."""
    env = ctx.environ
    try:
        wt = git.checked(where, repo, env)
        git.run(["read-tree", "-m", "-u", old, new], wt, env)
        return ""
    except GitError as e:
        back = git.run(["update-ref", "-m", "zwarm merge queue: undo", f"refs/heads/{target}",
                        old, new], rtree, env, check=False)  # fmt: skip
        put = "put back" if back.returncode == 0 else "NOT put back (it moved)"
        return f"the checkout {where} could not be updated ({e}); {target} was {put}"


def _is_ancestor(a: str, b: str, cwd: git.Where, env: Mapping[str, str]) -> bool:
    proc = git.run(["merge-base", "--is-ancestor", a, b], cwd, env, check=False)
    return proc.returncode == 0


def _comment(ctx: Ctx, s: Session, ws: Workspace, e: Entry, files: list[str], text: str) -> None:
    """A review comment on the session saying why its entry was ejected (on its first
    conflicting file, else the first file it changed)."""
    env = ctx.environ
    path = files[0] if files else None
    if path is None and e.tip is not None:
        with contextlib.suppress(GitError):
            rtree = git.checked(ws.repo, ws.repo, env)
            base = ws.base or e.tip
            raw = git.run(["diff", "--name-only", "-z", base, e.tip, "--"], rtree, env).stdout
            path = next((p.decode("utf-8", "replace") for p in raw.split(b"\0") if p), None)
    try:
        with ctx.store.transaction(s.id) as fresh:
            first = max((c.id for c in fresh.comments), default=0) + 1
            if len(fresh.comments) < 10_000:
                fresh.comments.append(Comment(first, path or ".", 1, text[:65536], ctx.now()))
    except ZwarmError as err:
        ctx.say(f"could not comment on session {s.id}: {err}")


# ---------------------------------------------------------------------------- temp worktrees
def _tmp_path(ctx: Ctx, repo: str, target: str, what: str) -> Path:
    from zwarm.store.mergeq import key

    return workspace.repo_dir(ctx.root, Path(repo)) / ".mergeq" / f"{key(repo, target)}-{what}"


def _add_worktree(ctx: Ctx, rtree: git.Tree, tmp: Path, commit: str) -> None:
    from zwarm.system.files import private_dir

    _drop_worktree(ctx, rtree, tmp)  # one a killed run left
    try:
        private_dir(tmp.parent)
    except OSError as err:
        raise WorkspaceError(f"cannot create {tmp.parent}: {err.strerror}") from None
    git.run(["worktree", "add", "--detach", "--", str(tmp), git.check_sha(commit)], rtree,
            ctx.environ)  # fmt: skip


def _drop_worktree(ctx: Ctx, rtree: git.Tree, tmp: Path) -> None:
    """Remove the temporary worktree ``tmp`` (only under ``.mergeq/``, never through a link)
    and git's record of it; never raises."""
    if tmp.parent.name != ".mergeq" or not tmp.is_absolute():
        return
    with contextlib.suppress(OSError):
        st = os.lstat(tmp)
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(GitError):
                git.run(["worktree", "remove", "--force", "--force", "--", str(tmp)], rtree,
                        ctx.environ)  # fmt: skip
        if os.path.lexists(tmp):
            _rmtree(tmp)
    with contextlib.suppress(GitError):
        git.run(["worktree", "prune"], rtree, ctx.environ)


def _rmtree(path: Path) -> None:
    import shutil

    if os.path.islink(path) or not os.path.isdir(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    shutil.rmtree(path, ignore_errors=True)  # never follows a link inside
