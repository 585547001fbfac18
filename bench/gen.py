"""Generators for the bench's state directories (cached under ``bench/.cache/``).

Everything zwarm reads is written in zwarm's own store format: sessions are built as
``zwarm.model.Session``/``Turn`` objects and serialized exactly as ``Store.save`` does, into the
paths ``Store`` computes (``sessions/<id>/meta.json``, ``turns/turn_N.{prompt,jsonl,stderr}``,
``names/<name>``), with 0700/0600 permissions. Only the fsync that ``Store.save`` does per
write is skipped (it changes nothing on disk and would make a 10,000-session tree take minutes).

Turn logs are realistic codex/claude JSONL built from the real samples in
``tests/fixtures/samples``: the same event shapes, ids, usage blocks and the 3 KB claude init
line, with varied commands, outputs (slices of real source text), messages and file changes.

The zwarm 3.10.6 ("old") trees hold the same sessions in that version's format (read from its
installed source, ``zwarm/sessions/base.py`` and ``sessions/manager.py``): ``.zwarm/sessions/<id>/``
with an indented ``meta.json`` (id, task, status, working_dir, pid, turn, messages,
token_usage, ...) and ``turns/turn_N.jsonl`` (hard links to the new tree's logs).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zwarm.agents.codex import DEFAULT_PRICES  # noqa: E402
from zwarm.env import iso  # noqa: E402
from zwarm.model import Session, Status, Turn, Usage  # noqa: E402
from zwarm.store import Store  # noqa: E402
from zwarm.system.boot import ProcRef  # noqa: E402

SAMPLES = ROOT / "tests" / "fixtures" / "samples"
GEN_VERSION = "4"  # 4: schema 3 (meta.json)

# --------------------------------------------------------------------------- vocabulary

TASKS = [
    "Add a --json flag to the export command and cover it with tests",
    "Fix the flaky test in tests/unit/test_store.py (it fails one run in twenty under load)",
    "Refactor the config loader so unknown keys give a clear error naming the file",
    "Write a migration that adds an index on sessions(created_at)",
    "Investigate why the CI job times out on the integration suite and propose a fix",
    "Port the retry logic from the HTTP client to the websocket client",
    "Update the README with the new install instructions for Windows",
    "Add type hints to zwarm/render.py and make mypy --strict pass",
    "Implement pagination for the /v1/sessions endpoint (cursor based, 100 per page)",
    "Bump the pinned dependencies and fix whatever breaks",
    "Profile the importer on the 2 GB sample and make it at least twice as fast",
    "Review the diff in the last commit and list anything risky",
    "Create a Dockerfile for the service with a non-root user and a health check",
    "Reproduce issue #412 (unicode filenames in the archive) and fix it",
    "Split the 900-line utils.py into coherent modules without changing behaviour",
]
TASK_DETAIL = (
    "\n\nContext: the repository is a Python 3.11 project using pytest. Keep the public API "
    "stable, do not add dependencies, and run the full test suite before you finish. "
    "When you are done, summarise what you changed and why, file by file.\n"
)
FOLLOWUPS = [
    "Now add tests for the edge cases you mentioned.",
    "The CI still fails on Python 3.12, can you look?",
    "Please also update the changelog.",
    "Good. Can you make the error message friendlier?",
    "Revert the change to setup.cfg, it is not needed.",
    "Run the linters and fix what they report.",
]
COMMANDS = [
    "/bin/bash -lc 'rg -n \"def sessions\" -S .'",
    "/bin/bash -lc 'pytest -q tests/unit'",
    "/bin/bash -lc 'git status --short'",
    "/bin/bash -lc \"sed -n '1,160p' zwarm/api.py\"",
    "/bin/bash -lc 'ls -la'",
    "/bin/bash -lc 'python -m mypy zwarm'",
    "/bin/bash -lc 'cat pyproject.toml'",
    "/bin/bash -lc 'git diff --stat'",
    '/bin/bash -lc "rg --files | head -200"',
    "/bin/bash -lc 'ruff check .'",
]
FILES = [
    "zwarm/api.py",
    "zwarm/store.py",
    "tests/unit/test_store.py",
    "README.md",
    "zwarm/cli.py",
    "pyproject.toml",
    "docs/usage.md",
    "zwarm/render.py",
]
MESSAGES = [
    "I'll start by looking at how the command is wired up.",
    "The failure comes from a race between the writer and the reader; fixing it with a lock.",
    "Tests pass locally now. Let me run the linters too.",
    "I found the root cause: the path is built before the ref is validated.",
    "Updating the docs to match.",
]
REASONING = [
    "**Inspecting the code path**\n\nI need to see where sessions are listed before changing it.",
    "**Planning the fix**\n\nThe simplest safe change is to validate first, then build the path.",
    "**Checking tests**\n\nThere is no test for the empty case; I should add one.",
]
CODEX_MODELS = ["gpt-5-codex", "gpt-5", "gpt-5.1-codex", "o4-mini", None]
CLAUDE_MODELS = ["sonnet", "opus", "claude-sonnet-4-5", None]


def _source_corpus() -> list[str]:
    lines: list[str] = []
    for p in sorted((ROOT / "zwarm").rglob("*.py")):
        lines += p.read_text(encoding="utf-8").splitlines()
    return lines or ["print('hello')"]


CORPUS = _source_corpus()


def _output(rng: random.Random, lo: int = 2, hi: int = 60) -> str:
    start = rng.randrange(len(CORPUS))
    n = rng.randint(lo, hi)
    return "\n".join(CORPUS[start : start + n]) + "\n"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


# --------------------------------------------------------------------------- turn logs


@dataclass
class TurnLog:
    lines: list[bytes]
    status: Status
    final_message: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    error: str | None = None
    assistant: list[str] = field(default_factory=list)  # every agent message (old format)


def codex_turn(rng: random.Random, thread: str, outcome: Status, steps: int) -> TurnLog:
    out = [_dumps({"type": "thread.started", "thread_id": thread}), b'{"type":"turn.started"}\n']
    said: list[str] = []
    item = 0
    for _ in range(steps):
        kind = rng.random()
        if kind < 0.2:
            out.append(
                _dumps(
                    {
                        "type": "item.completed",
                        "item": {
                            "id": f"item_{item}",
                            "type": "reasoning",
                            "text": rng.choice(REASONING),
                        },
                    }
                )
            )
        elif kind < 0.35:
            text = rng.choice(MESSAGES)
            said.append(text)
            out.append(
                _dumps(
                    {
                        "type": "item.completed",
                        "item": {"id": f"item_{item}", "type": "agent_message", "text": text},
                    }
                )
            )
        elif kind < 0.9:
            cmd = rng.choice(COMMANDS)
            code = 0 if rng.random() < 0.85 else 1
            out.append(
                _dumps(
                    {
                        "type": "item.started",
                        "item": {
                            "id": f"item_{item}",
                            "type": "command_execution",
                            "command": cmd,
                            "aggregated_output": "",
                            "exit_code": None,
                            "status": "in_progress",
                        },
                    }
                )
            )
            out.append(
                _dumps(
                    {
                        "type": "item.completed",
                        "item": {
                            "id": f"item_{item}",
                            "type": "command_execution",
                            "command": cmd,
                            "aggregated_output": _output(rng),
                            "exit_code": code,
                            "status": "completed" if code == 0 else "failed",
                        },
                    }
                )
            )
        else:
            path = rng.choice(FILES)
            out.append(
                _dumps(
                    {
                        "type": "item.completed",
                        "item": {
                            "id": f"item_{item}",
                            "type": "file_change",
                            "changes": [{"path": f"/home/dev/project/{path}", "kind": "update"}],
                            "status": "completed",
                        },
                    }
                )
            )
        item += 1
    if outcome is Status.KILLED:  # cut off mid-stream: no terminal event
        return TurnLog(out, outcome, said[-1] if said else None, None, assistant=said)
    if outcome is Status.FAILED:
        msg = "We're currently experiencing high demand, which may cause temporary errors."
        out.append(_dumps({"type": "error", "message": msg}))
        out.append(_dumps({"type": "turn.failed", "error": {"message": msg}}))
        return TurnLog(out, outcome, said[-1] if said else None, None, None, msg, said)
    final = f"Done. {rng.choice(MESSAGES)} Changed {rng.choice(FILES)}; all tests pass."
    said.append(final)
    out.append(
        _dumps(
            {
                "type": "item.completed",
                "item": {"id": f"item_{item}", "type": "agent_message", "text": final},
            }
        )
    )
    inp = rng.randint(2_000, 400_000)
    usage = Usage(inp, rng.randint(0, inp), rng.randint(200, 20_000), rng.randint(0, 4_000))
    out.append(
        _dumps(
            {
                "type": "turn.completed",
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "cached_input_tokens": usage.cached_input_tokens,
                    "cache_write_input_tokens": 0,
                    "output_tokens": usage.output_tokens,
                    "reasoning_output_tokens": usage.reasoning_tokens,
                },
            }
        )
    )
    return TurnLog(out, outcome, final, usage, None, None, said)


def _claude_templates() -> dict[str, str]:
    lines = (SAMPLES / "claude_toolcall.jsonl").read_text(encoding="utf-8").splitlines()
    by = {}
    for raw in lines:
        d = json.loads(raw)
        t = d.get("type")
        if t == "system" and d.get("subtype") == "init":
            by["init"] = raw
        elif t == "result":
            by["result"] = raw
    by["sid"] = json.loads(by["init"])["session_id"]
    return by


_CLAUDE = _claude_templates()


def claude_turn(rng: random.Random, sid: str, model: str, outcome: Status, steps: int) -> TurnLog:
    init = _CLAUDE["init"].replace(_CLAUDE["sid"], sid)
    out = [init.encode("utf-8") + b"\n"]
    said: list[str] = []

    def assistant(content: list[dict[str, Any]], k: int) -> bytes:
        return _dumps(
            {
                "type": "assistant",
                "message": {
                    "id": f"msg_{k:04d}_{sid[:8]}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": content,
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 200 + 40 * k,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 150 * k,
                        "output_tokens": 1,
                    },
                    "context_management": None,
                },
                "parent_tool_use_id": None,
                "session_id": sid,
                "uuid": str(uuid.UUID(int=rng.getrandbits(128))),
            }
        )

    for k in range(steps):
        r = rng.random()
        if r < 0.2:
            out.append(
                assistant(
                    [
                        {
                            "type": "thinking",
                            "thinking": rng.choice(REASONING),
                            "signature": "sig" + str(k),
                        }
                    ],
                    k,
                )
            )
        elif r < 0.35:
            text = rng.choice(MESSAGES)
            said.append(text)
            out.append(assistant([{"type": "text", "text": text}], k))
        else:
            tid = f"toolu_{k:02d}_{rng.getrandbits(32):08x}"
            c = rng.choice(COMMANDS)
            cmd = c.split("'")[1] if "'" in c else c
            out.append(
                assistant(
                    [
                        {
                            "type": "tool_use",
                            "id": tid,
                            "name": "Bash",
                            "input": {"command": cmd, "description": "Run it"},
                        }
                    ],
                    k,
                )
            )
            text = _output(rng)
            out.append(
                _dumps(
                    {
                        "type": "user",
                        "message": {
                            "role": "user",
                            "content": [
                                {
                                    "tool_use_id": tid,
                                    "type": "tool_result",
                                    "content": text,
                                    "is_error": False,
                                }
                            ],
                        },
                        "parent_tool_use_id": None,
                        "session_id": sid,
                        "uuid": str(uuid.UUID(int=rng.getrandbits(128))),
                        "tool_use_result": {
                            "stdout": text,
                            "stderr": "",
                            "interrupted": False,
                            "isImage": False,
                        },
                    }
                )
            )
    if outcome is Status.KILLED:
        return TurnLog(out, outcome, said[-1] if said else None, assistant=said)
    result = json.loads(_CLAUDE["result"])
    result["session_id"] = sid
    inp = rng.randint(2_000, 200_000)
    usage = Usage(inp, rng.randint(0, inp), rng.randint(200, 20_000), 0)
    cost = round(inp * 3e-6 + usage.output_tokens * 15e-6, 6)
    result["usage"]["input_tokens"] = inp
    result["usage"]["cache_read_input_tokens"] = usage.cached_input_tokens
    result["usage"]["output_tokens"] = usage.output_tokens
    result["total_cost_usd"] = cost
    if outcome is Status.FAILED:
        msg = (
            "API Error: 500 internal server error. This is a server-side issue, usually temporary."
        )
        result.update(is_error=True, result=msg, subtype="error_during_execution")
        out.append(_dumps(result))
        return TurnLog(out, outcome, None, usage, cost, msg, said)
    final = f"Done. {rng.choice(MESSAGES)} Changed {rng.choice(FILES)}; all tests pass."
    said.append(final)
    out.append(assistant([{"type": "text", "text": final}], steps))
    result["result"] = final
    out.append(_dumps(result))
    return TurnLog(out, outcome, final, usage, cost, None, said)


# --------------------------------------------------------------------------- sessions


def write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def save_meta(store: Store, s: Session) -> None:
    """Exactly ``Store.save`` minus the fsyncs (same refresh, same bytes, same mode)."""
    s.refresh()
    text = json.dumps(s.to_dict(), ensure_ascii=False, separators=(",", ":"))
    tmp = store.meta_path(s.id).with_name(".meta.json.gen.tmp")
    write_private(tmp, text.encode("utf-8"))
    os.replace(tmp, store.meta_path(s.id))


@dataclass
class Generated:
    session: Session
    logs: list[TurnLog]


def make_session(
    rng: random.Random,
    now: float,
    running: bool = False,
    sup: ProcRef | None = None,
    agent: ProcRef | None = None,
    adapter: str | None = None,
    turns: int | None = None,
    steps: tuple[int, int] = (3, 25),
    sid: str | None = None,
) -> Generated:
    adapter = adapter or ("codex" if rng.random() < 0.6 else "claude")
    drawn = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    sid = sid or drawn
    created = now - rng.uniform(86400, 30 * 86400) if not running else now - rng.uniform(5, 600)
    n_turns = turns or rng.randint(1, 5)
    models = CODEX_MODELS if adapter == "codex" else CLAUDE_MODELS
    model = rng.choice(models)
    task = rng.choice(TASKS) + (TASK_DETAIL * rng.randint(0, 3))
    thread = str(uuid.UUID(int=rng.getrandbits(128)))
    cost_source = (
        "reported"
        if adapter == "claude"
        else ("estimated" if model in DEFAULT_PRICES else "unknown")
    )
    s = Session(
        id=sid,
        adapter=adapter,
        task=task,
        cwd=f"/home/dev/work/proj{rng.randint(1, 40)}",
        created_at=iso(created),
        updated_at=iso(created),
        name=f"job-{sid[:6]}" if rng.random() < 0.2 else None,
        model=model if adapter == "codex" else (model or "claude-sonnet-4-5"),
        requested_model=model,
        context_mode="summary" if rng.random() < 0.7 else "native",
        source=rng.choice(["cli", "cli", "cli", "mcp", "orchestrator"]),
        dangerous=rng.random() < 0.05,
        cost_source=cost_source,
        agent_session_id=thread,
    )
    logs: list[TurnLog] = []
    sched = []  # (start, duration) of each turn, relative to the session's creation
    rel = 0.0
    for _ in range(n_turns):
        dur = rng.uniform(20, 900)
        sched.append((rel, dur))
        rel += dur + rng.uniform(30, 3600)
    if running:  # the running turn started a few minutes ago
        created = now - rng.uniform(5, 600) - sched[-1][0]
        s.created_at = iso(created)
    for n in range(1, n_turns + 1):
        t = created + sched[n - 1][0]
        dur = sched[n - 1][1]
        last = n == n_turns
        if running and last:
            outcome = Status.RUNNING
        elif last:
            r = rng.random()
            outcome = Status.COMPLETED if r < 0.85 else Status.FAILED if r < 0.95 else Status.KILLED
        else:
            outcome = Status.COMPLETED
        k = rng.randint(*steps)
        gen_outcome = Status.KILLED if outcome is Status.RUNNING else outcome
        log = (
            codex_turn(rng, thread, gen_outcome, k)
            if adapter == "codex"
            else claude_turn(rng, thread, s.model or "sonnet", gen_outcome, k)
        )
        message = task if n == 1 else rng.choice(FOLLOWUPS)
        turn = Turn(
            n=n,
            status=outcome,
            message=message[:16000],
            context="task" if n == 1 else s.context_mode,
            started_at=iso(t),
        )
        if outcome is not Status.RUNNING:
            t += dur
            turn.ended_at = iso(t)
            turn.exit_code = (
                0 if outcome is Status.COMPLETED else None if outcome is Status.KILLED else 1
            )
            turn.signal = 15 if outcome is Status.KILLED else None
            turn.usage = log.usage or Usage()
            turn.reported_usage = log.usage
            turn.final_message = log.final_message
            turn.agent_session_id = thread
            if outcome is Status.KILLED:
                turn.error = "killed by user"
            elif outcome is Status.FAILED:
                turn.error = log.error
            if adapter == "claude":
                turn.cost_usd = turn.reported_cost_usd = log.cost_usd
            elif log.usage is not None and model in DEFAULT_PRICES:
                p = DEFAULT_PRICES[model]
                u = log.usage
                turn.cost_usd = round(
                    (
                        (u.input_tokens - u.cached_input_tokens) * p["input"]
                        + u.cached_input_tokens * p["cached_input"]
                        + u.output_tokens * p["output"]
                    )
                    / 1e6,
                    8,
                )
            pid = rng.randint(1000, 4_000_000)
            ticks = rng.randint(100, 10**9)
            turn.supervisor = ProcRef(pid, ticks, "")  # another boot: never alive
            turn.agent = ProcRef(pid + 1, ticks + 5, "")
        else:
            turn.supervisor, turn.agent = sup, agent
        s.turns.append(turn)
        logs.append(log)
    s.updated_at = s.turns[-1].ended_at or s.turns[-1].started_at
    s.refresh()
    return Generated(s, logs)


def write_session(store: Store, g: Generated) -> None:
    s = g.session
    d = store.session_dir(s.id)
    d.mkdir(mode=0o700)
    (d / "turns").mkdir(mode=0o700)
    for turn, log in zip(s.turns, g.logs, strict=True):
        prompt = (s.task if turn.n == 1 else turn.message).encode("utf-8")
        write_private(store.turn_path(s.id, turn.n, "prompt"), prompt)
        write_private(store.turn_path(s.id, turn.n), b"".join(log.lines))
        write_private(store.turn_path(s.id, turn.n, "stderr"), b"")
    write_private(d / ".lock", b"")
    write_private(d / "supervisor.log", b"")
    if s.name:
        write_private(store.names / s.name, s.id.encode())
    save_meta(store, s)


def _naive_local(iso_s: str) -> str:
    from datetime import datetime

    return datetime.fromisoformat(iso_s).astimezone().replace(tzinfo=None).isoformat()


def old_meta(g: Generated, pid: int | None = None) -> dict[str, Any]:
    """The same session as zwarm 3.10.6 records it (``Session.to_dict`` in its base.py)."""
    s = g.session
    msgs = []
    for turn, log in zip(s.turns, g.logs, strict=True):
        ts = _naive_local(turn.started_at)
        msgs.append(
            {
                "role": "user",
                "content": s.task if turn.n == 1 else turn.message,
                "timestamp": ts,
                "metadata": {},
            }
        )
        for text in log.assistant:
            msgs.append({"role": "assistant", "content": text, "timestamp": ts, "metadata": {}})
    u = s.usage
    usage = {
        "input_tokens": u.input_tokens,
        "cached_input_tokens": u.cached_input_tokens,
        "cache_write_input_tokens": 0,
        "output_tokens": u.output_tokens,
        "reasoning_output_tokens": u.reasoning_tokens,
        "total_tokens": u.total_tokens,
    }
    cur = s.turns[-1]
    return {
        "id": s.id,
        "task": s.task,
        "status": s.status.value,
        "working_dir": s.cwd,
        "created_at": _naive_local(s.created_at),
        "updated_at": _naive_local(s.updated_at),
        "pid": pid if pid is not None else (cur.agent.pid if cur.agent else None),
        "exit_code": cur.exit_code,
        "model": s.model or "",
        "turn": len(s.turns),
        "messages": msgs,
        "token_usage": usage if s.status is not Status.RUNNING else {},
        "error": s.error,
        "source": "user" if s.source == "cli" else "orchestrator:" + s.id[:8],
        "adapter": s.adapter,
    }


def write_old_session(
    old_sessions: Path, store: Store, g: Generated, pid: int | None = None
) -> None:
    s = g.session
    d = old_sessions / s.id
    (d / "turns").mkdir(parents=True)
    for turn in s.turns:
        src = store.turn_path(s.id, turn.n)
        dst = d / "turns" / f"turn_{turn.n}.jsonl"
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    (d / "meta.json").write_text(json.dumps(old_meta(g, pid), indent=2))


# --------------------------------------------------------------------------- trees


def tree_paths(cache: Path, n: int) -> tuple[Path, Path]:
    """(new-format state dir, old-format project dir holding .zwarm/) for an n-session tree."""
    return cache / "trees" / f"new-{n}", cache / "trees" / f"old-{n}"


def ensure_tree(cache: Path, n: int, log: Any = print) -> tuple[Path, Path]:
    new, old = tree_paths(cache, n)
    stamp = new.parent / f".complete-{n}"
    if stamp.exists() and stamp.read_text() == GEN_VERSION and new.is_dir() and old.is_dir():
        return new, old
    log(f"  generating {n:,} finished sessions (new + 3.10.6 format) under {new.parent} ...")
    t0 = time.perf_counter()
    for p in (new, old):
        if p.exists():
            shutil.rmtree(p)
    new.parent.mkdir(parents=True, exist_ok=True)
    store = Store(new)
    store.ensure()
    old_sessions = old / ".zwarm" / "sessions"
    old_sessions.mkdir(parents=True)
    rng = random.Random(1000 + n)
    now = time.time()
    for _ in range(n):
        g = make_session(rng, now)
        write_session(store, g)
        write_old_session(old_sessions, store, g)
    stamp.write_text(GEN_VERSION)
    log(f"  ... done in {time.perf_counter() - t0:.1f} s")
    return new, old


def ensure_clone_tree(cache: Path, n: int, log: Any = print) -> tuple[Path, Path]:
    """An ``n``-session tree (10,000, 50,000) made fast from the 1,000-session one: each
    session's meta.json copied under a new id (every occurrence of the old id replaced), with
    an empty ``turns/``. Enough for listings, which never read turn logs. Its 3.10.6 twin is
    empty (figure 3 is measured at 1,000 only)."""
    new, old = tree_paths(cache, n)
    stamp = new.parent / f".complete-{n}"
    if stamp.exists() and stamp.read_text() == GEN_VERSION + "-clone" and new.is_dir():
        return new, old
    src, _ = ensure_tree(cache, 1000, log)
    log(f"  cloning {n:,} sessions from the 1,000-session tree under {new.parent} ...")
    t0 = time.perf_counter()
    for p in (new, old):
        if p.exists():
            shutil.rmtree(p)
    store = Store(new)
    store.ensure()
    (old / ".zwarm" / "sessions").mkdir(parents=True)
    metas = [(d.name, (d / "meta.json").read_bytes()) for d in sorted(store_dirs(src))]
    rng = random.Random(7000 + n)
    for i in range(n):
        sid_old, data = metas[i % len(metas)]
        sid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        d = store.sessions / sid
        d.mkdir(mode=0o700)
        (d / "turns").mkdir(mode=0o700)
        write_private(d / "meta.json", data.replace(sid_old.encode(), sid.encode()))
    stamp.write_text(GEN_VERSION + "-clone")
    log(f"  ... done in {time.perf_counter() - t0:.1f} s")
    return new, old


def store_dirs(state: Path) -> list[Path]:
    return [d for d in (state / "sessions").iterdir() if d.is_dir() and not d.name.startswith(".")]


class RunningOverlay:
    """50 running sessions added to the cached trees for one bench run, with live processes.

    Each running session's supervisor and agent are real processes (``sleep``) recorded with
    their true identity (``zwarm.system.procs.identify``: pid + create time), so zwarm's reconcile
    sees live supervisors and leaves them running, and 3.10.6 sees a live pid. Their current
    turn's log is a partial stream (no terminal event). Removed again by ``close``.
    """

    MANIFEST = "running-overlay.json"

    def __init__(self, cache: Path, n: int, adapters: tuple[str, ...]) -> None:
        from zwarm.system import procs

        self.cache = cache
        self.n = n
        self.adapters = adapters
        self.procs: list[subprocess.Popen[bytes]] = []
        self.refs: list[tuple[ProcRef, ProcRef]] = []
        self.placed: list[tuple[Path, str]] = []  # (sessions dir, id)
        self.cleanup_stale(cache)
        self.sids = [str(uuid.uuid4()) for _ in range(n)]
        for sid in self.sids:
            pair = []
            # the markers by which zwarm verifies a process is the session's supervisor / agent
            for marker in (procs.SUPERVISOR_MARKER, procs.MARKER):
                env = {**os.environ, marker: sid}
                p = subprocess.Popen(
                    ["sleep", "86400"], stdin=subprocess.DEVNULL, start_new_session=True, env=env
                )
                self.procs.append(p)
                pair.append(p.pid)
            time.sleep(0.002)
            sup, agent = (procs.identify(pair[0]), procs.identify(pair[1]))
            assert sup is not None and agent is not None
            self.refs.append((sup, agent))

    @classmethod
    def cleanup_stale(cls, cache: Path) -> None:
        man = cache / cls.MANIFEST
        if not man.exists():
            return
        for sessions_dir, sid in json.loads(man.read_text()):
            shutil.rmtree(Path(sessions_dir) / sid, ignore_errors=True)
        man.unlink()

    def _record(self) -> None:
        (self.cache / self.MANIFEST).write_text(json.dumps([[str(d), i] for d, i in self.placed]))

    def add_to(self, new: Path, old: Path, seed: int) -> None:
        store = Store(new)
        old_sessions = old / ".zwarm" / "sessions"
        rng = random.Random(seed)
        now = time.time()
        for k, (sup, agent) in enumerate(self.refs):
            g = make_session(
                rng,
                now,
                running=True,
                sup=sup,
                agent=agent,
                adapter=self.adapters[k % len(self.adapters)],
                steps=(100, 800),
                sid=self.sids[k],
            )
            self.placed += [(store.sessions, g.session.id), (old_sessions, g.session.id)]
            self._record()
            write_session(store, g)
            write_old_session(old_sessions, store, g, pid=agent.pid)

    def close(self) -> None:
        for sessions_dir, sid in self.placed:
            shutil.rmtree(sessions_dir / sid, ignore_errors=True)
        self.placed = []
        man = self.cache / self.MANIFEST
        if man.exists():
            man.unlink()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.procs = []


# --------------------------------------------------------------------------- special sessions


def ensure_big_turn(cache: Path, target_mb: int, log: Any = print) -> tuple[Path, str]:
    """A state dir with one finished codex session whose single turn log is ~target_mb MB."""
    state = cache / f"state-traj-{target_mb}mb"
    stamp = cache / f".complete-traj-{target_mb}"
    sid_file = state / "bench-sid"
    if stamp.exists() and stamp.read_text() == GEN_VERSION and sid_file.exists():
        return state, sid_file.read_text()
    log(f"  generating a {target_mb} MB codex turn log under {state} ...")
    t0 = time.perf_counter()
    if state.exists():
        shutil.rmtree(state)
    state.parent.mkdir(parents=True, exist_ok=True)
    store = Store(state)
    store.ensure()
    rng = random.Random(7)
    g = make_session(rng, time.time(), adapter="codex", turns=1, steps=(5, 5))
    s = g.session
    s.turns[0].status = Status.COMPLETED
    s.refresh()
    d = store.session_dir(s.id)
    d.mkdir(mode=0o700)
    (d / "turns").mkdir(mode=0o700)
    write_private(store.turn_path(s.id, 1, "prompt"), s.task.encode())
    write_private(store.turn_path(s.id, 1, "stderr"), b"")
    limit = target_mb * 1_000_000
    thread = s.agent_session_id or "t"
    with open(store.turn_path(s.id, 1), "wb") as f:
        size = 0
        block = codex_turn(rng, thread, Status.KILLED, 400).lines
        head, body = block[:2], block[2:]
        for ln in head:
            f.write(ln)
            size += len(ln)
        item = 0
        final = codex_turn(rng, thread, Status.COMPLETED, 1).lines[-2:]
        while size < limit - 4096:
            for ln in body:
                # renumber item ids so every item is unique, like a real long turn
                ln2 = ln.replace(b'"id":"item_', b'"id":"item_%d_' % item, 1)
                f.write(ln2)
                size += len(ln2)
            item += 1
            if item % 5 == 0:
                block = codex_turn(rng, thread, Status.KILLED, 400).lines
                body = block[2:]
        for ln in final:
            f.write(ln)
    save_meta(store, s)
    sid_file.write_text(s.id)
    stamp.write_text(GEN_VERSION)
    log(f"  ... done in {time.perf_counter() - t0:.1f} s")
    return state, s.id


def make_many_turns(state: Path, turns: int, seed: int = 11) -> str:
    """A finished codex session with ``turns`` realistic turns (fresh: no digest caches)."""
    if state.exists():
        shutil.rmtree(state)
    state.parent.mkdir(parents=True, exist_ok=True)
    store = Store(state)
    store.ensure()
    rng = random.Random(seed)
    g = make_session(rng, time.time(), adapter="codex", turns=turns, steps=(5, 60))
    g.session.turns[-1].status = Status.COMPLETED
    write_session(store, g)
    return g.session.id
