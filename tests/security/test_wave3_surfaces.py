"""A hostile agent against this wave's surfaces (the merge queue, best-of sets, accounts, the
checks runner): each test plants what an agent (or a cloned repository) can write and checks
that it decides nothing: no command run, no merge over, no path followed.

An agent working in a worktree of the user's repository can write that repository's
``.git/config`` (docs/threat-model.md); zwarm's git turns off every driver that config
defines (``engine.git.neutral``). A conditional include (``includeIf "gitdir:..."``,
``"onbranch:..."``) applies only in the context git evaluates it in: in the child ``git``
that ``worktree add`` starts in the new worktree, not in the repository ``neutral`` read the
config from, so a filter defined only there must be turned off too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import ZW
from tests.support.workspace import Repo, agent, make_repo

GIT = "git -c user.name=Agent -c user.email=agent@example.com"


@pytest.fixture
def repo(zw: ZW) -> Repo:
    return make_repo(zw.cwd / "repo", zw.env)


def _plant_filter(zw: ZW, repo: Repo, condition: str) -> Path:
    """What a hostile agent writes into the repository's config: a filter (and a merge
    driver) defined only in a file included under ``condition``; the marker its commands
    would create."""
    marker = zw.tmp / "PWNED"
    inc = zw.tmp / "evil.inc"
    inc.write_text(
        f'[filter "pwn"]\n\tsmudge = "touch {marker}; cat"\n\tclean = "touch {marker}; cat"\n'
        f'[merge "pwn"]\n\tdriver = "touch {marker}; false"\n'
    )
    repo.git("config", f"includeIf.{condition}.path", str(inc))
    return marker


def _spawn(zw: ZW, repo: Repo, name: str, shell: str) -> str:
    sid = zw.spawn("do " + name, "-C", str(repo.path), "--worktree", "--name", name,
                   env_extra=agent(shell))  # fmt: skip
    res = zw.wait(sid)
    assert res.returncode in (0, 1), res.stderr
    return sid


def test_merge_queue_runs_no_filter_of_a_conditional_include(zw: ZW, repo: Repo) -> None:
    """The queue's temporary worktree is made by ``git worktree add``: its child checkout
    runs with the temporary worktree's git dir, where a ``gitdir:`` include applies."""
    shell = (
        "printf '* filter=pwn merge=pwn\\n' > .gitattributes; echo mine > f.txt; "
        f"git add -A; {GIT} commit -qm attrs"
    )
    _spawn(zw, repo, "fx", shell)
    marker = _plant_filter(zw, repo, "gitdir:**/worktrees/**")
    res = zw.json("merge", "--queue", "fx", "--no-check")
    assert [d["state"] for d in res["run"]["done"]] == ["merged"], res
    assert not marker.exists(), "the planted filter ran in zwarm's git"
    assert repo.git("show", "main:f.txt") == "mine\n"
    assert (repo.path / "f.txt").read_text() == "mine\n"  # checked out as its bytes are


@pytest.mark.parametrize("condition", ["gitdir:**/worktrees/**", "onbranch:zwarm/**"])
def test_spawn_worktree_runs_no_filter_of_a_conditional_include(
    zw: ZW, repo: Repo, condition: str
) -> None:
    """A previous session (or the cloned repository's own files) left ``.gitattributes``
    naming a filter, and a config include that defines it only in a worktree / on zwarm's
    branches: making the next session's worktree must not run it."""
    repo.write(".gitattributes", "* filter=pwn\n")
    repo.commit("attrs")
    marker = _plant_filter(zw, repo, condition)
    _spawn(zw, repo, "w1", "true")
    assert not marker.exists(), "the planted filter ran in zwarm's git"
