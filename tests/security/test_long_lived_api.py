"""Issue 5, fault 9: a long-lived Python process using the API (as an orchestrator does).

A separate Python process runs 50 sessions through ``zwarm.api.Zwarm`` -- completed, failed
and killed ones, with follow-ups, reading them back every way (ls, show, trajectory, logs,
a trajectory iterator dropped half-read) -- and then reports its own children, zombies, open
file descriptors and threads against a baseline taken after one warm-up session. Nothing
may leak: no zombie, no child left, the same fds, no extra threads.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.usefixtures("strays")

SCRIPT = r"""
import json, os, sys, threading, time
from pathlib import Path
import psutil
from zwarm.api import Zwarm
from zwarm.env import Env

state, cwd, env_json = sys.argv[1], sys.argv[2], sys.argv[3]
base_env = json.loads(env_json)
samples = sys.argv[4]
def api(**extra):
    return Zwarm(env=Env(state_dir=Path(state), environ={**base_env, **extra}, cwd=Path(cwd)))
ok = api(FAKE_REPLAY=f"{samples}/codex_simple.jsonl")
bad = api(FAKE_REPLAY=f"{samples}/codex_error.jsonl", FAKE_EXIT="1")
hang = api(FAKE_REPLAY=f"{samples}/claude_simple.jsonl", FAKE_HANG="1")

def fds():
    return sorted(os.listdir("/proc/self/fd"))

def status(k):
    # a child may exit between the listing and this look (a detached server's starter does)
    try:
        return k.status()
    except psutil.NoSuchProcess:
        return None

def settle(deadline=60.0):
    # every supervisor exits after recording its turn; wait until none is left
    end = time.monotonic() + deadline
    me = psutil.Process()
    while time.monotonic() < end:
        kids = [k for k in me.children(recursive=True)
                if status(k) not in (psutil.STATUS_ZOMBIE, None)]
        if not kids and threading.active_count() == 1:
            break
        time.sleep(0.05)

w = ok.spawn("warm-up")
ok.wait([w.id], timeout=60)
settle()
base_fds, base_threads = fds(), threading.active_count()

done = 1
while done < 50:
    batch = []
    for i in range(4):
        batch.append(ok.spawn(f"task {done + i}").id)
    batch.append(bad.spawn(f"fails {done}").id)
    h = hang.spawn(f"hangs {done}", adapter="claude").id
    res = ok.wait(batch, timeout=60)
    assert not res["timed_out"], res
    ok.inject(batch[0], "follow-up")
    ok.kill([h])
    ok.wait(batch, timeout=60)
    for sid in batch:
        ok.show(sid)
        list(ok.trajectory(sid))
        b"".join(ok.logs(sid))
    it = ok.trajectory(batch[1])
    next(it, None)  # dropped half-read
    del it
    ok.sessions()
    done += 6

settle()
me = psutil.Process()
kids = me.children(recursive=True)
out = {
    "sessions": len(ok.sessions()),
    "statuses": sorted({r["status"] for r in ok.sessions()}),
    "zombies": [k.pid for k in kids if status(k) == psutil.STATUS_ZOMBIE],
    "children": [k.pid for k in kids if status(k) is not None],
    "base_fds": base_fds, "end_fds": fds(),
    "base_threads": base_threads, "end_threads": threading.active_count(),
}
print(json.dumps(out))
"""


def test_fifty_sessions_leave_no_zombie_or_fd(zw: Any) -> None:
    samples = str(zw.sample("codex_simple")).rsplit("/", 1)[0]
    args = [str(zw.state_dir), str(zw.cwd), json.dumps(zw.env), samples]
    res = zw.python(SCRIPT, *args, timeout=600)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["sessions"] >= 50
    assert out["statuses"] == ["completed", "failed", "killed"]
    assert out["zombies"] == []
    assert out["children"] == []
    assert out["end_fds"] == out["base_fds"]
    assert out["end_threads"] == out["base_threads"] == 1
