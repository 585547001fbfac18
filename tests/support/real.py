"""The world a real-agent conformance test runs in: ``RealWorld`` and its helpers.

``RealWorld`` (the ``real`` fixture, see conftest.py) is one isolated world per test, all
under ``tmp_path``:

- ``state/``: zwarm's state dir, with a ``config.toml`` whose ``[codex]``/``[claude]`` tables
  point the agents at the fakes: ``command`` = the pinned binary, ``env`` = the isolated
  CODEX_HOME / HOME / CLAUDE_CONFIG_DIR / TMPDIR plus the fake's URL and a dummy key (retries
  at 0: ``request_max_retries``/``stream_max_retries`` for codex, CLAUDE_CODE_MAX_RETRIES for
  claude), ``extra_args`` and ``[codex.config]`` (``-c`` overrides: provider, model);
- ``work/``: the sessions' working directory;
- ``[gemini]`` (when used) holds only the binary, the fake's URL and a dummy key in ``env``, the
  model and one attempt per request: zwarm writes gemini's settings itself, in the session's
  own home;
- zwarm itself runs with a minimal environment (PATH, locale, an isolated HOME and TMPDIR):
  nothing from the caller's environment (real API keys, proxies) reaches an agent.

``real.use(adapter, script, ...)`` starts that adapter's fake (a ``Gated*Server``: a request
can be held until the test releases it) and rewrites config.toml; a world may use both
adapters at once. Sessions are started and driven only through zwarm (``real.api()``, the
``Zwarm`` API, or ``real.cli(...)``, the installed ``zwarm`` console script).

A missing binary skips the test with the reason, or fails it when ``CI=true``. ``close()``
kills every running session through zwarm, stops the fakes, and SIGKILLs any process still
working under ``tmp_path``, so nothing outlives a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import tomli_w

from tests.fakes.gemini_api import FAKE_KEY, GEMINI_MODEL, FakeGeminiServer
from tests.fakes.llm import (
    NO_PROXY,
    FakeLLMServer,
    FakeMessagesServer,
    FakeResponsesServer,
    Reply,
    Request,
    binary,
    claude_setup,
    codex_setup,
    nested,
)
from tests.support import VENV_BIN, ZWARM_BIN
from tests.support import wait_until as _wait_until
from zwarm.api import Zwarm
from zwarm.env import Env
from zwarm.trust_plan import trust_config

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ("codex", "claude")
# The CLIs start in ~0.4-0.8 s, but the machine is small and shared (one codex run once took
# 8.7 s): every wait is on a condition, with a deadline far beyond any sane run.
DEADLINE = 120.0
_BASE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "USER", "LOGNAME", "SHELL", "TERM")
# zwarm runs claude with --permission-mode acceptEdits (its safe default), under which claude
# -p refuses any Bash command that is not read-only ("needs approval"). Tests whose script
# runs commands allow Bash explicitly, as a user would, instead of skipping permissions.
# Codex needs nothing: its default sandbox here (-s workspace-write, bubblewrap) runs them.
ALLOW_BASH = ("--allowedTools", "Bash")


def require(name: str) -> str:
    """The pinned binary's path; skip (or fail when CI=true) if it is not installed."""
    path = binary(name)
    if path is None:
        reason = f"{name} binary not found: run .ci/install-agents to install the pinned CLIs"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def wait_until(
    predicate: Callable[[], Any], timeout: float = DEADLINE, message: str = "condition"
) -> Any:
    """``tests.support.wait_until`` with this world's longer default deadline."""
    return _wait_until(predicate, timeout, message=message)


# --------------------------------------------------------------------------- gated fakes


class _Gates(FakeLLMServer):
    """``gate(i)`` holds the answer to model request ``i`` until the test releases it.

    The request is recorded first (``wait_for_requests`` sees it), then its handler waits for
    the gate, or for the server to stop, before playing the scripted reply.
    """

    def __init__(self, script: Sequence[Reply]) -> None:
        super().__init__(script)
        self._gates: dict[int, threading.Event] = {}

    def gate(self, index: int) -> threading.Event:
        """The gate of request ``index`` (created closed): ``.set()`` it to let the reply go."""
        return self._gates.setdefault(index, threading.Event())

    def wait_for_requests(self, n: int, timeout: float = DEADLINE) -> list[Request]:
        """Block until at least ``n`` model requests arrived (default deadline: DEADLINE)."""
        return super().wait_for_requests(n, timeout)

    def _reply_for(self, index: int) -> Reply:
        ev = self._gates.get(index)
        while ev is not None and not ev.wait(0.05) and not self._stopping.is_set():
            pass
        return super()._reply_for(index)


class GatedResponsesServer(_Gates, FakeResponsesServer):
    """The fake OpenAI Responses API (codex), with gates."""


class GatedMessagesServer(_Gates, FakeMessagesServer):
    """The fake Anthropic Messages API (claude), with gates."""


class GatedGeminiServer(_Gates, FakeGeminiServer):
    """The fake Gemini API (gemini), with gates."""


Fake = GatedResponsesServer | GatedMessagesServer | GatedGeminiServer


# --------------------------------------------------------------------------- the world


@dataclass
class _AgentSetup:
    server: Fake
    table: dict[str, Any]  # the adapter's config table ([codex] / [claude])


@dataclass
class RealWorld:
    tmp: Path
    stack: ExitStack
    state: Path = field(init=False)
    work: Path = field(init=False)
    environ: dict[str, str] = field(init=False)
    agents: dict[str, _AgentSetup] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # more of config.toml

    def __post_init__(self) -> None:
        self.state = self.tmp / "state"
        self.work = self.tmp / "work"
        home, ztmp = self.tmp / "zwarm-home", self.tmp / "zwarm-tmp"
        for d in (self.state, self.work, home, ztmp):
            d.mkdir()
        base = {k: os.environ[k] for k in _BASE_ENV_KEYS if k in os.environ}
        base["PATH"] = os.pathsep.join([str(VENV_BIN), base.get("PATH", os.defpath)])
        self.environ = {
            **base,
            "HOME": str(home),
            "TMPDIR": str(ztmp),
            "ZWARM_DIR": str(self.state),
            "NO_PROXY": NO_PROXY,
            "no_proxy": NO_PROXY,
            "NO_COLOR": "1",
            "COLUMNS": "1000",  # `zwarm show` prints long agent messages on one line
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    # ----- setup
    def use(
        self,
        adapter: str,
        script: Sequence[Reply],
        *,
        extra_args: Sequence[str] = (),
        **table: Any,
    ) -> Fake:
        """Start ``adapter``'s fake with ``script`` and point zwarm's config at it.

        ``extra_args`` and ``table`` (e.g. ``permission_mode``, ``dangerous``) go into the
        adapter's config table as they are.
        """
        exe = require(adapter)
        assert adapter not in self.agents, f"{adapter} is already set up in this world"
        home = self.tmp / f"{adapter}-agent"  # CODEX_HOME, HOME, CLAUDE_CONFIG_DIR, TMPDIR
        srv: Fake
        if adapter == "codex":
            srv = self.stack.enter_context(GatedResponsesServer(script))
            env, overrides = codex_setup(srv.base_url, home)
            extra = ["--disable", "plugins", *extra_args]  # no outbound plugin lookups
            cfg = {"command": [exe], "env": env, "extra_args": extra, "config": nested(overrides)}
        elif adapter == "gemini":
            # zwarm writes gemini's settings itself (a home of its own per session): the
            # table only points it at the fake, with the key in the environment, one attempt
            srv = self.stack.enter_context(GatedGeminiServer(script))
            env = {
                "GOOGLE_GEMINI_BASE_URL": srv.url,
                "GEMINI_API_KEY": FAKE_KEY,
                "TMPDIR": str(_made(home / "tmp")),
                "NO_PROXY": NO_PROXY,
                "no_proxy": NO_PROXY,
            }
            cfg = {
                "command": [exe],
                "env": env,
                "extra_args": list(extra_args),
                "model": GEMINI_MODEL,
                "max_attempts": 1,
            }
        else:
            srv = self.stack.enter_context(GatedMessagesServer(script))
            env = claude_setup(srv.url, home)
            env.pop("IS_SANDBOX")  # only --dangerously-skip-permissions as root needs it
            cfg = {"command": [exe], "env": env, "extra_args": list(extra_args)}
        self.agents[adapter] = _AgentSetup(srv, {**cfg, **table})
        self.write_config()
        return srv

    def write_config(self) -> None:
        doc: dict[str, Any] = {"defaults": {"adapter": next(iter(self.agents))}}
        for name, setup in self.agents.items():
            doc[name] = setup.table
        doc.update(self.tables)
        path = self.state / "config.toml"
        path.write_text(tomli_w.dumps(doc))
        trust_config(path, environ=self.environ)  # as its user would: `zwarm trust`

    def server(self, adapter: str) -> Fake:
        return self.agents[adapter].server

    # ----- driving zwarm
    def api(self) -> Zwarm:
        """A fresh ``zwarm.api.Zwarm`` on this world (reads config.toml anew)."""
        return Zwarm(env=Env(state_dir=self.state, environ=dict(self.environ), cwd=self.work))

    def cli(
        self, *args: str, check: bool = True, input_: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the installed ``zwarm`` console script; ``check`` asserts exit 0."""
        proc = subprocess.run(
            [str(ZWARM_BIN), *args],
            input=input_,
            capture_output=True,
            text=True,
            env=self.environ,
            cwd=self.work,
            timeout=DEADLINE + 60,
            check=False,
        )
        if check:
            assert proc.returncode == 0, (
                f"zwarm {' '.join(args)} exited {proc.returncode}\n"
                f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--json").stdout)

    def spawn(self, task: str, adapter: str, **kw: Any) -> str:
        sid: str = self.api().spawn(task, adapter=adapter, cwd=self.work, **kw).id
        return sid

    def wait(self, sid: str) -> dict[str, Any]:
        """Wait (through zwarm) until ``sid`` is not running; return ``show`` of it."""
        res = self.api().wait([sid], timeout=DEADLINE)
        assert not res["timed_out"], f"session {sid} still running after {DEADLINE:g}s"
        return self.show(sid)

    def show(self, sid: str) -> dict[str, Any]:
        shown: dict[str, Any] = self.api().show(sid)
        return shown

    def steps(self, sid: str, turn: int | None = None) -> list[dict[str, Any]]:
        return list(self.api().trajectory(sid, turn))

    def events(self, sid: str, n: int = 1) -> list[dict[str, Any]]:
        """The turn's raw JSONL as the agent wrote it, decoded."""
        path = self.state / "sessions" / sid / "turns" / f"turn_{n}.jsonl"
        lines = path.read_bytes().splitlines()
        return [json.loads(line) for line in lines if line.startswith(b"{")]

    def stderr(self, sid: str, n: int = 1) -> str:
        path = self.state / "sessions" / sid / "turns" / f"turn_{n}.stderr"
        return path.read_text(errors="replace") if path.exists() else ""

    def agent_pid(self, sid: str) -> int:
        """The pid of the running turn's agent, once its supervisor has recorded it."""

        def recorded() -> int | None:
            t = self.api().get(sid).current
            return t.agent.pid if t is not None and t.agent is not None else None

        pid: int = wait_until(recorded, message=f"session {sid}'s agent to be recorded")
        return pid

    def supervisor_pid(self, sid: str) -> int:
        t = self.api().get(sid).current
        assert t is not None and t.supervisor is not None
        return t.supervisor.pid

    # ----- teardown
    def close(self) -> None:
        try:
            if (self.state / "sessions").is_dir():
                self.api().kill(all_=True)
        except Exception as e:  # teardown must not mask the test's own result
            print(f"real teardown: could not kill running sessions: {e}", file=sys.stderr)
        self.stack.close()  # stops the fakes (releasing held and hanging requests)
        kill_strays(self.tmp)


def _made(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return d


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is ``pgid``."""
    found = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def processes_under(root: Path) -> list[psutil.Process]:
    """Live processes whose cwd or command line lies under ``root``, but a fork server
    (``zwarm.runtime.forkserver``: it idles on after its turns by design; a supervisor it
    forked is found, by the server's command line)."""
    me, prefix = os.getpid(), str(root)
    found = []
    for p in psutil.process_iter(["pid", "cwd", "cmdline", "status"]):
        if p.pid == me or p.info["status"] == psutil.STATUS_ZOMBIE or _forkserver(p.pid):
            continue
        cwd = p.info.get("cwd") or ""
        cmd = " ".join(p.info.get("cmdline") or [])
        if cwd.startswith(prefix) or prefix in cmd:
            found.append(p)
    return found


def _forkserver(pid: int) -> bool:
    from zwarm.launchers import forking
    from zwarm.system import procs

    return procs.has_marker(pid, forking.PLACEHOLDER, procs.SUPERVISOR_MARKER)


def kill_strays(root: Path) -> None:
    for p in processes_under(root):
        with contextlib.suppress(psutil.Error, ProcessLookupError):  # it may exit meanwhile
            os.kill(p.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- assertions helpers


def shell_args(adapter: str) -> dict[str, Any]:
    """``RealWorld.use`` options that let ``adapter`` run shell commands (see ALLOW_BASH)."""
    return {"extra_args": ALLOW_BASH} if adapter == "claude" else {}


def result_line(real: RealWorld, sid: str, n: int = 1) -> dict[str, Any]:
    """Claude's ``result`` line of turn ``n``, as the agent wrote it."""
    (result,) = [e for e in real.events(sid, n) if e.get("type") == "result"]
    return result
