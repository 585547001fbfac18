"""The hosts sessions may run on (``[hosts.NAME]``): ``zwarm hosts`` and ``zwarm hosts check``.

Owns reading the configured hosts for these two reports (as trusted: an untrusted host is
refused in one line, ``UntrustedConfig``) and which programs a check looks for on a host (each
installed agent's default command). What a host answers, and how it is asked (one shared
connection per host, a timeout on every step), is the hosts module's
(``zwarm.launchers.ssh.hosts``). Must stay true: nothing here waits on a host longer than
its timeout; nothing is written, started or signalled on this machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zwarm.api import Zwarm


def listing(api: Zwarm, timeout: float | None = None) -> list[dict[str, Any]]:
    """Every configured host with whether it answers, its zwarm, one command's latency."""
    from zwarm.launchers.ssh import hosts

    found = hosts.hosts(api.config)
    return hosts.statuses(found, hosts.control_dir(), timeout or hosts.CHECK_TIMEOUT)


def check(api: Zwarm, name: str, timeout: float | None = None) -> dict[str, Any]:
    """Host ``name`` checked: it answers, runs this zwarm, has git, its directory and which
    agent CLIs (``InvalidInput`` for a host that is not configured)."""
    from zwarm import agents
    from zwarm.launchers.ssh import hosts

    h = hosts.host(api.config, name)
    programs = []
    for agent in agents.names():
        command = agents.get(agent).config_schema()["command"].default
        if isinstance(command, list) and command and isinstance(command[0], str):
            programs.append(command[0])
    return hosts.check(h, hosts.control_dir(), programs, timeout or hosts.CHECK_TIMEOUT)
