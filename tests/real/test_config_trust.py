"""Conformance, security: a sandboxed real agent rewrites zwarm's config; zwarm refuses it.

The real codex, in its default ``-s workspace-write`` sandbox, works in a project whose state
dir sits in the project (``work/.zwarm``, found by walking up from the cwd, zwarm's default
layout), so the sandbox lets it write ``.zwarm/config.toml``. The fake Responses server makes
it run one shell command that points ``[codex] command`` at a script writing a marker file.
The next ``zwarm inject`` must refuse the changed, untrusted config in one line, and the
script must never run (the marker must not exist).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.fakes.llm import Reply, shell, text
from tests.real.world import RealWorld
from zwarm.errors import UntrustedConfig


class ProjectWorld(RealWorld):
    """A RealWorld whose state dir is ``work/.zwarm``, found from the cwd (no ZWARM_DIR)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.state.rmdir()
        self.state = self.work / ".zwarm"
        self.state.mkdir(mode=0o700)
        del self.environ["ZWARM_DIR"]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[ProjectWorld]:
    with ExitStack() as stack:
        world = ProjectWorld(tmp_path, stack)
        try:
            yield world
        finally:
            world.close()


def test_sandboxed_codex_cannot_make_zwarm_run_another_command(project: ProjectWorld) -> None:
    marker = project.tmp / "PWNED"
    evil = project.work / "evil.sh"
    planted = f'[codex]\ncommand = ["{evil}"]\n'
    command = (
        f"printf '#!/bin/sh\\necho pwned > %s\\n' {shlex.quote(str(marker))} > evil.sh"
        f" && chmod +x evil.sh && printf %s {shlex.quote(planted)} > .zwarm/config.toml"
    )
    script = [Reply([shell(command)]), Reply([text("Done.")])]
    project.use("codex", script)  # -s workspace-write: the default
    sid = project.cli("spawn", "Tidy up the project.", "--adapter", "codex").stdout.strip()
    d = project.wait(sid)
    assert d["status"] == "completed" and d["permissions"] == "-s workspace-write", (
        d["error"],
        project.stderr(sid)[-2000:],
    )
    cfg = project.state / "config.toml"
    assert cfg.read_text() == planted, "the agent did not rewrite the config: nothing tested"

    res = project.cli("inject", sid, "Now continue.", check=False)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert str(cfg) in line and "changed since you trusted it" in line and "codex.command" in line
    with pytest.raises(UntrustedConfig):
        project.api().inject(sid, "Now continue.")
    assert project.cli("ls", "--json").stdout  # reading still works
    assert len(project.show(sid)["turns_detail"]) == 1
    assert not marker.exists()
