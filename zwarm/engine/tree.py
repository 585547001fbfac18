"""Delegation trees: which session (or orchestrator run) started which, how deep, what a
subtree used, and what a kill or rm of a parent reaches.

Owns the variables the engine puts in every agent's environment (``PARENT_VAR``: the
session whose agent runs; ``DIR_VAR``: its state dir; ``ZWARM_VAR``: the absolute path of
a ``zwarm`` that runs this zwarm, whose directory also comes first on ``PATH``;
``AGENT_PATH_VAR``: the ``PATH`` the agent was given, which a child's agent is looked up on
first, ``agent_path``), the rule
that gives a new session its place in a tree (``lineage``), the children and descendants of a
session over a listing, the roll-up of a subtree's usage and cost (``roll_up``), which
sessions go with a parent (``cascade``) and a parent's budget over its whole subtree
(``over_budget``). Must stay true:
- a parent comes from the environment of the process that spawns, which an agent can change:
  it is believed only if it names, in full, a session of this state dir whose latest turn runs
  (its agent is the one spawning); the depth is that record's ``spawn_depth`` + 1, never read
  from the environment; a spawn deeper than ``[limits] max_spawn_depth`` is refused before
  anything is created;
- a linked child goes with its parent (kill, rm), and so does its own linked subtree; a
  detached child, and everything under it, never does;
- a subtree's cost with unknown parts is the sum of the known parts with the count of unknown
  ones (a lower bound that says so), never a partial sum passed off as the total; ``None``
  when no part is known;
- every file is untrusted: parent links that loop, or name sessions that are gone or damaged,
  end a walk there (never an endless loop, never a crash);
- ``AGENT_PATH_VAR``, like ``PATH``, is the spawning agent's to change: it only says where
  its child's agent CLI is looked up, as ``PATH`` itself does, never what runs with which
  sandbox (the trusted config and the session's pin say that);
- this module reads what it is given (or the store); it writes and signals nothing.
"""

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from zwarm.errors import DamagedSession, InvalidInput, SessionNotFound, StoreError
from zwarm.model import RUNS, USAGE_KEYS, Session, Usage
from zwarm.model.records import SESSION_ID, order_key

if TYPE_CHECKING:
    from zwarm.store import Store

PARENT_VAR = "ZWARM_PARENT_SESSION"  # the session whose agent runs (set by the engine)
DIR_VAR = "ZWARM_DIR"  # its state dir: a spawn from inside the agent lands in the same one
ZWARM_VAR = "ZWARM"  # how the agent runs zwarm: "$ZWARM" spawn ... (``env.launcher``)
AGENT_PATH_VAR = "ZWARM_AGENT_PATH"  # the PATH the agent was given (``agent_path``)
_ID = re.compile(SESSION_ID)


def agent_path(environ: Mapping[str, str]) -> str:
    """The ``PATH`` an agent started from ``environ`` is looked up on (and runs with): the one
    the spawning agent was given first (``AGENT_PATH_VAR``), then ``environ``'s own. Codex runs
    every command in ``bash -lc``, whose profile resets ``PATH``: the agent CLI its parent was
    found on (nvm's bin, a virtualenv, set in ``.bashrc``) was gone for a child."""
    own = environ.get("PATH") or os.defpath
    given = environ.get(AGENT_PATH_VAR)
    if not given:
        return own
    parts: list[str] = []
    for d in [*given.split(os.pathsep), *own.split(os.pathsep)]:
        if d and d not in parts:  # an empty entry (the working directory) is never added
            parts.append(d)
    return os.pathsep.join(parts)


class Lineage(msgspec.Struct, frozen=True):
    """A new session's place in a tree: its parent session or run, its depth, its lifecycle."""

    parent_session_id: str | None = None
    parent_run_id: str | None = None
    depth: int = 1
    lifecycle: str = "linked"

    def apply(self, s: Session) -> None:
        s.parent_session_id, s.parent_run_id = self.parent_session_id, self.parent_run_id
        s.spawn_depth = self.depth
        s.lifecycle = "detached" if self.lifecycle == "detached" else "linked"


def lineage(
    store: "Store",
    environ: Mapping[str, str],
    max_depth: int,
    run: str | None = None,
    detached: bool = False,
) -> Lineage:
    """Where a session spawned now goes: under the running session named by ``PARENT_VAR``
    (verified), else a root (of orchestrator run ``run``, if given). ``InvalidInput`` if the
    variable names no running session here, or if the new session would be too deep."""
    ref = (environ.get(PARENT_VAR) or "").strip()
    parent = verified_parent(store, ref) if ref else None
    depth = parent.spawn_depth + 1 if parent is not None else 1
    if max_depth and depth > max_depth:
        assert parent is not None
        raise InvalidInput(
            f"spawn refused: it would be at depth {depth} (session {parent.id} is at depth "
            f"{parent.spawn_depth}), deeper than [limits] max_spawn_depth = {max_depth}; "
            "do the work in this session instead"
        )
    return Lineage(
        parent.id if parent is not None else None,
        run,
        depth,
        "detached" if detached else "linked",
    )


def verified_parent(store: "Store", ref: str) -> Session:
    """The session ``ref`` (from ``PARENT_VAR``) names, if it is one of this state dir's and
    its latest turn runs; else ``InvalidInput`` saying why (the variable may be stale, or an
    agent's invention)."""
    where = f"{PARENT_VAR}={ref[:80]!r}"
    if not _ID.match(ref):
        raise InvalidInput(f"{where} is not a session id: refusing to guess the parent")
    try:
        if not store.exists():
            raise SessionNotFound(ref)
        got = store.load(ref)
    except SessionNotFound:
        raise InvalidInput(
            f"{where} names no session in {store.root}: the parent must be a session of the "
            f"same state dir (unset {PARENT_VAR} to start a top-level session)"
        ) from None
    except (DamagedSession, StoreError) as e:
        raise InvalidInput(f"{where}: the parent cannot be read ({e})") from None
    if got.status not in RUNS:
        raise InvalidInput(
            f"{where} names session {got.id}, which is {got.status.value}, not running: only "
            f"a running session's agent can start a child (unset {PARENT_VAR} to start a "
            "top-level session)"
        )
    return got


# ---------------------------------------------------------------------- trees over a listing
def children_map(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Parent id -> its children's ids (oldest first), over listing rows whose parent is also
    in the listing."""
    rows = list(rows)
    ids = {r["id"] for r in rows}
    kids: dict[str, list[str]] = {}
    linked = [r for r in rows if r.get("parent_session_id")]
    for r in sorted(linked, key=order_key):
        parent = r.get("parent_session_id")
        if parent and parent in ids and parent != r["id"]:
            kids.setdefault(parent, []).append(r["id"])
    return kids


def descendants(
    sid: str, kids: Mapping[str, list[str]], follow: Callable[[str], bool] = lambda _: True
) -> list[str]:
    """The descendants of ``sid`` (breadth first), going down only into children for which
    ``follow`` holds; a loop in the links ends there."""
    out: list[str] = []
    seen = {sid}
    level = [sid]
    while level:
        nxt = []
        for parent in level:
            for child in kids.get(parent, []):
                if child not in seen and follow(child):
                    seen.add(child)
                    out.append(child)
                    nxt.append(child)
        level = nxt
    return out


_N = len(USAGE_KEYS)  # a subtree's totals: the usage keys, then cost, known, unpriced, count


def _own(r: Mapping[str, Any]) -> list[float]:
    usage = r.get("usage") or {}
    out: list[float] = [v if isinstance(v := usage.get(k), int) else 0 for k in USAGE_KEYS]
    cost = r.get("cost_usd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        out += [cost, 1, 0 if r.get("cost_complete") is not False else 1, 1]
    else:
        out += [0.0, 0, 1, 1]
    return out


def _fields(t: list[float]) -> dict[str, Any]:
    """A subtree's totals as row fields: its known cost is a lower bound when
    ``tree_unpriced`` counts sessions of unknown cost, and None when none is known."""
    return {
        "tree_sessions": int(t[_N + 3]),
        "tree_usage": {k: int(t[i]) for i, k in enumerate(USAGE_KEYS)},
        "tree_cost_usd": round(t[_N], 8) if t[_N + 1] else None,
        "tree_unpriced": int(t[_N + 2]),
    }


def roll_up(rows: list[dict[str, Any]]) -> None:
    """Fill in each listing row's ``children`` and its subtree's totals (``tree_usage``,
    ``tree_cost_usd``, ``tree_unpriced``, ``tree_sessions``: the session and all its
    descendants in the listing). A row in no tree keeps what ``model.rows.row`` gave it (itself,
    no children): only the rows of trees are walked."""
    kids = children_map(rows)
    if not kids:
        return
    members = set(kids).union(*kids.values())
    by_id = {r["id"]: r for r in rows if r["id"] in members}
    totals: dict[str, list[float]] = {}
    seen: set[str] = set()
    for root in by_id:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, False)]
        while stack:
            sid, done = stack.pop()
            if not done:
                stack.append((sid, True))
                for k in kids.get(sid, ()):
                    if k not in seen:
                        seen.add(k)
                        stack.append((k, False))
                continue
            t = _own(by_id[sid])
            for k in kids.get(sid, ()):
                sub = totals.get(k)  # missing: a loop in the links, cut there
                if sub is not None:
                    t = [a + b for a, b in zip(t, sub, strict=True)]
            totals[sid] = t
    for sid, r in by_id.items():
        r["children"] = list(kids.get(sid, ()))
        r.update(_fields(totals[sid]))


def subtree(rows: list[dict[str, Any]], sid: str) -> list[dict[str, Any]]:
    """``sid``'s row and its descendants' rows (``sid`` first), from a whole listing."""
    by_id = {r["id"]: r for r in rows}
    if sid not in by_id:
        return []
    return [by_id[sid], *(by_id[d] for d in descendants(sid, children_map(rows)))]


# ---------------------------------------------------------------------- kill and rm
class Cascade(msgspec.Struct):
    """What goes with a parent: its linked descendants (breadth first), and the detached
    children met on the way (each kept, with everything under it)."""

    linked: list[str] = msgspec.field(default_factory=list)
    detached: list[str] = msgspec.field(default_factory=list)


def cascade(rows: list[dict[str, Any]], sid: str) -> Cascade:
    by_id = {r["id"]: r for r in rows}
    kids = children_map(rows)
    out = Cascade()

    def linked(child: str) -> bool:
        if by_id[child].get("lifecycle") == "detached":
            out.detached.append(child)
            return False
        return True

    out.linked = descendants(sid, kids, linked)
    return out


# ---------------------------------------------------------------------- budgets
def over_budget(store: "Store", s: Session) -> str | None:
    """Why ``s``'s turn must stop for a budget over a subtree: ``s``'s own budget counting
    its descendants, or an ancestor's counting all of its subtree (``s`` included, as given:
    the caller may hold its newer state). None if none is passed, or none applies. Reads
    every session only when some budget applies."""
    from zwarm.engine import limits

    chain = ancestors(store, s)
    budgeted = [a for a in [s, *chain] if a.max_cost_usd is not None or a.max_tokens is not None]
    if not budgeted:
        return None
    sessions = _all_sessions(store, s)
    kids = children_map([{"id": x.id, "parent_session_id": x.parent_session_id,
                          "created_at": x.created_at} for x in sessions.values()])  # fmt: skip
    for a in budgeted:
        below = [sessions[d] for d in descendants(a.id, kids) if d in sessions]
        if not below:
            continue
        extra = Usage()
        for d in below:
            extra = extra + d.usage
        cost = sum(d.spent()[1] for d in below)
        me = sessions.get(a.id, a)
        why = limits.over_budget(me, extra, cost)
        if why is not None:
            whose = "its" if a.id == s.id else f"parent session {a.id}'s"
            return f"{why} (counting {whose} {len(below)} descendant session(s): a budget "
            "covers the subtree)"
    return None


def ancestors(store: "Store", s: Session, limit: int = 1000) -> list[Session]:
    """``s``'s parent, its parent's parent ... as their files say (a missing or damaged one,
    or a loop, ends the chain)."""
    out: list[Session] = []
    seen = {s.id}
    parent = s.parent_session_id
    while parent and parent not in seen and len(out) < limit:
        seen.add(parent)
        got = store.read(parent)
        if not isinstance(got, Session):
            break
        out.append(got)
        parent = got.parent_session_id
    return out


def _all_sessions(store: "Store", s: Session) -> dict[str, Session]:
    found = {}
    for sid in store.list_ids():
        got = s if sid == s.id else store.read(sid)
        if isinstance(got, Session):
            found[sid] = got
    return found
