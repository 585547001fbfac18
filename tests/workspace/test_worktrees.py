"""Worktrees: one per session, on its own branch, outside the repository and the state dir.

Every test runs zwarm (the installed CLI) against a real git repository in a temporary
directory; the fake agent changes files through ``FAKE_SHELL``.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
from pathlib import Path

from tests.support import ZW, wait_until
from tests.support.workspace import Repo, agent, spawn


def test_worktree_spawn_runs_the_agent_in_its_own_worktree_and_branch(zw: ZW, repo: Repo) -> None:
    before = repo.state()
    sid = spawn(zw, repo, "--worktree", "--name", "feat", shell="echo hi > new.txt")
    d = zw.json("show", sid)
    ws = d["workspace"]
    root = zw.tmp / "xdg-data" / "zwarm" / "worktrees"
    tree = Path(ws["tree"])
    assert (ws["mode"], ws["repo"], ws["branch"]) == ("worktree", str(repo.path), "zwarm/feat")
    assert ws["base"] == before["head"]
    assert tree.parent.parent == root and tree.name == "feat"  # <root>/<repo>-<hash>/<name>
    assert d["cwd"] == str(tree) and d["branch"] == "zwarm/feat" and d["worktree"] == str(tree)
    argv, _ = zw.recorded()
    assert argv["cwd"] == str(tree)  # the agent ran there, not in the repository
    assert (tree / "new.txt").read_text() == "hi\n" and not (repo.path / "new.txt").exists()
    assert "zwarm/feat" in repo.branches() and str(tree) in repo.worktrees()
    assert d["changes"] == {"files": 1, "added": 1, "removed": 0}
    # the user's checkout, index, HEAD and refs (but the new branch): untouched
    assert repo.state("refs/heads/zwarm/feat") == before
    rows = zw.json("ls")
    assert rows[0]["branch"] == "zwarm/feat" and rows[0]["changes"]["files"] == 1
    table = zw.run("ls", check=True).stdout
    assert "BRANCH" in table and "zwarm/feat" in table
    assert "branch zwarm/feat" in zw.run("show", sid, check=True).stdout


def test_default_branch_is_the_id_prefix_and_a_subdirectory_is_kept(zw: ZW, repo: Repo) -> None:
    sub = repo.path / "src"
    sid = zw.spawn("t", "-C", str(sub), "--worktree", env_extra=agent("pwd > where.txt"))
    zw.wait(sid)
    ws = zw.json("show", sid)["workspace"]
    assert ws["branch"] == f"zwarm/{sid[:8]}"
    assert (Path(ws["tree"]) / "src" / "where.txt").read_text().strip() == ws["tree"] + "/src"


def test_branch_and_base_options(zw: ZW, repo: Repo) -> None:
    first = repo.git("rev-parse", "HEAD").strip()
    repo.write("later.txt", "x\n")
    repo.commit("later")
    sid = spawn(zw, repo, "--worktree", "--branch", "topic/one", "--base", first)
    ws = zw.json("show", sid)["workspace"]
    assert (ws["branch"], ws["base"]) == ("topic/one", first)
    assert not (Path(ws["tree"]) / "later.txt").exists()
    res = zw.run("spawn", "t", "-C", str(repo.path), "--worktree", "--branch", "topic/one")
    assert res.returncode == 1 and "branch 'topic/one' already exists" in res.stderr
    res = zw.run("spawn", "t", "-C", str(repo.path), "--worktree", "--branch", "-x")
    assert res.returncode == 1 and "invalid branch name" in res.stderr
    res = zw.run("spawn", "t", "-C", str(repo.path), "--worktree", "--base", "nope")
    assert res.returncode == 1 and "'nope' does not name a commit" in res.stderr
    res = zw.run("spawn", "t", "-C", str(repo.path), "--branch", "b")
    assert res.returncode == 1 and "--branch and --base need --worktree" in res.stderr
    assert "Traceback" not in res.stderr


def test_worktree_outside_a_repository_is_a_clear_error(zw: ZW) -> None:
    res = zw.run("spawn", "t", "--worktree")
    assert res.returncode == 1
    assert res.stderr.strip() == f"Error: {zw.cwd} is not in a git repository: --worktree needs one"
    assert not (zw.state_dir / "sessions").exists() or not os.listdir(zw.state_dir / "sessions")


def test_config_default_workspace_worktree_and_shared_override(zw: ZW, repo: Repo) -> None:
    zw.state_dir.mkdir()
    zw.write_config('[defaults]\nworkspace = "worktree"\n')
    sid = spawn(zw, repo)
    assert zw.json("show", sid)["workspace"]["mode"] == "worktree"
    sid = spawn(zw, repo, "--shared")
    ws = zw.json("show", sid)["workspace"]
    assert (ws["mode"], ws["tree"], ws["branch"]) == ("shared", str(repo.path), None)


def test_ten_worktree_spawns_at_once_all_succeed(zw: ZW, repo: Repo) -> None:
    def one(i: int) -> str:
        return zw.spawn(
            f"task {i}",
            "-C",
            str(repo.path),
            "--worktree",
            "--name",
            f"w{i}",
            env_extra=agent(f"echo {i} > mine.txt"),
        )

    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        sids = list(pool.map(one, range(10)))
    assert zw.wait(*sids, timeout=120).returncode == 0
    shown = [zw.json("show", s) for s in sids]
    trees = {d["workspace"]["tree"] for d in shown}
    branches = {d["workspace"]["branch"] for d in shown}
    assert len(trees) == len(branches) == 10  # never shared
    for i, d in enumerate(shown):
        assert (Path(d["workspace"]["tree"]) / "mine.txt").read_text() == f"{i}\n"
    assert len(repo.worktrees()) == 11


def test_concurrent_sessions_editing_the_same_file_do_not_collide(zw: ZW, repo: Repo) -> None:
    hold = zw.tmp / "hold"
    hold.touch()
    sids = [
        zw.spawn(
            f"edit {w}",
            "-C",
            str(repo.path),
            "--worktree",
            "--name",
            w,
            env_extra=agent(
                f"echo '    return \"{w}\"' >> src/app.py", FAKE_WAIT_FILE=str(zw.tmp / "go")
            ),
        )
        for w in ("left", "right")
    ]
    (zw.tmp / "go").touch()  # both agents write at once
    assert zw.wait(*sids).returncode == 0
    for sid, w in zip(sids, ("left", "right"), strict=True):
        d = zw.json("diff", sid)
        (f,) = d["files"]
        assert (f["path"], f["status"], f["added"]) == ("src/app.py", "modified", 1)
        assert f["hunks"][0]["lines"][-1] == f'+    return "{w}"'
    assert repo.git("status", "--porcelain") == ""


def test_the_worktree_root_is_never_inside_the_state_dir_or_the_repository(
    zw: ZW, repo: Repo
) -> None:
    zw.state_dir.mkdir()
    for root in (zw.state_dir / "wt", repo.path / "wt"):
        zw.write_config(f'[workspace]\nroot = "{root}"\n')
        res = zw.run("spawn", "t", "-C", str(repo.path), "--worktree")
        assert res.returncode == 1, res.stdout
        assert "set [workspace] root" in res.stderr and not root.exists()
    other = zw.tmp / "elsewhere"
    zw.write_config(f'[workspace]\nroot = "{other}"\n')
    sid = spawn(zw, repo, "--worktree")
    assert Path(zw.json("show", sid)["workspace"]["tree"]).is_relative_to(other)


def test_no_session_works_in_a_directory_holding_worktrees(zw: ZW, repo: Repo) -> None:
    spawn(zw, repo, "--worktree", "--name", "a")
    data = zw.tmp / "xdg-data"
    res = zw.run("spawn", "t", "-C", str(data))  # its agent could write every worktree
    assert res.returncode == 1 and "contains zwarm's worktrees" in res.stderr
    inside = Path(zw.json("show", "a")["workspace"]["tree"])
    res = zw.run("spawn", "t", "-C", str(inside))  # another session's worktree, shared
    assert res.returncode == 1 and "is in zwarm's worktrees" in res.stderr


def test_a_new_worktree_never_lies_in_another_sessions_directory(zw: ZW, repo: Repo) -> None:
    zw.spawn("t", "-C", str(zw.tmp), env_extra=agent("true"))  # its agent may write tmp/...
    zw.write_config(f'[workspace]\nroot = "{zw.tmp / "wt"}"\n')  # ... so not tmp/wt
    res = zw.run("spawn", "t", "-C", str(repo.path), "--worktree")
    assert res.returncode == 1 and "inside another session's working directory" in res.stderr


def test_setup_runs_in_the_new_worktree_with_copied_and_linked_ignored_files(
    zw: ZW, repo: Repo
) -> None:
    repo.write(".env", "SECRET=1\n")
    repo.write("node_modules/pkg/index.js", "x\n")
    repo.write("notignored.txt", "n\n")
    zw.state_dir.mkdir()
    zw.write_config(
        "[workspace]\n"
        'setup = ["echo setting up; cat .env > from-setup.txt", ["touch", "argv-ran"]]\n'
        'copy = [".env", "notignored.txt", "missing.txt"]\n'
        'link = ["node_modules"]\n'
    )
    sid = spawn(zw, repo, "--worktree", shell="test -f argv-ran && echo seen > agent.txt")
    d = zw.json("show", sid)
    tree = Path(d["workspace"]["tree"])
    assert d["status"] == "completed"
    assert (tree / ".env").read_text() == "SECRET=1\n" and not (tree / ".env").is_symlink()
    assert (tree / "node_modules").resolve() == repo.path / "node_modules"
    assert (tree / "from-setup.txt").read_text() == "SECRET=1\n"
    assert (tree / "agent.txt").read_text() == "seen\n"  # setup ran before the agent
    assert not (tree / "notignored.txt").exists()
    stderr = zw.turn_file(sid, 1, "stderr").read_text()
    assert "setting up" in stderr and "notignored.txt: not ignored by git" in stderr
    assert "missing.txt: not in" in stderr
    # setup's own files and the copied ignored ones are not the agent's changes
    assert [f["path"] for f in zw.json("diff", sid, "--turn", "1")["files"]] == ["agent.txt"]


def test_setup_failure_fails_the_turn_and_leaves_nothing_behind(zw: ZW, repo: Repo) -> None:
    zw.state_dir.mkdir()
    zw.write_config('[workspace]\nsetup = ["echo about to fail; exit 7"]\n')
    sid = spawn(zw, repo, "--worktree", "--name", "broken")
    d = zw.json("show", sid)
    assert (d["status"], d["reason"]) == ("failed", "setup_failed")
    assert "setup command 1 (echo about to fail; exit 7) exited with code 7" in d["error"]
    assert zw.calls() == 0  # the agent never ran
    assert "about to fail" in zw.turn_file(sid, 1, "stderr").read_text()
    assert not Path(d["workspace"]["tree"]).exists() and d["workspace"]["removed"]
    assert repo.branches() == ["main"] and repo.worktrees() == [str(repo.path)]
    assert "failed (setup)" in zw.run("ls", check=True).stdout
    res = zw.run("inject", sid, "again")
    assert res.returncode == 1 and "was removed: it cannot run again" in res.stderr
    assert zw.run("rm", sid).returncode == 0


def test_untrusted_setup_is_refused_at_spawn(zw: ZW, repo: Repo) -> None:
    zw.state_dir.mkdir()
    (zw.state_dir / "config.toml").write_text('[workspace]\nsetup = ["touch pwned"]\n')
    res = zw.run("spawn", "t", "-C", str(repo.path), "--worktree")
    assert res.returncode == 1 and "workspace.setup" in res.stderr and "zwarm" in res.stderr
    assert repo.branches() == ["main"]


def test_a_tampered_worktree_in_meta_json_never_redirects_a_turn(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, "--worktree", "--name", "t1")
    meta_path = zw.session_dir(sid) / "meta.json"
    m = json.loads(meta_path.read_bytes())
    victim = zw.tmp / "victim"
    victim.mkdir()
    m["cwd"] = m["workspace"]["tree"] = str(victim)
    meta_path.write_text(json.dumps(m))
    res = zw.run("inject", sid, "go on", env_extra=agent("echo owned > x.txt"))
    assert res.returncode == 0, res.stderr
    zw.wait(sid)
    d = zw.json("show", sid)
    assert d["turns_detail"][1]["reason"] == "start_failed"
    assert "disagrees with the session's launch record" in d["turns_detail"][1]["error"]
    log = (zw.session_dir(sid) / "supervisor.log").read_text()
    assert f"no snapshot of session {sid}'s workspace: " in log  # said, not silently skipped
    assert os.listdir(victim) == []
    for cmd in (["merge", sid], ["diff", sid]):
        res = zw.run(*cmd)
        assert res.returncode == 1 and "disagrees with its launch record" in res.stderr
    assert zw.run("rm", sid, "--force").returncode == 0
    assert victim.is_dir() and "zwarm/t1" not in repo.branches()  # rm acted on the pin


def test_inject_runs_in_the_same_worktree(zw: ZW, repo: Repo) -> None:
    sid = spawn(zw, repo, "--worktree", shell="echo 1 > f.txt")
    tree = zw.json("show", sid)["workspace"]["tree"]
    zw.run("inject", sid, "more", env_extra=agent("echo 2 >> f.txt"), check=True)
    wait_until(lambda: zw.json("show", sid)["status"] != "running")
    assert zw.recorded()[0]["cwd"] == tree
    assert Path(tree, "f.txt").read_text() == "1\n2\n"


def test_kill_during_setup_stops_it_and_removes_the_worktree(zw: ZW, repo: Repo) -> None:
    zw.state_dir.mkdir()
    mark = zw.tmp / "setup-finished"
    zw.write_config(f'[workspace]\nsetup = ["echo started; sleep 60; touch {mark}"]\n')
    sid = zw.spawn("t", "-C", str(repo.path), "--worktree", env_extra=agent("true"))
    wait_until(lambda: "started" in _text(zw.turn_file(sid, 1, "stderr")))
    zw.run("kill", sid, check=True)
    d = zw.json("show", sid)
    assert (d["status"], d["reason"]) == ("killed", "killed") and zw.calls() == 0
    wait_until(lambda: not Path(d["workspace"]["tree"]).exists(), message="worktree removed")
    wait_until(lambda: repo.branches() == ["main"], message="branch removed")
    assert not mark.exists()  # the setup's sleep was stopped with it (it carried the marker)


def _text(p: Path) -> str:
    return p.read_text() if p.exists() else ""
