"""Removal: killing sessions (``kill``) and deleting them (``rm``), with their linked
descendants (``engine.tree``).

Owns the fan-out over several sessions (``each``: every one tried, then ``PartlyFailed``),
``kill --all`` (every waiting session recorded killed first, then all stopped together), and
the removal of one session under its lock. Must stay true:
- a kill is recorded before anything is signalled; the waiting are recorded killed first, so
  none starts in a slot a kill frees; a kill that frees a slot lets the next queued session
  start;
- a session killed or removed takes its linked descendants, said in its result; a detached
  child is never taken;
- whether a session runs is decided again under its lock, where it is removed: an ``inject``
  that restarted it meanwhile is never removed from under (without ``force``); a lost
  session is ended in memory only (removing frees space: a full disk must not stop it);
- a session's worktree that holds work is kept (``WouldLoseWork``) unless ``force``;
- whatever carries a session's marker is stopped by its ``kill`` and ``rm`` and by ``kill
  --all``, whatever its record says (``engine.recovery.stop_strays``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from zwarm.errors import (
    DamagedSession,
    PartlyFailed,
    SessionNotFound,
    SessionStateError,
    WorkspaceError,
    ZwarmError,
)
from zwarm.model import ACTIVE, FINISHED, RUNS
from zwarm.model.rows import row
from zwarm.text import plural

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.launchers.base import Launcher
    from zwarm.text import plural
from zwarm.model import Turn

T = TypeVar("T")


def kill(api: Zwarm, refs: list[str] | None = None, all_: bool = False) -> list[dict[str, Any]]:
    """Kill running sessions (whole process trees), and queued or parked ones (they never
    start). With ``all_``, every one of them, together (``_kill_many``): the waiting are
    recorded killed first, so none starts in a slot a kill frees. A kill that frees a slot
    lets the next queued session start. A session killed takes its linked descendants
    with it (``engine.tree``), said in its row."""
    if not all_:
        try:
            return _each(api, refs or [], lambda sid: _kill_one(api, sid))
        finally:
            api.tick(force=True)
    every = api.sessions()
    rows = [r for r in every if r["status"] in ACTIVE]
    _readers(api, rows)
    waiting = [r["id"] for r in rows if r["status"] not in RUNS]
    try:
        return _kill_many(api, waiting, [r["id"] for r in rows if r["status"] in RUNS])
    finally:  # what runs though its record says not (rewritten by its agent): stopped too
        from zwarm.engine.recovery import stop_strays

        ended = [r["id"] for r in every if r["status"] not in ACTIVE]
        stop_strays(api.env.environ, api.store.root, ended)


def _readers(api: Zwarm, rows: list[dict[str, Any]]) -> None:
    """The readers of these sessions' adapters, made once here, before ``_kill_many``'s
    threads share them."""
    for adapter in sorted({r["adapter"] for r in rows}):
        with contextlib.suppress(ZwarmError):  # said by that session's own kill
            api.reader(adapter)


def _kill_many(api: Zwarm, *batches: list[str]) -> list[dict[str, Any]]:
    """Kill the sessions of ``batches`` together (no cascade: all go anyway). Each is
    recorded killed in its own transaction (a batch after the one before), then the
    processes of all of them are stopped at once by their launchers (``stop_many``:
    for local turns one scan of /proc, every signal sent before any wait), so 200 take
    about as long as one. A session that finished meanwhile is left out; every kill is
    done before the errors are raised (``PartlyFailed``, in order)."""
    ended: dict[str, tuple[BaseSessionManager, int, Turn | None]] = {}
    failed: dict[str, ZwarmError] = {}
    for sids in batches:
        _end_killed(api, sids, ended, failed)
    stops: dict[str, tuple[Launcher, list[tuple[str, Turn]]]] = {}
    for sid, (manager, _, t) in ended.items():
        if t is not None:
            stops.setdefault(t.launcher, (manager.launcher(t), []))[1].append((sid, t))
    for launcher, items in stops.values():
        failed.update(launcher.stop_many(items))
    done = [_killed_row(api, sid, ended[sid][1]) for sid in ended if sid not in failed]
    order = [sid for sids in batches for sid in sids if sid in failed]
    if order:
        raise PartlyFailed(done, [(sid, failed[sid]) for sid in order])
    return done


def _end_killed(
    api: Zwarm,
    sids: list[str],
    ended: dict[str, tuple[BaseSessionManager, int, Turn | None]],
    failed: dict[str, ZwarmError],
) -> None:
    """Record each of ``sids`` killed (``end_killed``), into ``ended`` or ``failed``; a few
    transactions at a time (each mostly waits for its disk writes)."""
    if not sids:
        return
    from concurrent.futures import ThreadPoolExecutor

    def one(sid: str) -> tuple[BaseSessionManager, int, Turn | None] | ZwarmError | None:
        try:
            manager = api.reader(api.store.load(sid, history=False).adapter)
            _, dropped, t = manager.end_killed(sid)
        except SessionStateError:  # finished meanwhile
            return None
        except ZwarmError as e:
            return e
        return manager, dropped, t

    with ThreadPoolExecutor(max_workers=min(_KILL_THREADS, len(sids))) as pool:
        for sid, got in zip(sids, pool.map(one, sids), strict=True):
            if isinstance(got, ZwarmError):
                failed[sid] = got
            elif got is not None:
                ended[sid] = got


def _killed_row(api: Zwarm, sid: str, dropped: int) -> dict[str, Any]:
    out = {**row(api.store.load(sid)), "dropped_queued": dropped}
    return {**out, "children_killed": [], "children_left": []}


def _kill_one(api: Zwarm, sid: str, cascade: bool = True) -> dict[str, Any]:
    """Kill ``sid``, then its linked descendants that are active (``engine.tree``),
    whatever its own state: a parent that already finished keeps its status (``stopped``
    False) and its running tree is stopped. The row says which descendants were killed
    (``children_killed``) and which detached children it left running (``children_left``).
    A finished session with nothing active under it is not running: an error."""
    s = api.store.load(sid)
    try:
        s, dropped = api.reader(s.adapter).kill(sid)
    except SessionStateError:
        killed, left = _kill_linked(api, sid) if cascade else ([], [])
        if not killed:
            raise
        s, dropped, stopped = api.store.load(sid), 0, False
    else:
        killed, left = _kill_linked(api, sid) if cascade else ([], [])
        stopped = True
    out = {**row(s), "dropped_queued": dropped, "stopped": stopped}
    return {**out, "children_killed": killed, "children_left": left}


def _kill_linked(api: Zwarm, sid: str) -> tuple[list[str], list[str]]:
    """Kill the active linked descendants of ``sid`` (parent already killed, so it starts
    no more; a child spawned meanwhile is found by the next scan, up to 3), together
    (``_kill_many``). Returns (the ids killed, the active detached children left
    running)."""
    from zwarm.engine import tree

    killed: list[str] = []
    left: list[str] = []
    for _ in range(3):
        rows = api.sessions()
        status = {r["id"]: r["status"] for r in rows}
        c = tree.cascade(rows, sid)
        left = [d for d in c.detached if status.get(d) in ACTIVE]
        todo = [d for d in c.linked if status.get(d) in ACTIVE and d not in killed]
        if not todo:
            break
        _readers(api, [r for r in rows if r["id"] in todo])
        try:
            done = _kill_many(api, todo)
        except PartlyFailed as e:  # finished meanwhile, or damaged: not killed here
            done = e.done
        killed += [r["id"] for r in done]
    return killed, left


def _each(
    api: Zwarm,
    refs: list[str],
    act: Callable[[str], T | None],
    resolve: Callable[[str], str] | None = None,
) -> list[T]:
    """``act`` on each session ``refs`` name (once each, in order), every one tried: what
    it returned (None: nothing done), or ``PartlyFailed`` naming every reference that
    failed after the others were done. A single reference's error is raised as it is."""
    done: list[T] = []
    failed: list[tuple[str, ZwarmError]] = []
    seen: set[str] = set()
    for ref in refs:
        try:
            sid = (resolve or api.store.resolve)(ref)
            if sid in seen:
                continue
            seen.add(sid)
            got = act(sid)
        except ZwarmError as e:
            if len(refs) == 1:
                raise
            failed.append((ref, e))
            continue
        if got is not None:
            done.append(got)
    if failed:
        raise PartlyFailed(list(done), failed)
    return done


def rm(
    api: Zwarm,
    refs: list[str] | None = None,
    finished: bool = False,
    force: bool = False,
    detail: bool = False,
) -> list[Any]:
    """Delete sessions: the ids removed, each followed by its linked descendants, removed
    with it (``engine.tree``; an active one only with ``force``, else nothing is
    removed). Running ones only with ``force`` (killed first); damaged likewise. Every
    reference is tried (see ``_each``). With ``detail``, one dict per session asked for:
    ``id``, ``children_removed``, ``children_kept`` (detached: left as they are) and
    ``children_failed`` (``[id, why]``)."""
    gone: set[str] = set()
    try:
        done = _rm(api, refs or [], finished, force, gone)
    except PartlyFailed as e:
        raise PartlyFailed(e.done if detail else _flat(e.done), e.failed) from None
    return done if detail else _flat(done)


def _rm(
    api: Zwarm, refs: list[str], finished: bool, force: bool, gone: set[str]
) -> list[dict[str, Any]]:
    if not finished:
        known = {}
        for ref in refs:  # resolved first: a later ref may be a child that went already
            with contextlib.suppress(ZwarmError):
                known[ref] = api.store.resolve(ref)
        return _each(
            api,
            refs,
            lambda sid: _rm_tree(api, sid, force, False, gone),
            resolve=lambda ref: known.get(ref) or api.store.resolve(ref),
        )
    rows = api.sessions()
    targets = [r["id"] for r in rows if r["status"] in FINISHED]
    done: list[dict[str, Any]] = []
    kept: list[tuple[str, ZwarmError]] = []
    for sid in targets:
        try:
            got = _rm_tree(api, sid, force, True, gone, rows)
            if got is not None:
                done.append(got)
        except WorkspaceError as e:  # its worktree holds work: kept, and said
            kept.append((sid, e))
    if kept:
        raise PartlyFailed(list(done), kept)
    return done


def _rm_tree(
    api: Zwarm,
    sid: str,
    force: bool,
    skip_busy: bool,
    gone: set[str],
    rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """Remove ``sid`` and then its linked descendants (deepest first); None if it went
    already (with a parent) or ``skip_busy`` skipped it. With a linked descendant still
    active and no ``force``, nothing is removed."""
    from zwarm.engine import tree

    if sid in gone:
        return None
    rows = api.sessions() if rows is None else rows
    status = {r["id"]: r["status"] for r in rows}
    c = tree.cascade(rows, sid)
    busy = [d for d in c.linked if status.get(d) in ACTIVE]
    if busy and not force:
        if skip_busy:
            return None
        raise SessionStateError(
            f"session {sid} has {plural(len(busy), 'linked child session')} still active "
            f"({', '.join(busy)}): kill it first (they go with it), or use --force"
        )
    if _rm_one(api, sid, force, skip_busy) is None:
        return None
    gone.add(sid)
    out: dict[str, Any] = {"id": sid, "children_removed": [], "children_failed": []}
    out["children_kept"] = [d for d in c.detached if d not in gone]
    for child in reversed(c.linked):
        try:
            if _rm_one(api, child, force, skip_busy=False) is not None:
                out["children_removed"].append(child)
        except SessionNotFound:
            pass  # removed meanwhile
        except ZwarmError as e:
            out["children_failed"].append([child, str(e)])
            continue
        gone.add(child)
    out["children_removed"].reverse()  # shallowest first, as listed
    return out


def _rm_one(api: Zwarm, sid: str, force: bool, skip_busy: bool) -> str | None:
    """Remove one session (its id; None if ``skip_busy`` skipped it). Whether it runs is
    decided again under its lock, where the removal happens: an ``inject`` that restarted
    it meanwhile is never removed from under (without ``force``), and with ``force`` it is
    killed again first. A lost session (its supervisor gone) is ended in memory only, its
    orphaned agent stopped, never written: removing frees space, so a full disk must not
    stop it."""
    for _ in range(3):
        try:
            api.tick()
            s = api.store.load(sid)  # never reconciled on disk: removal needs no room
        except DamagedSession as e:
            if not force:
                raise DamagedSession(
                    sid, f"{e.problem} (use --force to delete it anyway)"
                ) from None
            _remove(api, sid, None)
            return sid
        if s.status in ACTIVE and not api.reader(s.adapter).is_lost(s):
            if skip_busy:
                return None
            if not force:
                raise SessionStateError(
                    f"session {sid} is {s.status.value} (kill it first, or use --force)"
                )
            with contextlib.suppress(SessionStateError):
                api.reader(s.adapter).kill(sid)
        with api.store.lock(sid):
            now = api.store.load(sid)
            api.reader(now.adapter).end_lost(now)  # in memory: it is deleted next
            if now.status not in ACTIVE:
                _release_workspace(api, sid, force)
                _remove(api, sid, s.name)
                return sid
        if skip_busy:
            return None  # rm --finished: it is not finished any more
        if not force:
            raise SessionStateError(f"session {sid} is running (kill it first, or use --force)")
    raise SessionStateError(f"session {sid} keeps being restarted; not removed")


def _release_workspace(api: Zwarm, sid: str, force: bool) -> None:
    """Remove the session's worktree, branch and snapshot refs (lock held), unless that
    would lose work and not ``force`` (``WouldLoseWork``)."""
    s = api.store.load(sid)
    from zwarm.engine import workspace

    ws = workspace.for_removal(s, api.env.environ, api.store.root)
    if ws is not None and ws.host is not None:  # on its host, by the host's zwarm
        from zwarm.ops import hostws

        there = hostws.of(api.env.environ, api.store.root, s, ws)
        if there is not None and ws.mode == "worktree" and not ws.removed:
            there.remove(sid, ws, force)
    elif ws is not None:
        workspace.release(ws, api.env.environ, sid, force)


def _remove(api: Zwarm, sid: str, name: str | None) -> None:
    """Delete the session and its pin, once whatever still carries its marker is stopped
    (its record may say it ended when its agent rewrote it: ``stop_strays``)."""
    from zwarm.engine.recovery import stop_strays
    from zwarm.store import pins

    stop_strays(api.env.environ, api.store.root, [sid])
    api.store.remove(sid, name)
    pins.remove(api.env.environ, sid)


_KILL_THREADS = 32  # kill --all: transactions at once (each mostly waits for its fsyncs)


def _flat(done: list[Any]) -> list[str]:
    """``rm``'s ids: each session asked for, then the linked children that went with it."""
    out: list[str] = []
    for d in done:
        out += [d["id"], *d["children_removed"]] if isinstance(d, dict) else [d]
    return out
