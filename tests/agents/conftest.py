"""The conformance kit's ``agent`` fixture: a test that takes it runs once per agent name
(``tests.support.agents.agent_names``).
"""

from __future__ import annotations

import pytest

from tests.support.agents import agent_names, require_agent
from zwarm.agents.base import Agent


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "agent" in metafunc.fixturenames:
        metafunc.parametrize("agent", agent_names(), indirect=True)


@pytest.fixture
def agent(request: pytest.FixtureRequest) -> Agent:
    return require_agent(request.param)
