"""Regenerate the example sessions in ``.zwarm.example/`` from the real agent CLIs.

Owns ``.zwarm.example/sessions/`` and ``.zwarm.example/names/`` (never ``config.toml`` or
``README.md``, which are written by hand). It runs the pinned ``codex`` and ``claude``
(``.ci/install-agents``) through zwarm itself against the fake LLM servers of
``tests/fakes/llm.py``, in a temporary world (``tests/support/real.py``), then copies that
world's sessions into ``.zwarm.example/`` with the temporary paths replaced by
``/home/you/project``. So the example is real zwarm output of the real CLIs, not hand-made.
``tests/config/test_example_dir.py`` checks that zwarm still reads it. Run::

    .venv/bin/python tests/make_example.py
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.llm import Reply, Usage, reasoning, shell, text, write_file  # noqa: E402
from tests.support.real import RealWorld, shell_args  # noqa: E402

EXAMPLE = ROOT / ".zwarm.example"
PROJECT = "/home/you/project"


def codex_session(world: RealWorld) -> None:
    """A codex session: reasoning, a shell command, a file write; then a summary follow-up."""
    work = world.work
    world.use("codex", [
        Reply([reasoning("**Looking at the layout first**"), shell("ls -1")], Usage(1200, 0, 40)),
        Reply([write_file(str(work / "NOTES.md"), "# Notes\n\nA small demo project.\n")],
              Usage(1500, 1024, 60)),
        Reply([text("Wrote NOTES.md with a one-line summary of the project.")],
              Usage(1700, 1280, 25)),
        Reply([shell("wc -l NOTES.md")], Usage(900, 0, 20)),
        Reply([text("NOTES.md has 3 lines; nothing else changed.")], Usage(1000, 896, 15)),
    ], **shell_args("codex"))  # fmt: skip
    sid = (
        world.api()
        .spawn("Summarise this project in NOTES.md", adapter="codex", cwd=work, name="notes")
        .id
    )
    world.wait(sid)
    world.api().inject(sid, "How long is NOTES.md now?", context="summary")
    world.wait(sid)


def claude_session(world: RealWorld) -> None:
    """A claude session: a Bash tool call and an answer; then a native (--resume) follow-up."""
    world.use("claude", [
        Reply([text("Checking the tests."), shell("echo 3 passed")], Usage(2400, 0, 50)),
        Reply([text("All 3 tests pass.")], Usage(2600, 2048, 12)),
        Reply([text("No: the suite has no slow tests.")], Usage(2700, 2560, 10)),
    ], **shell_args("claude"))  # fmt: skip
    sid = (
        world.api()
        .spawn(
            "Run the tests and tell me if they pass", adapter="claude", cwd=world.work, name="tests"
        )
        .id
    )
    world.wait(sid)
    world.api().inject(sid, "Are any of them slow?", context="native")
    world.wait(sid)


def scrub(path: Path, tmp: Path) -> None:
    """Replace the temporary world's paths by PROJECT in a copied text file (also in the
    escaped form JSON may use, and in claude's dashed project-directory form)."""
    raw = path.read_bytes()
    for old in (str(tmp / "work"), str(tmp)):
        for form, new in (
            (old, PROJECT),
            (json.dumps(old)[1:-1], PROJECT),
            (re.sub("[^A-Za-z0-9]", "-", old), PROJECT.replace("/", "-")),
        ):
            raw = raw.replace(form.encode(), new.encode())
    path.write_bytes(raw)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="zwarm-example-") as t, ExitStack() as stack:
        tmp = Path(t).resolve()
        world = RealWorld(tmp, stack)
        try:
            codex_session(world)
            claude_session(world)
        finally:
            world.close()
        for sub in ("sessions", "names"):
            shutil.rmtree(EXAMPLE / sub, ignore_errors=True)
            shutil.copytree(
                world.state / sub, EXAMPLE / sub, ignore=shutil.ignore_patterns(".lock")
            )
        for f in EXAMPLE.rglob("*"):
            if f.is_file() and f.parent != EXAMPLE:
                scrub(f, tmp)
                f.chmod(0o644)  # git keeps only the x bit; zwarm itself writes 0600
    print(f"wrote {EXAMPLE / 'sessions'} and {EXAMPLE / 'names'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
