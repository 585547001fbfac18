"""Process guards for the built-in orchestrator: its API key stays in its own memory.

Owns the rule for the orchestrator-only key variable (``ORCH_KEY_VAR``), making the
``zwarm orchestrate`` process non-dumpable, and the ``prctl`` calls (Linux, through ctypes)
that this and the bash tool's child subreaper need. Must stay true:
- ``ZWARM_ORCH_API_KEY`` is read once, when a run starts, and then removed from the
  environment given to the API (``without_key``): no supervisor, agent or bash command that
  the run starts inherits it;
- while ``zwarm orchestrate`` runs, its process is non-dumpable (``PR_SET_DUMPABLE`` 0), so a
  process of the same user (a bash tool command, an agent) can read neither
  ``/proc/<pid>/environ`` (the process's initial environment, which still holds the key
  whatever ``os.environ`` says) nor ``/proc/<pid>/mem``; root still can, nothing stops root;
- the variable named by ``[orchestrator] api_key_env`` (default ``OPENAI_API_KEY``) is the
  user's shared key: sessions keep it, as they keep the rest of the user's environment, since
  the codex agent itself reads ``OPENAI_API_KEY``; only the bash tool never gets it (its
  environment is an allowlist). A key meant for the orchestrator alone belongs in
  ``ZWARM_ORCH_API_KEY``;
- off Linux every call here is a no-op that says so (returns False): nothing fails.
Outside this process nothing is guarded: a bash command can read the environment of the
user's other processes (the shell that exported the key, the agents holding a shared key).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Mapping

ORCH_KEY_VAR = "ZWARM_ORCH_API_KEY"

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

_libc: ctypes.CDLL | None = None


def without_key(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``environ`` without the orchestrator-only key variable."""
    return {k: v for k, v in environ.items() if k != ORCH_KEY_VAR}


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False off Linux or when the kernel refuses."""
    libc = _load_libc()
    if libc is None:
        return False
    return int(libc.prctl(option, value, 0, 0, 0)) == 0


def prctl_get(option: int) -> int | None:
    """The value of a ``PR_GET_*`` option that returns it (dumpable) or stores it through a
    pointer (child subreaper); None off Linux or on error."""
    libc = _load_libc()
    if libc is None:
        return None
    if option == PR_GET_CHILD_SUBREAPER:
        out = ctypes.c_int(0)
        ok = int(libc.prctl(option, ctypes.byref(out), 0, 0, 0)) == 0
        return out.value if ok else None
    got = int(libc.prctl(option, 0, 0, 0, 0))
    return got if got >= 0 else None


def make_undumpable() -> bool:
    """Make this process non-dumpable for the rest of its life; True if it now is.

    Not undone at the end of a run on purpose: sessions outlive the run, and this process's
    initial environment still holds the key until it exits.
    """
    return prctl(PR_SET_DUMPABLE, 0) and prctl_get(PR_GET_DUMPABLE) == 0


def _load_libc() -> ctypes.CDLL | None:
    global _libc
    if not sys.platform.startswith("linux"):
        return None
    if _libc is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _ = libc.prctl
        except (OSError, AttributeError):  # pragma: no cover - every Linux libc has prctl
            return None
        _libc = libc
    return _libc
