"""``spawn --host NAME --worktree``: the session's worktree is made on the host, in the host's
repository, by the host's zwarm (``ops.hostws``); ``ls``/``show`` say its branch, ``diff``
shows the host's change, ``merge`` merges into the host's checkout (a conflicting one is
refused in one line, nothing changed), ``rm`` removes the host worktree. An agent planting a
``.git`` file or a ``filter`` in its host worktree decides nothing; a host down at ``diff`` is
said in one line within its timeout. Real sshd, real git, real zwarm on both sides; every
test makes its own repository on each host, as the hosts' user."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.launchers.ssh.test_ssh_launcher import Hosts, config
from tests.support import ZW


@pytest.fixture
def hz(zw: ZW, ssh_hosts: Any) -> Iterator[Hosts]:
    zw.state_dir.mkdir()
    zw.write_config(config(zw, ssh_hosts))
    yield Hosts(zw, ssh_hosts)


def on(hz: Hosts, name: str, line: str) -> str:
    """``line`` run by the shell of host ``name``'s user there (what ssh itself gives)."""
    ssh = ["ssh", "-F", str(hz.bed.ssh_config), "-o", "BatchMode=yes", f"host-{name}", line]
    done = subprocess.run(ssh, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, (line, done.stderr)
    return done.stdout


def host_repo(hz: Hosts, name: str, tag: str) -> Path:
    """A new repository of host ``name``'s user there, one commit of ``f.txt`` on ``main``."""
    repo = hz.shared / f"repo-{name}-{tag}"
    q = shlex.quote(str(repo))
    on(hz, name, f"git init -q -b main {q} && cd {q} && printf 'one\\ntwo\\n' > f.txt "
                 "&& git add -A && git commit -q -m init")  # fmt: skip
    return repo


def git_on(hz: Hosts, name: str, repo: Path, *args: str) -> str:
    return on(hz, name, shlex.join(["git", "-C", str(repo), *args]))


@pytest.mark.parametrize("name", ["a", "b"])
def test_worktree_diff_merge_and_rm_on_the_hosts_repository(hz: Hosts, name: str) -> None:
    zw = hz.zw
    repo = host_repo(hz, name, "m")
    edit = "printf 'one\\nTWO\\n' > f.txt && echo new > g.txt"
    sid = zw.spawn("--host", name, "-C", str(repo), "--worktree", "--name", f"w{name}",
                   "edit f", env_extra=hz.env(FAKE_SHELL=edit))  # fmt: skip
    assert zw.wait(sid).returncode == 0, zw.run("show", sid).stdout
    ws = zw.meta(sid)["workspace"]
    assert ws["host"] == name and ws["branch"] == f"zwarm/w{name}" and ws["repo"] == str(repo)
    tree = ws["tree"]
    assert zw.meta(sid)["cwd"] == tree and tree.startswith(str(hz.bed.hosts[f"host-{name}"].home))
    # the agent ran in the worktree on the host; the host's checkout is untouched
    assert on(hz, name, f"cat {shlex.quote(tree)}/g.txt") == "new\n"
    assert git_on(hz, name, repo, "status", "--porcelain") == ""
    assert f"zwarm/w{name}" in git_on(hz, name, repo, "branch", "--list")
    assert f"zwarm/w{name}" in zw.run("show", sid, check=True).stdout
    row = next(r for r in zw.json("ls") if r["id"] == sid)
    assert (row["branch"], row["host"], row["status"]) == (f"zwarm/w{name}", name, "completed")
    assert zw.json("show", sid)["workspace"]["branch"] == f"zwarm/w{name}"
    d = zw.json("diff", sid)
    assert {f["path"] for f in d["files"]} == {"f.txt", "g.txt"}
    assert d["changes"] == {"files": 2, "added": 2, "removed": 1}
    text = zw.run("diff", sid, check=True).stdout
    assert "-two" in text and "+TWO" in text and "+new" in text
    merged = zw.json("merge", sid)
    assert merged["merged"] is True and merged["into"] == "main" and merged["committed"]
    assert git_on(hz, name, repo, "show", "HEAD:f.txt") == "one\nTWO\n"
    assert on(hz, name, f"cat {shlex.quote(str(repo))}/g.txt") == "new\n"
    assert git_on(hz, name, repo, "status", "--porcelain") == ""
    zw.run("rm", sid, check=True)
    assert not os.path.exists(tree)
    assert git_on(hz, name, repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_conflicting_merge_on_a_host_is_refused_in_one_line_and_changes_nothing(
    hz: Hosts,
) -> None:
    zw = hz.zw
    repo = host_repo(hz, "a", "c")
    sid = zw.spawn("--host", "a", "-C", str(repo), "--worktree", "clash",
                   env_extra=hz.env(FAKE_SHELL="printf 'one\\nMINE\\n' > f.txt"))  # fmt: skip
    assert zw.wait(sid).returncode == 0
    on(hz, "a", f"cd {shlex.quote(str(repo))} && printf 'one\\nTHEIRS\\n' > f.txt "
                "&& git commit -q -am theirs")  # fmt: skip
    head = git_on(hz, "a", repo, "rev-parse", "HEAD")
    r = zw.run("merge", sid)
    assert r.returncode != 0 and r.stderr.startswith("Error: ") and "f.txt" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert git_on(hz, "a", repo, "rev-parse", "HEAD") == head
    assert git_on(hz, "a", repo, "status", "--porcelain") == ""
    assert git_on(hz, "a", repo, "show", "HEAD:f.txt") == "one\nTHEIRS\n"


def test_an_agent_planting_a_filter_or_a_dot_git_on_the_host_decides_nothing(hz: Hosts) -> None:
    zw = hz.zw
    marks = hz.shared / "marks"
    marks.mkdir()
    marks.chmod(0o777)
    repo = host_repo(hz, "a", "s")
    # a filter and an fsmonitor in the repository's own config (the agent, unsandboxed on the
    # host, can write it), and a .gitattributes applying the filter
    plant = (
        f"git config filter.evil.clean 'touch {marks}/clean; cat' && "
        f"git config core.fsmonitor 'touch {marks}/fsmonitor; false' && "
        "echo '* filter=evil' > .gitattributes && echo changed > f.txt"
    )
    sid = zw.spawn("--host", "a", "-C", str(repo), "--worktree", "--name", "plant", "t",
                   env_extra=hz.env(FAKE_SHELL=plant))  # fmt: skip
    assert zw.wait(sid).returncode == 0
    assert {f["path"] for f in zw.json("diff", sid)["files"]} == {"f.txt", ".gitattributes"}
    assert zw.json("merge", sid)["merged"] is True
    assert os.listdir(marks) == []
    # a .git file pointed at a repository of the agent's own: refused, nothing followed
    other = hz.shared / "agents-own"
    redirect = f"git init -q {other} && rm .git && echo 'gitdir: {other}/.git' > .git"
    sid2 = zw.spawn("--host", "a", "-C", str(repo), "--worktree", "--name", "redir", "t",
                    env_extra=hz.env(FAKE_SHELL=redirect))  # fmt: skip
    assert zw.wait(sid2).returncode == 0
    tree = zw.meta(sid2)["workspace"]["tree"]
    for cmd in (["diff", sid2], ["merge", sid2], ["rm", sid2]):
        r = zw.run(*cmd)
        assert r.returncode != 0 and "no longer points at the repository" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert os.path.isdir(tree)
    zw.run("rm", sid2, "--force", check=True)  # removes the folder; runs no git in it
    assert not os.path.exists(tree)
    assert os.listdir(marks) == []
    # the plants were live: plain git on the host follows them
    git_on(hz, "a", repo, "status")
    assert "fsmonitor" in os.listdir(marks)


def test_a_host_down_at_diff_is_said_in_one_line_within_the_timeout(hz: Hosts) -> None:
    zw = hz.zw
    repo = host_repo(hz, "b", "d")
    sid = zw.spawn("--host", "b", "-C", str(repo), "--worktree", "t",
                   env_extra=hz.env(FAKE_SHELL="echo x > f.txt"))  # fmt: skip
    assert zw.wait(sid).returncode == 0
    assert zw.json("diff", sid)["files"]  # the connection is warm
    hz.freeze("b")
    try:
        t = time.monotonic()
        r = zw.run("diff", sid)
        took = time.monotonic() - t
    finally:
        hz.thaw("b")
    assert r.returncode != 0 and r.stderr.startswith("Error: host 'b' unreachable"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and took < 15, (took, r.stderr)
    assert zw.json("diff", sid)["files"]  # back: it answers again
