"""``zwarm hosts`` and ``zwarm hosts check`` with no host configured: they say so (a table
line, ``[]`` as JSON) and a host that is not configured is one error line, exit 1. (The
reports of real hosts are in tests/launchers/ssh/test_hosts.py, on the two-sshd test bed.)"""

from __future__ import annotations

import json

from tests.support import ZW


def test_no_hosts(zw: ZW) -> None:
    zw.state_dir.mkdir()
    res = zw.run("hosts", check=True)
    assert res.stdout == "no hosts configured ([hosts.NAME] in config.toml; see docs/hosts.md)\n"
    assert json.loads(zw.run("hosts", "--json", check=True).stdout) == []


def test_an_unknown_host_is_one_line(zw: ZW) -> None:
    zw.state_dir.mkdir()
    res = zw.run("hosts", "check", "box")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr == (
        "Error: unknown host 'box' (hosts: none configured: [hosts.NAME] in config.toml)\n"
    )
    res = zw.run("hosts", "--timeout", "0", "--json")
    assert res.returncode == 2 and "--timeout" in res.stderr  # click's own usage error
