"""Nothing an agent writes into a git repository makes zwarm's git run a program.

An agent controls its working tree: the files, a ``.gitattributes``, nested repositories
(``git init sub``), the worktree's ``.git`` file, and (unsandboxed, in a worktree of the
user's repository or in the repository itself) the repository's shared ``.git/config`` and
hooks. Every config key that can make git execute something is planted here, each pointing
at a script that leaves a marker file, in three ways: in the repository's own config and
hooks, in a nested repository inside the worktree, and in a repository of the agent's own
that the worktree's ``.git`` is redirected to. Then zwarm takes its after-turn snapshot and
runs ``diff``, ``merge`` and ``rm``: no marker may ever appear. A final check runs plain git
(not zwarm's) on the same trees and sees the markers appear: the plants are live, so the
test can fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ZW
from tests.support.workspace import Repo, agent

HOOKS = [
    *("pre-commit", "pre-merge-commit", "prepare-commit-msg", "commit-msg", "post-commit"),
    *("post-merge", "post-checkout", "post-rewrite", "reference-transaction"),
    *("post-index-change", "fsmonitor-watchman", "pre-auto-gc", "pre-push", "push-to-checkout"),
]
PROGRAMS = [  # one marker script per config key that names a program
    *("fsmonitor", "ssh", "editor", "seqeditor", "pager", "askpass", "altrefs", "proxy"),
    *("clean", "smudge", "process", "extdiff", "textconv", "diffcmd", "mergedriver", "gpg"),
    *("gpgssh", "gpgx509", "gpgopenpgp", "sshkeycmd", "cred", "pagerlog", "uploadpack"),
    *("receivepack", "packhook", "incclean", "incifclean"),
]


def _tools(tmp: Path) -> tuple[Path, Path, Path]:
    """The marker scripts (one per key), a hooks folder (one per hook) and the marks folder."""
    bin_, hooks, marks = tmp / "evil-bin", tmp / "evil-hooks", tmp / "marks"
    for d in (bin_, hooks, marks):
        d.mkdir()
    for name in PROGRAMS:
        body = "exit 1" if name in ("process", "ssh") else "cat"
        _script(bin_ / name, f'#!/bin/sh\ntouch "{marks}/{name}"\n{body}\n')
    for hook in HOOKS:
        _script(hooks / hook, f'#!/bin/sh\ntouch "{marks}/hook-{hook}"\nexit 0\n')
    return bin_, hooks, marks


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _config(bin_: Path, hooks: Path, inc: Path) -> str:
    """A git config that would run a marker script for every key that can execute one."""
    b = str(bin_)
    return f"""
[core]
\tfsmonitor = {b}/fsmonitor
\thooksPath = {hooks}
\tsshCommand = {b}/ssh
\teditor = {b}/editor
\tpager = {b}/pager
\taskPass = {b}/askpass
\talternateRefsCommand = {b}/altrefs
\tgitProxy = {b}/proxy
\tuntrackedCache = true
[sequence]
\teditor = {b}/seqeditor
[filter "evil"]
\tclean = {b}/clean
\tsmudge = {b}/smudge
\tprocess = {b}/process
\trequired = true
[diff]
\texternal = {b}/extdiff
\tsubmodule = log
[diff "evil"]
\ttextconv = {b}/textconv
\tcommand = {b}/diffcmd
[merge "evil"]
\tdriver = {b}/mergedriver %O %A %B
[merge]
\tverifySignatures = true
[gpg]
\tprogram = {b}/gpg
[gpg "openpgp"]
\tprogram = {b}/gpgopenpgp
[gpg "ssh"]
\tprogram = {b}/gpgssh
\tdefaultKeyCommand = {b}/sshkeycmd
[gpg "x509"]
\tprogram = {b}/gpgx509
[commit]
\tgpgSign = true
[tag]
\tgpgSign = true
[log]
\tshowSignature = true
[credential]
\thelper = {b}/cred
[pager]
\tlog = {b}/pagerlog
\tdiff = {b}/pagerlog
[submodule]
\trecurse = true
[status]
\tsubmoduleSummary = true
[remote "origin"]
\turl = ssh://example.invalid/x
\tuploadpack = {b}/uploadpack
\treceivepack = {b}/receivepack
[uploadpack]
\tpackObjectsHook = {b}/packhook
[include]
\tpath = {inc}/plain.inc
[includeIf "gitdir:/"]
\tpath = {inc}/cond.inc
"""


ATTRIBUTES = "* filter=evil diff=evil merge=evil\n*.i filter=inc\n*.j filter=incif\n"


def _plant_script(tmp: Path, where: str) -> str:
    """The agent's shell command: change files, then plant everything ``where``:
    ``repo`` (the repository's shared config and hooks, as ``git config`` in a worktree
    writes them), ``nested`` (a repository of its own inside the worktree) or ``redirect``
    (the worktree's ``.git`` pointed at a repository of its own)."""
    bin_, hooks, _ = _tools(tmp)
    inc = tmp / "inc"
    inc.mkdir()
    (inc / "plain.inc").write_text(f'[filter "inc"]\n\tclean = {bin_}/incclean\n')
    (inc / "cond.inc").write_text(f'[filter "incif"]\n\tclean = {bin_}/incifclean\n')
    conf = tmp / "evil.config"
    conf.write_text(_config(bin_, hooks, inc))
    who = "-c user.name=a -c user.email=a@b"
    steps = [
        "set -e",
        "unset GIT_DIR GIT_INDEX_FILE GIT_WORK_TREE",
        "echo work > work.txt; echo i > x.i; echo j > y.j",
        f"printf '{ATTRIBUTES}' > .gitattributes",
    ]
    if where == "repo":
        gd = "$(git rev-parse --path-format=absolute --git-common-dir)"
        steps += [
            f'cat "{conf}" >> "{gd}/config"',
            f'for h in {" ".join(HOOKS)}; do cp "{hooks}/$h" "{gd}/hooks/$h"; done',
        ]
    elif where == "nested":
        steps += [
            "git init -q sub",
            f"git -C sub {who} commit -q --allow-empty -m nested",
            "echo s > sub/s.txt",
            f"printf '{ATTRIBUTES}' > sub/.gitattributes",
            f'cat "{conf}" >> sub/.git/config',
            f'for h in {" ".join(HOOKS)}; do cp "{hooks}/$h" sub/.git/hooks/$h; done',
        ]
    else:
        steps += [
            'git init -q "$PWD/.own"',
            f'cat "{conf}" >> .own/.git/config',
            f'for h in {" ".join(HOOKS)}; do cp "{hooks}/$h" .own/.git/hooks/$h; done',
            "printf 'gitdir: %s\\n' \"$PWD/.own/.git\" > .git",
        ]
    script = tmp / f"plant-{where}.sh"
    script.write_text("\n".join(steps) + "\n")
    return f"sh {script}"


def _marks(zw: ZW) -> list[str]:
    return sorted(os.listdir(zw.tmp / "marks"))


def _plain_git(tree: Path, env: dict[str, str], *args: str) -> None:
    """git as a user runs it (nothing turned off)."""
    subprocess.run(
        ["git", "-c", "user.name=a", "-c", "user.email=a@b", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("where", ["repo", "nested"])
def test_planted_config_runs_nothing_in_snapshot_diff_merge_and_rm(
    zw: ZW, repo: Repo, where: str
) -> None:
    shell = _plant_script(zw.tmp, where)
    sid = zw.spawn("t", "-C", str(repo.path), "--worktree", "--name", "ev", env_extra=agent(shell))
    zw.wait(sid)
    d = zw.json("show", sid)
    tree = Path(d["workspace"]["tree"])
    assert (tree / "work.txt").exists()
    turn = d["turns_detail"][0]
    assert turn["before"] and turn["after"], (zw.session_dir(sid) / "supervisor.log").read_text()
    assert _marks(zw) == []  # the after-turn snapshot ran nothing
    files = {f["path"] for f in zw.json("diff", "ev")["files"]}
    assert {"work.txt", "x.i", "y.j", ".gitattributes"} <= files
    assert ("sub" in files) == (where == "nested")
    zw.run("diff", "ev", check=True)
    zw.run("diff", "ev", "--stat", check=True)
    assert _marks(zw) == []
    res = zw.json("merge", "ev")  # commits the leftovers, merges into the user's checkout
    assert res["merged"] and res["committed"]
    assert (repo.path / "work.txt").read_text() == "work\n"
    assert (repo.path / "x.i").read_text() == "i\n"  # stored as on disk: no filter ran
    assert _marks(zw) == []
    if where == "nested":
        shutil.copytree(tree / "sub", zw.tmp / "sub-copy", symlinks=True)
    zw.run("rm", "ev", check=True)  # merged: nothing would be lost (log, status ran)
    assert not tree.exists()
    assert _marks(zw) == []
    # the plants are live: git as the user runs it executes them
    target = zw.tmp / "sub-copy" if where == "nested" else repo.path
    (target / "new.txt").write_text("n\n")
    _plain_git(target, repo.env, "status")
    _plain_git(target, repo.env, "add", "-A")
    _plain_git(target, repo.env, "commit", "-q", "--allow-empty", "-m", "x")
    assert {"fsmonitor", "process"} <= set(_marks(zw))


def test_a_redirected_dot_git_is_refused_and_runs_nothing(zw: ZW, repo: Repo) -> None:
    shell = _plant_script(zw.tmp, "redirect")
    sid = zw.spawn("t", "-C", str(repo.path), "--worktree", "--name", "rd", env_extra=agent(shell))
    zw.wait(sid)
    d = zw.json("show", sid)
    tree = Path(d["workspace"]["tree"])
    refused = f"Error: {tree}/.git no longer points at the repository {repo.path}: refused"
    assert d["turns_detail"][0]["after"] is None  # no snapshot of a tree that is not the repo's
    log = (zw.session_dir(sid) / "supervisor.log").read_text()
    assert "no after snapshot of turn 1" in log and "no longer points at the repository" in log
    for cmd in (["diff", "rd"], ["merge", "rd"], ["rm", "rd"]):
        res = zw.run(*cmd)
        assert res.returncode == 1 and res.stderr.strip() == refused, (cmd, res.stderr)
    assert "zwarm/rd" in repo.branches() and tree.is_dir()
    assert _marks(zw) == []
    zw.run("rm", "rd", "--force", check=True)  # removes the folder; runs no git in it
    assert not tree.exists() and "zwarm/rd" not in repo.branches()
    assert repo.worktrees() == [str(repo.path)]
    assert _marks(zw) == []
    # the plant was live: git run in such a tree follows the .git file
    (zw.tmp / "again").mkdir()
    (zw.tmp / "again" / ".gitattributes").write_text(ATTRIBUTES)
    (zw.tmp / "again" / "f.txt").write_text("f\n")
    _plain_git(zw.tmp / "again", repo.env, "init", "-q")
    with (zw.tmp / "again" / ".git" / "config").open("a") as f:
        f.write((zw.tmp / "evil.config").read_text())
    _plain_git(zw.tmp / "again", repo.env, "add", "-A")
    _plain_git(zw.tmp / "again", repo.env, "commit", "-q", "--allow-empty", "-m", "x")
    assert {"fsmonitor", "process"} <= set(_marks(zw))


def test_a_shared_session_planting_in_the_users_repository_runs_nothing(zw: ZW, repo: Repo) -> None:
    """Without a worktree the agent writes the user's checkout and its .git itself."""
    shell = _plant_script(zw.tmp, "repo")
    sid = zw.spawn("t", "-C", str(repo.path), env_extra=agent(shell))
    zw.wait(sid)
    d = zw.json("show", sid)
    assert d["turns_detail"][0]["after"], (zw.session_dir(sid) / "supervisor.log").read_text()
    assert {"work.txt", "x.i"} <= {f["path"] for f in zw.json("diff", sid)["files"]}
    other = zw.tmp / "elsewhere"
    _plain_git(zw.tmp, repo.env, "clone", "-q", "--no-hardlinks", str(repo.path), str(other))
    zw.run("apply", sid, cwd=other, check=True)
    zw.run("rm", sid, check=True)
    assert _marks(zw) == []


def test_a_worktree_record_pointed_at_another_repository_is_refused(zw: ZW, repo: Repo) -> None:
    """The worktree's record in the repository (``commondir``) names a repository the
    agent made: git would read that one's config; zwarm refuses the tree."""
    _plant_script(zw.tmp, "repo")  # (for its marker scripts and config; the agent runs none)
    sid = spawn_tree(zw, repo, "cd")
    tree = Path(zw.json("show", sid)["workspace"]["tree"])
    record = Path(repo.git("rev-parse", "--absolute-git-dir", cwd=tree).strip())
    own = zw.tmp / "own"
    _plain_git(zw.tmp, repo.env, "init", "-q", str(own))
    with (own / ".git" / "config").open("a") as f:
        f.write((zw.tmp / "evil.config").read_text())
    (record / "commondir").write_text(f"{own / '.git'}\n")
    (tree / "work.txt").write_text("w\n")
    refused = f"Error: {tree}/.git no longer points at the repository {repo.path}: refused"
    for cmd in (["merge", sid], ["rm", sid]):
        res = zw.run(*cmd)
        assert res.returncode == 1 and res.stderr.strip() == refused, (cmd, res.stderr)
    zw.run("diff", sid, check=True)  # the recorded snapshots: read in the repository
    assert _marks(zw) == []


def spawn_tree(zw: ZW, repo: Repo, name: str, shell: str = "true") -> str:
    sid = zw.spawn("t", "-C", str(repo.path), "--worktree", "--name", name, env_extra=agent(shell))
    zw.wait(sid)
    return sid


def test_a_missing_object_never_makes_zwarm_fetch(zw: ZW, repo: Repo) -> None:
    """The repository made a partial clone whose promisor remote goes through an agent's
    sshCommand, and an object the diff needs deleted: git would fetch it lazily, running
    that command; zwarm's git has every transport off and reports the missing object."""
    _plant_script(zw.tmp, "repo")  # (for its marker scripts)
    sid = zw.spawn("t", "-C", str(repo.path), "--worktree", env_extra=agent("echo new > README.md"))
    zw.wait(sid)
    blob = repo.git("rev-parse", "HEAD:README.md").strip()
    for key, value in (
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", "origin"),
        ("remote.origin.url", "ssh://example.invalid/x"),
        ("remote.origin.promisor", "true"),
        ("core.sshCommand", str(zw.tmp / "evil-bin" / "ssh")),
    ):
        repo.git("config", key, value)
    (repo.path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    res = zw.run("diff", sid)
    assert res.returncode == 1 and res.stderr.startswith("Error: git diff failed")
    assert len(res.stderr.strip().splitlines()) == 1 and _marks(zw) == []
    _plain_git(repo.path, repo.env, "cat-file", "-p", blob)  # git as the user runs it: fetches
    assert _marks(zw) == ["ssh"]


def test_a_merge_driver_never_runs_it_is_a_conflict(zw: ZW, repo: Repo) -> None:
    """A merge driver named by .gitattributes and defined in the repository's config runs
    on any real three-way merge of such a file; zwarm's merge turns it into a conflict
    (refused, nothing merged), never running it, and never silently keeping one side."""
    _plant_script(zw.tmp, "repo")  # (for its marker scripts)
    repo.write("README.md", "one\ntwo\nthree\n")
    repo.write(".gitattributes", "README.md merge=evil\n")
    repo.commit("attributes")
    sid = spawn_tree(zw, repo, "md", shell="printf 'one\\ntwo\\nTHREE\\n' > README.md")
    repo.write("README.md", "ONE\ntwo\nthree\n")
    repo.commit("the user's change")
    repo.git("config", "merge.evil.driver", f"{zw.tmp / 'evil-bin' / 'mergedriver'} %O %A %B")
    before = repo.state()
    res = zw.run("merge", sid)
    assert res.returncode == 1 and "conflicts in README.md; nothing was merged" in res.stderr
    assert repo.state() == before and _marks(zw) == []
    tree = Path(zw.json("show", sid)["workspace"]["tree"])
    _plain_git(tree, repo.env, "commit", "-qam", "agent")
    _plain_git(repo.path, repo.env, "merge-tree", "--write-tree", "main", "zwarm/md")
    assert _marks(zw) == ["mergedriver"]  # git as the user runs it: the driver runs


FIFO_PLANTS = {
    # a file git reads in the worktree, made a named pipe (no sandbox stops mkfifo)
    "gitignore": "rm -f .gitignore; mkfifo .gitignore",
    "gitattributes": "rm -f .gitattributes; mkfifo .gitattributes",
    # a nested repository whose HEAD (read by `add -A` for its gitlink) is a named pipe
    "nested": "git init -q sub; git -C sub -c user.name=a -c user.email=a@b commit -q "
    "--allow-empty -m n; rm sub/.git/HEAD; mkfifo sub/.git/HEAD",
    # an include of the repository's config naming a named pipe (unsandboxed: .git is writable)
    "include": 'mkfifo "$PWD/../pipe-$$"; git config --file "$(git rev-parse '
    '--path-format=absolute --git-common-dir)/config" include.path "$PWD/../pipe-$$"',
}


@pytest.mark.parametrize("plant", sorted(FIFO_PLANTS))
def test_a_named_pipe_where_git_reads_is_refused_in_one_line_not_a_hang(
    zw: ZW, repo: Repo, plant: str
) -> None:
    """git opens a FIFO in place of a file it reads (a ``.gitignore``, a nested repository's
    ``HEAD``, an include) and waits for a writer: zwarm's git would hold the after-turn
    snapshot, ``diff`` and ``rm`` for its 600 s timeout. zwarm checks the config files and
    include targets before git runs, stops a git that waits on a FIFO, and says so in one
    line."""
    shell = f"unset GIT_DIR GIT_INDEX_FILE GIT_WORK_TREE; echo w > work.txt; {FIFO_PLANTS[plant]}"
    sid = zw.spawn("t", "-C", str(repo.path), "--worktree", "--name", "ff", env_extra=agent(shell))
    zw.wait(sid, timeout=60)
    d = zw.json("show", sid, timeout=60)
    assert d["status"] in ("completed", "failed"), d["status"]
    assert d["turns_detail"][0]["after"] is None
    log = (zw.session_dir(sid) / "supervisor.log").read_text()
    assert "no after snapshot of turn 1" in log, log
    assert "named pipe" in log or "is not a regular file: refused" in log, log
    res = zw.run("diff", "ff", timeout=60)
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith("Error: ") and "refused" in res.stderr, res.stderr
    tree = Path(d["workspace"]["tree"])
    if plant == "include":  # the user's own checkout is refused too, until the include goes
        config = repo.path / ".git" / "config"
        kept = [ln for ln in config.read_text().splitlines(True) if "pipe-" not in ln]
        config.write_text("".join(kept))
    zw.run("rm", "ff", "--force", check=True, timeout=60)
    assert not tree.exists()
