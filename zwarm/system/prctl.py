"""``prctl(2)`` through ctypes (Linux): the calls zwarm makes on its own process.

Owns ``prctl``/``prctl_get`` and the options zwarm uses: the orchestrator's non-dumpable
process (``zwarm.orchestrator.guard``) and the child subreaper of a command run for zwarm
(``zwarm.sandbox.run``). Must stay true: off Linux every call is a no-op that says so
(``prctl`` returns False, ``prctl_get`` None): nothing fails; ``ctypes`` is loaded only when a
call is made.
"""

from __future__ import annotations

import sys
from typing import Any

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

_libc: Any = None


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
        import ctypes

        out = ctypes.c_int(0)
        ok = int(libc.prctl(option, ctypes.byref(out), 0, 0, 0)) == 0
        return out.value if ok else None
    got = int(libc.prctl(option, 0, 0, 0, 0))
    return got if got >= 0 else None


def _load_libc() -> Any:
    global _libc
    if not sys.platform.startswith("linux"):
        return None
    if _libc is None:
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _ = libc.prctl
        except (OSError, AttributeError):  # pragma: no cover - every Linux libc has prctl
            return None
        _libc = libc
    return _libc
