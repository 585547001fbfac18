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


def test_a_best_of_set_across_the_three_real_clis_is_decided_by_zwarms_checks(
    real: RealWorld,
) -> None:
    """codex, claude and gemini, one attempt each, one worktree each from one base: the
    check zwarm runs decides (claude's answer claims success, its file says otherwise), the
    smaller of the two passing ones is picked and merged."""
    from tests.fakes.llm import shell
    from tests.support.real import shell_args

    repo = real.work
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# demo\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    real.use("codex", [Reply([write_file("done.txt", "ok\n")]), Reply([text("Done.")])])
    claude = [Reply([shell("echo broken > done.txt")]), Reply([text("All checks pass.")])]
    real.use("claude", claude, **shell_args("claude"))
    gemini = [Reply([write_file("done.txt", "ok\nand more\n")]), Reply([text("Done.")])]
    real.use("gemini", gemini)
    real.tables["checks"] = {"unsandboxed": True}
    real.write_config()
    out = real.cli("spawn", "Write done.txt.", "--best-of", "3", "--agents",
                   "codex,claude,gemini", "--check", "grep -qx ok done.txt")  # fmt: skip
    set_id = out.stdout.strip()
    rows = [r for r in real.cli_json("ls") if r["set"] == set_id]
    for r in rows:
        real.wait(r["id"])
    v = real.cli_json("compare", set_id)
    assert [a["adapter"] for a in v["attempts"]] == ["codex", "gemini", "claude"], v
    assert [a["passed"] for a in v["attempts"]] == [True, True, False]
    assert v["attempts"][2]["claim"] == "All checks pass."
    assert real.cli_json("pick", set_id)["picked"] == 1
    assert (repo / "done.txt").read_text() == "ok\n"
