"""``zwarm hosts`` and ``zwarm hosts check`` through the installed CLI, on the two hosts of the
test bed: a trusted config names them (and one that refuses connections); the listing shows
each reachable or not with its zwarm; a check says what the host has; an untrusted host is
refused in one line. It needs the ``[hosts]`` family in the config's schema, which the ssh
launcher declares (``Launcher.families``): until a launcher does, it is skipped, saying so."""

from __future__ import annotations

import json

import pytest

from tests.support import ZW
from tests.support.hosts import HostBed, silent_port
from zwarm import __version__, config


@pytest.fixture
def declared() -> None:
    if "hosts" not in config.schema():
        pytest.skip("no launcher declares [hosts.NAME] yet (the ssh launcher does)")


def test_hosts_and_check_through_the_cli(zw: ZW, ssh_hosts: HostBed, declared: None) -> None:
    sock, port = silent_port()
    sock.close()  # nothing listens there: refused
    zw.state_dir.mkdir()
    cfg, repo = ssh_hosts.ssh_config, ssh_hosts.hosts["host-b"].repo
    text = (
        f'[hosts.a]\nssh = "host-a"\nssh_config = "{cfg}"\n'
        f'[hosts.b]\nssh = "host-b"\nssh_config = "{cfg}"\ncwd = "{repo}"\n'
        f'[hosts.gone]\nssh = "127.0.0.1"\nport = {port}\n'
    )
    zw.write_config(text)
    rows = json.loads(zw.run("hosts", "--json", check=True).stdout)
    assert [(r["name"], r["reachable"], r["version"]) for r in rows] == [
        ("a", True, __version__),
        ("b", True, __version__),
        ("gone", False, None),
    ]
    table = zw.run("hosts", check=True)
    assert table.stdout.splitlines()[0].split() == ["HOST", "SSH", "STATUS", "ZWARM", "LATENCY"]
    assert table.stderr.startswith("warning: host 'gone' unreachable: ")
    res = zw.run("hosts", "check", "b", check=True)
    assert [ln.split()[:2] for ln in res.stdout.splitlines()[:4]] == [
        ["connect", "ok"],
        ["zwarm", "ok"],
        ["git", "ok"],
        ["cwd", "ok"],
    ]
    res = zw.run("hosts", "check", "gone")
    assert res.returncode == 1 and res.stderr.startswith("Error: host 'gone' unreachable: ")
    assert res.stderr.count("\n") == 1
    # a host added by someone else (an agent writing .zwarm/): refused until trusted
    (zw.state_dir / "config.toml").write_text(text + '[hosts.evil]\nssh = "x@example.org"\n')
    res = zw.run("hosts", "check", "evil")
    assert res.returncode == 1 and "hosts.evil" in res.stderr and "trust" in res.stderr
    assert res.stderr.count("\n") == 1
