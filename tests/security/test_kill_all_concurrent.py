"""``kill --all`` stops the running sessions at once, not one after another: each kill waits
for its processes to exit (up to a grace period for an agent that ignores SIGTERM), so a
serial kill over N sessions takes N grace periods. Every session is recorded killed first
(the waiting ones before the running), then all their processes are stopped together: when
the command returns, every process group, marked process and supervisor is gone, and each
supervisor has recorded how its agent ended."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from tests.support import wait_until
from tests.support.faults import agent_ref, alive, spawn, supervisor_ref
from zwarm.launchers.local import LocalLauncher
from zwarm.system import procs
from zwarm.system.boot import ProcRef

pytestmark = pytest.mark.usefixtures("strays")

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
    assert all(zw.meta(sid)["status"] == "killed" for sid in ids)


def _groups_alive(pgids: set[int]) -> list[int]:
    """Live (not zombie) processes in any of these process groups."""
    found = []
    for name in os.listdir("/proc"):
        fields = procs._stat_fields(int(name)) if name.isdigit() else None
        if fields is not None and not procs._dead(fields) and int(fields[2]) in pgids:
            found.append(int(name))
    return found


def test_kill_all_leaves_no_process_of_twenty_sessions_that_ignore_sigterm(zw: Any) -> None:
    """20 agents, each with a tree (a nested shell, a sleep that left the group with setsid),
    all ignoring SIGTERM: the one shared grace ends in SIGKILL for all of them."""
    env = zw.replay("codex_simple", FAKE_HANG="1", FAKE_IGNORE_TERM="1", FAKE_CHILDREN="2")
    api = zw.api(env_extra=env)
    ids = [api.spawn(f"hang {i}").id for i in range(20)]
    for sid in ids:  # the agent, two shells, three sleeps
        wait_until(lambda sid=sid: len(procs.marked(sid)) >= 6, message=f"{sid}'s tree")
    members = [r for sid in ids for r in procs.marked(sid)]
    pgids = {int(f[2]) for r in members if (f := procs._stat_fields(r.pid)) is not None}
    sups = [ProcRef(**zw.meta(sid)["turns"][-1]["supervisor"]) for sid in ids]
    killed = zw.json("kill", "--all")
    assert sorted(r["id"] for r in killed) == sorted(ids)
    assert len(pgids) == 40 and _groups_alive(pgids) == []
    assert not any(procs.is_alive(r) for r in [*members, *sups])
    assert not set(ids) & set(procs._scan())
    for sid in ids:  # recorded by its supervisor before the command returned
        turn = zw.meta(sid)["turns"][-1]
        assert (zw.meta(sid)["status"], turn["signal"]) == ("killed", 9)


def test_kill_all_records_every_session_before_stopping_any(
    zw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiting and the running are all recorded killed, then one ``stop_many`` stops the
    running together; no queued session starts in a slot the kill frees."""
    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config("[limits]\nmax_running = 3\n")
    api = zw.api(env_extra=zw.replay("codex_simple", FAKE_HANG="1"))
    ids = [api.spawn(f"hang {i}").id for i in range(5)]
    assert sorted(zw.meta(sid)["status"] for sid in ids) == ["queued"] * 2 + ["running"] * 3
    wait_until(lambda: zw.calls() == 3, message="the 3 running agents started")
    calls: list[tuple[int, list[str]]] = []
    real = LocalLauncher.stop_many

    def stop_many(self: LocalLauncher, items: Any) -> Any:
        calls.append((len(items), [zw.meta(sid)["status"] for sid in ids]))
        return real(self, items)

    monkeypatch.setattr(LocalLauncher, "stop_many", stop_many)
    assert sorted(r["id"] for r in api.kill(all_=True)) == sorted(ids)
    assert calls == [(3, ["killed"] * 5)]
    assert zw.calls() == 3 and {zw.meta(sid)["status"] for sid in ids} == {"killed"}
