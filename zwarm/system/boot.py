"""This machine's boot: its id and when it started, read from the kernel once per process.

Owns the two facts process identities are anchored to. Must stay true: imports nothing of
zwarm's (the model's migrations use it), and off Linux both facts are empty/zero.
"""

from __future__ import annotations

import sys

LINUX = sys.platform.startswith("linux")
_boot: tuple[str, float] | None = None


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
