"""One shared connection per ssh host, on two real sshd (``tests.support.hosts``: tier
``hosts``): commands run there with their exit codes, output streams line by line, every
command after the first rides the same login, a host that does not answer (a port that never
speaks SSH, a host that hangs) costs at most the timeout, a remote zwarm of another version is
refused in one line, and nothing a caller passes becomes an ssh option or a shell word.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until
from tests.support.hosts import HostBed, elapsed, silent_port
from zwarm import __version__
from zwarm.errors import ConfigError, ZwarmError
from zwarm.launchers.ssh.hosts import (
    Connection,
    Host,
    HostUnreachable,
    check,
    hosts,
    remote_version,
    statuses,
)

SLACK = 5.0  # seconds a slow machine may add to a timeout before the test calls it a hang


def conn(bed: HostBed, name: str, **over: Any) -> Connection:
    (h,) = hosts({name.replace("host-", ""): bed.config(name, **over)}).values()
    return Connection(h, bed.control)


def test_commands_run_on_each_host_with_their_exit_codes(ssh_hosts: HostBed) -> None:
    for name in ("host-a", "host-b"):
        c = conn(ssh_hosts, name, cwd=str(ssh_hosts.hosts[name].repo))
        done = c.run(
            ["sh", "-c", 'echo "$ZWARM_HOST $(pwd) $(id -u)"; exit 7'], timeout=60, cwd=c.host.cwd
        )
        assert done.returncode == 7
        where, cwd, uid = done.stdout.decode().split()
        assert (where, cwd) == (name, str(ssh_hosts.hosts[name].repo))
        assert uid != "0"  # a user who is not root: signals reach what it runs
        assert c.run(["cat"], input=b"to stdin\n", timeout=60).stdout == b"to stdin\n"
        git = c.run(["git", "log", "--format=%s"], timeout=60, cwd=c.host.cwd)
        assert (git.returncode, git.stdout) == (0, b"init\n")  # its own repository, its user's


def test_words_are_never_shell_or_ssh_syntax(ssh_hosts: HostBed, tmp_path: Path) -> None:
    c = conn(ssh_hosts, "host-a")
    words = ["$(id)", "`id`", "a b", "x;touch /tmp/zwarm-pwned-ssh", "'", '"', "\\", "*", "~", "-n"]
    done = c.run(["printf", "%s\\n", *words], timeout=60)
    assert done.stdout.decode().splitlines() == words
    assert not Path("/tmp/zwarm-pwned-ssh").exists()
    # a destination that is an ssh option never reaches ssh, however the host was given
    with pytest.raises(ConfigError, match="must be an ssh destination"):
        hosts({"a": {"ssh": f"-oProxyCommand=touch {tmp_path}/pwned"}})
    assert not (tmp_path / "pwned").exists()


def test_output_streams_line_by_line(ssh_hosts: HostBed) -> None:
    """A line reaches this side while the remote command still runs (it waits for a file
    that this test makes only once it has read the first line)."""
    c = conn(ssh_hosts, "host-b")
    gate = f"{ssh_hosts.hosts['host-b'].home}/gate-{uuid.uuid4().hex}"
    script = f"echo one; while [ ! -e {gate} ]; do sleep 0.05; done; echo two; rm -f {gate}; exit 3"
    proc = subprocess.Popen(
        c.argv(["sh", "-c", script]), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"one\n"
        assert proc.poll() is None  # still running: the line came before the end
        c.run(["touch", gate], timeout=60)
        assert proc.stdout.readline() == b"two\n"
        assert proc.wait(60) == 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_commands_share_one_connection(ssh_hosts: HostBed) -> None:
    """One login per host however many commands: the first opens the shared connection, the
    others ride it (the host's log counts the logins)."""
    c = conn(ssh_hosts, "host-a")
    c.drop()
    assert not c.alive()
    before = ssh_hosts.logins("host-a")
    assert c.up(60) and c.alive()
    for _ in range(5):
        assert c.run(["true"], timeout=60).returncode == 0
    other = conn(ssh_hosts, "host-a")  # another Connection (another zwarm process): the same
    assert other.run(["true"], timeout=60).returncode == 0
    assert ssh_hosts.logins("host-a") == before + 1
    c.drop()
    wait_until(lambda: not c.alive(), timeout=30)


def test_a_port_that_never_speaks_ssh_is_unreachable_within_the_timeout(
    ssh_hosts: HostBed,
) -> None:
    sock, port = silent_port()
    try:
        h = Host("silent", "127.0.0.1", port=port, ssh_config=str(ssh_hosts.ssh_config))
        c = Connection(h, ssh_hosts.control, connect_timeout=30)
        out, took = elapsed(c.run, ["true"], timeout=2)
        assert isinstance(out, HostUnreachable), out
        assert str(out) == "host 'silent' unreachable: no answer within 2 s"
        assert took < 2 + SLACK
        out, took = elapsed(c.up, 2)
        assert out is False and took < 5 + 2 + SLACK  # its check of the master, then the try
        # ssh's own ConnectTimeout bounds it too, even under a longer timeout
        c = Connection(h, ssh_hosts.control, connect_timeout=1)
        out, took = elapsed(c.run, ["true"], timeout=120)
        assert isinstance(out, HostUnreachable) and took < 1 + SLACK * 2, (out, took)
    finally:
        sock.close()


def test_a_host_that_hangs_is_unreachable_within_the_timeout_then_comes_back(
    ssh_hosts: HostBed,
) -> None:
    """The shared connection is open, then the whole host stops (sshd and its sessions):
    a command is refused within its timeout, never a hang; so is a new connection; once the
    host answers again, so does the next command."""
    host_b = ssh_hosts.hosts["host-b"]
    c = conn(ssh_hosts, "host-b")
    assert c.up(60)
    host_b.pause()
    try:
        out, took = elapsed(c.run, ["true"], timeout=2)
        assert isinstance(out, HostUnreachable) and took < 2 + SLACK, (out, took)
        assert str(out) == "host 'b' unreachable: no answer within 2 s"
        out, took = elapsed(c.run, ["true"], timeout=2)  # a new connection: no answer either
        assert isinstance(out, HostUnreachable) and took < 2 + SLACK, (out, took)
    finally:
        host_b.resume()
    assert c.run(["echo", "back"], timeout=60).stdout == b"back\n"


def test_a_stopped_host_is_unreachable_at_once(ssh_hosts: HostBed) -> None:
    sock, port = silent_port()
    sock.close()  # nothing listens there now: connection refused
    c = Connection(Host("gone", "127.0.0.1", port=port), ssh_hosts.control)
    out, took = elapsed(c.run, ["true"], timeout=30)
    assert isinstance(out, HostUnreachable) and took < SLACK, (out, took)
    assert str(out).startswith("host 'gone' unreachable: ") and "refused" in str(out)
    assert "\n" not in str(out)


def test_the_remote_zwarm_must_be_this_version(ssh_hosts: HostBed) -> None:
    c = conn(ssh_hosts, "host-a")
    assert remote_version(c) == __version__
    old = ssh_hosts.base / f"old-{uuid.uuid4().hex}"
    old.write_text("#!/bin/sh\necho 'zwarm 0.0.1'\n")
    old.chmod(0o755)
    with pytest.raises(ZwarmError) as e:
        remote_version(conn(ssh_hosts, "host-a", zwarm=str(old)))
    assert str(e.value) == (
        f"host 'a' runs zwarm 0.0.1, this is zwarm {__version__}: install the same version there"
    )
    other = ssh_hosts.base / f"other-{uuid.uuid4().hex}"
    other.write_text("#!/bin/sh\necho 'hello 1.0'\n")
    other.chmod(0o755)
    with pytest.raises(ZwarmError) as e:
        remote_version(conn(ssh_hosts, "host-a", zwarm=str(other)))
    assert str(e.value) == f"host 'a': {other} is not zwarm (it says 'hello 1.0')"
    with pytest.raises(ZwarmError, match=r"^host 'a': ~/no/zwarm --version failed: .*not found"):
        remote_version(conn(ssh_hosts, "host-a", zwarm="~/no/zwarm"))
    # a ~/ path is the remote home's: the remote shell expands it
    home = ssh_hosts.hosts["host-a"].home
    link = home / "zw"
    link.write_text('#!/bin/sh\nexec zwarm "$@"\n')
    link.chmod(0o755)
    assert remote_version(conn(ssh_hosts, "host-a", zwarm="~/zw")) == __version__


def test_latency_cold_and_warm(ssh_hosts: HostBed, capsys: pytest.CaptureFixture[str]) -> None:
    """What a command costs on a fresh connection and on the shared one (printed for the
    record; only the order is asserted: a figure on a loaded machine is no contract)."""
    c = conn(ssh_hosts, "host-b")
    cold, warm = [], []
    for _ in range(3):
        c.drop()
        wait_until(lambda: not c.alive(), timeout=30)
        t = time.monotonic()
        c.run(["true"], timeout=60)
        cold.append(time.monotonic() - t)
        for _ in range(5):
            t = time.monotonic()
            c.run(["true"], timeout=60)
            warm.append(time.monotonic() - t)
    cold_ms, warm_ms = sorted(cold)[1] * 1000, sorted(warm)[len(warm) // 2] * 1000
    with capsys.disabled():
        print(
            f"\nssh true: cold {cold_ms:.0f} ms, warm {warm_ms:.1f} ms ({cold_ms / warm_ms:.0f}x)"
        )
    assert min(cold) > sorted(warm)[0]


def test_status_of_each_host_never_waits_past_its_timeout(ssh_hosts: HostBed) -> None:
    """``zwarm hosts``' rows: both hosts answer with this zwarm and a latency; a host that
    hangs and one that refuses say so, each within the timeout, asked at once."""
    sock, port = silent_port()
    gone, gone_port = silent_port()
    gone.close()
    try:
        found = {
            "a": hosts({"a": ssh_hosts.config("host-a")})["a"],
            "b": hosts({"b": ssh_hosts.config("host-b")})["b"],
            "hung": Host("hung", "127.0.0.1", port=port),
            "gone": Host("gone", "127.0.0.1", port=gone_port),
        }
        rows, took = elapsed(statuses, found, ssh_hosts.control, 10)
        assert took < 10 * 2 + SLACK  # the hung host's timeout once, not once per host
        by = {r["name"]: r for r in rows}
        assert [r["name"] for r in rows] == ["a", "b", "gone", "hung"]
        for name in ("a", "b"):
            assert by[name]["reachable"] and by[name]["version"] == __version__, by[name]
            assert by[name]["latency_ms"] > 0 and by[name]["error"] is None
        assert by["hung"]["reachable"] is False and by["hung"]["version"] is None
        # whichever gives up first: ssh's ConnectTimeout or the command's timeout
        assert by["hung"]["error"].startswith("host 'hung' unreachable: ")
        assert by["gone"]["reachable"] is False and "refused" in by["gone"]["error"]
    finally:
        sock.close()
    old = ssh_hosts.base / f"old-{uuid.uuid4().hex}"
    old.write_text("#!/bin/sh\necho 'zwarm 0.0.1'\n")
    old.chmod(0o755)
    (row,) = statuses(
        {"a": Host("a", "host-a", ssh_config=str(ssh_hosts.ssh_config), zwarm=str(old))},
        ssh_hosts.control,
    )
    assert row["reachable"] is True and row["version"] is None
    assert "runs zwarm 0.0.1" in row["error"]


def test_check_says_what_a_host_has(ssh_hosts: HostBed) -> None:
    repo = str(ssh_hosts.hosts["host-b"].repo)
    (h,) = hosts({"b": ssh_hosts.config("host-b", cwd=repo)}).values()
    report = check(h, ssh_hosts.control, ["sh", "no-such-agent-cli", "bad name;x"], timeout=30)
    steps = {s["what"]: s for s in report["steps"]}
    assert report["ok"] is True and list(steps) == [
        "connect",
        "zwarm",
        "git",
        "cwd",
        "sh",
        "no-such-agent-cli",
    ]
    assert steps["zwarm"]["detail"] == f"zwarm: zwarm {__version__}"
    assert steps["git"]["detail"].startswith("git version")
    assert steps["cwd"] == {"what": "cwd", "ok": True, "detail": repo, "needed": True}
    assert steps["sh"]["ok"] and steps["sh"]["detail"].endswith("/sh")
    assert steps["no-such-agent-cli"] == {
        "what": "no-such-agent-cli", "ok": False, "detail": "not found on the PATH", "needed": False
    }  # fmt: skip
    (h,) = hosts({"b": ssh_hosts.config("host-b", cwd="/no/such/dir")}).values()
    report = check(h, ssh_hosts.control, [], timeout=30)
    assert report["ok"] is False
    assert report["steps"][-1] == {
        "what": "cwd", "ok": False, "detail": "/no/such/dir: no such directory", "needed": True
    }  # fmt: skip
    sock, port = silent_port()
    try:
        report, took = elapsed(
            check, Host("hung", "127.0.0.1", port=port), ssh_hosts.control, ["sh"], 2
        )
    finally:
        sock.close()
    assert took < 2 + SLACK and report["ok"] is False
    (step,) = report["steps"]  # whichever gives up first: ssh's ConnectTimeout or the timeout
    assert step["what"] == "connect" and step["ok"] is False
    assert step["detail"].startswith("host 'hung' unreachable: ")
