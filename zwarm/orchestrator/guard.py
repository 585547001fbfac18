"""Process guards for the built-in orchestrator: its API key stays in its own memory.

Owns the rule for the orchestrator-only key variable (``ORCH_KEY_VAR``), the re-execution that
takes it out of the process's environment block (``reexec_without_key``/``take_handed_key``),
making the ``zwarm orchestrate`` process non-dumpable (``zwarm.system.prctl``) and the
redaction of every value zwarm knows to be secret (``Secrets``). Must stay true:
- ``ZWARM_ORCH_API_KEY`` is read once, when a run starts, and then removed from the
  environment given to the API (``without_key``): no supervisor, agent or bash command that
  the run starts inherits it, nor does any process another zwarm command starts when the user
  exported it in their shell (``env.children.for_children``, where the name is declared);
- it is not in the process's environment block either: ``/proc/<pid>/environ`` shows the
  block the process was started with, whatever ``os.environ`` says, so ``zwarm orchestrate``
  started with the key re-executes itself (same pid, same argv, ``python -I -m zwarm``)
  without it, handing it over on a pipe whose only copy is read at once
  (``ZWARM_ORCH_KEY_FD`` names the pipe and this pid: a stale one is ignored). Only zwarm's own
  process does that (a program calling ``zwarm.cli.main`` keeps its process);
- while ``zwarm orchestrate`` runs, its process is non-dumpable (``PR_SET_DUMPABLE`` 0), so a
  process of the same user (a bash tool command, an agent) can read neither
  ``/proc/<pid>/environ`` nor ``/proc/<pid>/mem``; root still can, nothing stops root (hence
  the re-execution: root reads an environment block without the key);
- every value zwarm knows to be secret (the run's key, the ``api_key_env`` variable's value,
  variables of its environment and the agents' configured ``env`` whose names look secret,
  ``zwarm.secret_names.looks_secret``) is replaced by ``[redacted NAME]`` in what the model
  is sent and the run store keeps (``Secrets.redact``), whatever wrote it there (a bash
  command reading another process's environment, an agent's output). Values shorter than
  ``MIN_SECRET`` characters are not secrets (a flag, a port) and are left alone;
- the variable named by ``[orchestrator] api_key_env`` (default ``OPENAI_API_KEY``) is the
  user's shared key: sessions keep it, as they keep the rest of the user's environment, since
  the codex agent itself reads ``OPENAI_API_KEY``; only the bash tool never gets it (its
  environment is an allowlist). A key meant for the orchestrator alone belongs in
  ``ZWARM_ORCH_API_KEY``;
- off Linux every call here is a no-op that says so (returns False): nothing fails.
Outside this process nothing is guarded: a bash command can read the environment of the
user's other processes (the shell that exported the key, the agents holding a shared key);
redaction keeps the values it finds there out of the transcript and the store, not out of
what the command itself does with them.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping
from typing import Any

# ORCH_KEY_VAR is declared there (never given to a child) and re-exported here
from zwarm.env.children import ORCH_KEY_VAR as ORCH_KEY_VAR
from zwarm.env.children import for_children
from zwarm.errors import OrchestratorError
from zwarm.secret_names import looks_secret

# the prctl calls are the system layer's (zwarm.system.prctl), re-exported here
from zwarm.system.prctl import PR_GET_DUMPABLE as PR_GET_DUMPABLE
from zwarm.system.prctl import PR_SET_DUMPABLE as PR_SET_DUMPABLE
from zwarm.system.prctl import prctl as prctl
from zwarm.system.prctl import prctl_get as prctl_get

KEY_FD_VAR = "ZWARM_ORCH_KEY_FD"
MAX_KEY_BYTES = 16384  # far below a pipe's buffer: the write never blocks before the exec
MIN_SECRET = 8


def without_key(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``environ`` without the orchestrator-only key variable."""
    return for_children(environ)


def reexec_without_key(args: list[str]) -> str | None:
    """If the orchestrator-only key is in this process's environment, execute zwarm again
    (same pid, ``args`` as its arguments) without it, the key on an inherited pipe that
    ``take_handed_key`` reads. Returns (None) when there is no key to hand over; returns why
    when the interpreter cannot be executed again (the key then stays in the block, which only
    root can read, this process being non-dumpable)."""
    key = os.environ.get(ORCH_KEY_VAR)
    if not key:
        return None
    data = os.fsencode(key)
    if len(data) > MAX_KEY_BYTES:
        raise OrchestratorError(f"{ORCH_KEY_VAR} is longer than {MAX_KEY_BYTES} bytes")
    env = {k: v for k, v in os.environ.items() if k != ORCH_KEY_VAR}
    r, w = os.pipe()
    try:
        try:
            os.write(w, data)
        finally:
            os.close(w)
        os.set_inheritable(r, True)
        env[KEY_FD_VAR] = f"{r}:{os.getpid()}"
        sys.stdout.flush()
        sys.stderr.flush()
        from zwarm.env.python import python_argv

        os.execve(sys.executable, python_argv(sys.executable, "zwarm", *args), env)
    except OSError as e:
        return f"cannot execute {sys.executable}: {e.strerror or e}"
    finally:  # reached only when the exec failed
        os.close(r)
    return None  # pragma: no cover - execve does not return


def take_handed_key() -> None:
    """Read the key ``reexec_without_key`` handed to this process into ``os.environ`` (which
    the environment block does not show); nothing if none was handed to this very process."""
    handed = os.environ.pop(KEY_FD_VAR, None)
    if handed is None:
        return
    fd_text, _, pid = handed.partition(":")
    if not fd_text.isdigit() or pid != str(os.getpid()):
        return  # not ours: inherited from a run that started this process, or set by hand
    fd = int(fd_text)
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
        data = b""
        while len(data) <= MAX_KEY_BYTES and (chunk := os.read(fd, MAX_KEY_BYTES + 1)):
            data += chunk
        os.environ[ORCH_KEY_VAR] = os.fsdecode(data[:MAX_KEY_BYTES])
    except OSError:
        return
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


class Secrets:
    """The values zwarm knows to be secret, each with the name it is known by."""

    def __init__(self, named: Iterable[tuple[str, str]]) -> None:
        self.names: dict[str, str] = {}
        for name, value in named:
            if len(value) >= MIN_SECRET:
                self.names.setdefault(value, name)
        longest_first = sorted(self.names, key=len, reverse=True)  # a value inside another
        self._pattern = (
            re.compile("|".join(re.escape(v) for v in longest_first)) if longest_first else None
        )

    @classmethod
    def known(
        cls,
        environ: Mapping[str, str],
        keys: Iterable[tuple[str, str]] = (),
        configured: Iterable[tuple[str, str]] = (),
    ) -> Secrets:
        """The ``keys`` (name, value: secret whatever their names), ``environ``'s variables
        whose names look secret, and the ``configured`` (name, value) pairs whose names do
        (the agents' ``env`` tables)."""
        named = list(keys)
        named += [(k, v) for k, v in environ.items() if looks_secret(k)]
        named += [(k, v) for k, v in configured if looks_secret(k)]
        return cls(named)

    def redact(self, value: Any) -> Any:
        """``value`` (a string, or lists and dicts of them) with every secret replaced."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self._pattern.sub(lambda m: f"[redacted {self.names[m.group()]}]", value)
        if isinstance(value, list):
            return [self.redact(v) for v in value]
        if isinstance(value, dict):
            return {self.redact(k): self.redact(v) for k, v in value.items()}
        return value


def make_undumpable() -> bool:
    """Make this process non-dumpable for the rest of its life; True if it now is.

    Not undone at the end of a run on purpose: sessions outlive the run, and this process's
    initial environment still holds the key until it exits.
    """
    return prctl(PR_SET_DUMPABLE, 0) and prctl_get(PR_GET_DUMPABLE) == 0
