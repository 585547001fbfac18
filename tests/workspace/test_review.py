"""Review: comments back to the agent, merge, apply, and removing worktrees safely."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support import ZW, wait_until
from tests.support.workspace import Repo, agent, spawn

CHANGE = "printf 'def main():\\n    return 42\\n' > src/app.py; echo doc > doc.txt"


def _done(zw: ZW, sid: str) -> dict[str, object]:
    wait_until(lambda: zw.json("show", sid)["status"] != "running")
    shown: dict[str, object] = zw.json("show", sid)
    return shown


# ---------------------------------------------------------------------------- comments
def test_comments_reach_the_agents_next_prompt_with_their_diff_context(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, "--worktree", "--name", "rv", shell=CHANGE)
    out = zw.json("comment", "rv", "src/app.py:2", "return 43, not 42")
    assert out["comments"][0] | {"created_at": None} == {
        "id": 1,
        "path": "src/app.py",
        "line": 2,
        "text": "return 43, not 42",
        "created_at": None,
        "context": " def main():\n-    return 1\n+    return 42",
        "sent_turn": None,
    }
    comments = json.dumps([{"path": "doc.txt", "line": 1, "text": "say more"}])
    zw.run("comment", "rv", "--file", "-", input=comments, check=True)
    shown = zw.run("show", "rv", check=True).stdout
    assert "comment 1: src/app.py:2 return 43, not 42" in shown
    assert "comment 2: doc.txt:1 say more" in shown
    zw.run("inject", "rv", "Fix them please.", env_extra=agent("true"), check=True)
    _done(zw, sid)
    _, prompt = zw.recorded()
    want = (
        "Review comments on your changes:\n\n"
        "1. src/app.py:2\n```diff\n def main():\n-    return 1\n+    return 42\n```\n"
        "return 43, not 42\n\n"
        "2. doc.txt:1\n```diff\n+doc\n```\nsay more\n\n"
        "Fix them please."
    )
    assert want in prompt.decode()
    d = zw.json("show", "rv")
    assert [c["sent_turn"] for c in d["comments"]] == [2, 2]
    assert "comment 1:" not in zw.run("show", "rv", check=True).stdout  # sent: not open
    zw.run("inject", "rv", "Next.", env_extra=agent("true"), check=True)
    _done(zw, sid)
    new = zw.recorded()[1].decode().rsplit("## New message", 1)[1]
    assert new.strip() == "Next."  # sent once only (turn 2's summary still shows them)


def test_comment_send_sends_the_open_comments_now(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, shell=CHANGE)  # shared mode: comments work there too
    res = zw.run("comment", sid, "doc.txt:1", "rename it", "--send", env_extra=agent("true"))
    assert res.returncode == 0, res.stderr
    assert f"{sid} started (turn 2)" in res.stdout
    _done(zw, sid)
    prompt = zw.recorded()[1].decode()
    assert "1. doc.txt:1\n```diff\n+doc\n```\nrename it\n\nPlease address these review" in prompt


def test_comments_are_refused_on_files_the_session_did_not_change(zw: ZW, repo: Repo) -> None:
    spawn(zw, repo, "--worktree", "--name", "rv", shell=CHANGE)
    res = zw.run("comment", "rv", "README.md:1", "why?")
    assert res.returncode == 1
    assert "README.md is not changed by session" in res.stderr
    assert "(changed: doc.txt, src/app.py)" in res.stderr
    for bad in ("src/app.py", "src/app.py:0", "src/app.py:x"):
        res = zw.run("comment", "rv", bad, "t")
        assert res.returncode == 1 and "expected PATH:LINE" in res.stderr
    res = zw.run("comment", "rv", "../etc/passwd:1", "t")
    assert res.returncode == 1 and "invalid path" in res.stderr
    res = zw.run("comment", "rv", "--file", "-", input='[{"path": 3}]')
    assert res.returncode == 1 and "item 0 needs a path, a line" in res.stderr
    assert zw.json("show", "rv")["comments"] == []


# ---------------------------------------------------------------------------- merge
def test_merge_commits_the_agents_work_and_merges_into_the_main_branch(zw: ZW, repo: Repo) -> None:
    spawn(zw, repo, "--worktree", "--name", "m1", shell=CHANGE)
    repo.write("other.txt", "user's work\n")
    repo.commit("meanwhile")  # the target moved on: a real merge
    res = zw.json("merge", "m1")
    assert res["merged"] and res["into"] == "main" and res["branch"] == "zwarm/m1"
    assert res["committed"]  # the agent had not committed
    assert (repo.path / "doc.txt").read_text() == "doc\n"
    assert "return 42" in (repo.path / "src/app.py").read_text()
    log = repo.git("log", "--format=%s", "-3").splitlines()
    assert log[0] == "Merge: do the task" and sorted(log[1:]) == ["do the task", "meanwhile"]
    assert repo.git("rev-parse", "HEAD").strip() == res["commit"]
    assert repo.git("status", "--porcelain") == ""
    again = zw.json("merge", "m1")
    assert not again["merged"] and again["note"] == "main already has it"
    zw.run("rm", "m1", check=True)  # merged: removable without --force
    assert repo.branches() == ["main"] and repo.worktrees() == [str(repo.path)]
    assert repo.zwarm_refs() == []


def test_merge_squash_with_a_message(zw: ZW, repo: Repo) -> None:
    spawn(zw, repo, "--worktree", "--name", "sq", shell=CHANGE)
    res = zw.json("merge", "sq", "--squash", "-m", "One commit")
    assert res["merged"] and res["squash"]
    assert repo.git("log", "--format=%s", "-1").strip() == "One commit"
    assert repo.git("rev-list", "--count", "HEAD").strip() == "2"  # no merge commit
    zw.run("rm", "sq", check=True)  # squash-merged: its branch counts as merged
    assert "zwarm/sq" not in repo.branches()


def test_merge_conflict_is_aborted_cleanly_and_names_the_files(zw: ZW, repo: Repo) -> None:
    spawn(zw, repo, "--worktree", "--name", "cf", shell=CHANGE)
    repo.write("src/app.py", "def main():\n    return 7\n")
    repo.commit("conflicting")
    before = repo.state()  # the conflict is found before the agent's leftovers are committed
    tree = zw.json("show", "cf")["workspace"]["tree"]
    res = zw.run("merge", "cf")
    assert res.returncode == 1
    assert res.stderr.strip() == (
        "Error: merging zwarm/cf into main conflicts in src/app.py; nothing was merged, "
        f"nothing was committed (the agent's work is still uncommitted in {tree}); next: "
        "zwarm inject cf 'commit your work, rebase it on main and resolve the conflicts', "
        "or do that yourself there"
    )
    # nothing half-merged: no MERGE_HEAD, the same index (bytes), tree, HEAD and refs
    assert repo.state() == before
    assert not (repo.path / ".git" / "MERGE_HEAD").exists()
    res = zw.run("merge", "cf", "--squash")
    assert res.returncode == 1 and "conflicts in src/app.py" in res.stderr
    assert repo.state() == before
    repo.git("add", "-A", cwd=Path(tree))
    repo.git("commit", "-q", "-m", "agent", cwd=Path(tree))
    res = zw.run("merge", "cf")  # committed by the agent: nothing for zwarm to commit
    assert res.returncode == 1 and res.stderr.strip().endswith(
        "nothing was merged, nothing was committed; next: zwarm inject cf 'rebase your branch "
        f"on main and resolve the conflicts', or do it yourself: git -C {tree} rebase main"
    )


def test_merge_refuses_changes_in_the_way_and_a_running_session(zw: ZW, repo: Repo) -> None:
    spawn(zw, repo, "--worktree", "--name", "dw", shell=CHANGE)
    repo.write("doc.txt", "mine, uncommitted\n")  # a file the merge would bring in
    res = zw.run("merge", "dw")
    assert res.returncode == 1
    assert "uncommitted changes in files the merge touches (doc.txt)" in res.stderr
    assert (repo.path / "doc.txt").read_text() == "mine, uncommitted\n"
    (repo.path / "doc.txt").unlink()
    repo.write("unrelated.txt", "dirty but not in the way\n")
    assert zw.json("merge", "dw")["merged"]
    hold = zw.tmp / "hold"
    hold.touch()
    sid = zw.spawn(
        "t",
        "-C",
        str(repo.path),
        "--worktree",
        "--name",
        "busy",
        env_extra=zw.gated(hold, **agent("true")),
    )
    res = zw.run("merge", sid)
    assert res.returncode == 1 and "is running: wait for it (or kill it) first" in res.stderr
    hold.unlink()
    zw.wait(sid)


def _every_byte(top: Path) -> dict[str, bytes]:
    """Every file and link of a checkout (its .git folder included), by relative path."""
    out: dict[str, bytes] = {}
    for p in sorted(top.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(top))] = b"link:" + str(p.readlink()).encode()
        elif p.is_file():
            out[str(p.relative_to(top))] = p.read_bytes()
    return out


def test_merge_and_apply_never_overwrite_files_git_does_not_track(zw: ZW, repo: Repo) -> None:
    """The user's ignored .env, and an ignored file where the agent made a folder: the
    agent emptied .gitignore and committed its own. Refused, naming them; not one byte of
    the user's checkout (nor a ref) changes. The same for apply, and for a file with
    uncommitted changes."""
    repo.write(".env", "SECRET=users\n")
    repo.write("debug.log", "the user's log\n")
    shell = (
        ": > .gitignore; echo SECRET=agents > .env; mkdir debug.log; echo x > debug.log/x; "
        "git add -A && git -c user.name=a -c user.email=a@b commit -q -m agent"
    )
    sid = spawn(zw, repo, "--worktree", "--name", "sec", shell=shell)
    before, files = repo.state(), _every_byte(repo.path)
    for squash in ([], ["--squash"]):
        res = zw.run("merge", "sec", *squash)
        assert res.returncode == 1 and res.stderr.strip() == (
            f"Error: {repo.path} has files git does not track where the merge writes (.env, "
            "debug.log): move them away first, they would be overwritten; nothing was merged"
        )
        assert _every_byte(repo.path) == files and repo.state() == before
    other = zw.tmp / "other"
    repo.git("clone", "-q", str(repo.path), str(other), cwd=zw.tmp)
    (other / ".env").write_text("SECRET=other\n")
    kept = _every_byte(other)
    res = zw.run("apply", sid, cwd=other)
    assert res.returncode == 1 and "files git does not track where the diff writes (.env)" in (
        res.stderr
    )
    assert _every_byte(other) == kept
    # a file with uncommitted changes that the diff changes too: refused, kept
    (other / ".env").unlink()
    (other / ".gitignore").write_text("*.log\n.env\nnode_modules/\nmine\n")
    kept = _every_byte(other)
    res = zw.run("apply", sid, cwd=other)
    assert res.returncode == 1
    assert "uncommitted changes in files the diff touches (.gitignore)" in res.stderr
    assert "nothing changed" in res.stderr and _every_byte(other) == kept
    (repo.path / ".env").unlink()
    (repo.path / "debug.log").unlink()
    assert zw.json("merge", "sec")["merged"]  # out of the way: merged
    assert (repo.path / ".env").read_text() == "SECRET=agents\n"


def test_leftovers_on_another_branch_are_refused_not_left_out(zw: ZW, repo: Repo) -> None:
    """The agent switched its worktree to a branch of its own and left work uncommitted:
    committing it there and merging the session's branch would silently leave it out."""
    sid = spawn(zw, repo, "--worktree", "--name", "sw", shell="git switch -q -c mine; " + CHANGE)
    tree = zw.json("show", sid)["workspace"]["tree"]
    before = repo.state()
    res = zw.run("merge", "sw")
    assert res.returncode == 1 and res.stderr.strip() == (
        f"Error: the worktree {tree} has uncommitted work but is not on its branch zwarm/sw "
        "(refs/heads/mine): commit it there or switch back; nothing was merged"
    )
    assert repo.state() == before and "mine" in repo.branches()


def test_merge_into_another_checked_out_branch_or_none(zw: ZW, repo: Repo) -> None:
    spawn(zw, repo, "--worktree", "--name", "x1", shell=CHANGE)
    res = zw.run("merge", "x1", "--into", "nope")
    assert res.returncode == 1 and "there is no branch 'nope'" in res.stderr
    repo.git("branch", "release")
    res = zw.run("merge", "x1", "--into", "release")
    assert res.returncode == 1 and "is not checked out in any worktree" in res.stderr
    other = zw.tmp / "release-wt"
    repo.git("worktree", "add", "-q", str(other), "release")
    res = zw.json("merge", "x1", "--into", "release")
    assert res["merged"] and res["worktree"] == str(other)
    assert (other / "doc.txt").exists() and not (repo.path / "doc.txt").exists()
    res = zw.run("merge", spawn(zw, repo, shell="true"))
    assert res.returncode == 1 and "has no worktree of its own" in res.stderr


# ---------------------------------------------------------------------------- rm
def test_rm_refuses_to_lose_work_unless_forced(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, "--worktree", "--name", "keep", shell=CHANGE)
    tree = Path(zw.json("show", sid)["workspace"]["tree"])
    res = zw.run("rm", "keep")
    assert res.returncode == 1
    assert "would be lost (2 uncommitted file(s): doc.txt, src/app.py)" in res.stderr
    assert tree.is_dir() and zw.session_dir(sid).is_dir()
    repo.git("add", "-A", cwd=tree)
    repo.git("commit", "-q", "-m", "agent commit", cwd=tree)
    res = zw.run("rm", "keep")
    assert res.returncode == 1 and "1 unmerged commit(s):" in res.stderr
    assert "agent commit" in res.stderr
    res = zw.run("rm", "--finished")
    assert res.returncode == 1 and "would be lost" in res.stderr and zw.session_dir(sid).is_dir()
    zw.run("rm", "keep", "--force", check=True)
    assert not tree.exists() and "zwarm/keep" not in repo.branches()
    assert not zw.session_dir(sid).exists() and repo.zwarm_refs() == []


def test_rm_finished_removes_clean_worktrees_and_keeps_the_others(zw: ZW, repo: Repo) -> None:
    clean = spawn(zw, repo, "--worktree", "--name", "clean", shell="true")
    busy = spawn(zw, repo, "--worktree", "--name", "busy", shell="echo x > x.txt")
    res = zw.run("rm", "--finished")
    assert res.returncode == 1  # as documented: not everything asked for was removed
    assert f"{clean} removed" in res.stdout
    # kept, and said so: not an error (issue 30.15)
    assert res.stderr.startswith(f"kept {busy}: ") and "would be lost" in res.stderr
    assert len(res.stderr.splitlines()) == 1 and "Error" not in res.stderr
    assert res.stderr.count(busy) == 1, res.stderr  # the id said once ("kept ID: its ...")
    assert repo.branches() == ["main", "zwarm/busy"]


def test_a_worktree_deleted_by_hand_is_tolerated(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, "--worktree", "--name", "gone", shell="true")
    shutil.rmtree(zw.json("show", sid)["workspace"]["tree"])
    res = zw.run("inject", sid, "more")
    assert res.returncode == 1 and "was removed: it cannot run again" in res.stderr
    zw.run("rm", sid, check=True)  # pruned; its branch had no commits
    assert repo.branches() == ["main"] and repo.worktrees() == [str(repo.path)]


# ---------------------------------------------------------------------------- apply
def test_apply_brings_a_turns_diff_into_this_checkout_uncommitted(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, "--worktree", "--name", "ap", shell=CHANGE)
    zw.run("inject", sid, "more", env_extra=agent("echo t2 > second.txt"), check=True)
    _done(zw, sid)
    head = repo.git("rev-parse", "HEAD").strip()
    res = zw.run("apply", "ap", "--turn", "2", cwd=repo.path, check=True)
    assert "applied 1 file(s)" in res.stdout
    assert (repo.path / "second.txt").read_text() == "t2\n" and not (repo.path / "doc.txt").exists()
    assert repo.git("rev-parse", "HEAD").strip() == head
    assert repo.git("status", "--porcelain") == "?? second.txt\n"
    (repo.path / "second.txt").unlink()
    out = zw.json("apply", "ap", cwd=repo.path / "src")  # from a subdirectory: the whole tree
    assert sorted(f["path"] for f in out["files"]) == ["doc.txt", "second.txt", "src/app.py"]
    res = zw.run("apply", "ap", cwd=repo.path)  # already there: all or nothing
    assert (
        res.returncode == 1 and "does not apply" in res.stderr and "nothing changed" in res.stderr
    )


def test_a_conflict_found_only_by_the_real_merge_is_aborted_too(
    zw: ZW, repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where git cannot predict the conflict (``merge-tree`` says nothing), the merge itself
    stops on it and is aborted: the same branch, files and staged entries as before."""
    from zwarm.engine import review
    from zwarm.errors import MergeConflict

    spawn(zw, repo, "--worktree", "--name", "late", shell=CHANGE)
    repo.write("src/app.py", "def main():\n    return 7\n")
    repo.commit("conflicting")
    monkeypatch.setattr(review, "_predict_conflicts", lambda *a: [])
    api = zw.api()
    for squash in (False, True):
        staged = repo.git("ls-files", "-s")
        with pytest.raises(MergeConflict) as e:
            api.merge("late", squash=squash)
        assert e.value.files == ["src/app.py"]
        assert repo.git("ls-files", "-s") == staged and repo.git("status", "--porcelain") == ""
        assert "return 7" in (repo.path / "src/app.py").read_text()
        assert not (repo.path / ".git" / "MERGE_HEAD").exists()
