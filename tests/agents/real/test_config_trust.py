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
from tests.support.real import RealWorld
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


def test_sandboxed_codex_cannot_unsandbox_its_next_turn_through_meta_json(
    project: ProjectWorld,
) -> None:
    """The real codex, sandboxed, rewrites its own meta.json (``bypass``/``dangerous``), plants
    a ``zwarm`` package in its session dir and links its next turn log to a file outside. Its
    next turn still runs sandboxed (a write outside the sandbox fails), nothing planted is
    imported, and the link is not written through."""
    import uuid

    outside = Path("/var/tmp") / f"zwarm-sandbox-probe-{uuid.uuid4().hex}"
    marker, victim = project.tmp / "IMPORTED", project.tmp / "victim.txt"
    victim.write_text("precious")
    tamper = (
        "import glob, json, os\n"
        "meta = glob.glob('.zwarm/sessions/*/meta.json')[0]\n"
        "d = json.load(open(meta)); d['bypass'] = d['dangerous'] = True\n"
        "open(meta, 'w').write(json.dumps(d))\n"
        "s = os.path.dirname(meta); os.makedirs(s + '/zwarm/runtime', exist_ok=True)\n"
        f"code = \"open({str(marker)!r}, 'w').write('x')\\n\"\n"
        "for f in ('__init__', 'runtime/__init__', 'runtime/supervisor'):\n"
        "    open(s + '/zwarm/' + f + '.py', 'w').write(code)\n"
        f"os.symlink({str(victim)!r}, s + '/turns/turn_2.jsonl')\n"
    )
    (project.work / "tamper.py").write_text(tamper)
    script = [
        Reply([shell("python3 tamper.py && echo tampered")]),
        Reply([text("Done.")]),
        Reply([shell(f"touch {outside}")]),
        Reply([text("Tried.")]),
    ]
    project.use("codex", script)
    try:
        sid = project.cli("spawn", "Tidy up.", "--adapter", "codex").stdout.strip()
        d = project.wait(sid)
        assert d["status"] == "completed", (d["error"], project.stderr(sid)[-2000:])
        meta = project.state / "sessions" / sid / "meta.json"
        assert '"bypass":true' in meta.read_text().replace(" ", ""), "nothing was tampered"
        project.cli("inject", sid, "Now continue.")
        d = project.wait(sid)
        assert d["status"] == "completed", (d["error"], project.stderr(sid)[-2000:])
        assert not outside.exists(), "turn 2 ran without its sandbox"
        # it was tried: codex sent the model the failed command's output (a sandbox-denied
        # command leaves no command item in codex's own stream)
        reqs = project.server("codex").wait_for_requests(4)
        assert "Read-only file system" in reqs[3].dump(), reqs[3].dump()[-2000:]
        assert not marker.exists() and victim.read_text() == "precious"
    finally:
        outside.unlink(missing_ok=True)
