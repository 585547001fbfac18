"""The merge queue on real git repositories: sessions' branches rebased onto the target in a
temporary worktree, checked, the target moved to exactly that commit; conflicts ejected with a
comment; the user's checkout never moved under changes in the way; nothing lost."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZW
from tests.support.workspace import Repo, agent

GIT = "git -c user.name=Agent -c user.email=agent@example.com"
CONFLICT = (
    "printf 'def main():\\n    return {n}\\n' > src/app.py; git add -A; "
    + GIT
    + " commit -qm 'app {n}'"
)


def _spawn_all(zw: ZW, repo: Repo, shells: dict[str, str]) -> dict[str, str]:
    """Worktree sessions named as ``shells``' keys, each running its shell; all waited for."""
    sids = {}
    for name, shell in shells.items():
        sids[name] = zw.spawn("do " + name, "-C", str(repo.path), "--worktree", "--name", name,
                              env_extra=agent(shell))  # fmt: skip
    res = zw.wait(*sids.values())
    assert res.returncode in (0, 1), res.stderr
    return sids


def _adds(name: str, commit: bool = True) -> str:
    """A shell adding ``<name>.txt`` (committed, or left for zwarm to commit)."""
    done = f"; git add -A; {GIT} commit -qm 'add {name}'" if commit else ""
    return f"echo {name} > {name}.txt{done}"


def blobs(repo: Repo) -> set[str]:
    """Every blob reachable from any ref: what must never be lost."""
    out = repo.git("rev-list", "--objects", "--all").splitlines()
    objs = "\n".join(ln.split(" ", 1)[0] for ln in out if ln.strip()) + "\n"
    proc = subprocess.run(["git", "cat-file", "--batch-check=%(objecttype) %(objectname)"],
                          cwd=repo.path, env=repo.env, input=objs.encode(), capture_output=True,
                          check=True)  # fmt: skip
    return {ln.split()[1] for ln in proc.stdout.decode().splitlines() if ln.startswith("blob ")}


def _queue(zw: ZW) -> dict[str, Any]:
    queues = zw.json("merges")
    assert len(queues) == 1
    q: dict[str, Any] = queues[0]
    return q


def _by_branch(q: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["branch"]: e for e in q["entries"]}


def _temp_worktrees(zw: ZW) -> list[Path]:
    return list((zw.tmp).glob("xdg-data/zwarm/worktrees/*/.mergeq/*"))


def test_a_queue_run_merges_green_branches_and_ejects_conflicts_with_a_comment(
    zw: ZW, repo: Repo
) -> None:
    sids = _spawn_all(zw, repo, {
        "a": _adds("a"),
        "b": _adds("b", commit=False),  # the agent left it uncommitted: zwarm commits it
        "c": CONFLICT.format(n=3),
        "d": CONFLICT.format(n=4),  # conflicts with c once c is in
    })  # fmt: skip
    before = repo.state()
    res = zw.json("merge", "--queue", "a", "b", "c", "d", "--no-check")
    assert res["target"] == "main" and [e["branch"] for e in res["queued"]] == [
        "zwarm/a", "zwarm/b", "zwarm/c", "zwarm/d"]  # fmt: skip
    states = {d["branch"]: d["state"] for d in res["run"]["done"]}
    assert states == {"zwarm/a": "merged", "zwarm/b": "merged", "zwarm/c": "merged",
                      "zwarm/d": "ejected"}  # fmt: skip
    # the target moved to exactly the last tested commit; a straight line (rebased)
    head = repo.git("rev-parse", "main").strip()
    q = _by_branch(_queue(zw))
    assert q["zwarm/c"]["commit"] == head
    assert repo.git("rev-list", "--merges", "--count", "main").strip() == "0"
    log = repo.git("log", "--format=%s", "main").splitlines()
    assert log[:3] == ["app 3", "do b", "add a"] and log[-1] == "init"
    # the user's checkout followed (it was clean): files, index and status
    assert (repo.path / "a.txt").read_text() == "a\n" and (repo.path / "b.txt").exists()
    assert "return 3" in (repo.path / "src/app.py").read_text()
    assert repo.git("status", "--porcelain") == "" and repo.state()["head"] == head
    assert repo.state()["HEAD"] == before["HEAD"]  # still on main
    # d: ejected, with a review comment naming the conflicting file, the target untouched by it
    d = q["zwarm/d"]
    assert d["state"] == "ejected" and d["why"] == "conflicts with main in src/app.py"
    shown = zw.json("show", sids["d"])
    assert [(c["path"], c["line"]) for c in shown["comments"]] == [("src/app.py", 1)]
    assert shown["comments"][0]["text"].startswith("conflicts with main in src/app.py; rebase")
    # nothing left behind: no temporary worktree, every session's worktree and branch intact
    assert _temp_worktrees(zw) == []
    assert len(repo.worktrees()) == 5
    assert sorted(repo.branches()) == ["main", "zwarm/a", "zwarm/b", "zwarm/c", "zwarm/d"]
    # merged sessions are removable without --force (their tips count as brought in)
    zw.run("rm", "a", "b", "c", check=True)
    res = zw.run("rm", "d")
    assert res.returncode == 1 and "lost" in res.stderr
    # a second run has nothing to do
    again = zw.json("merges", "run", "--no-check")
    assert again[0]["done"] == [] and again[0]["stopped"] == "empty"


def test_the_users_dirty_checkout_holds_the_entry_and_the_target_stays(zw: ZW, repo: Repo) -> None:
    _spawn_all(zw, repo, {"h": _adds("h")})
    repo.write("h.txt", "the user's own, untracked\n")  # where the update would write
    old = repo.git("rev-parse", "main").strip()
    ran = zw.run("merge", "--queue", "h", "--no-check", "--json")
    assert ran.returncode == 1, ran  # held: nothing merged, and a script can tell
    res = json.loads(ran.stdout)
    (done,) = res["run"]["done"]
    assert done["state"] == "held"
    assert done["why"] == (
        f"the checkout {repo.path} has uncommitted changes in files the update touches (h.txt): "
        "commit or stash them first; the target was not moved"
    )
    assert res["run"]["stopped"] == "held"
    assert repo.git("rev-parse", "main").strip() == old  # the target did not move
    assert (repo.path / "h.txt").read_text() == "the user's own, untracked\n"
    listed = zw.run("merges", check=True).stdout
    assert "held" in listed and "h.txt" in listed
    # changes elsewhere in the checkout do not stand in the way; the held entry is retried
    (repo.path / "h.txt").unlink()
    repo.write("README.md", "# demo, edited by the user\n")
    (run,) = zw.json("merges", "run", "--no-check")
    assert [d["state"] for d in run["done"]] == ["merged"]
    assert (repo.path / "h.txt").read_text() == "h\n"
    assert (repo.path / "README.md").read_text() == "# demo, edited by the user\n"  # kept
    assert repo.git("status", "--porcelain") == " M README.md\n"


def test_a_target_not_checked_out_moves_alone(zw: ZW, repo: Repo) -> None:
    _spawn_all(zw, repo, {"o": _adds("o")})
    repo.git("switch", "-q", "-c", "elsewhere")
    repo.write("scratch.txt", "dirty, on another branch\n")
    before = repo.state("refs/heads/main")
    res = zw.json("merge", "--queue", "o", "--target", "main", "--no-check")
    assert [d["state"] for d in res["run"]["done"]] == ["merged"]
    assert repo.git("show", "main:o.txt") == "o\n"
    assert repo.state("refs/heads/main") == before  # the user's checkout untouched


def test_no_check_is_refused_loudly(zw: ZW, repo: Repo) -> None:
    _spawn_all(zw, repo, {"n": _adds("n")})
    res = zw.run("merge", "--queue", "n")
    assert res.returncode == 1
    assert res.stderr.strip() == (
        'Error: the merge queue has no check: set [merge] check = ["..."] in config.toml, pass '
        "--check CMD (to each run: checks given are not kept), or pass --no-check to merge "
        "untested"
    )
    assert zw.run("merges").stderr.strip() == "no merge queue"


def test_pause_resume_remove_and_priorities(zw: ZW, repo: Repo) -> None:
    _spawn_all(zw, repo, {"p1": _adds("p1"), "p2": _adds("p2"), "p3": _adds("p3")})
    zw.json("merge", "--queue", "p1", "--no-check")  # makes the queue, merges p1
    assert zw.json("merges", "pause")["paused"] is True
    res = zw.json("merge", "--queue", "p2", "--no-check")
    assert res["run"]["stopped"] == "paused" and res["run"]["done"] == []
    zw.json("merge", "--queue", "p3", "--priority", "5", "--no-check")
    removed = zw.json("merges", "remove", "p2")
    assert removed["removed"]["branch"] == "zwarm/p2"
    zw.json("merges", "resume")
    (run,) = zw.json("merges", "run", "--no-check")
    assert [d["branch"] for d in run["done"]] == ["zwarm/p3"]
    q = _by_branch(_queue(zw))
    assert q["zwarm/p2"]["state"] == "removed" and q["zwarm/p3"]["state"] == "merged"
    assert "zwarm/p2" in repo.branches()  # nothing deleted


# ---------------------------------------------------------------------------- crash safety
@pytest.mark.parametrize(
    ("step", "depth"),
    [(s, 1) for s in ("prepare", "rebase", "check", "advance", "checkout", "done")]
    + [(s, 2) for s in ("rebase", "check", "advance", "checkout")],
)
def test_a_run_killed_at_any_step_is_resumed_by_the_next(
    zw: ZW, repo: Repo, step: str, depth: int
) -> None:
    """SIGKILL at each step (``ZWARM_TEST_MERGEQ_KILL``, zwarm's test hook), then a rerun:
    the target is untouched or at the tested commit, no half-rebased branch, no temporary
    worktree left, every blob still there, and the queue finishes."""
    _spawn_all(zw, repo, {"k1": _adds("k1"), "k2": _adds("k2", commit=False)})
    repo.write("user.txt", "the user's work\n")
    repo.commit("the user moved main meanwhile")  # a real rebase
    old = repo.git("rev-parse", "main").strip()
    tip = repo.git("rev-parse", "zwarm/k1").strip()
    res = zw.run("merge", "--queue", "k1", "k2", "--no-check", "--depth", str(depth),
                 env_extra={"ZWARM_TEST_MERGEQ_KILL": step})  # fmt: skip
    assert res.returncode == -9, res.stderr
    assert bool(_temp_worktrees(zw)) == (step != "prepare")  # left behind, swept below
    before = blobs(repo)
    now = repo.git("rev-parse", "main").strip()
    if now != old:  # only ever the tested commit: k1 rebased onto main
        assert step in ("checkout", "done")
        assert repo.git("rev-parse", f"{now}^").strip() == old
        assert repo.git("show", f"{now}:k1.txt") == "k1\n"
    assert repo.git("rev-parse", "zwarm/k1").strip() == tip  # never rewritten
    zw.json("merges", "run", "--no-check")
    q = _by_branch(_queue(zw))
    assert q["zwarm/k1"]["state"] == "merged" and q["zwarm/k2"]["state"] == "merged", q
    main = repo.git("rev-parse", "main").strip()
    assert q["zwarm/k2"]["commit"] == main
    assert repo.git("show", "main:k1.txt") == "k1\n" and repo.git("show", "main:k2.txt") == "k2\n"
    assert repo.git("rev-list", "--count", f"{old}..main").strip() == "2"  # each once
    assert _temp_worktrees(zw) == [] and len(repo.worktrees()) == 3
    assert repo.git("status", "--porcelain") == ""  # the checkout followed, nothing half-done
    assert (repo.path / "k1.txt").exists() and (repo.path / "k2.txt").exists()
    assert before <= blobs(repo)
    zw.run("rm", "k1", "k2", check=True)  # merged, however the run went: removable as such


# ---------------------------------------------------------------------------- with checks
CHECKED = """
[checks]
unsandboxed = true

[merge]
check = ["cat REASON 2>/dev/null; test ! -e BROKEN"]
"""


def _breaks(name: str) -> str:
    return f"echo {name} > {name}.txt; echo '{name} broke it' > REASON; touch BROKEN"


def _never_red(repo: Repo, old: str) -> None:
    """No commit the queue put on the target fails the check (no BROKEN in its tree)."""
    for c in repo.git("rev-list", f"{old}..main").split():
        names = repo.git("ls-tree", "-r", "--name-only", c).split()
        assert "BROKEN" not in names, c


@pytest.mark.parametrize("depth", [1, 3])
def test_ten_agent_branches_in_one_run_never_red_nothing_lost(
    zw: ZW, repo: Repo, depth: int
) -> None:
    """With ``--depth 3`` too: entries stacked three at a time, the same outcome."""
    shells = {f"g{i}": _adds(f"g{i}", commit=i % 2 == 0) for i in range(1, 6)}
    shells |= {"c1": CONFLICT.format(n=11), "c2": CONFLICT.format(n=12)}
    shells |= {"r1": _breaks("r1"), "r2": _breaks("r2")}
    shells |= {"c3": CONFLICT.format(n=13) + "; " + _breaks("c3")}  # conflicts and breaks
    sids = _spawn_all(zw, repo, shells)
    zw.write_config(CHECKED)
    repo.write("README.md", "# demo, the user's edit in progress\n")  # dirty, not in the way
    old = repo.git("rev-parse", "main").strip()
    before = blobs(repo)
    order = ["g1", "c1", "r1", "g2", "c2", "g3", "r2", "g4", "c3", "g5"]
    res = zw.json("merge", "--queue", *order, "--send", "--depth", str(depth),
                  env_extra=agent("true"))  # fmt: skip
    states = {d["branch"].removeprefix("zwarm/"): d["state"] for d in res["run"]["done"]}
    assert states == {n: "merged" for n in ("g1", "c1", "g2", "g3", "g4", "g5")} | {
        n: "ejected" for n in ("r1", "c2", "r2", "c3")}  # fmt: skip
    _never_red(repo, old)
    main = repo.git("rev-parse", "main").strip()
    assert repo.git("rev-list", "--count", f"{old}..main").strip() == "6"  # each green one once
    for n in ("g1", "g2", "g3", "g4", "g5"):
        assert repo.git("show", f"main:{n}.txt") == f"{n}\n"
    assert "return 11" in repo.git("show", "main:src/app.py")
    q = _by_branch(_queue(zw))
    assert q["zwarm/g5"]["commit"] == main
    assert q["zwarm/r1"]["why"].startswith("check failed: `cat REASON 2>/dev/null; test ! -e "
                                           "BROKEN` exited with 1\nr1 broke it")  # fmt: skip
    assert q["zwarm/c2"]["why"] == "conflicts with main in src/app.py"
    for n in ("r1", "c2", "r2", "c3"):  # each ejected one has its comment, sent as its turn
        shown = zw.json("show", sids[n])
        (c,) = shown["comments"]
        assert c["sent_turn"] == 2, n
    r1 = zw.json("show", sids["r1"])["comments"][0]
    assert r1["text"].startswith("the merge queue's check failed on your branch rebased onto "
                                 "main: `cat REASON")  # fmt: skip
    assert "r1 broke it" in r1["text"]
    assert before <= blobs(repo)  # nothing lost
    assert _temp_worktrees(zw) == []
    assert (repo.path / "README.md").read_text() == "# demo, the user's edit in progress\n"
    assert repo.git("status", "--porcelain") == " M README.md\n"  # the checkout followed


def test_a_red_target_blocks_the_queue_until_it_is_green(zw: ZW, repo: Repo) -> None:
    _spawn_all(zw, repo, {"b1": _adds("b1")})
    zw.write_config(CHECKED)
    repo.write("BROKEN", "")
    repo.write("REASON", "main is broken\n")
    repo.commit("the user broke main")
    ran = zw.run("merge", "--queue", "b1", "--json")
    assert ran.returncode == 1, ran  # blocked: nothing merged, and a script can tell
    res = json.loads(ran.stdout)
    assert res["run"]["stopped"] == "blocked" and res["run"]["done"] == []
    again = zw.run("merges", "run")
    assert again.returncode == 1 and "main: stopped (blocked)" in again.stdout, again
    (q,) = zw.json("merges")
    assert q["blocked"].startswith("main itself fails its check at ")
    assert "main is broken" in q["blocked"]
    assert [e["state"] for e in q["entries"]] == ["waiting"]
    assert "blocked: main itself fails its check" in zw.run("merges", check=True).stdout
    repo.git("rm", "-q", "BROKEN")
    repo.commit("fixed")
    (run,) = zw.json("merges", "run")
    assert [d["state"] for d in run["done"]] == ["merged"]
    assert zw.json("merges")[0]["blocked"] == ""


def test_a_run_killed_while_checking_the_target_is_resumed(zw: ZW, repo: Repo) -> None:
    _spawn_all(zw, repo, {"t1": _adds("t1")})
    zw.write_config(CHECKED)
    repo.write("user.txt", "moved outside the queue\n")
    repo.commit("user")
    res = zw.run("merge", "--queue", "t1", env_extra={"ZWARM_TEST_MERGEQ_KILL": "target-check"})
    assert res.returncode == -9
    assert _temp_worktrees(zw) != []  # the target's check worktree was left ...
    (run,) = zw.json("merges", "run")
    assert [d["state"] for d in run["done"]] == ["merged"]
    assert _temp_worktrees(zw) == [] and len(repo.worktrees()) == 2  # ... and swept


def test_two_runs_at_once_one_runner_each_entry_once(zw: ZW, repo: Repo) -> None:
    import subprocess

    from tests.support import ZWARM_BIN, wait_until

    _spawn_all(zw, repo, {"w1": _adds("w1"), "w2": _adds("w2")})
    gate = zw.tmp / "gate"
    zw.write_config(CHECKED.replace('check = ["', f'check = ["while [ ! -e {gate} ]; do sleep '
                                    '0.05; done; '))  # fmt: skip
    old = repo.git("rev-parse", "main").strip()

    def start(*args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([str(ZWARM_BIN), *args, "--json"], env=zw.env, cwd=zw.cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip

    first = start("merge", "--queue", "w1")
    wait_until(lambda: _temp_worktrees(zw))  # its check is running (waiting for the gate)
    second = start("merges", "run")
    # a third joins while the first runs: queued, and taken by the run under way
    third = zw.json("merge", "--queue", "w2")
    assert third["run"]["stopped"] == "another run is processing it"
    gate.touch()
    out1, err1 = first.communicate(timeout=120)
    out2, err2 = second.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    done1 = json.loads(out1)["run"]["done"]
    (run2,) = json.loads(out2)
    assert [d["branch"] for d in done1] == ["zwarm/w1", "zwarm/w2"]
    assert run2["done"] == []  # it waited for the first, then found nothing to do
    assert repo.git("rev-list", "--count", f"{old}..main").strip() == "2"


def test_sandboxed_checks_do_not_see_the_state_dir(zw: ZW, repo: Repo) -> None:
    _spawn_all(zw, repo, {"s1": _adds("s1")})
    probe = f"test ! -e {zw.state_dir}/config.toml"  # true only where the state dir is hidden
    zw.write_config(f'[sandbox]\nmode = "bwrap"\n\n[merge]\ncheck = ["{probe}"]\n')
    res = zw.json("merge", "--queue", "s1")
    assert [d["state"] for d in res["run"]["done"]] == ["merged"], res
    assert repo.git("show", "main:s1.txt") == "s1\n"


def test_an_ignored_file_of_the_users_where_the_update_writes_holds_it(zw: ZW, repo: Repo) -> None:
    """The merge rule: an agent that commits its own ``.env`` (ignored here) never overwrites
    the user's: the entry is held, the target unmoved, the file intact."""
    _spawn_all(zw, repo, {"env": f"echo AGENT=1 > .env; git add -f .env; {GIT} commit -qm env"})
    repo.write(".env", "SECRET=mine\n")
    old = repo.git("rev-parse", "main").strip()
    ran = zw.run("merge", "--queue", "env", "--no-check", "--json")
    assert ran.returncode == 1, ran  # held
    res = json.loads(ran.stdout)
    (done,) = res["run"]["done"]
    assert done["state"] == "held" and "files git does not track where the update writes (.env)" \
        in done["why"]  # fmt: skip
    assert repo.git("rev-parse", "main").strip() == old
    assert (repo.path / ".env").read_text() == "SECRET=mine\n"


def test_a_damaged_queue_record_is_one_line_never_followed(zw: ZW, repo: Repo) -> None:
    _spawn_all(zw, repo, {"x": _adds("x")})
    zw.json("merge", "--queue", "x", "--no-check")
    (record,) = (zw.tmp / "xdg-state" / "zwarm" / "merges").glob("*/*.json")
    record.write_text('{"version": 1, "state_dir": "/elsewhere", "repo": "/", "target": "main"}')
    res = zw.run("merges")
    assert res.returncode == 1 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("Error: the merge queue ") and "refused" in res.stderr
    record.write_text("not json")
    res = zw.run("merges", "run", "--no-check")
    assert res.returncode == 1 and "is damaged" in res.stderr and "Traceback" not in res.stderr


def test_a_target_green_only_without_checks_is_checked_before_an_entry_is_blamed(
    zw: ZW, repo: Repo
) -> None:
    """A target merged into with --no-check was never tested under the checks a later run
    has: that run checks the target first (red: blocked), instead of ejecting the next entry
    for a failure that is the target's own."""
    _spawn_all(zw, repo, {"nb": "touch BROKEN", "e2": _adds("e2")})
    zw.json("merge", "--queue", "nb", "--no-check")
    zw.write_config(CHECKED)
    ran = zw.run("merge", "--queue", "e2", "--json")
    assert ran.returncode == 1, ran  # blocked
    res = json.loads(ran.stdout)
    assert res["run"]["stopped"] == "blocked" and res["run"]["done"] == []
    states = {e["branch"]: e["state"] for e in _queue(zw)["entries"]}
    assert states == {"zwarm/nb": "merged", "zwarm/e2": "waiting"}  # not blamed


def test_a_target_checked_again_for_new_checks_says_so_not_that_it_moved(
    zw: ZW, repo: Repo
) -> None:
    """The queue itself made the target's tip; a later run with other checks tests it again
    and says why: the checks changed, not "it changed outside the queue" (it did not)."""
    _spawn_all(zw, repo, {"g1": _adds("g1"), "g2": _adds("g2")})
    zw.json("merge", "--queue", "g1", "--no-check")
    zw.write_config(CHECKED)
    res = zw.run("merge", "--queue", "g2", check=True)
    assert "(the checks changed)" in res.stderr, res.stderr
    # progress, not warnings: a merged entry is no cause for alarm
    assert "entry 2: merged" in res.stderr and "warning:" not in res.stderr
    assert "changed outside the queue" not in res.stderr
    repo.write("user.txt", "moved outside the queue\n")
    repo.commit("user")
    _spawn_all(zw, repo, {"g3": _adds("g3")})
    res = zw.run("merge", "--queue", "g3", check=True)
    assert "(it changed outside the queue)" in res.stderr, res.stderr


def test_merge_mode_makes_merge_commits_and_ejects_a_conflict(zw: ZW, repo: Repo) -> None:
    sids = _spawn_all(zw, repo, {"m1": _adds("m1"), "m2": CONFLICT.format(n=5),
                                 "m3": CONFLICT.format(n=6)})  # fmt: skip
    zw.write_config('[merge]\nmode = "merge"\n')
    tip = repo.git("rev-parse", "zwarm/m1").strip()
    res = zw.json("merge", "--queue", "m1", "m2", "m3", "--no-check")
    assert [d["state"] for d in res["run"]["done"]] == ["merged", "merged", "ejected"]
    assert repo.git("rev-list", "--merges", "--count", "main").strip() == "2"
    repo.git("merge-base", "--is-ancestor", tip, "main")  # in, as it is (asserts exit 0)
    assert repo.git("log", "-1", "--format=%s", "main") == "Merge: do m2\n"
    assert _by_branch(_queue(zw))["zwarm/m3"]["why"] == "conflicts with main in src/app.py"
    assert zw.json("show", sids["m3"])["comments"][0]["path"] == "src/app.py"
    assert _temp_worktrees(zw) == [] and repo.git("status", "--porcelain") == ""
    zw.run("rm", "m1", "m2", check=True)  # merged: their tips are on main


def test_a_session_the_queue_merged_is_refused_as_a_new_entry(zw: ZW, repo: Repo) -> None:
    """Queueing a session again after the queue merged it (its branch not moved since) is
    refused in one line, not accepted as a new entry to merge twice (a user pass)."""
    _spawn_all(zw, repo, {"once": _adds("once")})
    res = zw.json("merge", "--queue", "once", "--no-check")
    ((done,),) = [res["run"]["done"]]
    assert done["state"] == "merged"
    again = zw.run("merge", "--queue", "once", "--no-check")
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"Error: {done['session_id']} was merged already (at {done['commit'][:12]})"
    ]
