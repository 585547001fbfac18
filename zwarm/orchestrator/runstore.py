"""The built-in orchestrator's run store: one SQLite database, ``.zwarm/orchestrator.db``.

Owns the tables and every read and write of them: ``runs`` (a run's state: status, model,
budgets, totals, its context size), ``messages`` (each run's transcript as an append-only log
keyed by ``(run_id, seq)``, each message ``active`` or ``compacted_out``, ordered by ``pos``:
its own seq, or for a compaction's summary the first seq it replaced), ``compactions`` (the
audit of every compaction: which seqs became which summary, tokens before and after, the
model), ``rounds`` (each model call: tokens, cost, how many attempts, and a failed call's error
and the text it had streamed); the per-run lock; and reading the JSON run directories of
earlier zwarm versions (``orchestrator/<run>/run.json`` + ``messages.json``) into it, once.
Must stay true:
- a message is written once, in one insert (never a rewrite of the transcript); a compaction
  only marks messages out and adds its summary and audit row, in one transaction; every change
  is one transaction (WAL, ``synchronous = FULL``): a process killed at any point leaves the
  store as it was before or after that change, which ``--resume`` continues from;
- everything read back is untrusted (an agent can write the file): each run field and message
  is checked, and a bad one is one ``OrchestratorError`` naming the run and the field
  ("run X is damaged: max_tokens is 'lots'"), never a traceback; the database and its WAL
  files are never followed through a link;
- one process at a time runs or compacts a run (``flock`` on ``orchestrator/locks/<run>``);
- a JSON run is imported whole or not at all, and its files are left as they were; a damaged
  one is reported (``problems``), never half-imported;
- this module uses only the standard library (``sqlite3``) and zwarm's file helpers.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sqlite3
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from zwarm.errors import InvalidInput, OrchestratorError
from zwarm.model.records import RUN_ID as RUN_ID_PATTERN
from zwarm.system.files import CLOEXEC, NOFOLLOW, open_lock, private_dir, read_file, take_lock

DB_NAME = "orchestrator.db"
USER_VERSION = 1
RUN_ID = re.compile(RUN_ID_PATTERN)
_RUN_REF = re.compile(r"^[0-9a-f-]{1,40}\Z")
STATUSES = ("running", "finished", "step_limit", "budget", "error", "interrupted")
ROLES = ("system", "user", "assistant", "tool")
MAX_MESSAGE_BYTES = 16 << 20
MAX_JSON_RUN_BYTES = 256 << 20

DDL = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    base_url TEXT,
    cwd TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    status TEXT NOT NULL,
    steps INTEGER NOT NULL DEFAULT 0,
    invocations INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL,
    max_tokens INTEGER,
    max_cost_usd REAL,
    total_cost_usd REAL,
    unpriced_parts INTEGER NOT NULL DEFAULT 0,
    nudged INTEGER NOT NULL DEFAULT 0,
    summary TEXT,
    stop_reason TEXT,
    sessions TEXT NOT NULL DEFAULT '[]',
    context_tokens INTEGER NOT NULL DEFAULT 0,
    context_estimated INTEGER NOT NULL DEFAULT 0,
    compactions INTEGER NOT NULL DEFAULT 0,
    migrated_from TEXT
);
CREATE TABLE IF NOT EXISTS messages (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'active',
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX IF NOT EXISTS messages_active ON messages (run_id, state, pos, seq);
CREATE TABLE IF NOT EXISTS compactions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    summary_seq INTEGER NOT NULL,
    tokens_before INTEGER NOT NULL,
    tokens_after INTEGER NOT NULL,
    model TEXT NOT NULL,
    trigger TEXT NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    cost_usd REAL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rounds (
    run_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    cached_tokens INTEGER,
    cost_usd REAL,
    attempt INTEGER NOT NULL DEFAULT 1,
    error TEXT,
    partial TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, n)
);
"""


# ---------------------------------------------------------------------------- the run record
@dataclass
class Run:
    """A run's state (a ``runs`` row). ``steps``/usage/cost add up over every invocation;
    ``context_tokens`` is the size of its transcript now: what the endpoint reported for the
    last call (an estimate, ``context_estimated``, after a compaction or where none was
    reported)."""

    id: str
    task: str
    model: str
    base_url: str | None
    cwd: str
    created_at: str
    updated_at: str
    status: str = "running"  # running | finished | step_limit | budget | error | interrupted
    steps: int = 0
    invocations: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0  # the orchestrator LLM's own; None once any call is unpriced
    max_tokens: int | None = None  # the run's budgets (0: none), kept for --resume
    max_cost_usd: float | None = None
    total_cost_usd: float | None = None  # orchestrator + sessions, the priced parts (at stop)
    unpriced_parts: int = 0  # parts of that total whose cost is unknown (it is a lower bound)
    nudged: bool = False
    summary: str | None = None
    stop_reason: str | None = None
    sessions: list[dict[str, Any]] = field(default_factory=list)
    context_tokens: int = 0
    context_estimated: bool = False
    compactions: int = 0

    @property
    def source(self) -> str:
        return f"orchestrate:{self.id}"

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "source": self.source, "total_tokens": self.tokens}


_TEXT = ("task", "model", "cwd", "created_at", "updated_at")
_OPT_TEXT = ("base_url", "summary", "stop_reason")
_COUNTS = ("steps", "invocations", "prompt_tokens", "completion_tokens", "unpriced_parts",
           "context_tokens", "compactions")  # fmt: skip
_MONEY = ("cost_usd", "total_cost_usd", "max_cost_usd")
_FLAGS = ("nudged", "context_estimated")
_RUN_FIELDS = tuple(f.name for f in fields(Run))


def check_run(d: Mapping[str, Any]) -> Run:
    """A ``Run`` from a row (or a JSON run), every field checked; ``OrchestratorError``
    naming the first bad one."""
    rid = d.get("id")
    if not isinstance(rid, str) or not RUN_ID.match(rid):
        raise OrchestratorError(f"a run in the store is damaged: its id is {str(rid)[:60]!r}")
    out: dict[str, Any] = {"id": rid}
    for key in _RUN_FIELDS[1:]:
        if key in d:
            out[key] = _checked(rid, key, d[key])
    for key in _TEXT:
        if key not in out:
            raise OrchestratorError(f"run {rid} is damaged: it has no {key}")
    out.setdefault("base_url", None)
    return Run(**out)


def _checked(rid: str, key: str, v: Any) -> Any:
    def bad() -> OrchestratorError:
        return OrchestratorError(f"run {rid} is damaged: {key} is {_shown(v)}")

    number = isinstance(v, (int, float)) and not isinstance(v, bool)
    if key in _TEXT or key in _OPT_TEXT:
        if not (isinstance(v, str) or (v is None and key in _OPT_TEXT)):
            raise bad()
        return v
    if key == "status":
        if v not in STATUSES:
            raise bad()
        return v
    if key in _COUNTS or key == "max_tokens":
        if v is None and key == "max_tokens":
            return None
        if not number or v != int(v) or not 0 <= v <= 2**53:
            raise bad()
        return int(v)
    if key in _MONEY:
        if v is None:
            return None
        if not number or not math.isfinite(v) or not 0 <= v <= 1e9:
            raise bad()
        return float(v)
    if key in _FLAGS:
        if v not in (0, 1, True, False):
            raise bad()
        return bool(v)
    if key == "sessions":
        return _sessions(v, bad)
    return v


def _sessions(v: Any, bad: Any) -> list[dict[str, Any]]:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            raise bad() from None
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v) or len(v) > 100_000:
        raise bad()
    return v


def _shown(v: Any) -> str:
    from zwarm.text import clip

    return clip(repr(v), 80)


def check_message(rid: str, where: str, m: Any) -> dict[str, Any]:
    """A chat message read back, checked: a known role, text content, well-formed tool calls."""

    def bad(what: str) -> OrchestratorError:
        return OrchestratorError(f"run {rid} is damaged: {where} {what}")

    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise bad("is not a chat message with a known role")
    if not isinstance(m.get("content"), (str, type(None))):
        raise bad("has content that is not text")
    calls = m.get("tool_calls")
    if calls is not None:
        if m["role"] != "assistant" or not isinstance(calls, list):
            raise bad("has malformed tool calls")
        for c in calls:
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not isinstance(c.get("id"), str):
                raise bad("has a malformed tool call")
            if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
                raise bad("has a malformed tool call")
    if m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str):
        raise bad("is a tool result without the id of its call")
    return m


@dataclass(frozen=True)
class Stored:
    """A message as stored: its seq, its place in the transcript, whether it is active."""

    seq: int
    pos: int
    state: str
    message: dict[str, Any]
    created_at: str


# ---------------------------------------------------------------------------- the store
class RunStore:
    """The run store of one state dir (``open`` it; use it as a context manager)."""

    def __init__(self, state_dir: Path, conn: sqlite3.Connection) -> None:
        self.state_dir = state_dir
        self.path = state_dir / DB_NAME
        self.conn = conn
        self.problems: list[str] = []  # JSON runs that could not be imported, and why

    @classmethod
    def open(cls, state_dir: Path, create: bool = True) -> RunStore | None:
        """The store (created, and earlier JSON runs imported, if ``create``, or if there are
        JSON runs to import); None if there is none and it may not be created."""
        path = state_dir / DB_NAME
        legacy = _json_runs(state_dir)
        if not os.path.lexists(path) and not (create or legacy):
            return None
        for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            _check_file(p)
        if not os.path.lexists(path):
            _create_file(path)
        with _db_errors(path):
            conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
            conn.row_factory = sqlite3.Row
            rs = cls(state_dir, conn)
            rs._setup()
        if legacy:
            rs.import_json(legacy)
        return rs

    def _setup(self) -> None:
        c = self.conn
        version = int(c.execute("PRAGMA user_version").fetchone()[0])
        if version > USER_VERSION:
            raise OrchestratorError(
                f"{self.path} was written by a newer zwarm (store version {version})"
            )
        c.execute("PRAGMA journal_mode = WAL")
        c.execute("PRAGMA synchronous = FULL")
        if version < USER_VERSION:  # tables made once, by whoever gets there first
            c.executescript(f"BEGIN IMMEDIATE;{DDL}PRAGMA user_version = {USER_VERSION};COMMIT;")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``): all of it or none."""
        with _db_errors(self.path):
            mine = not self.conn.in_transaction  # else: part of the one around it
            try:  # a signal (Ctrl-C) anywhere in here leaves no transaction open
                if mine:
                    self.conn.execute("BEGIN IMMEDIATE")
                yield self.conn
                if mine:
                    self.conn.execute("COMMIT")
            except BaseException:
                if mine and self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with _db_errors(self.path):
            return list(self.conn.execute(sql, args).fetchall())

    # ----- runs
    def run_ids(self) -> list[str]:
        """Every run's id, oldest first: in the order they were created (the row's rowid),
        not by id, whose start-time prefix has one-second steps (two runs started in the
        same second would sort by their random suffix) and follows a stepped clock."""
        return [str(r[0]) for r in self._query("SELECT id FROM runs ORDER BY rowid")]

    def find(self, ref: str) -> str:
        """The run named by a full id, a unique prefix, or ``last`` (the newest)."""
        runs = self.run_ids()
        if ref == "last":
            if not runs:
                raise OrchestratorError("there is no orchestrator run yet")
            return runs[-1]
        if not _RUN_REF.match(ref):
            raise InvalidInput(f"invalid run id {ref!r}")
        found = [r for r in runs if r.startswith(ref)]
        if len(found) != 1:
            what = "no run matches" if not found else f"{len(found)} runs match"
            raise OrchestratorError(f"{what} {ref!r} (runs are in {self.path})")
        return found[0]

    def load(self, run_id: str) -> Run:
        rows = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise OrchestratorError(f"no run {run_id} in {self.path}")
        return check_run(dict(rows[0]))

    def runs(self) -> list[tuple[str, Run | OrchestratorError]]:
        """Every run (id, run), oldest first; a damaged one with its error instead (listed,
        never hidden)."""
        out: list[tuple[str, Run | OrchestratorError]] = []
        for r in self._query("SELECT * FROM runs ORDER BY id"):
            try:
                out.append((str(r["id"]), check_run(dict(r))))
            except OrchestratorError as e:
                out.append((str(r["id"])[:40], e))
        return out

    def save_run(self, run: Run) -> None:
        """Write the run's row (its state; never its transcript)."""
        with self.tx() as c:
            _put_run(c, run)

    def create(self, run: Run, messages: list[dict[str, Any]], migrated: str | None = None) -> None:
        """A new run with its first messages, in one transaction."""
        with self.tx() as c:
            if c.execute("SELECT 1 FROM runs WHERE id = ?", (run.id,)).fetchone():
                raise OrchestratorError(f"run {run.id} exists already")
            _put_run(c, run, migrated)
            for m in messages:
                _insert(c, run.id, m, run.updated_at)

    # ----- messages
    def append(self, run: Run, message: dict[str, Any]) -> int:
        """Add ``message`` at the end of the run's transcript and save the run's row, in one
        transaction; its seq."""
        with self.tx() as c:
            seq = _insert(c, run.id, message, run.updated_at)
            _put_run(c, run)
        return seq

    def stored(self, run_id: str, everything: bool = False) -> list[Stored]:
        """The transcript in order: the active messages (with ``everything``, the compacted
        ones too, each where it was), each checked."""
        where = "" if everything else " AND state = 'active'"
        rows = self._query(
            "SELECT seq, pos, state, body, created_at FROM messages WHERE run_id = ?"
            + where
            + " ORDER BY "
            + ("seq" if everything else "pos, seq"),
            (run_id,),
        )
        out = []
        for r in rows:
            seq = r["seq"]
            where_ = f"message {seq}"
            if not isinstance(seq, int) or not isinstance(r["pos"], int):
                raise OrchestratorError(f"run {run_id} is damaged: a message has no number")
            if r["state"] not in ("active", "compacted_out"):
                raise OrchestratorError(f"run {run_id} is damaged: {where_} has no valid state")
            body = r["body"]
            if not isinstance(body, str) or len(body) > MAX_MESSAGE_BYTES:
                raise OrchestratorError(f"run {run_id} is damaged: {where_} is not JSON text")
            try:
                m = json.loads(body)
            except ValueError:
                raise OrchestratorError(f"run {run_id} is damaged: {where_} is not JSON") from None
            when = r["created_at"] if isinstance(r["created_at"], str) else ""
            out.append(Stored(seq, r["pos"], r["state"], check_message(run_id, where_, m), when))
        return out

    def transcript(self, run_id: str) -> list[dict[str, Any]]:
        """What the model is sent: the active messages, in order."""
        return [s.message for s in self.stored(run_id)]

    # ----- compactions and rounds
    def compact(
        self,
        run: Run,
        seqs: list[int],
        summary: dict[str, Any],
        audit: Mapping[str, Any],
    ) -> int:
        """Mark ``seqs`` compacted out and put ``summary`` in the place of the first, record
        the audit row and save the run, in one transaction; the summary's seq. Refused if
        any of them is no longer active (another compaction got there first)."""
        with self.tx() as c:
            marks = ",".join("?" * len(seqs))
            active = c.execute(
                f"SELECT COUNT(*) FROM messages WHERE run_id = ? AND state = 'active' "
                f"AND seq IN ({marks})",
                (run.id, *seqs),
            ).fetchone()[0]
            if active != len(seqs):
                raise OrchestratorError(f"run {run.id} changed while it was being compacted")
            pos = c.execute(
                f"SELECT MIN(pos) FROM messages WHERE run_id = ? AND seq IN ({marks})",
                (run.id, *seqs),
            ).fetchone()[0]
            c.execute(
                "UPDATE messages SET state = 'compacted_out' "
                f"WHERE run_id = ? AND seq IN ({marks})",
                (run.id, *seqs),
            )
            seq = _insert(c, run.id, summary, run.updated_at, pos=pos)
            c.execute(
                "INSERT INTO compactions (run_id, first_seq, last_seq, messages, summary_seq, "
                "tokens_before, tokens_after, model, trigger, prompt_tokens, completion_tokens, "
                "cost_usd, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run.id, min(seqs), max(seqs), len(seqs), seq, audit["tokens_before"],
                 audit["tokens_after"], audit["model"], audit["trigger"],
                 audit.get("prompt_tokens"), audit.get("completion_tokens"),
                 audit.get("cost_usd"), run.updated_at),
            )  # fmt: skip
            _put_run(c, run)
        return seq

    def compactions(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM compactions WHERE run_id = ? ORDER BY id", (run_id,))
        return [dict(r) for r in rows]

    def add_round(self, run_id: str, r: Mapping[str, Any], when: str) -> None:
        """Record one model call (or one failed attempt at one)."""
        with self.tx() as c:
            n = c.execute(
                "SELECT COALESCE(MAX(n), 0) + 1 FROM rounds WHERE run_id = ?", (run_id,)
            ).fetchone()[0]
            c.execute(
                "INSERT INTO rounds (run_id, n, kind, model, prompt_tokens, completion_tokens, "
                "cached_tokens, cost_usd, attempt, error, partial, created_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, n, r["kind"], r["model"], r.get("prompt_tokens"),
                 r.get("completion_tokens"), r.get("cached_tokens"), r.get("cost_usd"),
                 r.get("attempt", 1), r.get("error"), r.get("partial"), when),
            )  # fmt: skip

    def rounds(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._query("SELECT * FROM rounds WHERE run_id = ? ORDER BY n", (run_id,))
        return [dict(r) for r in rows]

    # ----- the lock
    @contextlib.contextmanager
    def lock(self, run_id: str) -> Iterator[None]:
        """Hold run ``run_id``'s lock for the block, or ``OrchestratorError`` if another
        process holds it (running or compacting that run)."""
        d = self.state_dir / "orchestrator" / "locks"
        _private_dirs(d)
        try:
            fd = open_lock(d / run_id)
        except OSError as e:
            raise OrchestratorError(f"cannot open the lock of run {run_id}: {e.strerror}") from None
        try:
            if not take_lock(fd, 0):
                raise OrchestratorError(
                    f"run {run_id} is being run (or compacted) by another zwarm process"
                )
            yield
        finally:
            os.close(fd)

    # ----- runs of earlier zwarm versions
    def import_json(self, ids: list[str]) -> None:
        """Import the JSON runs ``ids`` not in the store yet (each whole or not at all)."""
        have = set(self.run_ids())
        for rid in ids:
            if rid in have:
                continue
            try:
                run, messages = _read_json_run(self.state_dir / "orchestrator" / rid)
                self.create(run, messages, migrated=f"orchestrator/{rid}")
            except OrchestratorError as e:
                if "exists already" not in str(e):  # imported meanwhile by another process
                    self.problems.append(f"JSON run {rid} was not imported: {e}")


def _put_run(c: sqlite3.Connection, run: Run, migrated: str | None = None) -> None:
    d = dict(run.__dict__)
    d["sessions"] = json.dumps(run.sessions, ensure_ascii=False)
    d["nudged"], d["context_estimated"] = int(run.nudged), int(run.context_estimated)
    d["migrated_from"] = migrated
    cols = list(d)
    updates = ", ".join(f"{k} = excluded.{k}" for k in cols if k not in ("id", "migrated_from"))
    c.execute(
        f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT(id) DO UPDATE SET {updates}",
        tuple(d.values()),
    )


def _insert(
    c: sqlite3.Connection, run_id: str, m: dict[str, Any], when: str, pos: int | None = None
) -> int:
    seq = int(
        c.execute(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE run_id = ?", (run_id,)
        ).fetchone()[0]
    )
    body = json.dumps(m, ensure_ascii=False, separators=(",", ":"))
    c.execute(
        "INSERT INTO messages (run_id, seq, pos, role, body, state, created_at) "
        "VALUES (?, ?, ?, ?, ?, 'active', ?)",
        (run_id, seq, seq if pos is None else pos, str(m.get("role")), body, when),
    )
    return seq


@contextlib.contextmanager
def _db_errors(path: Path) -> Iterator[None]:
    """SQLite's errors as one line naming the store (a damaged file, a full disk...)."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        raise OrchestratorError(f"the run store {path} cannot be used: {e}") from None


def _check_file(p: Path) -> None:
    """``p`` is absent, or a regular file (never a link to follow: who may write the state
    dir it is in is decided for the whole dir, ``zwarm.env``)."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise OrchestratorError(f"{p} is not a regular file (a link?): refused")


def _create_file(p: Path) -> None:
    private_dir(p.parent)
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o600))
    except FileExistsError:
        _check_file(p)  # made meanwhile by another process
    except OSError as e:
        raise OrchestratorError(f"cannot create {p}: {e.strerror}") from None


def _private_dirs(d: Path) -> None:
    try:
        private_dir(d)
    except OSError as e:
        raise OrchestratorError(f"cannot create {d}: {e.strerror}") from None
    if not stat.S_ISDIR(os.lstat(d).st_mode):
        raise OrchestratorError(f"{d} is not a directory (a link?)")


def _json_runs(state_dir: Path) -> list[str]:
    """The run directories of earlier zwarm versions (``orchestrator/<run>/run.json``)."""
    root = state_dir / "orchestrator"
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(n for n in names if RUN_ID.match(n) and os.path.lexists(root / n / "run.json"))


def _read_json_run(d: Path) -> tuple[Run, list[dict[str, Any]]]:
    """A JSON run directory's run and transcript, checked like the store's own."""
    try:
        meta = json.loads(read_file(d / "run.json", MAX_JSON_RUN_BYTES)[0])
        messages = json.loads(read_file(d / "messages.json", MAX_JSON_RUN_BYTES)[0])
    except (OSError, ValueError) as e:
        raise OrchestratorError(f"cannot read it: {e}") from None
    if not isinstance(meta, dict) or not isinstance(messages, list):
        raise OrchestratorError("run.json or messages.json is not what a run holds")
    if meta.get("id") != d.name:
        raise OrchestratorError(f"run.json names another run ({str(meta.get('id'))[:40]!r})")
    run = check_run({k: v for k, v in meta.items() if k in _RUN_FIELDS})
    for i, m in enumerate(messages, 1):
        check_message(run.id, f"message {i}", m)
    return run, messages
