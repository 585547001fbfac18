"""Conformance, processes: prompts, kill, timeout and concurrency with the real agents.

Matrix items 9-12 of issue 3. A model request can be held by the fake (``srv.gate(i)``), so
a turn stays in flight for exactly as long as a test needs, with no sleeps: the agent's argv
is read, or the session killed, while the agent waits for its LLM.
"""

from __future__ import annotations

import random
import string
from pathlib import Path

import psutil

from tests.fakes.llm import Reply, hang, shell, text
from tests.support.real import (
    RealWorld,
    group_members,
    processes_under,
    shell_args,
    wait_until,
)


def big_prompt() -> str:
    """A 200 KiB+ prompt of random lines (no run of it can appear anywhere by chance)."""
    rnd = random.Random(3)
    alphabet = string.ascii_letters + string.digits + " "
    lines = ["".join(rnd.choices(alphabet, k=99)) for _ in range(2100)]
    return "BIG-PROMPT-BEGIN\n" + "\n".join(lines) + "\nBIG-PROMPT-END ünïcødé ✓"


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def tree(pid: int) -> list[psutil.Process]:
    """The live process ``pid`` and all its descendants."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def gone(procs: list[psutil.Process]) -> bool:
    """True when none of ``procs`` is still running (same pid and start time, not a zombie)."""
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.Error:
            continue
    return True


# --------------------------------------------------------------------------- 9 large prompt


def test_large_prompt_reaches_the_llm_intact_and_never_argv(real: RealWorld, adapter: str) -> None:
    prompt = big_prompt()
    assert len(prompt.encode()) >= 200 * 1024
    srv = real.use(adapter, [Reply([text("Read it all.")])])
    srv.gate(0)  # hold the reply: the agent stays alive, waiting for its LLM
    sid = real.cli("spawn", "-", "--adapter", adapter, input_=prompt).stdout.strip()
    srv.wait_for_requests(1)

    agent = real.agent_pid(sid)
    procs = [real.supervisor_pid(sid), *(p.pid for p in tree(agent)), *group_members(agent)]
    if adapter == "codex":
        assert len(tree(agent)) >= 2  # node launcher + native codex
    assert cmdline(agent), "the agent vanished while its LLM reply was held"
    lines = prompt.splitlines()
    for pid in set(procs):
        argv = cmdline(pid)  # empty if a short-lived helper has exited meanwhile
        assert len(argv) < 16 * 1024, f"{pid} argv is {len(argv)} bytes: {argv[:200]!r}"
        for needle in (lines[0], lines[1], lines[1000], lines[-1]):
            assert needle.encode() not in argv, f"the prompt is in the argv of {pid}"

    srv.gate(0).set()
    d = real.wait(sid)
    assert (d["status"], d["last_message"]) == ("completed", "Read it all.")
    assert srv.requests[0].contains(prompt)  # byte for byte, in one piece
    assert prompt.startswith(d["task"]) and d["task"]  # (the stored preview may be cut)


# --------------------------------------------------------------------------- 10 kill


def test_kill_while_the_llm_reply_is_delayed(real: RealWorld, adapter: str) -> None:
    srv = real.use(adapter, [Reply([text("never delivered")])])
    srv.gate(0)  # never released: the turn waits on its LLM until killed
    sid = real.spawn("Wait for the model.", adapter)
    srv.wait_for_requests(1)
    agent = real.agent_pid(sid)
    supervisor = psutil.Process(real.supervisor_pid(sid))
    members = tree(agent)
    assert group_members(agent), "the agent runs in its own process group"
    if adapter == "codex":
        assert len(members) >= 2  # node launcher + the native binary it started

    out = real.cli("kill", sid).stdout
    assert out.strip() == f"{sid} killed"
    wait_until(lambda: not group_members(agent), message="no process left in the agent's group")
    wait_until(lambda: gone([*members, supervisor]), message="the agent's tree and supervisor")
    d = real.show(sid)
    (t,) = d["turns_detail"]
    assert (d["status"], t["status"], d["error"]) == ("killed", "killed", "killed by user")
    assert real.cli("wait", sid, check=False).returncode == 1
    wait_until(lambda: not processes_under(real.tmp), message="nothing left under the test dir")


def test_kill_during_a_long_command_takes_what_the_agent_started(
    real: RealWorld, adapter: str
) -> None:
    # claude refuses to run a bare `sleep`; codex runs commands in a bubblewrap sandbox, in
    # sessions of their own (outside the agent's process group)
    command = "python3 -c 'import time; time.sleep(600)' # LONG-COMMAND"
    script = [Reply([shell(command)]), Reply([text("never")])]
    srv = real.use(adapter, script, **shell_args(adapter))
    sid = real.spawn("Run the long command.", adapter)
    srv.wait_for_requests(1)
    agent = real.agent_pid(sid)

    def running_command() -> list[psutil.Process]:
        return [p for p in tree(agent) if b"LONG-COMMAND" not in cmdline(p.pid)
                and b"time.sleep(600)" in cmdline(p.pid)]  # fmt: skip

    wait_until(running_command, message="the agent's command to run")
    started = tree(agent)  # the agent, and everything it started
    assert len(started) >= 2

    real.cli("kill", sid)
    wait_until(lambda: gone(started), message="every process the agent started to be gone")
    wait_until(lambda: not group_members(agent), message="no process left in the agent's group")
    assert real.show(sid)["status"] == "killed"
    assert len(srv.requests) == 1  # it never got to answer the model
    wait_until(lambda: not processes_under(real.tmp), message="nothing left under the test dir")


# --------------------------------------------------------------------------- 11 timeout


def test_timeout_kills_a_turn_whose_llm_never_answers(real: RealWorld, adapter: str) -> None:
    srv = real.use(adapter, [hang()])
    # 8 s: the agent must reach the LLM before it is killed, and a CLI can take several
    # seconds to start on a loaded 2-core machine (seen: claude not at the fake after 3 s)
    sid = real.cli("spawn", "Hang on.", "--adapter", adapter, "--timeout", "8").stdout.strip()
    srv.wait_for_requests(1)
    agent = real.agent_pid(sid)
    members = tree(agent)
    d = real.wait(sid)

    (t,) = d["turns_detail"]
    assert (d["status"], t["status"]) == ("failed", "failed")
    assert d["error"] == t["error"] == "timeout: killed after 8 s"
    assert t["timeout"] == 8.0
    assert t["duration_s"] >= 8.0
    # SIGTERM first: codex's node launcher dies of it, claude traps it and exits 143;
    # SIGKILL only if it is still there after the grace period
    on_term = (None, 15) if adapter == "codex" else (143, None)
    assert (t["exit_code"], t["signal"]) in (on_term, (None, 9))
    assert "timeout: killed after 8 s" in real.cli("show", sid).stdout
    wait_until(lambda: gone(members), message="the timed-out agent's processes to be gone")
    assert not group_members(agent)


# --------------------------------------------------------------------------- 12 concurrency


def test_two_adapters_run_at_once_in_one_state_dir(real: RealWorld) -> None:
    codex = real.use("codex", [Reply([text("codex answer")])])
    claude = real.use("claude", [Reply([text("claude answer")])])
    codex.gate(0)
    claude.gate(0)
    a = real.spawn("codex task", "codex")
    b = real.spawn("claude task", "claude")
    # both agents are in flight at the same time, each waiting on its own LLM
    codex.wait_for_requests(1)
    claude.wait_for_requests(1)
    rows = {r["id"]: r for r in real.cli_json("ls")}
    assert {(r["adapter"], r["status"]) for r in rows.values()} == {
        ("codex", "running"),
        ("claude", "running"),
    }
    assert rows[a]["adapter"] == "codex" and rows[b]["adapter"] == "claude"

    codex.gate(0).set()
    claude.gate(0).set()
    assert real.cli("wait", a, b, "--timeout", "120").returncode == 0
    assert real.show(a)["last_message"] == "codex answer"
    assert real.show(b)["last_message"] == "claude answer"
    assert codex.requests[0].contains("codex task") and not codex.requests[0].contains("claude")
    assert claude.requests[0].contains("claude task")
    assert [r["status"] for r in real.cli_json("ls")] == ["completed", "completed"]


# --------------------------------------------------------------------------- reaching zwarm
def test_an_agent_reaches_zwarm_through_ZWARM_from_its_shell(real: RealWorld, adapter: str) -> None:
    """Issue 30.9: the real agent runs ``"$ZWARM" --version`` as it runs any command (codex:
    ``bash -lc``, a login shell that resets PATH), and zwarm answers."""
    command = '"$ZWARM" --version > zwarm-version.txt 2>&1'
    srv = real.use(adapter, [Reply([shell(command)]), Reply([text("done")])], **shell_args(adapter))
    sid = real.spawn("Check zwarm.", adapter)
    assert real.wait(sid)["status"] == "completed"
    assert len(srv.requests) == 2
    out = (real.work / "zwarm-version.txt").read_text()
    assert out.startswith("zwarm "), out
