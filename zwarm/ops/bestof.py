"""Best-of sets: ``spawn --best-of N`` (``start``), ``compare`` (``view``), ``pick``, and a
follow-up to every attempt still in the running (``inject``).

Owns what a set's operations settle before and after the engine: the attempts' agents and
models (round-robin; both lists paired by position), the one base commit, where the checks
will run (``zwarm.sandbox.run.check_plan``: said, or refused, before anything starts), each
attempt's budget (an equal share of the set's), and the view ``compare`` and the front ends
show. Must stay true:
- every attempt is an ordinary worktree session spawned through ``Zwarm.spawn`` (the
  scheduler, caps, budgets and sandbox apply as to any), from the same base commit;
- everything a spawn can refuse for is refused before the first attempt starts;
- ``pick`` merges through ``Zwarm.merge`` (every rule of ``zwarm merge`` holds), picks by
  default only an attempt that passed, and removes the others' worktrees only after the
  merge succeeded, keeping their branches and snapshots until ``rm``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import structs

from zwarm.errors import InvalidInput, ZwarmError, naming

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.engine.bestof import Standing
    from zwarm.model.requests import MessageRequest, SpawnRequest
    from zwarm.model.sets import BestOf, Judgement, Member
    from zwarm.store.sets import Sets

SET_FIELDS = ("agents", "models", "check", "check_timeout", "protect", "set_budget")


def _split(values: tuple[str, ...]) -> list[str]:
    out = [v.strip() for value in values for v in value.split(",")]
    if "" in out:
        raise InvalidInput("--agents/--models name an empty value (a stray comma?)")
    return out


def plan(req: SpawnRequest) -> list[tuple[str | None, str | None]]:
    """Each attempt's (agent, model), round-robin over the lists given; with both, paired."""
    n = req.best_of
    assert n is not None
    agents, models = _split(req.agents), _split(req.models)
    if agents and models and len(agents) != len(models):
        raise InvalidInput(
            f"--agents names {len(agents)} and --models {len(models)}: with both, they are "
            "paired by position, so give as many of each"
        )
    if (req.adapter is not None and agents) or (req.model is not None and models):
        raise InvalidInput("give --agents or --adapter, --models or --model, not both")
    k = max(len(agents), len(models), 1)
    if k > n:
        raise InvalidInput(f"--best-of {n} is fewer than the {k} agents/models named")
    pairs = []
    for i in range(n):
        a = agents[i % k] if agents else req.adapter
        m = models[i % k] if models else req.model
        pairs.append((a, m))
    return pairs


def _bounds(req: SpawnRequest) -> None:
    """The set's own numbers within what its record holds, or ``InvalidInput`` before
    anything is written or started (a request from the CLI or Python was checked by nothing:
    ``--best-of 99`` wrote a record it then read as damaged, with an attempt running)."""
    from zwarm.engine.limits import need
    from zwarm.model.records import AttemptNo, Seconds
    from zwarm.model.requests import Budget

    need("--best-of", req.best_of, AttemptNo)
    if req.check_timeout is not None:  # 0 is no timeout to give: it is not 600 either
        need("--check-timeout", req.check_timeout, Seconds)
    if req.set_budget is not None:
        need("--set-budget", req.set_budget, Budget)


def start(api: Zwarm, req: SpawnRequest) -> dict[str, Any]:
    """Start the set ``req`` asks for (``req.best_of`` attempts); its view (``view``)."""
    from zwarm.engine import git
    from zwarm.engine import workspace as ws_mod
    from zwarm.engine.bestof import DEFAULT_CHECK_TIMEOUT_S
    from zwarm.engine.manager import check_cwd
    from zwarm.model.records import Attempt
    from zwarm.model.sets import BestOf, Member
    from zwarm.ops import checks, starting
    from zwarm.store import sets as set_store

    sets = set_store.Sets(api.store.root, api.env.environ)
    n = req.best_of
    assert n is not None
    checks.request(req)
    _bounds(req)
    if req.name is not None or req.branch is not None:
        raise InvalidInput(
            "--best-of makes one branch per attempt: --name and --branch cannot be given"
        )
    if req.worktree is False:
        raise InvalidInput(
            "--best-of runs each attempt in its own worktree: --shared cannot be given"
        )
    if req.host or (req.launcher is None and api.config.get("defaults", "host")):
        raise naming(InvalidInput, lambda n: (
            f"{n('best_of')} runs its attempts here: not on a host ({n('host')}) yet"
        ))  # fmt: skip
    pairs = plan(req)
    routes = [starting.route(api, a, m) for a, m in pairs]
    for adapter in dict.fromkeys(a for a, _ in routes):
        starting.check_agent(api, api.manager(adapter))
    workdir = check_cwd(Path(req.cwd) if req.cwd is not None else api.env.cwd, api.state_dir)
    found = ws_mod.detect(workdir, api.env.environ)
    if found is None:
        raise InvalidInput(f"--best-of needs a git repository: {workdir} is not in one")
    base = git.resolve_commit(req.base or "HEAD", found.tree, api.env.environ)
    protect = [os.path.normpath(p) for p in req.protect]
    if "." in protect:
        raise InvalidInput(
            "--protect . would restore the whole tree from the base: name paths in it"
        )
    sandboxed = _check_plan(api, found.repo) if req.check else True
    if req.check and not protect:
        api.warn(
            "the checks read files the agents can change (tests, their config): name them "
            "with --protect, or an attempt can pass by editing them"
        )
    share = req.set_budget / n if req.set_budget is not None else None
    budget = (
        min(x for x in (share, req.max_cost) if x is not None) if share or req.max_cost else None
    )
    api.ensure_state_dir()
    bo = BestOf(
        schema_version=1,
        id=set_store.new_id(),
        state_dir=os.path.realpath(api.store.root),
        task=req.task,
        created_at=api.env.now_iso(),
        repo=str(found.repo),
        base=base,
        size=n,
        checks=list(req.check),
        check_timeout_s=req.check_timeout or DEFAULT_CHECK_TIMEOUT_S,
        protect=protect,
        sandboxed=sandboxed,
        budget_usd=req.set_budget,
        attempts=[],
        picked=None,
        picked_at=None,
        judge=None,
    )
    sets.create(bo)
    clear = {f: () for f in ("agents", "models", "check", "protect")}
    for k, (adapter, model) in enumerate(routes, 1):
        sub = structs.replace(
            req, **clear, best_of=None, check_timeout=None, set_budget=None,
            adapter=adapter, model=model, worktree=True, base=base, max_cost=budget,
        )  # fmt: skip
        try:
            s = api._spawn(sub, attempt=Attempt(set=bo.id, n=k))
        except ZwarmError as e:
            raise type(e)(f"set {bo.id}: attempt {k} did not start: {e}") from None
        member = Member(n=k, session=s.id, adapter=s.adapter, model=s.model)
        sets.update(bo.id, _add(member))
    return view(api, bo.id, settle=False)


def _add(member: Member) -> Callable[[BestOf], None]:
    def add(b: BestOf) -> None:
        b.attempts.append(member)

    return add


def _check_plan(api: Zwarm, repo: Path) -> bool:
    """Where the checks will run: True sandboxed, False unsandboxed as the user opted in;
    ``ChecksRefused`` (one line, how to opt in) otherwise."""
    from zwarm.sandbox import run as sbx

    return bool(sbx.check_plan(api.config, repo))


def _sets(api: Zwarm) -> Sets:
    from zwarm.store.sets import Sets

    return Sets(api.store.root, api.env.environ)


def load(api: Zwarm, ref: str) -> BestOf:
    sets = _sets(api)
    return sets.read(sets.resolve(ref))


def standings(api: Zwarm, bo: BestOf, settle: bool = True) -> list[Standing]:
    """Each attempt's standing; with ``settle``, an ended attempt's missing evidence is made
    now (its supervisor died before, or was interrupted)."""
    from zwarm.engine import bestof

    sets = _sets(api)
    out = []
    for m in bo.attempts:
        try:
            s = api.get(m.session, history=False)
        except ZwarmError:
            s = None
        ev = None
        if s is not None and s.id == m.session:
            n = bestof.last_turn(s)
            if n is not None:
                ev = sets.read_evidence(bo.id, s.id, n)
                if ev is None and settle and bo.picked is None:
                    ev = bestof.settle(api.store, api.config, api.env.environ, bo, s, n)
        out.append(bestof.standing(bo, m.n, s, ev))
    return out


def view(api: Zwarm, ref: str, rank: str | None = None, settle: bool = True) -> dict[str, Any]:
    """The set, its attempts with their evidence, ranked (``engine.bestof.rank``)."""
    from zwarm.engine import bestof

    bo = load(api, ref)
    order = bestof.parse_order(rank)
    ranked = bestof.rank(standings(api, bo, settle), order)
    return {
        "set": bo.id,
        "task": bo.task,
        "created_at": bo.created_at,
        "repo": bo.repo,
        "base": bo.base,
        "size": bo.size,
        "checks": list(bo.checks),
        "check_timeout_s": bo.check_timeout_s,
        "protect": list(bo.protect),
        "checks_sandboxed": bo.sandboxed,
        "budget_usd": bo.budget_usd,
        "rank": list(order),
        "picked": bo.picked,
        "judge": msgspec.to_builtins(bo.judge) if bo.judge is not None else None,
        "ties": ties(ranked),
        "attempts": [_attempt(st, place) for place, st in enumerate(ranked, 1)],
    }


TIE_LINES = 0.10  # attempts whose changed lines are within 10% of the best's tie with it


def ties(ranked: Sequence[Standing]) -> list[int]:
    """The attempts whose evidence equals the top-ranked one's within the tolerance: all
    passed (the same checks pass), none flagged, changed lines within ``TIE_LINES`` of the
    top's; empty unless there are two or more (a judge has nothing to break otherwise)."""
    if not ranked or not ranked[0].passed or ranked[0].flags:
        return []
    top = ranked[0].lines
    tied = [
        st.n
        for st in ranked
        if st.passed and not st.flags and abs(st.lines - top) <= TIE_LINES * max(top, 1)
    ]
    return tied if len(tied) > 1 else []


def _attempt(st: Standing, place: int) -> dict[str, Any]:
    ev = st.evidence
    return {
        "place": place,
        "attempt": st.n,
        "session": st.session,
        "adapter": st.adapter,
        "model": st.model,
        "status": st.status,
        "pending": st.pending,
        "passed": st.passed,
        "flags": list(st.flags),
        "checks": [
            {
                "command": c.command,
                "passed": c.passed,
                "exit_code": c.exit_code,
                "timed_out": c.timed_out,
                "duration_s": round(c.duration_s, 3),
                "sandboxed": c.sandboxed,
                "output_tail": c.output_tail,
            }
            for c in (ev.checks if ev else [])
        ],
        "protect_changed": list(ev.protect_changed) if ev else [],
        "files": st.files,
        "lines": st.lines,
        "tokens": st.tokens,
        "cost_usd": st.cost_usd,
        "cost_source": st.cost_source,
        "wall_s": round(st.wall_s, 3),
        "overhead_s": round(ev.overhead_s, 4) if ev else None,
        "claim": st.claim,
    }


def pick(
    api: Zwarm,
    ref: str,
    attempt: int | None = None,
    *,
    into: str | None = None,
    squash: bool = False,
    message: str | None = None,
    judge: dict[str, Any] | None = None,
    queue: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Merge the top-ranked attempt (or ``attempt``) like ``zwarm merge``, or with ``queue``
    (``Zwarm.enqueue_merge``'s keywords) put it in the merge queue (rebased, checked and
    merged there: every rule of the queue holds, a queue with no check refused); then remove
    the other attempts' worktrees (their branches and snapshots stay until ``rm``). ``judge``
    (``model``, ``attempt``, ``reason``): an LLM's tie-break, taken only for an attempt tied
    with the best on the evidence, and recorded with the set."""
    v = view(api, ref)
    verdict = None
    if judge is not None:
        verdict = _verdict(api, v, judge)
        attempt = verdict.attempt
    if v["picked"] is not None:
        raise InvalidInput(f"set {v['set']}: attempt {v['picked']} was picked already")
    rows = v["attempts"]
    if attempt is None:
        pending = [r["attempt"] for r in rows if r["pending"]]
        if pending:
            raise InvalidInput(
                f"set {v['set']}: attempt {_few(pending)} still running: wait for the set "
                "(zwarm wait), or name the attempt to pick"
            )
        top = rows[0]
        if not top["passed"]:
            raise InvalidInput(
                f"set {v['set']}: no attempt passes its checks (the best, attempt "
                f"{top['attempt']}: {_why(top)}): name an attempt to pick it anyway"
            )
        chosen = top
    else:
        chosen = next((r for r in rows if r["attempt"] == attempt), None)
        if chosen is None:
            raise InvalidInput(f"set {v['set']} has no attempt {attempt} (1 to {len(rows)})")
    if queue is not None:
        if into is not None or squash or message is not None:
            raise InvalidInput("into, squash and message are not for a queued pick")
        queued = api.enqueue_merge([chosen["session"]], **queue)  # refused: nothing changes
    else:
        merged = api.merge(chosen["session"], into=into, squash=squash, message=message)
    _sets(api).update(v["set"], lambda b: _picked(b, chosen["attempt"], api, verdict))
    removed, kept = [], []
    for r in rows:
        if r["attempt"] == chosen["attempt"]:
            continue
        try:
            if r["pending"]:
                api.kill([r["session"]])
            if _drop_worktree(api, r["session"]):
                removed.append(r["attempt"])
        except ZwarmError as e:
            kept.append({"attempt": r["attempt"], "error": str(e)})
    return {
        "set": v["set"],
        "picked": chosen["attempt"],
        "session": chosen["session"],
        **({"queue": queued} if queue is not None else {"merge": merged}),
        "worktrees_removed": removed,
        "not_removed": kept,
    }


def _picked(b: BestOf, n: int, api: Zwarm, verdict: Judgement | None) -> None:
    b.picked, b.picked_at, b.judge = n, api.env.now_iso(), verdict


def _verdict(api: Zwarm, v: dict[str, Any], judge: dict[str, Any]) -> Judgement:
    """The judge's choice, if it names an attempt tied with the best (it never overrides the
    evidence: a failing check, a flag, a larger change)."""
    from zwarm.model.sets import Judgement

    tied = v["ties"]
    n = judge.get("attempt")
    if not tied:
        raise InvalidInput(
            f"set {v['set']}: no attempts are tied on the evidence: nothing to judge"
        )
    if not isinstance(n, int) or isinstance(n, bool) or n not in tied:
        raise InvalidInput(
            f"set {v['set']}: the judge chose attempt {n!r}, which is not among the tied "
            f"attempts ({_few(tied)}): nothing merged"
        )
    reason = str(judge.get("reason") or "")[:8000]
    return Judgement(str(judge["model"])[:200], list(tied), n, reason, api.env.now_iso())


def _drop_worktree(api: Zwarm, sid: str) -> bool:
    """Remove attempt ``sid``'s worktree folder (git's record of it too), keeping its branch
    and snapshots (``rm`` removes those): what was in it is in its last after-snapshot."""
    from zwarm.engine import workspace as ws_mod

    s = api.get(sid, history=False)
    ws = ws_mod.pinned(s, api.env.environ, api.store.root)
    if ws is None or ws.mode != "worktree" or ws.removed or not os.path.isdir(ws.tree):
        return False
    ws_mod.remove_tree(ws, api.env.environ)
    return True


def inject(api: Zwarm, ref: str, req: MessageRequest) -> list[dict[str, Any]]:
    """``req`` to every attempt still in the running (not failed, killed, or picked over)."""
    from zwarm.model import Status

    bo = load(api, ref)
    if bo.picked is not None:
        raise InvalidInput(f"set {bo.id}: attempt {bo.picked} was picked; inject it by its id")
    out = []
    for m in bo.attempts:
        s = api.get(m.session, history=False)
        if s.status in (Status.FAILED, Status.KILLED):
            continue
        s, state = api.inject(m.session, req)
        out.append({"attempt": m.n, "session": s.id, "state": state})
    if not out:
        raise InvalidInput(f"set {bo.id}: no attempt is still in the running")
    return out


def diff(api: Zwarm, ref: str, a: int, b: int) -> bytes:
    """How attempt ``b``'s tree differs from attempt ``a``'s (their latest snapshots)."""
    from zwarm.engine import diffs
    from zwarm.engine import workspace as ws_mod
    from zwarm.errors import WorkspaceError

    bo = load(api, ref)
    ends = []
    for k in (a, b):
        m = next((m for m in bo.attempts if m.n == k), None)
        if m is None:
            raise InvalidInput(f"set {bo.id} has no attempt {k}")
        s = api.get(m.session)
        after = next((t.after for t in reversed(s.turns) if t.after), None)
        if after is None:
            raise WorkspaceError(f"attempt {k} has no snapshot yet (its first turn has not ended)")
        ws = ws_mod.pinned(s, api.env.environ, api.store.root)
        if ws is None:
            raise WorkspaceError(f"attempt {k} has no git workspace")
        ends.append((after, ws))
    tree = ws_mod.git_dir_tree(ends[0][1], api.env.environ)
    return diffs.text(tree, api.env.environ, ends[0][0], ends[1][0])


def _why(r: dict[str, Any]) -> str:
    failed = [c["command"] for c in r["checks"] if not c["passed"]]
    if failed:
        return "failed " + ", ".join(failed)
    return "; ".join(r["flags"]) or r["status"]


def _few(ns: list[int]) -> str:
    return ", ".join(str(n) for n in ns)
