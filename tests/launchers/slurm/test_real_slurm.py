"""The real Codex CLI and Claude Code, run by zwarm as Slurm jobs against the fake LLM servers.

The world is tests/support/real.py's (pinned binaries, isolated homes, the fakes on this
machine) with ``[launcher] default = "slurm"``: each turn's supervisor and agent run in a
batch job on the node. A plain turn, then a native follow-up (``--context native``), which
resumes the agent's own session from its home (CODEX_HOME / CLAUDE_CONFIG_DIR, which on a
real cluster must be on the shared filesystem): a new job for the new turn.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import tomli_w

from tests.fakes.llm import Reply, text
from tests.support.real import ADAPTERS, RealWorld
from tests.support.slurm import final_state
from zwarm.trust_plan import trust_config


class SlurmWorld(RealWorld):
    """A ``RealWorld`` whose sessions' turns run as Slurm jobs."""

    def write_config(self) -> None:
        super().write_config()
        path = self.state / "config.toml"
        doc = tomllib.loads(path.read_text())
        doc["launcher"] = {"default": "slurm"}
        doc["slurm"] = {"env": ["NO_PROXY", "no_proxy", "COLUMNS", "NO_COLOR"]}
        path.write_text(tomli_w.dumps(doc))
        trust_config(path, environ=self.environ)


@pytest.fixture
def real(tmp_path: Path, slurm_cluster: None) -> Iterator[SlurmWorld]:
    with ExitStack() as stack:
        world = SlurmWorld(tmp_path, stack)
        try:
            yield world
        finally:
            world.close()


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_real_agent_turns_run_as_jobs(real: SlurmWorld, adapter: str) -> None:
    srv = real.use(adapter, [Reply([text("Hello from a node!")]), Reply([text("Again!")])])
    sid = real.spawn("Say hello.", adapter)
    d = real.wait(sid)
    assert d["status"] == "completed", d["error"]
    assert d["last_message"] == "Hello from a node!"
    (t,) = d["turns_detail"]
    assert t["launcher"] == "slurm" and t["exit_code"] == 0
    assert final_state(t["handle"]["job"]) == "COMPLETED"
    assert srv.requests[0].contains("Say hello.")

    real.api().inject(sid, "Say it again.", context="native")
    d = real.wait(sid)
    assert d["status"] == "completed", d["error"]
    first, second = d["turns_detail"]
    assert (second["context"], second["final_message"]) == ("native", "Again!")
    assert second["handle"]["job"] != first["handle"]["job"]  # a job of its own
    assert second["agent_session_id"] == first["agent_session_id"]  # resumed, not restarted
    assert srv.requests[-1].contains("Say it again.")
