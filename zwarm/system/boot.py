"""This machine's boot: its id and when it started, read from the kernel once per process, and
the process identity anchored to it (``ProcRef``).

Owns the two facts process identities are anchored to, and the shape of such an identity as
meta.json stores it. Must stay true: imports nothing of zwarm's but the standard library and
msgspec (the model's records and migrations, below ``procs``, use it: it is on every
command's path); off Linux both facts are empty/zero; its annotations are objects, not
postponed strings (it defines a ``Struct``: see ``zwarm.model.records``).
"""

import sys
from typing import Annotated

from msgspec import Meta, Struct

LINUX = sys.platform.startswith("linux")
_boot: tuple[str, float] | None = None


class ProcRef(Struct):
    """A process identity that survives clock steps and PID reuse: pid, the kernel's start time
    in clock ticks since boot, and the boot id. Never a bare pid."""

    pid: Annotated[int, Meta(ge=1, le=2**31 - 1)]
    start_ticks: Annotated[int, Meta(ge=0, le=2**53)]
    boot_id: Annotated[str, Meta(pattern=r"^[0-9a-f-]{0,64}\Z")]


def facts() -> tuple[str, float]:
    """(boot id, boot time in epoch seconds); the boot time is used only by a migration."""
    global _boot
    if _boot is None:
        _boot = _read() if LINUX else ("", 0.0)
    return _boot


def _read() -> tuple[str, float]:
    with open("/proc/sys/kernel/random/boot_id", "rb") as f:
        bid = f.read().decode("ascii", "replace").strip()
    btime = 0.0
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime"):
                btime = float(line.split()[1])
                break
    return bid, btime


def legacy_ticks(create_time: float, clk_tck: int) -> tuple[int, str] | None:
    """(start ticks, boot id) for an epoch ``create_time`` of this boot (schema 1 records)."""
    if not LINUX:
        return int(create_time * 100), ""
    bid, btime = facts()
    ticks = round((create_time - btime) * clk_tck)
    return (ticks, bid) if ticks >= 0 else None
