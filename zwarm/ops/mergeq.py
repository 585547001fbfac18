"""The merge queue's operations: enqueue sessions, run, list, remove, pause and resume.

Owns the front of the merge queue: which sessions may join (finished, with a worktree of
their own, as their launch pins confirm), which queue a command means, which checks a run
executes and who runs them, and sending an ejected session its comment as its next turn;
the git work is ``engine.mergeq``'s, the records ``store.mergeq``'s. Must stay true:
- the checks come from the caller (``--check``) or from ``[merge] check`` read through
  trust, never from a queue record or a session; a run with no check is refused unless
  the caller says ``no_check``; the checks run through ``zwarm.sandbox.run`` (sandboxed, or
  unsandboxed only by the user's trusted opt-in: ``check_plan``), never another runner;
- a session joins a queue only as its launch pin confirms its worktree and branch
  (``review.workspace_of``), and the queue's repository is that pinned repository.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from zwarm.errors import InvalidInput, WorkspaceError, ZwarmError
from zwarm.model import Status

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.engine.mergeq import Ctx

NO_CHECK = (
    'the merge queue has no check: set [merge] check = ["..."] in config.toml, pass '
    "--check CMD (to each run: checks given are not kept), or pass --no-check to merge untested"
)


def _ctx(
    api: Zwarm, checks: Sequence[str] = (), no_check: bool = True, repo: str = "", depth: int = 1
) -> Ctx:
    """The engine's context for a run: the checks decided (``_checks``) and their runner."""
    from zwarm.engine import mergeq, workspace
    from zwarm.store.mergeq import Records

    cfg = api.config
    environ = api.env.environ
    cmds = _checks(api, checks, no_check)
    checker = None
    if cmds:
        from zwarm.sandbox.run import allowed_env, check_plan, run_checks

        where = Path(repo or api.env.cwd)
        check_plan(cfg, where)  # refused here, before anything is queued: no sandbox, no opt-in
        timeout = float(cfg.get("merge", "check_timeout_s"))
        env = allowed_env(environ)

        def checker(commands: Sequence[str], cwd: Path) -> list[Any]:
            return list(run_checks(commands, cwd, config=cfg, timeout_s=timeout, env=env,
                                   repo=where))  # fmt: skip

    return mergeq.Ctx(
        api.store,
        Records(environ, api.store.root),
        environ,
        api.env.now_iso,
        workspace.root_of(cfg.get("workspace", "root"), environ),
        mode=str(cfg.data["merge"]["mode"]),
        checks=tuple(cmds),
        checker=checker,
        depth=_depth(depth),
        say=api.on_progress or (lambda _: None),
    )


def _depth(depth: int) -> int:
    if not 1 <= depth <= 16:
        raise InvalidInput("--depth must be a whole number from 1 to 16")
    return depth


def _checks(api: Zwarm, given: Sequence[str], no_check: bool) -> list[str]:
    if given and no_check:
        raise InvalidInput("--check and --no-check contradict each other")
    if no_check:
        return []
    cmds = [c for c in given if c.strip()] or list(api.config.get("merge", "check"))
    if not cmds:
        raise InvalidInput(NO_CHECK)
    return cmds


def enqueue(
    api: Zwarm,
    refs: Sequence[str],
    *,
    target: str | None = None,
    priority: int = 0,
    checks: Sequence[str] = (),
    no_check: bool = False,
    send: bool = False,
    run: bool = True,
    depth: int = 1,
) -> dict[str, Any]:
    """Put the sessions ``refs`` (finished worktree sessions of one repository) in the queue
    of ``target`` (default: the branch of the main worktree), in order, then (``run``) process
    the queue now unless another run is doing it. The checks are settled before anything is
    queued: a queue with no check is refused unless ``no_check``."""
    from zwarm.engine import mergeq
    from zwarm.ops.review import workspace_of

    if not refs:
        raise InvalidInput("give at least one session to queue")
    if not -1000 <= priority <= 1000:
        raise InvalidInput("--priority must be a whole number from -1000 to 1000")
    items = []
    seen = set()
    for ref in refs:
        s = api.get(ref, history=False)
        if s.id in seen:
            continue
        seen.add(s.id)
        ws = workspace_of(api, s)
        if ws.mode != "worktree" or ws.branch is None or ws.removed:
            raise WorkspaceError(f"session {s.id} has no worktree of its own: nothing to merge")
        if ws.host is not None:
            raise WorkspaceError(f"session {s.id}'s worktree is on host {ws.host}: the merge "
                                 "queue runs here; merge it there (zwarm merge)")  # fmt: skip
        if s.status is Status.RUNNING:
            raise WorkspaceError(f"session {s.id} is running: queue it when it has finished")
        items.append((s, ws))
    repo = items[0][1].repo
    ctx = _ctx(api, checks, no_check, repo, depth)
    branch = mergeq.target_of(items[0][1], api.env.environ, target)
    api.ensure_state_dir()
    entries = mergeq.enqueue(ctx, items, branch, priority, send)
    out: dict[str, Any] = {
        "repo": repo,
        "target": branch,
        "queued": [msgspec.to_builtins(e) for e in entries],
        "run": None,
    }
    if run:
        out["run"] = _run(api, ctx, repo, branch, wait=False)
    return out


def run(
    api: Zwarm,
    target: str | None = None,
    *,
    checks: Sequence[str] = (),
    no_check: bool = False,
    depth: int = 1,
) -> list[dict[str, Any]]:
    """Process the queues of this state dir (those of ``target`` only, if given) to
    completion, one runner per queue (another run of one: wait for it)."""
    out = []
    for repo, branch in _queues(api, target):
        ctx = _ctx(api, checks, no_check, repo, depth)
        got = _run(api, ctx, repo, branch, wait=True)
        if got is not None:
            out.append(got)
    return out


def _run(api: Zwarm, ctx: Ctx, repo: str, target: str, wait: bool) -> dict[str, Any] | None:
    from zwarm.engine import mergeq
    from zwarm.engine.review import COMMENT_PROMPT

    res = mergeq.run(ctx, repo, target, wait=wait)
    if res is None:
        return {"repo": repo, "target": target, "stopped": "another run is processing it"}
    for d in res["done"]:
        if d["state"] == "ejected" and d["send"]:
            try:
                after, state = api.inject(d["session_id"], COMMENT_PROMPT)
                d["sent"] = {"state": state, "turn": after.count}
            except ZwarmError as e:  # reported: the queue's work stands
                d["sent"] = {"error": str(e)[:400]}
    return res


def _queues(api: Zwarm, target: str | None) -> list[tuple[str, str]]:
    from zwarm.store.mergeq import Records

    found = Records(api.env.environ, api.store.root).keys()
    if target is not None:
        found = [k for k in found if k[1] == target]
    return found


def _one(api: Zwarm, target: str | None) -> tuple[str, str]:
    """The queue a command means: the one of ``target`` (and of the repository zwarm runs
    in, when several repositories have one)."""
    found = _queues(api, target)
    if len(found) > 1:
        from zwarm.engine import git

        top = git.toplevel(api.env.cwd, api.env.environ)
        here = [k for k in found if top is not None and _same(k[0], top)]
        found = here or found
    if not found:
        raise InvalidInput("there is no merge queue" + (f" for {target}" if target else ""))
    if len(found) > 1:
        shown = ", ".join(f"{t} ({r})" for r, t in found[:10])
        raise InvalidInput(f"several merge queues: {shown}; pass --target BRANCH")
    return found[0]


def _same(repo: str, top: Path) -> bool:
    return os.path.realpath(repo) == os.path.realpath(top)


def listing(api: Zwarm, target: str | None = None) -> list[dict[str, Any]]:
    """Every queue of this state dir: its entries in order (testing, waiting, held, then the
    finished ones: merged, ejected and why, removed), paused, blocked."""
    from zwarm.store.mergeq import Records

    recs = Records(api.env.environ, api.store.root)
    out = []
    for repo, branch in _queues(api, target):
        q = recs.read(repo, branch)
        if q is None:
            continue
        d = msgspec.to_builtins(q)
        order = {"testing": 0, "waiting": 1, "held": 2}
        d["entries"] = sorted(
            d["entries"],
            key=lambda e: (order.get(e["state"], 3), -e["priority"] if e["state"] in order
                           else 0, e["id"] if e["state"] in order else -e["id"]),
        )  # fmt: skip
        d["flight"] = q.flight is not None
        out.append(d)
    return out


def remove(api: Zwarm, ref: str, target: str | None = None) -> dict[str, Any]:
    """Take session ``ref`` out of its queue (nothing of it is merged or deleted)."""
    from zwarm.engine import mergeq

    sid = api.resolve(ref)
    from zwarm.store.mergeq import Records

    recs = Records(api.env.environ, api.store.root)
    for repo, branch in _queues(api, target):
        q = recs.read(repo, branch)
        if q is not None and any(
            e.session_id == sid and e.state in ("waiting", "testing", "held") for e in q.entries
        ):
            e = mergeq.remove(_ctx(api), repo, branch, sid)
            return {"repo": repo, "target": branch, "removed": msgspec.to_builtins(e)}
    raise InvalidInput(f"session {sid} waits in no merge queue")


def pause(api: Zwarm, paused: bool, target: str | None = None) -> dict[str, Any]:
    """Pause (a run then stops before its next entry) or resume a queue."""
    from zwarm.engine import mergeq

    repo, branch = _one(api, target)
    q = mergeq.set_paused(_ctx(api), repo, branch, paused)
    return {"repo": repo, "target": branch, "paused": q.paused}
