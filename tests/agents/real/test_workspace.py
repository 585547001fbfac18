"""Conformance, workspaces: the real agent CLI writes a file in a worktree zwarm made for it,
and ``zwarm diff`` shows exactly that change (the user's checkout untouched)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fakes.llm import Reply, text, write_file
from tests.support.real import RealWorld

IDENTITY = ["-c", "user.name=Test User", "-c", "user.email=test@example.com"]


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *IDENTITY, *args], cwd=repo, capture_output=True, text=True, check=True
    )
    return proc.stdout


def test_codex_writes_in_its_worktree_and_zwarm_diff_shows_it(real: RealWorld) -> None:
    repo = real.work
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# demo\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    status, head = _git(repo, "status", "--porcelain"), _git(repo, "rev-parse", "HEAD")
    script = [
        Reply([write_file("notes/hello.txt", "line one\nline two\n")]),
        Reply([text("Wrote it.")]),
    ]
    real.use("codex", script)
    sid = real.cli("spawn", "Write the file.", "--worktree", "--name", "wt").stdout.strip()
    d = real.wait(sid)
    assert (d["status"], d["last_message"]) == ("completed", "Wrote it.")
    tree = Path(d["workspace"]["tree"])
    assert d["cwd"] == str(tree) and d["branch"] == "zwarm/wt"
    assert (tree / "notes" / "hello.txt").read_text() == "line one\nline two\n"
    assert not (repo / "notes").exists()  # the agent wrote in its worktree only
    assert (_git(repo, "status", "--porcelain"), _git(repo, "rev-parse", "HEAD")) == (status, head)

    diff = real.cli_json("diff", "wt")
    assert diff["changes"] == {"files": 1, "added": 2, "removed": 0}
    (f,) = diff["files"]
    assert (f["path"], f["status"]) == ("notes/hello.txt", "added")
    assert f["hunks"][0]["lines"] == ["+line one", "+line two"]
    unified = real.cli("diff", "wt", "--turn", "1").stdout
    assert "+++ b/notes/hello.txt\n@@ -0,0 +1,2 @@\n+line one\n+line two\n" in unified
