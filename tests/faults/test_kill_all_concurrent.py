"""``kill --all`` stops the running sessions at once, not one after another: each kill waits
for its processes to exit (up to a grace period for an agent that ignores SIGTERM), so a
serial kill over N sessions takes N grace periods."""

from __future__ import annotations

import time
from typing import Any

from ._helpers import agent_ref, alive, meta, spawn, supervisor_ref, wait_until

N = 4
GRACE_S = 3.0  # procs.kill_session's default: an agent ignoring SIGTERM is killed after it


def test_kill_all_stops_sessions_concurrently(zw: Any) -> None:
    env = zw.replay("codex_simple", FAKE_HANG="1", FAKE_IGNORE_TERM="1")
    ids = [spawn(zw, f"hang {i}", env=env) for i in range(N)]
    refs = [r for sid in ids for r in (agent_ref(zw, sid), supervisor_ref(zw, sid))]
    assert all(alive(r) for r in refs)
    t0 = time.monotonic()
    killed = zw.json("kill", "--all")
    took = time.monotonic() - t0
    assert sorted(r["id"] for r in killed) == sorted(ids)
    # one after another: at least N grace periods (12 s); at once: about one
    assert took < (N - 1) * GRACE_S, f"kill --all took {took:.1f} s"
    wait_until(lambda: not any(alive(r) for r in refs), message="every process gone")
    assert all(meta(zw, sid)["status"] == "killed" for sid in ids)
