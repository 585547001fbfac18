"""Exact per-turn diffs: snapshots before and after every turn, without touching the user's
index, HEAD, branches or stash; untracked files count, ignored ones do not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.support import ZW, wait_until
from tests.support.workspace import Repo, agent, spawn

# one turn that adds (untracked), deletes, renames, changes a binary, adds a symlink, a file
# with spaces, a file with a quote and a tab in its name, and an ignored file
EVERYTHING = (
    "echo new > untracked.txt; rm README.md; mv src/app.py src/main.py; "
    "printf '\\000\\001\\002' > blob.bin; ln -s src/main.py link; "
    "echo spaced > 'my file.txt'; echo odd > \"$(printf 'q\"\\tx.txt')\"; echo log > debug.log"
)


def _user_state(repo: Repo) -> dict[str, object]:
    s = repo.state()
    del s["status"]  # the agent's own edits change it; everything else must not move
    return s


def test_a_turn_diff_shows_every_kind_of_change_and_nothing_of_the_users(
    zw: ZW, repo: Repo
) -> None:
    repo.write("blob.bin", b"\x00\x00")
    repo.commit("binary")
    repo.write("src/app.py", "def main():\n    return 2\n")
    repo.git("stash", "push", "-q")  # the user's stash
    repo.write("staged.txt", "mine\n")
    repo.git("add", "staged.txt")  # and a staged change of the user's
    before = _user_state(repo)
    sid = spawn(zw, repo, shell=EVERYTHING)
    assert _user_state(repo) == before  # index bytes (and mtime), HEAD, refs, stash
    assert zw.json("show", sid)["status"] == "completed"
    d = zw.json("diff", sid, "--turn", "1")
    got = {
        f["path"]: (f["status"], f["old_path"], f["added"], f["removed"], f["binary"])
        for f in d["files"]
    }
    assert got == {
        "README.md": ("deleted", None, 0, 1, False),
        "blob.bin": ("modified", None, 0, 0, True),
        "link": ("added", None, 1, 0, False),
        "my file.txt": ("added", None, 1, 0, False),
        'q"\tx.txt': ("added", None, 1, 0, False),
        "src/main.py": ("renamed", "src/app.py", 0, 0, False),
        "untracked.txt": ("added", None, 1, 0, False),
    }
    assert "debug.log" not in got and "staged.txt" not in got  # ignored; there before
    link = next(f for f in d["files"] if f["path"] == "link")
    assert link["hunks"][0]["lines"][0] == "+src/main.py"
    spaced = next(f for f in d["files"] if f["path"] == "my file.txt")
    assert spaced["hunks"] == [
        {
            "header": "@@ -0,0 +1 @@",
            "old_start": 0,
            "old_lines": 0,
            "new_start": 1,
            "new_lines": 1,
            "lines": ["+spaced"],
        }
    ]
    assert d["changes"] == {"files": 7, "added": 4, "removed": 1} and not d["live"]
    turn = zw.json("show", sid)["turns_detail"][0]
    assert turn["changes"] == d["changes"]
    assert turn["before"] == d["from"] and turn["after"] == d["to"]
    refs = repo.zwarm_refs()
    assert refs == [f"refs/zwarm/{sid}/1/after", f"refs/zwarm/{sid}/1/before"]


def test_unified_diff_stat_and_turn_by_turn(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, shell="echo one > notes.txt")
    zw.run(
        "inject", sid, "more", env_extra=agent("echo two >> notes.txt; rm .gitignore"), check=True
    )
    wait_until(lambda: zw.json("show", sid)["status"] != "running")
    whole = zw.run("diff", sid, check=True).stdout
    assert "+one\n+two\n" in whole and "deleted file mode" in whole
    t2 = zw.run("diff", sid, "--turn", "2", check=True).stdout
    assert "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1,2 @@\n one\n+two\n" in t2
    assert "\x1b[" not in t2  # no colour when not a terminal
    stat = zw.run("diff", sid, "--stat", check=True).stdout
    assert "notes.txt  | 2 ++" in stat and "2 files changed" in stat
    js = zw.json("diff", sid, "--stat")
    assert "hunks" not in js["files"][0] and js["changes"]["files"] == 2
    turns = zw.json("show", sid)["turns_detail"]
    assert [t["changes"] for t in turns] == [
        {"files": 1, "added": 1, "removed": 0},
        {"files": 2, "added": 1, "removed": 3},
    ]
    row = zw.json("ls")[0]
    assert row["changes"] == {"files": 2, "added": 2, "removed": 3}
    assert row["turn_changes"] == [t["changes"] for t in turns]
    res = zw.run("diff", sid, "--turn", "3")
    assert res.returncode == 1 and res.stderr.strip().endswith("has no turn 3 (it has 1..2)")
    assert len(repo.zwarm_refs()) == 4
    zw.run("rm", sid, check=True)  # a shared session: its snapshot refs go, nothing else
    assert repo.zwarm_refs() == [] and (repo.path / "notes.txt").exists()


def test_the_diff_of_a_running_turn_is_taken_live(zw: ZW, repo: Repo) -> None:
    hold = zw.tmp / "hold"
    hold.touch()
    sid = zw.spawn(
        "t", "-C", str(repo.path), env_extra=zw.gated(hold, **agent("echo late > late.txt"))
    )
    wait_until(lambda: zw.json("show", sid)["turns_detail"][0]["before"])  # the agent starts
    repo.write("during.txt", "x\n")  # written while the turn runs
    d = zw.json("diff", sid)
    assert d["live"] and [f["path"] for f in d["files"]] == ["during.txt"]
    hold.unlink()
    zw.wait(sid)
    d = zw.json("diff", sid)
    assert not d["live"] and [f["path"] for f in d["files"]] == ["during.txt", "late.txt"]


def test_shared_sessions_running_at_once_are_named_in_the_diff(zw: ZW, repo: Repo) -> None:
    go = zw.tmp / "go"
    sids = [
        zw.spawn(
            f"t{i}",
            "-C",
            str(repo.path),
            "--name",
            f"s{i}",
            env_extra=agent(f"echo {i} > f{i}.txt", FAKE_WAIT_FILE=str(go)),
        )
        for i in (1, 2)
    ]
    go.touch()
    zw.wait(*sids)
    d = zw.json("diff", "s1")
    assert [o["name"] for o in d["overlaps"]] == ["s2"]
    assert "other sessions ran in the same working tree at the same time: s2 (turn 1)" in d["note"]
    res = zw.run("diff", "s1", check=True)
    assert "note: other sessions ran in the same working tree" in res.stderr
    alone = spawn(zw, repo, shell="true")
    assert zw.json("diff", alone)["overlaps"] == []


def test_git_environment_and_repository_config_cannot_steer_snapshots(zw: ZW, repo: Repo) -> None:
    """A stray GIT_DIR/GIT_INDEX_FILE in the user's environment, or a clean filter an agent
    wrote into the repository's config with a .gitattributes using it, change nothing: the
    snapshot still reads the right tree and runs no command."""
    mark, mark2 = zw.tmp / "filter-ran", zw.tmp / "filter2-ran"
    shell = (  # the second driver's name holds '=': `-c name=value` would misread it
        "unset GIT_DIR GIT_INDEX_FILE; "  # (the agent's own git must work)
        f"git config filter.evil.clean 'touch {mark}; cat'; "
        f"git config 'filter.a=b.clean' 'touch {mark2}; cat'; "
        "printf '*.txt filter=evil\\n*.dat filter=a=b\\n' > .gitattributes; "
        "echo data > x.txt; echo data > y.dat"
    )
    bogus = {"GIT_DIR": str(zw.tmp / "nope"), "GIT_INDEX_FILE": str(zw.tmp / "idx")}
    index = (repo.path / ".git" / "index").read_bytes()
    sid = zw.spawn("t", "-C", str(repo.path), env_extra=agent(shell, **bogus))
    zw.wait(sid)
    d = zw.json("diff", sid)
    assert {f["path"] for f in d["files"]} == {".gitattributes", "x.txt", "y.dat"}
    assert not mark.exists() and not mark2.exists() and not (zw.tmp / "idx").exists()
    assert (repo.path / ".git" / "index").read_bytes() == index


def test_no_repository_no_workspace(zw: ZW) -> None:
    sid = zw.spawn("t", env_extra=agent("echo x > y"))
    zw.wait(sid)
    d = zw.json("show", sid)
    assert d["workspace"] is None and d["changes"] is None and d["branch"] is None
    res = zw.run("diff", sid)
    assert res.returncode == 1
    assert "has no git workspace (it was not started in a git repository)" in res.stderr


def test_snapshot_failure_never_fails_the_turn(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, shell="rm -rf .git")  # the agent destroys the repository
    d = zw.json("show", sid)
    assert d["status"] == "completed"
    assert d["turns_detail"][0]["before"] and d["turns_detail"][0]["after"] is None
    log = (zw.session_dir(sid) / "supervisor.log").read_text()
    assert "no after snapshot of turn 1" in log


def test_an_old_meta_json_without_workspace_fields_still_reads(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, shell="true")
    path = zw.session_dir(sid) / "meta.json"
    m = json.loads(path.read_bytes())
    for key in ("workspace", "changes", "comments"):
        del m[key]
    for t in m["turns"]:
        for key in ("before", "after", "changes"):
            del t[key]
    path.write_text(json.dumps(m))
    d = zw.json("show", sid)
    assert d["workspace"] is None and d["comments"] == [] and d["status"] == "completed"
    assert os.path.isdir(Path(repo.path))


def test_diff_is_coloured_on_a_terminal_only(zw: ZW, repo: Repo) -> None:
    import pty
    import subprocess

    from tests.support import ZWARM_BIN

    sid = spawn(zw, repo, shell="echo one > notes.txt")
    master, slave = pty.openpty()
    env = {**zw.env, "NO_COLOR": ""}
    proc = subprocess.run(
        [str(ZWARM_BIN), "diff", sid],
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
        cwd=zw.cwd,
        timeout=60,
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b[32m+\x1b[m\x1b[32mone" in out  # git's colours: added lines green
    assert "\x1b[" not in zw.run("diff", sid, check=True).stdout


def test_the_state_dir_is_never_part_of_a_sessions_changes(zw: ZW, repo: Repo) -> None:
    """A state dir in the repository (zwarm run from its top): `init` makes it ignore
    itself, so git status stays clean; a session that wrote nothing changed nothing; and
    even with its .gitignore gone (whatever the user's ignore files say) a snapshot leaves
    it out."""
    state = repo.path / ".zwarm"
    env = {"ZWARM_DIR": str(state)}
    zw.run("init", "--yes", env_extra=env, cwd=repo.path, check=True)
    assert (state / ".gitignore").read_text().splitlines()[-1] == "*"
    assert repo.git("status", "--porcelain", "-uall") == ""

    def session(shell: str) -> dict[str, Any]:
        sid = zw.spawn("t", "-C", str(repo.path), env_extra={**env, **agent(shell)})
        zw.run("wait", sid, "--timeout", "120", env_extra=env, timeout=180)
        shown = json.loads(zw.run("show", sid, "--json", env_extra=env, check=True).stdout)
        diff = json.loads(zw.run("diff", sid, "--json", env_extra=env, check=True).stdout)
        return {"changes": shown["changes"], "files": [f["path"] for f in diff["files"]]}

    assert session("true") == {"changes": {"files": 0, "added": 0, "removed": 0}, "files": []}
    (state / ".gitignore").unlink()
    repo.write(".gitignore", "*.log\n!.zwarm/\n")  # the user's ignore files even ask for it
    repo.commit("track everything")
    got = session("echo x > a.txt")
    assert got == {"changes": {"files": 1, "added": 1, "removed": 0}, "files": ["a.txt"]}


def test_snapshots_stay_out_of_the_users_history_and_survive_gc(zw: ZW, repo: Repo) -> None:
    """Snapshots live in zwarm's snapshot store (borrowing the repository's objects): no
    `zwarm snapshot` commit in `git log --all`, no ref of zwarm's in the repository; the
    user's `git gc --prune=now` loses none of them; `zwarm diff` is the same throughout; and
    snapshots an older zwarm kept in the repository itself (refs/zwarm/) still read, and go
    with their session."""
    sid = spawn(zw, repo, shell="echo new > a.txt; printf 'x\\n' >> README.md")
    zw.run("inject", sid, "more", env_extra=agent("echo two > b.txt"), check=True)
    zw.wait(sid)
    whole, turn2 = zw.run("diff", sid, check=True).stdout, zw.run("diff", sid, "--turn", "2").stdout
    assert "+new" in whole and "+two" in whole and "a.txt" not in turn2
    assert "zwarm snapshot" not in repo.git("log", "--all", "--format=%s")
    assert repo.legacy_refs() == [] and len(repo.zwarm_refs()) == 4
    repo.git("gc", "-q", "--prune=now")
    assert zw.run("diff", sid, check=True).stdout == whole
    assert zw.run("diff", sid, "--turn", "2", check=True).stdout == turn2
    # an older zwarm's snapshots: objects and refs in the repository itself
    store = repo.path / ".git" / "zwarm" / "snapshots.git"
    at_store = f"--git-dir={store}"
    listed = repo.git(at_store, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    objects = repo.git(at_store, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    pack = subprocess.run(
        ["git", at_store, "pack-objects", "--stdout", "-q"],
        input=objects.encode(),
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(
        ["git", "index-pack", "--stdin"], input=pack, cwd=repo.path, capture_output=True, check=True
    )
    for line in listed:
        repo.git("update-ref", *line.split())
    shutil.rmtree(store)
    assert len(repo.legacy_refs()) == 4 and repo.zwarm_refs() == repo.legacy_refs()
    assert zw.run("diff", sid, check=True).stdout == whole
    zw.run("rm", sid, check=True)
    assert repo.legacy_refs() == []


def test_a_same_size_change_that_the_index_calls_racily_clean_is_in_the_snapshot(
    zw: ZW, repo: Repo
) -> None:
    """git finds a change its stat cache cannot see (same size, same second, ctime not
    trusted) by comparing with the index file's time ("racily clean"); the snapshot's
    private copy of the index keeps that time, so the change is in the diff."""
    repo.git("config", "core.trustctime", "false")
    old = "2020-01-01 00:00:00"
    shell = (
        f"touch -d '{old}' README.md; git update-index -q --refresh; "
        f"printf '# DEMO\\n' > README.md; touch -d '{old}' README.md; "
        f"touch -d '{old}' \"$(git rev-parse --git-path index)\""
    )
    sid = spawn(zw, repo, "--worktree", shell=shell)
    assert [f["path"] for f in zw.json("diff", sid)["files"]] == ["README.md"]
    assert zw.json("show", sid)["changes"] == {"files": 1, "added": 1, "removed": 1}
