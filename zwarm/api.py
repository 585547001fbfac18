"""zwarm's Python API: ``Zwarm``, the one object the CLI, the tools and users call.

Owns the operations on sessions (spawn, inject, list, show, trajectory, logs, wait, kill, rm)
and their stable JSON shapes. Must stay true:
- it raises only ``ZwarmError`` subclasses for bad input or state (callers map them once);
- read operations never create the state dir, and ``sessions()`` reads one meta.json per
  session (never a turn log), each decoded by the one schema (``zwarm.model.schema``);
  running ones are checked with their launcher, and only a lost one is reconciled;
- a damaged session is listed as damaged, never hidden, rewritten or deleted;
- it knows no agent's argv or event format: that is the adapters' (``zwarm.agents``).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zwarm import agents
from zwarm.agents import agent_for_model, manager_class
from zwarm.env import Env, parse_iso
from zwarm.errors import (
    AgentNotFound,
    DamagedSession,
    InvalidInput,
    SessionNotFound,
    SessionStateError,
    ZwarmError,
)
from zwarm.model import Session, Status
from zwarm.model.steps import Step
from zwarm.store import Store

if TYPE_CHECKING:  # imported where used: `ls` and the supervisor start faster without them
    from zwarm import config as config_mod
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.runtime.launcher import Launcher

WAIT_EXIT = {"completed": 0, "failed": 1, "timeout": 124}
LOG_CHUNK = 1 << 20  # logs streams a turn log in pieces this size: memory stays bounded
CONTEXT_MODES = ("summary", "native")


class Zwarm:
    def __init__(self, state_dir: str | Path | None = None, env: Env | None = None) -> None:
        self.env = env or Env()
        if state_dir is not None:
            self.env.state_dir = Path(state_dir)
        self.store = Store(self.env.find_state_dir())
        self._config: config_mod.Config | None = None
        self._managers: dict[str, BaseSessionManager] = {}
        self._launchers: dict[str, Launcher] = {}

    # ------------------------------------------------------------------ config
    @property
    def config_path(self) -> Path:
        return self.store.root / "config.toml"

    @property
    def config(self) -> config_mod.Config:
        if self._config is None:
            from zwarm import config as config_mod

            self._config = config_mod.load(self.config_path, self.env.environ)
        return self._config

    def manager(self, adapter: str) -> BaseSessionManager:
        if adapter not in self._managers:
            cls = self._manager_cls(adapter)
            self._managers[adapter] = cls(self.store, self.config, self.env)
        return self._managers[adapter]

    @staticmethod
    def _manager_cls(adapter: str) -> type[BaseSessionManager]:
        try:
            return manager_class(adapter)
        except ValueError as e:
            raise InvalidInput(str(e)) from None

    def reader(self, adapter: str) -> BaseSessionManager:
        """A manager for reading, reconciling and killing ``adapter``'s sessions: those never
        need the agent's command, so an invalid or untrusted config.toml does not stop them
        (the built-in defaults are used instead, e.g. for price estimates)."""
        try:
            _ = self.config
        except ZwarmError:
            from zwarm import config as config_mod

            key = f"{adapter}\0defaults"
            if key not in self._managers:
                cls = self._manager_cls(adapter)
                self._managers[key] = cls(self.store, config_mod.defaults(), self.env)
            return self._managers[key]
        return self.manager(adapter)

    def init(self, force: bool = False) -> Path:
        """Write ``config.toml`` with every default; refuses to overwrite unless ``force``."""
        path = self.config_path
        if path.exists() and not force:
            raise InvalidInput(f"{path} already exists (use --force to overwrite)")
        from zwarm import config as config_mod

        text = config_mod.dumps(self.config if path.exists() else config_mod.defaults())
        self.store.ensure()
        from zwarm.store import atomic_write

        atomic_write(path, text.encode("utf-8"))
        return path

    # ------------------------------------------------------------------ starting
    def spawn(
        self,
        task: str,
        *,
        adapter: str | None = None,
        model: str | None = None,
        cwd: str | Path | None = None,
        name: str | None = None,
        timeout: float | None = None,
        context: str | None = None,
        source: str = "cli",
        dangerous: bool | None = None,
    ) -> Session:
        """Start a session; returns once its supervisor is running (the turn runs on)."""
        check_prompt(task)
        adapter, model = self.route(adapter, model)
        mgr = self.manager(adapter)
        from zwarm.engine.manager import check_cwd

        workdir = check_cwd(Path(cwd) if cwd is not None else self.env.cwd)
        if name is not None:
            self.store.check_name(name)
        self._check_agent(mgr)
        cfg = self.config
        return mgr.spawn(
            task,
            cwd=workdir,
            model=model,
            name=name,
            timeout=check_timeout(timeout) or (cfg.get("defaults", "timeout") or None),
            context=check_context(context) or cfg.get("defaults", "context"),
            source=source,
            dangerous=cfg.get(adapter, "dangerous") if dangerous is None else dangerous,
        )

    def route(self, adapter: str | None, model: str | None) -> tuple[str, str | None]:
        """Pick (adapter, model): explicit > implied by the model > configured defaults."""
        cfg = self.config
        model = model or None
        default_model = cfg.get("defaults", "model") or None
        if adapter is None:
            implied = agent_for_model(model) if model else agent_for_model(default_model)
            adapter = implied or cfg.get("defaults", "adapter")
        agents.get(adapter)  # UnknownAgent (InvalidInput) names the installed ones
        if model is None:
            model = cfg.get(adapter, "model") or None
        if model is None and default_model and agent_for_model(default_model) in (None, adapter):
            model = default_model
        return adapter, model

    def _check_agent(self, mgr: BaseSessionManager) -> None:
        self.config.require(mgr.name)  # its supervisor will use every key: refuse now, not there
        cmd = self.config.command(mgr.name)[0]
        path_var = mgr.agent_env().get("PATH", os.defpath)
        import shutil

        found = shutil.which(cmd, path=path_var)
        if found is None:
            if os.path.exists(cmd) or (os.sep in cmd and Path(cmd).exists()):
                raise AgentNotFound(mgr.name, cmd, "is not executable")
            raise AgentNotFound(mgr.name, cmd)

    def inject(
        self,
        ref: str,
        message: str,
        *,
        context: str | None = None,
        timeout: float | None = None,
    ) -> tuple[Session, str]:
        """Continue a session: starts the next turn, or queues it behind the running one."""
        check_prompt(message)
        s = self.get(ref)
        mgr = self.manager(s.adapter)
        self._check_agent(mgr)
        mode, limit = check_context(context), check_timeout(timeout)
        return mgr.inject(s.id, message, context=mode, timeout=limit)

    # ------------------------------------------------------------------ reading
    def resolve(self, ref: str) -> str:
        return self.store.resolve(ref)

    def get(self, ref: str) -> Session:
        """The session (reconciled), or ``DamagedSession``/``SessionNotFound``."""
        sid = self.store.resolve(ref)
        s = self.store.load(sid)
        if s.status is not Status.RUNNING or self._alive(s):
            return s
        return self.reader(s.adapter).reconcile(s)

    def sessions(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every session as a compact row (see ``row``), oldest first; damaged ones included."""
        if status is not None and status not in {*(s.value for s in Status), "damaged"}:
            raise InvalidInput(f"unknown status {status!r}")
        rows = []
        for sid in self.store.list_ids():
            r = self._listed(sid)
            if status is None or r["status"] == status:
                rows.append(r)
        rows.sort(key=lambda r: (r.get("created_at") or "", r["id"]))
        return rows

    def _listed(self, sid: str) -> dict[str, Any]:
        """``sid``'s row, decoded by the one schema; a running session is reconciled (its
        launcher verifies what runs it; only a lost one needs its agent's parser)."""
        got = self.store.read(sid)
        if isinstance(got, DamagedSession):
            return damaged_row(sid, got.problem)
        if got.status is Status.RUNNING and not self._alive(got):
            try:
                got = self.reader(got.adapter).reconcile(got)
            except ZwarmError as e:
                return damaged_row(sid, str(e))
        return row(got.to_dict())

    def _alive(self, s: Session) -> bool:
        t = s.current
        if t is None or t.supervisor is None:
            return False
        if t.launcher not in self._launchers:
            from zwarm.runtime.launcher import get

            self._launchers[t.launcher] = get(t.launcher, self.store, self.env)
        return self._launchers[t.launcher].alive(s.id, t)

    def show(self, ref: str) -> dict[str, Any]:
        """The session row plus every turn in full."""
        s = self.get(ref)
        d = row(s.to_dict())
        d["context_mode"] = s.context_mode
        d["requested_model"] = s.requested_model
        d["permissions"] = s.permissions
        d["turns_detail"] = [turn_json(self.store, s, t.to_dict()) for t in s.turns]
        return d

    def trajectory(self, ref: str, turn: int | None = None) -> Iterator[Step]:
        """Normalized steps, streamed, each with ``turn`` and ``index``."""
        s = self.get(ref)
        mgr = self.manager(s.adapter)
        numbers = [t.n for t in s.turns]
        if turn is not None:
            if turn not in numbers:
                raise InvalidInput(f"session {s.id} has no turn {turn} (it has 1..{len(numbers)})")
            numbers = [turn]
        return _numbered(mgr, s.id, numbers)

    def logs(self, ref: str, turn: int | None = None, follow: bool = False) -> Iterator[bytes]:
        """Raw JSONL of a turn (default the latest); with ``follow``, tail until it ends."""
        s = self.get(ref)
        n = turn if turn is not None else len(s.turns)
        if not 1 <= n <= len(s.turns):
            raise InvalidInput(f"session {s.id} has no turn {n}")
        return self._tail(s.id, n, follow)

    def _tail(self, sid: str, n: int, follow: bool) -> Iterator[bytes]:
        path = self.store.turn_path(sid, n)
        pos = 0
        while True:
            chunk = _read_at(path, pos, LOG_CHUNK)
            if chunk:
                pos += len(chunk)
                yield chunk
                continue
            if not follow or self.get(sid).turns[n - 1].status is not Status.RUNNING:
                if follow and self._has_more(path, pos):
                    continue
                return
            time.sleep(0.1)

    @staticmethod
    def _has_more(path: Path, pos: int) -> bool:
        try:
            return path.stat().st_size > pos
        except OSError:
            return False

    # ------------------------------------------------------------------ waiting and stopping
    def wait(
        self, refs: list[str], timeout: float | None = None, any_: bool = False
    ) -> dict[str, Any]:
        """Block until all (or any) of ``refs`` finish, or ``timeout``. Never busy-polls hard."""
        timeout = check_timeout(timeout) if timeout != 0 else 0.0
        ids = [self.store.resolve(r) for r in refs]
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.05
        while True:
            states = {sid: self.get(sid).status.value for sid in ids}
            done = [sid for sid, st in states.items() if st != "running"]
            if (any_ and done) or len(done) == len(ids):
                return {"timed_out": False, "statuses": states, "finished": done}
            if deadline is not None and time.monotonic() >= deadline:
                return {"timed_out": True, "statuses": states, "finished": done}
            pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            delay = min(delay * 1.5, 0.5)

    def wait_turn(self, ref: str, n: int, timeout: float | None = None) -> tuple[Session, bool]:
        """Block until turn ``n`` of ``ref`` has finished (a queued message becomes turn ``n``
        when it starts), or ``timeout``. Returns (the session, whether it timed out). Unlike
        ``wait``, a later turn's outcome never answers for turn ``n``."""
        timeout = check_timeout(timeout) if timeout != 0 else 0.0
        sid = self.store.resolve(ref)
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.05
        while True:
            s = self.get(sid)
            if n < 1 or n > len(s.turns) + len(s.queue):
                raise InvalidInput(f"session {sid} has no turn {n}")
            if n <= len(s.turns) and s.turns[n - 1].status.finished:
                return s, False
            if n > len(s.turns) and s.status.finished and not s.queue:
                raise SessionStateError(f"turn {n} of session {sid} was dropped (killed)")
            if deadline is not None and time.monotonic() >= deadline:
                return s, True
            pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            delay = min(delay * 1.5, 0.5)

    def kill(self, refs: list[str] | None = None, all_: bool = False) -> list[dict[str, Any]]:
        """Kill running sessions (whole process trees). With ``all_``, every running one."""
        if all_:
            ids = [r["id"] for r in self.sessions("running")]
        else:
            ids = [self.store.resolve(r) for r in refs or []]
        out = []
        for sid in ids:
            s = self.store.load(sid)
            try:
                s, dropped = self.reader(s.adapter).kill(sid)
            except SessionStateError:
                if all_:
                    continue  # finished between listing and killing
                raise
            out.append({**row(s.to_dict()), "dropped_queued": dropped})
        return out

    def rm(
        self, refs: list[str] | None = None, finished: bool = False, force: bool = False
    ) -> list[str]:
        """Delete sessions. Running ones only with ``force`` (killed first); damaged likewise."""
        if finished:
            targets = [r["id"] for r in self.sessions() if r["status"] in _FINISHED]
        else:
            targets = [self.store.resolve(r) for r in refs or []]
        for sid in targets:
            self._rm_one(sid, force, skip_busy=finished)
        return targets

    def _rm_one(self, sid: str, force: bool, skip_busy: bool) -> None:
        """Remove one session. Whether it runs is decided again under its lock, where the
        removal happens: an ``inject`` that restarted it meanwhile is never removed from under
        (without ``force``), and with ``force`` it is killed again first."""
        for _ in range(3):
            try:
                s = self.get(sid)
            except DamagedSession as e:
                if not force:
                    raise DamagedSession(
                        sid, f"{e.problem} (use --force to delete it anyway)"
                    ) from None
                self._remove(sid, None)
                return
            if s.status is Status.RUNNING:
                if skip_busy:
                    return
                if not force:
                    raise SessionStateError(
                        f"session {sid} is running (kill it first, or use --force)"
                    )
                with contextlib.suppress(SessionStateError):
                    self.reader(s.adapter).kill(sid)
            with self.store.lock(sid):
                if self.store.load(sid).status is not Status.RUNNING:
                    self._remove(sid, s.name)
                    return
        raise SessionStateError(f"session {sid} keeps being restarted; not removed")

    def _remove(self, sid: str, name: str | None) -> None:
        from zwarm.store import pins

        self.store.remove(sid, name)
        pins.remove(self.env.environ, sid)

    # ------------------------------------------------------------------ for layers built on top
    # (the orchestrator tools and loop use these, never ``store`` or ``config`` directly)
    @property
    def state_dir(self) -> Path:
        """The state directory (``.zwarm/``); it may not exist yet."""
        return self.store.root

    def has_sessions(self) -> bool:
        """Whether the state dir holds a sessions directory (read operations check this)."""
        return self.store.exists()

    def ensure_state_dir(self) -> Path:
        """Create the state dir (0700) if needed, for writers; returns it."""
        self.store.ensure()
        return self.store.root

    def session_ids(self) -> list[str]:
        """The ids of every session on disk (damaged ones included); reads no meta.json."""
        return self.store.list_ids()

    def setting(self, table: str, key: str) -> Any:
        """A validated ``config.toml`` value (its default when unset); ``ConfigError`` if the
        file is invalid. A table value is a copy: changing it changes nothing here."""
        import copy

        return copy.deepcopy(self.config.get(table, key))


_FINISHED = ("completed", "failed", "killed")


def _read_at(path: Path, pos: int, size: int) -> bytes:
    """Up to ``size`` bytes of the turn log ``path`` from ``pos`` (none if it is missing or not
    a regular file: a planted FIFO or link is never opened blocking or followed)."""
    from zwarm.store.files import open_read

    try:
        fd = open_read(path)
    except OSError:
        return b""
    try:
        return os.pread(fd, size, pos)
    finally:
        os.close(fd)


def _numbered(mgr: BaseSessionManager, sid: str, numbers: list[int]) -> Iterator[Step]:
    index = 0
    for n in numbers:
        for step in mgr.turn_steps(sid, n):
            step["turn"] = n
            step["index"] = index
            index += 1
            yield step


def row(m: dict[str, Any]) -> dict[str, Any]:
    """The stable session JSON (ls rows, show header, tool results) from a meta dict."""
    turns = m.get("turns") or []
    return {
        "id": m["id"],
        "name": m.get("name"),
        "adapter": m.get("adapter"),
        "model": m.get("model"),
        "status": m.get("status"),
        "task": m.get("task"),
        "cwd": m.get("cwd"),
        "created_at": m.get("created_at"),
        "updated_at": m.get("updated_at"),
        "turns": len(turns),
        "usage": m.get("usage"),
        "cost_usd": m.get("cost_usd"),
        "cost_source": m.get("cost_source"),
        "agent_session_id": m.get("agent_session_id"),
        "last_message": m.get("last_message"),
        "error": m.get("error"),
        "queued": [q.get("message") for q in m.get("queue") or []],
        "source": m.get("source"),
        "dangerous": bool(m.get("dangerous")),
        "damaged": False,
    }


def damaged_row(sid: str, problem: str) -> dict[str, Any]:
    return {
        "id": sid,
        "name": None,
        "adapter": None,
        "model": None,
        "status": "damaged",
        "task": None,
        "cwd": None,
        "created_at": None,
        "updated_at": None,
        "turns": 0,
        "usage": None,
        "cost_usd": None,
        "cost_source": "unknown",
        "agent_session_id": None,
        "last_message": None,
        "error": problem,
        "queued": [],
        "source": None,
        "dangerous": False,
        "damaged": True,
    }


def turn_json(store: Store, s: Session, t: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in t.items() if k not in ("supervisor", "agent")}
    out["prompt_path"] = str(store.turn_path(s.id, t["n"], "prompt"))
    out["log_path"] = str(store.turn_path(s.id, t["n"]))
    if t.get("ended_at") and t.get("started_at"):
        out["duration_s"] = round(parse_iso(t["ended_at"]) - parse_iso(t["started_at"]), 3)
    return out


def check_prompt(text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the prompt is empty")
    if "\x00" in text:
        raise InvalidInput("the prompt contains NUL bytes, which no agent accepts")
    return text


def check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    bad = not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
    if bad or not math.isfinite(timeout) or timeout <= 0:
        raise InvalidInput(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def check_context(context: str | None) -> str | None:
    if context is not None and context not in CONTEXT_MODES:
        raise InvalidInput(f"unknown context mode {context!r} (use summary or native)")
    return context


__all__ = ["SessionNotFound", "Zwarm", "ZwarmError", "row"]
