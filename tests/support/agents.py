"""The conformance kit's agents: every installed agent, plus the plugins CI installs.

``agent_names``: every agent the registry loads (built-in and third-party plugins alike) and
``EXPECTED_PLUGINS``; set ``ZWARM_CONFORMANCE_AGENTS=name,...`` to check only some (e.g. your
own plugin). ``require_agent``: an expected agent that is not installed fails the test when
``CI=true`` and skips it (with the reason) otherwise.
"""

from __future__ import annotations

import os

import pytest

from zwarm import agents
from zwarm.agents.base import Agent

EXPECTED_PLUGINS = ("toy",)  # examples/toy-agent, installed by .ci/run


INSTALL_HINT = {"toy": "pip install -e examples/toy-agent"}


def agent_names() -> list[str]:
    selected = os.environ.get("ZWARM_CONFORMANCE_AGENTS")
    if selected:
        return [n.strip() for n in selected.split(",") if n.strip()]
    found = list(agents.names())
    return found + [n for n in EXPECTED_PLUGINS if n not in found]


def require_agent(name: str) -> Agent:
    """The installed agent ``name``; else fail under CI=true, skip otherwise."""
    if name in agents.names():
        return agents.get(name)
    why = agents.problems().get(name)
    hint = f" ({INSTALL_HINT[name]})" if name in INSTALL_HINT else ""
    reason = f"agent {name!r} " + (f"failed to load: {why}" if why else f"is not installed{hint}")
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)
