"""Best-of sets in the engine: settling an attempt when its turn ends (``settle``: its
protected paths restored from the base, zwarm's checks run in its worktree, the evidence
recorded) and ranking a set's attempts on that evidence (``standings``, ``rank``).

Owns what an attempt's evidence is made of and the ranking's order. Must stay true:
- the checks are zwarm's, never the agent's word: an attempt passes only when its turn
  completed and every check exited 0 within its timeout (``zwarm.sandbox.run``: sandboxed, or
  unsandboxed only where the user opted in for the repository; a refusal is a failed check);
- the worktree acted on is the one the session's launch pin names (``workspace.pinned``), and
  the base and the protected paths come from the set's record, never from meta.json;
- settling is idempotent and crash-safe: it runs under the attempt's settling lock, does
  nothing if the turn's evidence exists, and writes it once, atomically, at the end, so a
  settle interrupted anywhere is run again whole by the next one (the supervisor when a turn
  ends, else ``compare``/``pick``), never recorded twice;
- the ranking is a pure function of the records (documented in docs/workspaces.md): all
  checks pass, then not flagged, then fewer changed lines, then lower cost, then shorter
  time; attempts still running come last;
- like every module that defines a Struct, no postponed annotations (``Standing``).
"""

import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from zwarm.engine import git
from zwarm.engine import workspace as ws_mod
from zwarm.errors import ZwarmError
from zwarm.model import ACTIVE, Session, Status
from zwarm.model.sets import TAIL_CHARS, BestOf, CheckRun, Evidence
from zwarm.store.sets import Sets

if TYPE_CHECKING:
    from zwarm.config import Config
    from zwarm.store import Store

DEFAULT_CHECK_TIMEOUT_S = 600.0
RANK_KEYS = ("checks", "flags", "lines", "cost", "time")
DEFAULT_RANK = RANK_KEYS
LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}  # a protected path is a path, never pathspec magic


def member_of(sets: Sets, s: Session) -> BestOf | None:
    """The set ``s`` is an attempt of, if both its meta.json and the set's record say so."""
    if s.attempt is None:
        return None
    try:
        bo = sets.read(s.attempt.set)
    except ZwarmError:
        return None
    ok = any(m.session == s.id and m.n == s.attempt.n for m in bo.attempts)
    return bo if ok else None


def last_turn(s: Session) -> int | None:
    """The turn an idle attempt's evidence is of: its latest, once it ended."""
    if s.status in ACTIVE or s.current is None:
        return None
    return s.current.n


def settle(
    store: "Store", config: "Config", environ: Mapping[str, str], bo: BestOf, s: Session, n: int
) -> Evidence | None:
    """Attempt ``s``'s evidence for its turn ``n``: the recorded one, else made now (protected
    paths restored, checks run, written); None when there is no worktree to check any more."""
    sets = Sets(store.root, environ)
    found = sets.read_evidence(bo.id, s.id, n)
    if found is not None:
        return found
    with sets.settling(bo.id, s.id):
        found = sets.read_evidence(bo.id, s.id, n)
        if found is not None:
            return found
        start = time.monotonic()
        ws = ws_mod.pinned(s, environ, store.root)
        if ws is None or ws.mode != "worktree" or ws.removed or not os.path.isdir(ws.tree):
            return None
        tree = ws_mod.checked(ws, environ)
        changed = restore(tree, environ, bo.base, bo.protect)
        runs = run_checks(config, bo, Path(ws.tree), environ)
        spent = sum(r.duration_s for r in runs)
        ev = Evidence(
            schema_version=1,
            session=s.id,
            turn=n,
            recorded_at=_now(),
            checks=runs,
            protect_changed=changed,
            changes=s.changes,
            overhead_s=max(0.0, time.monotonic() - start - spent),
        )
        sets.write_evidence(bo.id, ev)
        return ev


def restore(
    tree: git.Tree, environ: Mapping[str, str], base: str, paths: Sequence[str]
) -> list[str]:
    """Bring ``paths`` of the worktree back to what ``base`` has (tracked files restored or
    removed, untracked ones, ignored ones too, deleted); the paths that differed, but for
    ignored files (a check's cache is not the agent's change)."""
    if not paths:
        return []
    base = git.check_sha(base)
    diff = git.run(
        ["diff", "--name-only", "-z", "--no-renames", base, "--", *paths],
        tree, environ, extra_env=LITERAL,
    )  # fmt: skip
    new = git.run(
        ["ls-files", "-z", "--others", "--exclude-standard", "--", *paths],
        tree, environ, extra_env=LITERAL,
    )  # fmt: skip
    listed = (diff.stdout + b"\0" + new.stdout).decode("utf-8", "replace").split("\0")
    changed = sorted({p for p in listed if p})
    lit = LITERAL
    git.run(
        ["rm", "-r", "-f", "-q", "--ignore-unmatch", "--", *paths], tree, environ, extra_env=lit
    )
    git.run(["clean", "-f", "-f", "-d", "-x", "-q", "--", *paths], tree, environ, extra_env=lit)
    there = git.run(
        ["ls-tree", "-z", "--name-only", base, "--", *paths], tree, environ, extra_env=lit
    )
    back = [p for p in there.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
    if back:
        git.run(["checkout", base, "--", *back], tree, environ, extra_env=lit)
    return changed


def run_checks(
    config: "Config", bo: BestOf, cwd: Path, environ: Mapping[str, str]
) -> list[CheckRun]:
    """The set's checks run at the top of the attempt's worktree (``zwarm.sandbox.run``); a
    refusal (the sandbox gone and no opt-in) is a failed check saying why."""
    if not bo.checks:
        return []
    from zwarm.sandbox import run as sbx

    try:
        results = sbx.run_checks(
            list(bo.checks),
            cwd,
            config=config,
            timeout_s=bo.check_timeout_s,
            env=sbx.allowed_env(environ),
            repo=Path(bo.repo),
        )
    except ZwarmError as e:
        return [CheckRun(c, None, 0.0, False, f"not run: {e}", False) for c in bo.checks]
    return [
        CheckRun(
            r.command,
            r.exit_code,
            r.duration_s,
            r.timed_out,
            r.output_tail[-TAIL_CHARS:],
            r.sandboxed,
        )
        for r in results
    ]


def _now() -> str:
    from zwarm.env import iso

    return iso(time.time())


# ---------------------------------------------------------------------------- ranking
class Standing(msgspec.Struct):
    """One attempt as the ranking sees it."""

    n: int
    session: str
    adapter: str
    model: str | None
    status: str
    evidence: Evidence | None
    pending: bool  # its turn still runs (or waits): no evidence yet
    passed: bool
    flags: list[str] = msgspec.field(default_factory=list)
    files: int = 0
    lines: int = 0
    cost_usd: float | None = None
    cost_source: str | None = None  # the session's: "estimated" from token prices, shown ~$
    tokens: int = 0
    wall_s: float = 0.0
    claim: str | None = None  # what the agent said it did (its last answer), for the record

    def key(self, order: Sequence[str]) -> tuple[Any, ...]:
        parts: dict[str, Any] = {
            "checks": 0 if self.passed else 1,
            "flags": len(self.flags),
            "lines": self.lines,
            "cost": math.inf if self.cost_usd is None else self.cost_usd,
            "time": self.wall_s,
        }
        return (1 if self.pending else 0, *(parts[k] for k in order), self.n)


def standing(bo: BestOf, n: int, s: Session | None, ev: Evidence | None) -> Standing:
    """Attempt ``n``'s standing from its session (None: removed or unreadable) and evidence."""
    m = next(m for m in bo.attempts if m.n == n)
    if s is None:
        return Standing(
            n, m.session, m.adapter, m.model, "gone", None, False, False, ["session gone"]
        )
    pending = s.status in ACTIVE
    st = Standing(n, s.id, s.adapter, s.model, s.status.value, ev, pending, False)
    ch = ev.changes if ev is not None and ev.changes is not None else s.changes
    if ch is not None:
        st.files, st.lines = ch.files, ch.added + ch.removed
    st.cost_usd = s.cost_usd if s.cost_complete else None
    st.cost_source = s.cost_source
    st.tokens = s.usage.total_tokens
    st.wall_s = _wall(s)
    st.claim = s.last_message
    if pending:
        return st
    completed = s.status is Status.COMPLETED
    if not completed:
        st.flags.append(f"ended {s.status.value}" + (f" ({s.reason})" if s.reason else ""))
    if ev is None:
        st.flags.append("no evidence (its worktree is gone)")
        return st
    if ev.protect_changed:
        shown = ", ".join(ev.protect_changed[:3]) + (" ..." if len(ev.protect_changed) > 3 else "")
        st.flags.append(f"changed protected paths: {shown}")
    st.passed = completed and all(c.passed for c in ev.checks)
    return st


def rank(standings: Sequence[Standing], order: Sequence[str] = DEFAULT_RANK) -> list[Standing]:
    return sorted(standings, key=lambda st: st.key(order))


def parse_order(text: str | None) -> tuple[str, ...]:
    """``--rank a,b,c``: the keys given first, then the rest in the default order."""
    if not text:
        return DEFAULT_RANK
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in RANK_KEYS]
    if bad or len(set(keys)) != len(keys):
        from zwarm.errors import InvalidInput

        raise InvalidInput(
            f"--rank {text!r}: name each of {', '.join(RANK_KEYS)} at most once, comma-separated"
        )
    return (*keys, *(k for k in DEFAULT_RANK if k not in keys))


def _wall(s: Session) -> float:
    from zwarm.env import parse_iso

    total = 0.0
    for t in s.turns:
        if t.started and t.ended_at:
            total += max(0.0, parse_iso(t.ended_at) - parse_iso(t.started_at))
    return total


def after_turn(
    store: "Store", config: "Config", environ: Mapping[str, str], sid: str, n: int
) -> None:
    """The supervisor's side: once turn ``n`` of ``sid`` is recorded (before a queued turn's
    agent starts), settle it if ``sid`` is an attempt of a set. Best effort: a failure is one
    line on the supervisor's log, and ``compare`` settles it again."""
    try:
        s = store.load(sid, history=False)
        bo = member_of(Sets(store.root, environ), s)
        t = s.turn(n)
        if bo is None or t is None or t.status in ACTIVE or bo.picked is not None:
            return
        settle(store, config, environ, bo, s, n)
    except Exception as e:  # the turn is recorded; compare settles it again
        print(
            f"zwarm: best-of checks of turn {n} not recorded: {type(e).__name__}: {e}",
            file=sys.stderr,
        )
