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

import json
import os
import time
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


def test_merge_queue_checks_see_no_secret_of_zwarms_environment(zw: ZW, repo: Repo) -> None:
    """A check runs the agent's code (its ``conftest.py``), and its output's tail goes back
    to the agent in the ejection comment: zwarm's environment (an API key, an account's
    token) must not be in the check's."""
    _spawn(zw, repo, "sx", f"echo x > x.txt; git add -A; {GIT} commit -qm x")
    probe = "if env | grep -q sk-zwarm-secret; then echo LEAKED; exit 1; fi"
    zw.write_config(f'[checks]\nunsandboxed = true\n\n[merge]\ncheck = ["{probe}"]\n')
    secrets = {"OPENAI_API_KEY": "sk-zwarm-secret", "ANTHROPIC_API_KEY": "sk-zwarm-secret"}
    res = zw.run("merge", "--queue", "sx", "--json", env_extra=secrets)
    assert res.returncode == 0, res.stderr
    assert [d["state"] for d in json.loads(res.stdout)["run"]["done"]] == ["merged"], res.stdout
    assert repo.git("show", "main:x.txt") == "x\n"


def test_a_planted_cooldown_fifo_or_linked_accounts_dir_hangs_and_follows_nothing(
    zw: ZW,
) -> None:
    """The state dir's ``accounts/`` is agent-writable: a FIFO as a cooldown file is no file
    (``zwarm accounts`` answers at once), and an ``accounts`` link to a folder elsewhere is
    refused when a cooldown is recorded, nothing written through it."""
    from tests.support.fleet import configure
    from zwarm.engine import accounts
    from zwarm.errors import StoreError

    configure(zw, '[accounts.claude.A]\nenv = { ACCT = "A" }\n')
    d = zw.state_dir / "accounts"
    d.mkdir(mode=0o700)
    os.mkfifo(d / "claude.A.json")
    res = zw.run("accounts", "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    assert {x["name"]: x for x in json.loads(res.stdout)}["A"]["state"] == "ready"
    (d / "claude.A.json").unlink()
    d.rmdir()
    victim = zw.tmp / "victim"
    victim.mkdir()
    d.symlink_to(victim)
    now = time.time()
    with pytest.raises(StoreError):
        accounts.cool(zw.api().store, "claude", "A", now + 60, "usage_limit", "x", now)
    assert list(victim.iterdir()) == []
