"""Driving ``zwarm orchestrate`` in tests: against a ``FakeChatServer``, as a subprocess or in
this process, and reading the run it leaves in the state dir."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fakes.chat_server import ChatRequest, FakeChatServer
from tests.support import SAMPLES
from zwarm.orchestrator import guard
from zwarm.orchestrator.runstore import RunStore

RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")


def env_for(srv: FakeChatServer, **extra: str) -> dict[str, str]:
    return {
        "ZWARM_ORCH_BASE_URL": srv.base_url,
        "ZWARM_ORCH_MODEL": "fake-orchestrator",
        "FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl"),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        **extra,
    }


def orchestrate(zw: Any, srv: FakeChatServer, *args: str, **extra: str) -> Any:
    """The real ``zwarm`` command as a subprocess."""
    return zw.run("orchestrate", *args, env_extra=env_for(srv, **extra), timeout=180)


def make_inproc(zw: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``inproc(srv, *args, **env)``: the same command run in this process (click's runner).

    Same environment and working directory as ``orchestrate``; saves a process start and the
    openai import per call. Returns an object with returncode, stdout and stderr. The command
    makes its process non-dumpable; the caller restores that (``restore_dumpable``).
    """
    from click.testing import CliRunner

    from zwarm.cli.commands import cli

    monkeypatch.chdir(zw.cwd)

    def run(srv: FakeChatServer, *args: str, **extra: str) -> Any:
        env: dict[str, str | None] = {k: None for k in os.environ}
        env.update({**zw.env, **env_for(srv, **extra)})
        res = CliRunner().invoke(cli, ["orchestrate", *args], env=env, catch_exceptions=False)
        return SimpleNamespace(returncode=res.exit_code, stdout=res.stdout, stderr=res.stderr)

    return run


def restore_dumpable() -> None:
    """Undo ``zwarm orchestrate``'s non-dumpable flag in this (test) process."""
    guard.prctl(guard.PR_SET_DUMPABLE, 1)


@dataclass(frozen=True)
class RunRef:
    """A run in a state dir's run store (``.zwarm/orchestrator.db``): its id is ``name``."""

    state_dir: Path
    name: str

    @property
    def db(self) -> Path:
        return self.state_dir / "orchestrator.db"


def runs(zw: Any) -> list[RunRef]:
    return runs_in(zw.state_dir)


def runs_in(state_dir: Path) -> list[RunRef]:
    """The runs in ``state_dir``'s run store, oldest first (read as any reader would)."""
    rs = RunStore.open(state_dir, create=False)
    if rs is None:
        return []
    with rs:
        return [RunRef(state_dir, rid) for rid in rs.run_ids()]


def load_run(ref: RunRef) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the run's record, its transcript: the active messages, in order)."""
    rs = RunStore.open(ref.state_dir, create=False)
    assert rs is not None
    with rs:
        return rs.load(ref.name).to_dict(), rs.transcript(ref.name)


def sql(ref: RunRef, statement: str, *args: Any) -> list[Any]:
    """Run one SQL statement on the run store directly (a test that damages or inspects it)."""
    conn = sqlite3.connect(ref.db, isolation_level=None)
    try:
        return list(conn.execute(statement, args).fetchall())
    finally:
        conn.close()


def delegated(req: ChatRequest) -> list[str]:
    return [r["session_id"] for r in req.results("delegate")]


def files_containing(root: Path, secret: str) -> list[Path]:
    """Every regular file under ``root`` whose bytes contain ``secret``."""
    needle = secret.encode()
    return [p for p in sorted(root.rglob("*")) if p.is_file() and needle in p.read_bytes()]
