"""The ssh launcher end to end: turns run on two loopback hosts (``tests.support.hosts``), and
every command works from here: spawn --host, wait, ls (HOST column, a stopped host within
2 s, reconciled when it returns), show, trajectory, inject (native resume on the host), kill
(nothing of the turn left on the host), a turn the host lost (``ssh_lost``), a version
mismatch refused in one line. Real zwarm subprocesses, real sshd and ssh; the agent is the
fake codex (tests/fakes/bin), run on the host by the host's user."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import tomli_w

from tests.support import FAKE_BIN, ROOT, ZW, wait_status, wait_until

CODEX = str(FAKE_BIN / "codex")


class Hosts:
    """The world's two hosts as ``[hosts.a]`` and ``[hosts.b]``, and what a test needs of them."""

    def __init__(self, zw: ZW, bed: Any) -> None:
        self.zw, self.bed = zw, bed
        self.shared = bed.base / f"t-{uuid.uuid4().hex[:8]}"  # the hosts' user writes here
        self.shared.mkdir()
        self.shared.chmod(0o777)
        self.record = self.shared / "record"

    def repo(self, name: str) -> Path:
        return Path(self.bed.hosts[f"host-{name}"].repo)

    def env(self, **extra: str) -> dict[str, str]:
        """What a spawn gives its agent: the fake's sample and a record the host can write."""
        return {"FAKE_REPLAY": self.zw.sample("codex_simple"), "FAKE_RECORD": str(self.record),
                **extra}  # fmt: skip

    def recorded(self, k: int) -> dict[str, Any]:
        got: dict[str, Any] = json.loads((self.record / f"argv{k}.json").read_text())
        got["env"] = json.loads((self.record / f"env{k}.json").read_text())
        return got

    def host_pids(self, name: str) -> list[int]:
        """The listener and every process below it (the sessions' sshd, what they run)."""
        top = psutil.Process(self.bed.hosts[f"host-{name}"].proc.pid)
        return [top.pid, *(p.pid for p in top.children(recursive=True))]

    def freeze(self, name: str) -> None:
        """The host stops answering: its sshd and every connection's are stopped (the turn's
        keeper and agent, started detached, run on)."""
        for pid in self.host_pids(name):
            os.kill(pid, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        for pid in self.host_pids(name):
            os.kill(pid, signal.SIGCONT)


def config(zw: ZW, bed: Any, **over: Any) -> str:
    hosts = {n: bed.config(f"host-{n}", cwd=str(bed.hosts[f"host-{n}"].repo), **over) for n in "ab"}
    return tomli_w.dumps({"codex": {"command": CODEX}, "hosts": hosts})


@pytest.fixture
def hz(zw: ZW, ssh_hosts: Any) -> Iterator[Hosts]:
    zw.state_dir.mkdir()
    zw.write_config(config(zw, ssh_hosts))
    yield Hosts(zw, ssh_hosts)


def on_host(user: str, sid: str) -> list[int]:
    """Processes of the hosts' ``user`` carrying session ``sid``'s marker (the turn's)."""
    uid = psutil.Process  # a name for mypy only
    del uid
    import pwd

    want = pwd.getpwnam(user).pw_uid
    found = []
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] is None or p.info["uids"].real != want:
                continue
            if p.environ().get("ZWARM_SESSION_ID") == sid:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def remote_dirs(hz: Hosts, name: str) -> list[str]:
    home = Path(hz.bed.hosts[f"host-{name}"].home)
    top = home / ".local/state/zwarm/remote"
    return sorted(os.listdir(top)) if top.is_dir() else []


def test_turns_run_on_their_hosts_and_every_command_works_from_here(hz: Hosts) -> None:
    zw = hz.zw
    a = zw.spawn("--host", "a", "fix the bug on a", env_extra=hz.env(ZW_TEST_SECRET="s3cr3t"))
    b = zw.spawn("--host", "b", "-C", str(hz.repo("b")), "and on b", env_extra=hz.env())
    assert zw.wait(a, b).returncode == 0, zw.run("show", a, b).stdout
    runs = [hz.recorded(k) for k in (1, 2)]
    by_host = {r["env"]["ZWARM_HOST"]: r for r in runs}
    assert set(by_host) == {"host-a", "host-b"}  # each turn ran on its own host
    assert by_host["host-a"]["cwd"] == str(hz.repo("a"))  # [hosts.a] cwd
    assert by_host["host-b"]["cwd"] == str(hz.repo("b"))  # -C on the host
    ran_a = by_host["host-a"]["env"]
    assert ran_a["ZWARM_SESSION_ID"] == a and ran_a["ZW_TEST_SECRET"] == "s3cr3t"
    assert ran_a["HOME"] == str(hz.bed.hosts["host-a"].home)  # the host's own, not ours
    assert (hz.record / "prompt1.bin").read_bytes() + (hz.record / "prompt2.bin").read_bytes()
    rows = {r["id"]: r for r in zw.json("ls")}
    assert (rows[a]["host"], rows[b]["host"]) == ("a", "b")
    assert rows[a]["status"] == rows[b]["status"] == "completed"
    table = zw.run("ls", check=True).stdout
    assert "HOST" in table.splitlines()[0]
    traj = zw.run("trajectory", a, check=True).stdout
    assert "Hi there! This is the fake server." in traj
    shown = zw.run("show", a, check=True).stdout
    assert "ssh host a" in shown
    assert zw.meta(a)["turns"][0]["exit_code"] == 0
    assert a not in remote_dirs(hz, "a") and b not in remote_dirs(hz, "b")  # nothing left there


def test_kill_stops_the_whole_tree_on_the_host(hz: Hosts) -> None:
    zw = hz.zw
    sid = zw.spawn("--host", "a", "run a tree", env_extra=hz.env(FAKE_CHILDREN="2"))
    # the agent's tree on the host: a shell, a shell below it, sleeps, one that left the group
    wait_until(lambda: len(on_host(hz.bed.user, sid)) >= 4, timeout=30)
    zw.run("kill", sid, check=True)
    assert zw.meta(sid)["status"] == "killed"
    wait_until(lambda: not on_host(hz.bed.user, sid), timeout=10)
    wait_until(lambda: zw.meta(sid)["turns"][0].get("ended_at") is not None, timeout=30)
    wait_until(lambda: sid not in remote_dirs(hz, "a"), timeout=30)  # nothing left there


def test_a_stopped_host_answers_ls_within_2s_then_the_turn_gets_its_real_outcome(
    hz: Hosts,
) -> None:
    zw = hz.zw
    hold = hz.shared / "go"
    sid = zw.spawn("--host", "a", "wait for it", env_extra=hz.env(FAKE_WAIT_FILE=str(hold)))
    wait_until(lambda: bool(on_host(hz.bed.user, sid)), timeout=30)
    rows = {r["id"]: r for r in zw.json("ls")}  # the host answers: the stream says it lives
    assert rows[sid]["shown_status"] is None and rows[sid]["launcher_state"]["detail"] == (
        "on host a"
    )
    hz.freeze("a")
    try:
        took: list[float] = []

        def unreachable() -> bool:
            t = time.monotonic()
            rows = {r["id"]: r for r in zw.json("ls")}
            took.append(time.monotonic() - t)
            assert rows[sid]["status"] == "running"
            return rows[sid]["shown_status"] == "unknown (host a unreachable)"

        wait_until(unreachable, timeout=20)
        assert max(took) < 2.0, took  # a listing never waits for a host that does not answer
        hold.touch()  # the agent ends on the host while nobody can reach it
        wait_until(lambda: not on_host(hz.bed.user, sid), timeout=30)
        assert zw.meta(sid)["status"] == "running"  # an unreachable host never ends a turn
    finally:
        hz.thaw("a")
    wait_status(zw, sid, "completed", timeout=60)
    assert "Hi there! This is the fake server." in zw.run("trajectory", sid, check=True).stdout
    assert zw.json("ls")[-1]["shown_status"] is None


def test_a_turn_the_host_lost_is_recorded_ssh_lost(hz: Hosts) -> None:
    zw = hz.zw
    sid = zw.spawn("--host", "a", "hang", env_extra=hz.env(FAKE_HANG="1"))
    wait_until(lambda: bool(on_host(hz.bed.user, sid)), timeout=30)
    # the host "reboots": the turn's keeper (first: else it records the agent's end) and
    # agent are gone, no end written
    keepers = [
        p for p in psutil.process_iter(["environ", "username"])
        if (p.info["environ"] or {}).get("ZWARM_SUPERVISOR_OF") == sid
        and p.info["username"] == hz.bed.user
    ]  # fmt: skip
    assert len(keepers) == 1
    keepers[0].kill()
    for pid in on_host(hz.bed.user, sid):
        os.kill(pid, signal.SIGKILL)
    wait_status(zw, sid, "failed", timeout=60)
    meta = zw.meta(sid)
    assert meta["turns"][0]["reason"] == "ssh_lost"
    assert sid not in remote_dirs(hz, "a")  # its partial output is here: nothing left there
    assert "host lost" in zw.run("ls", check=True).stdout


def test_inject_resumes_the_agents_own_session_on_the_host(hz: Hosts) -> None:
    zw = hz.zw
    env = hz.env()
    sid = zw.spawn("--host", "a", "--context", "native", "first", env_extra=env)
    wait_status(zw, sid, "completed")
    zw.run("inject", sid, "second", env_extra=env, check=True)
    wait_until(lambda: zw.meta(sid)["turns"][-1]["n"] == 2, timeout=30)
    wait_status(zw, sid, "completed")
    second = hz.recorded(2)
    thread = zw.meta(sid)["agent_session_id"]
    assert "resume" in second["argv"] and thread in second["argv"]
    assert second["env"]["ZWARM_HOST"] == "host-a"
    assert (hz.record / "prompt2.bin").read_bytes() == b"second"


def test_a_host_running_another_zwarm_version_is_refused_in_one_line(tmp_path: Path) -> None:
    """The host's side refuses a request from another version, before it runs anything."""
    sid = str(uuid.uuid4())
    request = json.dumps({"version": "0.0.0-other", "argv": ["true"], "cwd": "/", "env": {},
                          "prompt": ""})  # fmt: skip
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    r = subprocess.run(
        [sys.executable, "-m", "zwarm", "_launcher", "ssh", "start", sid, "1"],
        input=request.encode(), capture_output=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1
    said = r.stderr.decode().strip().splitlines()
    assert len(said) == 1 and "0.0.0-other" in said[0] and "same version" in said[0]
    assert not (tmp_path / "state/zwarm/remote" / sid).exists()


def test_the_real_codex_runs_on_a_host_against_the_fake_endpoint(zw: ZW, ssh_hosts: Any) -> None:
    """The pinned codex CLI, run on host-a by its user, reaches the fake Responses endpoint
    on loopback; a native follow-up resumes its own session there (its CODEX_HOME is the
    host's)."""
    from tests.fakes.llm import NO_PROXY, FakeResponsesServer, Reply, codex_setup, nested, text
    from tests.support.real import require

    exe = require("codex")
    hz = Hosts(zw, ssh_hosts)
    script = [Reply([text("HOST-ANSWER: done on the host.")]), Reply([text("SECOND-ON-HOST")])]
    with FakeResponsesServer(script) as srv:
        _, overrides = codex_setup(srv.base_url, zw.tmp / "unused")
        codex_home = hz.shared / "codex_home"  # the host's user writes it
        codex_home.mkdir()
        codex_home.chmod(0o777)
        env = {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "dummy", "NO_PROXY": NO_PROXY,
               "no_proxy": NO_PROXY}  # fmt: skip
        table = {"command": [exe], "env": env, "extra_args": ["--disable", "plugins"],
                 "config": nested(overrides)}  # fmt: skip
        zw.state_dir.mkdir()
        import tomllib

        hosts = tomllib.loads(config(zw, ssh_hosts))["hosts"]
        zw.write_config(tomli_w.dumps({"codex": table, "hosts": hosts}))
        sid = zw.spawn("--host", "a", "--context", "native", "say where you are")
        done = wait_status(zw, sid, "completed", "failed", timeout=120)
        assert done["status"] == "completed", zw.run("show", sid).stdout
        assert "HOST-ANSWER: done on the host." in zw.run("trajectory", sid, check=True).stdout
        assert any(p.name.startswith("sessions") for p in codex_home.iterdir())  # on the host
        zw.run("inject", sid, "and again", check=True)
        wait_until(lambda: len(zw.meta(sid)["turns"]) == 2, timeout=30)
        done = wait_status(zw, sid, "completed", "failed", timeout=120)
        assert done["status"] == "completed", zw.run("show", sid).stdout
        assert done["turns"][1]["context"] == "native"
        assert zw.meta(sid)["last_message"] == "SECOND-ON-HOST"
        assert len(srv.requests) == 2


def test_a_spawn_on_a_host_is_refused_in_one_line_before_anything_runs(hz: Hosts) -> None:
    zw = hz.zw
    refused = {
        ("--host", "c"): "unknown host 'c' (hosts: a, b)",
        ("--host", "a", "-C", "/no/such/dir"): "no directory '/no/such/dir' on host 'a'",
        ("--host", "a", "--branch", "x"): "--branch and --base need --worktree",
        ("--host", "a", "--sandbox", "bwrap"): "zwarm's sandbox does not run on a host yet",
        ("--host", "a", "--launcher", "local"): "--host runs its turns through the ssh launcher",
    }
    for args, said in refused.items():
        r = zw.run("spawn", *args, "task", env_extra=hz.env())
        assert r.returncode != 0 and r.stderr.startswith("Error: ") and said in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (zw.state_dir / "sessions").exists() or not os.listdir(zw.state_dir / "sessions")
    # the host's home, as its shell has it: "~" resolved there, recorded absolute
    sid = zw.spawn("--host", "b", "-C", "~", "at home", env_extra=hz.env())
    assert zw.meta(sid)["cwd"] == str(hz.bed.hosts["host-b"].home)
    wait_status(zw, sid, "completed")


def test_a_host_with_another_zwarm_version_is_refused_at_spawn(hz: Hosts) -> None:
    zw = hz.zw
    other = hz.shared / "zwarm-other"  # a zwarm of another version, on host-a
    other.write_text("#!/bin/sh\necho 'zwarm 0.0.0-other'\n")
    other.chmod(0o755)
    text = config(zw, hz.bed)
    zw.write_config(text + f'\n[hosts.old]\nssh = "host-a"\nssh_config = "{hz.bed.ssh_config}"\n'
                    f'zwarm = "{other}"\ncwd = "/"\n')  # fmt: skip
    r = zw.run("spawn", "--host", "old", "task", env_extra=hz.env())
    assert r.returncode != 0 and r.stderr.count("\n") == 1, r.stderr
    assert "runs zwarm 0.0.0-other" in r.stderr and "install the same version" in r.stderr


def test_a_turn_past_its_timeout_is_stopped_on_the_host(hz: Hosts) -> None:
    zw = hz.zw
    sid = zw.spawn("--host", "a", "--timeout", "3", "hang", env_extra=hz.env(FAKE_HANG="1",
                   FAKE_CHILDREN="1"))  # fmt: skip
    wait_until(lambda: bool(on_host(hz.bed.user, sid)), timeout=30)
    meta = wait_status(zw, sid, "failed", timeout=60)
    assert meta["turns"][0]["reason"] == "timeout"
    wait_until(lambda: not on_host(hz.bed.user, sid), timeout=15)
    assert sid not in remote_dirs(hz, "a")


def test_a_turn_whose_local_supervisor_died_is_reconciled_and_stopped_on_the_host(
    hz: Hosts,
) -> None:
    zw = hz.zw
    sid = zw.spawn("--host", "a", "hang", env_extra=hz.env(FAKE_HANG="1"))
    wait_until(lambda: bool(on_host(hz.bed.user, sid)), timeout=30)
    turn = wait_until(lambda: (lambda t: t if t.get("agent") else None)(zw.meta(sid)["turns"][0]))
    # this machine "restarts": the supervisor first (killed second, it could see its relay
    # end and record an agent error: it did under load), then the relay
    for ref in (turn["supervisor"], turn["agent"]):
        os.kill(ref["pid"], signal.SIGKILL)
    wait_until(lambda: zw.json("ls")[-1]["status"] == "failed", timeout=30)
    meta = zw.meta(sid)
    assert meta["turns"][0]["reason"] == "supervisor_lost"
    assert "its agent on host a stopped" in meta["turns"][0]["error"]
    wait_until(lambda: not on_host(hz.bed.user, sid), timeout=15)
    assert sid not in remote_dirs(hz, "a")
