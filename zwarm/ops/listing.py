"""Listing sessions: every session as a row, and what only a listing knows of each.

Owns ``sessions`` (``zwarm ls``, ``GET /sessions``, the tools' list): one meta.json read per
session that is not running, unless the listing cache holds its row (``store.rowcache``), one
survey of the running ones' launchers, then their rows; the queue places and the delegation
trees' roll-up filled in; ``EncodedRow`` (a finished row kept as its JSON for output);
``select_rows`` (the filters ``ls`` and the server share); ``launcher_says``, ``queue_place``;
and ``tree_facts``: what ``show`` adds to one session's row (its children, its subtree's
totals), read from that subtree only. Must stay true:
- it never reads a turn log (but a zwarm 3.x record's: ``legacy.filled``, in memory); each
  meta.json is decoded by the one schema (``zwarm.model.schema``); a running session is
  checked with its launcher, and only a lost one is reconciled;
- a damaged session is listed as damaged, never hidden, rewritten or deleted; a session
  removed while listed (``rm`` renames it away whole) is left out, not called damaged;
- a row's shape is ``zwarm.model.rows``'s, and the listing cache is kept per version of the
  code that makes rows (``_row_sources``);
- ``tree_facts`` reads the links of the other sessions (their cached rows, or their meta.json)
  but reconciles, probes and makes rows only for the shown session's descendants.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from zwarm import legacy
from zwarm.errors import (
    DamagedSession,
    InvalidInput,
    SessionNotFound,
    ZwarmError,
)
from zwarm.model import FINISHED, RUNS, Session
from zwarm.model.records import order_key
from zwarm.model.rows import damaged_row, row
from zwarm.model.status import ROW_STATUSES

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.launchers.base import Probe
    from zwarm.store.rowcache import RowCache
    from zwarm.system.files import DirFileKey

T = TypeVar("T")


def sessions(api: Zwarm, status: str | None = None, encoded: bool = False) -> list[dict[str, Any]]:
    """Every session as a compact row (see ``row``), oldest first; damaged ones included.
    With ``encoded`` (``zwarm ls --json``), each finished session outside any delegation
    tree is an ``EncodedRow``: its JSON, and only the keys a listing filters and sorts on."""
    if status is not None and status not in ROW_STATUSES:
        raise InvalidInput(f"unknown status {status!r}")
    api.tick()
    with _gc_paused():  # the rows make no cycles; collections cost 10-20% over 1,000
        every, running = _rows_of_finished(api, encoded)
        probes = _survey(api, running)
        listed = (_listed(api, s.id, s, probes.get(s.id)) for s in running)
        every += [r for r in listed if r is not None]
        queue_places(every)  # queued rows: never encoded
        if any(r.get("parent_session_id") for r in every):
            from zwarm.engine import tree

            every = _parents_whole(every) if encoded else every
            tree.roll_up(every)  # only rows in a delegation tree change
    rows = [r for r in every if status is None or r["status"] == status]
    rows.sort(key=order_key)
    return rows


def _rows_of_finished(
    api: Zwarm, encoded: bool = False
) -> tuple[list[dict[str, Any]], list[Session]]:
    """The rows of every session that is not running (each session dropped as soon as
    its row is made: a listing's memory is its rows; ``encoded``: a finished one's row
    dropped too, kept as its JSON), and the running sessions, whose rows wait for one
    survey of their launchers. A finished session whose files are as they were when its
    row was cached is not read (``store.rowcache``)."""
    from zwarm.store import rowcache

    rows: list[dict[str, Any]] = []
    running: list[Session] = []
    read = api.store.read_keyed
    with api.store.sessions_fd() as sfd:
        cache = rowcache.opened(api.env.environ, sfd, _row_sources())
        for sid in api.store.list_ids():
            cached = cache.get(sid) if cache is not None else None
            if cached is not None:
                rows.append(_kept(cached, encoded))
                continue
            got, key = read(sid)
            if isinstance(got, DamagedSession):
                if api.store.removed(sid):
                    continue  # removed since listed (rm renames it away whole): not damage
                rows.append(damaged_row(sid, got.problem))
            elif got.imported:  # zwarm 3.x's, never running: its logs read
                filled = legacy.filled(api.reader(got.adapter), got)
                rows.append(_kept(row(filled), encoded))
            elif got.status in RUNS and got.current is not None:
                running.append(got)
            else:
                rows.append(_kept(row(got), encoded, cache, key))
    if cache is not None:
        cache.save()
    return rows, running


def _listed(
    api: Zwarm, sid: str, got: Session | DamagedSession, probe: Probe | None
) -> dict[str, Any] | None:
    """``sid``'s row, decoded by the one schema; a running session is reconciled (its
    launcher verifies what runs it, ``probe`` its answer when the listing asked it
    already; only a lost one needs its agent's parser), and says what its launcher
    says of it (``launcher_state``: a Slurm job's state; ``shown_status``: the status
    shown instead of ``running``, ``queued (slurm: Resources)``)."""
    if isinstance(got, DamagedSession):
        return damaged_row(sid, got.problem)
    if got.status in RUNS and not (probe.alive if probe is not None else api._alive(got)):
        try:
            got = api.reader(got.adapter).reconcile(got)
        except SessionNotFound:
            return None
        except ZwarmError as e:
            return None if api.store.removed(sid) else damaged_row(sid, str(e))
    r = row(got)
    if probe is not None and got.status in RUNS:
        r["launcher_state"] = _launcher_state(probe, got)
        r["shown_status"] = probe.label()
    return r


def launcher_says(api: Zwarm, sessions: list[Session]) -> dict[str, dict[str, Any]]:
    """What the launchers of ``sessions``' running turns say of them, as a listing's rows
    carry it (``launcher_state``, ``shown_status``; see ``_listed``): one query per
    launcher (a cluster's queue is asked once for all, every host at once). The dashboard's
    live rows (``serve.streams``) show a pending Slurm job, or a host that does not answer
    (``unknown (host a unreachable)``), as ``zwarm ls`` does: every launcher is asked, as
    ``ls`` asks it (``_survey``), not only those that answer many turns at once."""
    running = [s for s in sessions if s.status in RUNS and s.current is not None]
    probes = _survey(api, running)
    return {
        s.id: {"launcher_state": _launcher_state(p, s), "shown_status": p.label()}
        for s in running
        if (p := probes.get(s.id)) is not None
    }


def _survey(api: Zwarm, sessions: list[Session]) -> dict[str, Probe]:
    """Probes of the running sessions' turns: one query per launcher (``runtime.survey``:
    one ``squeue`` for every Slurm job), none for a finished session."""
    items = [(s.id, s.current) for s in sessions if s.status in RUNS and s.current]
    if not items:
        return {}
    from zwarm.launchers import survey

    return survey(items, api._launcher)


def queue_place(api: Zwarm, sid: str) -> dict[str, Any]:
    """A queued session's ``queue_position`` and ``waiting_for`` (reads every session)."""
    for r in api.sessions():
        if r["id"] == sid:
            return {k: r[k] for k in ("queue_position", "waiting_for")}
    return {}


def tree_facts(api: Zwarm, s: Session) -> dict[str, Any]:
    """What only a listing knows of ``s``, as ``show`` adds it to its row: its children and its
    subtree's totals (``engine.tree``; ``child_sessions``: a short row per child), what its
    launcher says of it, and if it is queued its place in the queue. Only ``s``'s subtree is
    made rows: every other session is looked at for its parent link only (its cached row, or
    its meta.json), never reconciled, probed or made a row. A queued session's place needs
    the whole queue: a listing of every session then."""
    from zwarm.engine import tree

    if s.status.value == "queued":
        return _facts(s.id, sessions(api))
    links, found = _links(api, s)
    below = set(tree.descendants(s.id, tree.children_map(links)))
    rows: list[dict[str, Any]] = []
    running: list[Session] = []
    for link in links:  # in the listing's order: a loop in the links is cut where ls cuts it
        sid = link["id"]
        got = found.get(sid)
        if sid != s.id and sid not in below:
            continue
        if isinstance(got, Session) and got.status in RUNS and got.current is not None:
            running.append(got)
        elif isinstance(got, Session) and got.imported:  # zwarm 3.x's (zwarm.legacy)
            rows.append(row(legacy.filled(api.reader(got.adapter), got)))
        elif isinstance(got, Session):
            rows.append(row(got))
        elif got is not None:
            rows.append(got)  # a cached row: as the listing keeps it
    probes = _survey(api, running)
    listed = (_listed(api, x.id, x, probes.get(x.id)) for x in running)
    rows += [r for r in listed if r is not None]
    tree.roll_up(rows)
    return _facts(s.id, rows)


def _facts(sid: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``tree_facts`` of ``sid`` from ``rows`` (a listing's, or its subtree's, rolled up)."""
    by_id = {r["id"]: r for r in rows}
    mine = by_id.get(sid)
    if mine is None:
        return {}
    keys = ["children", *_TREE_TOTALS, "launcher_state", "shown_status"]
    if mine["status"] == "queued":
        keys += ["queue_position", "waiting_for"]
    out = {k: mine[k] for k in keys}
    out["child_sessions"] = [_child_view(by_id[c]) for c in mine["children"]]
    return out


def _links(
    api: Zwarm, s: Session
) -> tuple[list[dict[str, Any]], dict[str, Session | dict[str, Any]]]:
    """Every session's parent link (``id``, ``parent_session_id``, ``created_at``) in the
    listing's order, and what it was read from: ``s`` itself, a finished session's cached row
    (``store.rowcache``; its files unchanged), or its meta.json. A damaged or removed session
    links nothing (as in a listing, where it is in no tree)."""
    from zwarm.store import rowcache

    links: list[dict[str, Any]] = []
    found: dict[str, Session | dict[str, Any]] = {}
    with api.store.sessions_fd() as sfd:
        cache = rowcache.opened(api.env.environ, sfd, _row_sources())
        for sid in api.store.list_ids():
            got: Session | dict[str, Any] | DamagedSession | None = s if sid == s.id else None
            if got is None and cache is not None:
                got = cache.get(sid)
            if got is None:
                got = api.store.read(sid)
            if isinstance(got, DamagedSession):
                continue
            found[sid] = got
            if isinstance(got, Session):
                links.append(
                    {"id": sid, "parent_session_id": got.parent_session_id,
                     "created_at": got.created_at}
                )  # fmt: skip
            else:
                links.append({k: got[k] for k in ("id", "parent_session_id", "created_at")})
    return links, found


_TREE_TOTALS = ("tree_sessions", "tree_usage", "tree_cost_usd", "tree_unpriced")


def _child_view(r: dict[str, Any]) -> dict[str, Any]:
    """A child in ``show``: who it is, how it stands, what its subtree used."""
    keys = ("id", "name", "status", "lifecycle", "spawn_depth", "task", *_TREE_TOTALS)
    return {k: r.get(k) for k in keys}


def queue_places(rows: list[dict[str, Any]]) -> None:
    """Fill in each queued row's place in the queue (1 starts first: priority, then first
    queued) and the sessions it still waits for (``--after``), from every row."""
    status = {r["id"]: r["status"] for r in rows}
    queued = [r for r in rows if r["status"] == "queued"]
    queued.sort(key=lambda r: (-(r.get("priority") or 0), r.get("queued_at") or "", r["id"]))
    for place, r in enumerate(queued, 1):
        r["queue_position"] = place
        if r["turns"] == 1:
            r["waiting_for"] = [a for a in r["after"] if status.get(a) not in FINISHED]


def _row_sources() -> list[str]:
    """The files whose code decides what a listing row says (``row``, the record's derived
    fields, the schemas): the listing cache is kept per version of them."""
    from zwarm.model import records, rows, schema, status

    return [__file__, records.__file__, rows.__file__, schema.__file__, status.__file__]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block (a listing allocates thousands of
    containers and frees them by reference counting), back on after it as it was before."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class EncodedRow(dict[str, Any]):
    """A finished session's row as a listing for output keeps it (``sessions(encoded=True)``):
    ``raw``, the whole row's JSON, exactly ``msgspec.json.encode(row)``, and of the row only
    the keys a listing filters and sorts on (``KEYS``). Over 10,000 to 50,000 rows, holding
    the rows' dicts until output cost a cold ``ls --json`` 7-10% (their pages, and encoding
    them again once they are out of every CPU cache). Only a row no later step of a listing
    changes is kept so: a finished one (never queued) in no delegation tree
    (``_parents_whole`` restores a parent's row before the roll-up)."""

    __slots__ = ("raw",)
    KEYS = ("id", "status", "name", "adapter", "source", "created_at", "parent_session_id")
    raw: msgspec.Raw

    @classmethod
    def of(cls, r: dict[str, Any], raw: bytes) -> dict[str, Any]:
        """``r`` (finished) kept as ``raw``, or ``r`` itself if it is in a delegation tree."""
        if r["parent_session_id"] is not None or r["status"] not in FINISHED:
            return r
        e = cls((k, r[k]) for k in cls.KEYS)
        e.raw = msgspec.Raw(raw)
        return e


def _kept(
    r: dict[str, Any],
    encoded: bool,
    cache: RowCache | None = None,
    key: DirFileKey | None = None,
) -> dict[str, Any]:
    """Row ``r`` of a session that is not running, as a listing keeps it: given to ``cache``
    if it takes it (``r`` just made from the files of ``key``), and with ``encoded`` an
    ``EncodedRow`` if it can be one: encoded once, while the row is fresh in memory, and
    the cache's line made of the same bytes."""
    raw = _encoded(r) if encoded and r["status"] in FINISHED else None  # else never used
    if cache is not None and key is not None:
        cache.put(r["id"], key, r, raw)
    return r if raw is None else EncodedRow.of(r, raw)


def _encoded(r: dict[str, Any]) -> bytes | None:
    """Row ``r``'s JSON (``msgspec``), or None if msgspec cannot encode it (a lone surrogate
    in a string: output then takes its own way)."""
    try:
        return _encode_row(r)
    except (TypeError, ValueError):
        return None


def _parents_whole(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with each parent's ``EncodedRow`` decoded back to the whole row (the same
    dict, in the same key order), as a delegation tree's roll-up needs it."""
    parents = {r["parent_session_id"] for r in rows if r.get("parent_session_id")}

    def whole(r: dict[str, Any]) -> dict[str, Any]:
        if type(r) is EncodedRow and r["id"] in parents:
            d: dict[str, Any] = msgspec.json.decode(r.raw)
            return d
        return r

    return [whole(r) for r in rows]


_encode_row = msgspec.json.Encoder().encode


def select_rows(
    rows: list[dict[str, Any]],
    name: str | None = None,
    adapter: str | None = None,
    source: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The rows matching every filter given, as ``zwarm ls`` and ``GET /sessions`` filter
    them (names and sources by glob), the newest ``limit`` of them, still oldest first."""
    from fnmatch import fnmatchcase

    if name is not None:
        rows = [r for r in rows if r.get("name") and fnmatchcase(r["name"], name)]
    if adapter is not None:
        rows = [r for r in rows if r.get("adapter") == adapter]
    if source is not None:
        rows = [r for r in rows if r.get("source") and fnmatchcase(r["source"], source)]
    return rows[-limit:] if limit else rows


def _launcher_state(probe: Probe, s: Session) -> dict[str, Any]:
    """A running row's ``launcher_state``: the launcher's own state word (``PENDING``), the
    word shown instead of ``running`` (``queued``, ``unknown``) and why, and the turn's
    handle (``{"job": "123"}``)."""
    t = s.current
    handle = dict(t.handle) if t is not None and t.handle else {}
    return {"state": probe.state, "shown": probe.shown, "detail": probe.detail, "handle": handle}
