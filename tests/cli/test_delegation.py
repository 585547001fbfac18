"""Delegation trees (issue 15): a session's agent that runs ``zwarm spawn`` (or the API, or the
tools) starts a child of that session; depth is limited; linked children go with their parent
on kill and rm, detached ones do not; ``ls --tree`` and the JSON rows roll a subtree's usage
and cost up, saying when part of the cost is unknown; a parent's budget covers its subtree.

The agents are the fake ones (``tests/fakes/bin/fake_agent.py``): ``FAKE_SHELL_N`` makes the
Nth agent run a command during its turn, here ``zwarm spawn`` itself. The cascade tests set
``ZWARM_PARENT_SESSION`` in the API's environment, exactly what an agent's own environment
holds (the first test shows the engine sets it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.support import FAKE_BIN, VENV_BIN, wait_until
from zwarm.errors import InvalidInput, SessionStateError
from zwarm.orchestrator.tools import Toolbox

PRICES = '[codex.prices]\n"gpt-5" = { input = 1000.0, cached_input = 0.0, output = 0.0 }\n'


def rows_by_name(zw: Any) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in zw.json("ls")}


def settled(zw: Any, *names: str) -> dict[str, dict[str, Any]]:
    """Once every named session exists and is finished: the rows by name."""

    def done() -> dict[str, dict[str, Any]] | None:
        rows = rows_by_name(zw)
        ok = all(n in rows and rows[n]["status"] in ("completed", "failed") for n in names)
        return rows if ok else None

    got: dict[str, dict[str, Any]] = wait_until(done, message=f"sessions {names} to finish")
    return got


def toolbox(zw: Any, **extra: str) -> Toolbox:
    return Toolbox(zw.api(env_extra={**zw.replay("codex_simple"), **extra}), "t")


def hanging(zw: Any, parent: str | None = None, **extra: str) -> Any:
    """An API whose agents run until killed, inside ``parent``'s agent if given."""
    env = {"FAKE_HANG": "1", **extra}
    if parent is not None:
        env["ZWARM_PARENT_SESSION"] = parent
    return zw.api(env_extra={**zw.replay("codex_simple"), **env})


# ---------------------------------------------------------------------------- a real tree
def test_agents_that_spawn_make_a_three_level_tree_and_depth_4_is_refused(zw) -> None:
    shells = {
        "FAKE_SHELL_1": "zwarm spawn 'level two' --name lvl2",
        "FAKE_SHELL_2": "zwarm spawn 'level three' --name lvl3",
        "FAKE_SHELL_3": "zwarm spawn 'level four' --name lvl4; echo spawn-exit=$?",
    }
    root = zw.spawn("level one", "--name", "lvl1", env_extra=zw.replay("codex_simple", **shells))
    rows = settled(zw, "lvl1", "lvl2", "lvl3")
    assert "lvl4" not in rows and len(rows) == 3  # refused: nothing created
    one, two, three = rows["lvl1"], rows["lvl2"], rows["lvl3"]
    assert one["id"] == root
    assert (one["parent_session_id"], one["spawn_depth"]) == (None, 1)
    assert (two["parent_session_id"], two["spawn_depth"]) == (one["id"], 2)
    assert (three["parent_session_id"], three["spawn_depth"]) == (two["id"], 3)
    assert [r["lifecycle"] for r in (two, three)] == ["linked", "linked"]
    assert (one["children"], two["children"], three["children"]) == ([two["id"]], [three["id"]], [])
    # the refusal, as the third agent saw it: one clear line and a non-zero exit
    err = zw.turn_file(three["id"], 1, "stderr").read_text()
    assert "spawn refused: it would be at depth 4" in err and "max_spawn_depth = 3" in err
    assert "spawn-exit=1" in err and "Traceback" not in err
    # every agent got its own session as parent, and the state dir
    envs = [json.loads((zw.record / f"env{n}.json").read_text()) for n in (1, 2, 3)]
    assert [e["ZWARM_PARENT_SESSION"] for e in envs] == [one["id"], two["id"], three["id"]]
    assert {e["ZWARM_DIR"] for e in envs} == {str(zw.state_dir.resolve())}
    # the roll-up: 109 tokens each (codex_simple); the root's subtree is all three
    assert one["tree_sessions"] == 3 and one["tree_usage"]["total_tokens"] == 3 * 109
    assert two["tree_usage"]["total_tokens"] == 2 * 109
    # ls --tree draws it; show lists the children
    out = zw.run("ls", "--tree", check=True).stdout.splitlines()
    drawn = [ln for ln in out if "lvl" in ln]
    assert drawn[0].startswith(f"{root[:8]} lvl1")
    assert drawn[1].startswith(f"└─ {two['id'][:8]} lvl2")
    assert drawn[2].startswith(f"   └─ {three['id'][:8]} lvl3")
    shown = zw.run("show", "lvl1", check=True).stdout
    assert f"children (1):\n  {two['id']} lvl2 completed" in shown
    detail = zw.json("show", "lvl2")
    assert detail["children"] == [three["id"]] and detail["tree_sessions"] == 2


def test_an_agent_reaches_zwarm_from_a_login_shell_as_codex_runs_commands(zw) -> None:
    """Regression (issue 30.9): codex runs every command as ``bash -lc``, whose
    /etc/profile resets PATH (the virtualenv's bin is gone): ``zwarm spawn`` was "command
    not found". ``"$ZWARM"`` names a launcher of this zwarm that survives, and a shell that
    keeps PATH finds that same launcher as ``zwarm``."""
    login = (
        "bash -lc 'command -v zwarm > which-login.txt;"
        ' "$ZWARM" spawn "from a login shell" --name child\'; '
        "sh -c 'command -v zwarm' > which.txt"
    )
    zw.state_dir.mkdir()
    zw.write_config(f'[codex]\ncommand = ["{FAKE_BIN / "codex"}"]\n')  # found whatever PATH
    env = zw.replay("codex_simple", FAKE_SHELL_1=login, PATH="/usr/bin:/bin")
    root = zw.spawn("delegate", "--name", "root", env_extra=env)
    rows = settled(zw, "root", "child")
    assert rows["child"]["parent_session_id"] == root, (zw.cwd / "which-login.txt").read_text()
    launcher = (zw.cwd / "which.txt").read_text().strip()
    assert launcher and os.access(launcher, os.X_OK)
    assert os.stat(launcher).st_mode & 0o777 == 0o700
    assert VENV_BIN.as_posix() not in (zw.cwd / "which-login.txt").read_text()  # PATH reset
    out = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "zwarm" in out.stdout


def test_a_child_started_from_a_login_shell_finds_the_agent_its_parent_found(zw) -> None:
    """Issue 30.9, as a new user meets it: the agent CLI found on the PATH zwarm gave the
    parent (nvm's bin, a virtualenv: set in .bashrc, which ``bash -lc`` skips) was gone from
    the login shell's PATH, so ``"$ZWARM" spawn`` failed: "codex agent binary 'codex' not
    found on PATH". A session started from inside an agent looks its agent up on the PATH
    its parent's agent was given first (``engine.tree.AGENT_PATH_VAR``), then its own."""
    login = 'bash -lc \'"$ZWARM" spawn "from a login shell" --name child 2> child-err.txt\''
    env = zw.replay("codex_simple", FAKE_SHELL_1=login,
                    PATH=os.pathsep.join([str(FAKE_BIN), "/usr/bin", "/bin"]))  # fmt: skip
    root = zw.spawn("delegate", "--name", "root", env_extra=env)
    rows = settled(zw, "root")
    err = (zw.cwd / "child-err.txt").read_text()
    assert "child" in rows, err
    rows = settled(zw, "root", "child")
    assert rows["child"]["parent_session_id"] == root
    assert rows["child"]["status"] == "completed", rows["child"]
    child_env = json.loads((zw.record / "env2.json").read_text())
    assert child_env["PATH"].split(os.pathsep)[1] == str(FAKE_BIN)  # as its parent's agent


def test_the_launcher_runs_the_interpreter_it_names_even_one_not_utf8(tmp_path) -> None:
    """``env.launcher``: one per interpreter, 0700, exactly ``PYTHON -I -m zwarm "$@"``, kept
    when intact and rewritten when not; a path that is not UTF-8 is written as it is."""
    from zwarm.env.launcher import launcher

    environ = {"XDG_STATE_HOME": str(tmp_path / "state")}
    odd = os.fsdecode(b"/opt/py\xff/bin/python")
    path = launcher(odd, environ)
    assert path is not None and path.parent.parent == tmp_path / "state" / "zwarm" / "bin"
    assert b"exec '/opt/py\xff/bin/python' -I -m zwarm \"$@\"" in path.read_bytes()
    mine = launcher(sys.executable, environ)
    assert mine is not None and mine != path and os.stat(mine).st_mode & 0o777 == 0o700
    mine.write_text("#!/bin/sh\necho planted\n")
    assert launcher(sys.executable, environ) == mine and b"planted" not in mine.read_bytes()
    out = subprocess.run([mine, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("zwarm ")


def test_a_parent_the_environment_names_is_verified(zw) -> None:
    done = zw.spawn("finished", env_extra=zw.replay("codex_simple"))
    zw.wait(done)
    cases = {
        "not-an-id": "is not a session id",
        "12345678-1234-1234-1234-123456789abc": "names no session in",
        done: "which is completed, not running",
    }
    for parent, why in cases.items():
        res = zw.run("spawn", "x", env_extra={"ZWARM_PARENT_SESSION": parent})
        assert res.returncode == 1 and why in res.stderr and "Traceback" not in res.stderr
    # a parent in another state dir is not one of this state dir's sessions
    other = zw.tmp / "other-state"
    res = zw.run("spawn", "x", env_extra={"ZWARM_PARENT_SESSION": done, "ZWARM_DIR": str(other)})
    assert res.returncode == 1 and "names no session in" in res.stderr
    assert len(zw.json("ls")) == 1  # nothing was created


def test_depth_comes_from_the_parents_record_and_the_tool_says_no(zw) -> None:
    zw.state_dir.mkdir()
    zw.write_config("[limits]\nmax_spawn_depth = 2\n")
    root = hanging(zw).spawn("root")
    # the environment can claim no depth: only the parent's record counts
    child = hanging(zw, root.id, ZWARM_SPAWN_DEPTH="0").spawn("child")
    assert (child.parent_session_id, child.spawn_depth) == (root.id, 2)
    with pytest.raises(InvalidInput, match="deeper than \\[limits\\] max_spawn_depth = 2"):
        hanging(zw, child.id).spawn("grandchild")
    tb = toolbox(zw, FAKE_HANG="1", ZWARM_PARENT_SESSION=child.id)
    res = tb.dispatch("delegate", {"task": "too deep"})
    assert res["ok"] is False and "spawn refused: it would be at depth 3" in res["error"]
    assert {r["id"] for r in zw.json("ls")} == {root.id, child.id}


# ---------------------------------------------------------------------------- kill and rm
def test_kill_takes_linked_children_and_leaves_detached_ones(zw) -> None:
    parent = hanging(zw).spawn("parent", name="boss")
    kid = hanging(zw, parent.id).spawn("linked child", name="kid")
    free = hanging(zw, parent.id).spawn("detached child", name="free", detached=True)
    grandkid = hanging(zw, kid.id).spawn("grandchild", name="grandkid")
    loose = hanging(zw, free.id).spawn("under the detached one", name="loose")
    res = zw.run("kill", "boss", check=True)
    assert res.stdout.strip() == (
        f"{parent.id} killed; its linked children killed: {kid.id}, {grandkid.id}; "
        f"detached children left running: {free.id}"
    )
    rows = rows_by_name(zw)
    assert {n: r["status"] for n, r in rows.items()} == {
        "boss": "killed",
        "kid": "killed",
        "grandkid": "killed",
        "free": "running",
        "loose": "running",
    }
    assert rows["free"]["lifecycle"] == "detached" and rows["loose"]["lifecycle"] == "linked"
    # rm: the linked subtree goes, the detached one stays (a root of its own now)
    res = zw.run("rm", "boss", check=True)
    assert res.stdout.strip() == (
        f"{parent.id} removed, with its linked children: {kid.id}, {grandkid.id}; "
        f"detached children kept: {free.id}"
    )
    assert set(rows_by_name(zw)) == {"free", "loose"}
    tree = zw.run("ls", "--tree", check=True).stdout
    assert f"\n{free.id[:8]} free (detached)" in tree and f"└─ {loose.id[:8]} loose" in tree


def test_kill_of_a_finished_parent_stops_its_running_tree(zw) -> None:
    """Issue 30: a parent that already completed is not refused as ``not running``: its
    running linked descendants are killed, its own status kept, and the line says so."""
    parent = zw.api(env_extra=zw.replay("codex_simple", FAKE_SLEEP="1")).spawn("quick")
    kid = hanging(zw, parent.id).spawn("slow child", name="kid")
    grandkid = hanging(zw, kid.id).spawn("slower grandchild", name="grandkid")
    free = hanging(zw, parent.id).spawn("detached child", name="free", detached=True)
    zw.wait(parent.id)
    res = zw.run("kill", parent.id, check=True)
    assert res.stdout.strip() == (
        f"{parent.id} had already completed; its linked children killed: {kid.id}, "
        f"{grandkid.id}; detached children left running: {free.id}"
    )
    status = {r["id"]: r["status"] for r in zw.json("ls")}
    assert status == {parent.id: "completed", kid.id: "killed", grandkid.id: "killed",
                      free.id: "running"}  # fmt: skip
    res = zw.run("kill", parent.id)  # nothing under it runs any more: nothing to kill
    assert res.returncode == 1 and "is not running (completed)" in res.stderr


def test_rm_of_a_parent_with_a_running_linked_child_needs_force(zw) -> None:
    parent = zw.api(env_extra=zw.replay("codex_simple", FAKE_SLEEP="1")).spawn("quick")
    kid = hanging(zw, parent.id).spawn("slow child")
    zw.wait(parent.id)
    res = zw.run("rm", parent.id)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"has 1 linked child session still active ({kid.id})" in res.stderr
    assert len(zw.json("ls")) == 2  # nothing removed
    res = zw.run("rm", parent.id, "--force", "--json", check=True)
    assert json.loads(res.stdout) == [parent.id, kid.id]
    assert zw.json("ls") == []


def test_rm_of_a_parent_and_its_child_together_removes_each_once(zw) -> None:
    parent = zw.api(env_extra=zw.replay("codex_simple", FAKE_SLEEP="1")).spawn("p", name="p")
    kid = zw.api(env_extra={**zw.replay("codex_simple"), "ZWARM_PARENT_SESSION": parent.id})
    child = kid.spawn("c", name="c")
    zw.wait(parent.id, child.id)
    res = zw.run("rm", "p", "c", "--json", check=True)
    assert json.loads(res.stdout) == [parent.id, child.id]
    api = zw.api()
    assert api.rm([], finished=True) == []


def test_end_session_reports_the_children_it_took(zw) -> None:
    parent = hanging(zw).spawn("parent")
    kid = hanging(zw, parent.id).spawn("child")
    res = toolbox(zw).dispatch("end_session", {"session_id": parent.id})
    assert res["ok"] and res["children_killed"] == [kid.id]


# ---------------------------------------------------------------------------- cost roll-up
def test_tree_cost_rolls_up_and_says_when_a_part_is_unpriced(zw) -> None:
    zw.state_dir.mkdir()
    zw.write_config(PRICES)
    shell = "zwarm spawn priced -m gpt-5 --name a && zwarm spawn unpriced -m mystery --name b"
    extra = zw.replay("codex_simple", FAKE_SHELL_1=shell)
    zw.spawn("root", "-m", "gpt-5", "--name", "root", env_extra=extra)
    rows = settled(zw, "root", "a", "b")
    root = rows["root"]
    # 60 uncached input tokens at $1000/M = $0.06 for root and a; b's model has no price
    assert (root["cost_usd"], rows["a"]["cost_usd"], rows["b"]["cost_usd"]) == (0.06, 0.06, None)
    assert (root["tree_cost_usd"], root["tree_unpriced"], root["tree_sessions"]) == (0.12, 1, 3)
    assert root["tree_usage"]["total_tokens"] == 3 * 109
    assert (rows["a"]["tree_cost_usd"], rows["b"]["tree_cost_usd"]) == (0.06, None)
    drawn = zw.run("ls", "--tree", check=True).stdout.splitlines()
    line = next(ln for ln in drawn if " root " in ln)
    assert "≥ $0.1200 (1 ?)" in line  # a lower bound, and how many parts are unknown
    view = toolbox(zw).dispatch("check_session", {"session_id": "root"})
    assert view["subtree"]["cost_usd"] == 0.12 and view["subtree"]["unpriced_sessions"] == 1
    assert "lower bound" in view["subtree"]["note"]
    assert sorted(view["children"]) == sorted([rows["a"]["id"], rows["b"]["id"]])


def test_a_parents_budget_covers_its_subtree(zw) -> None:
    zw.state_dir.mkdir()
    zw.write_config(PRICES)
    parent = hanging(zw).spawn("parent", model="gpt-5", max_cost=0.1)
    kids = zw.api(env_extra={**zw.replay("codex_simple"), "ZWARM_PARENT_SESSION": parent.id})
    first = kids.spawn("first", model="gpt-5")
    zw.wait(first.id)
    assert kids.get(first.id).status.value == "completed"  # $0.06 of the parent's $0.10
    second = kids.spawn("second", model="gpt-5")
    zw.wait(second.id)
    s = kids.get(second.id)
    assert (s.status.value, s.reason) == ("failed", "budget_exceeded")
    assert f"counting parent session {parent.id}'s 2 descendant session(s)" in (s.error or "")
    with pytest.raises(InvalidInput, match=f"spawn refused: parent session {parent.id}"):
        kids.spawn("third", model="gpt-5")
    with pytest.raises(SessionStateError, match="budget exceeded"):
        kids.inject(first.id, "more")


def test_old_records_read_as_roots(zw) -> None:
    sid = zw.spawn("old", env_extra=zw.replay("codex_simple"))
    zw.wait(sid)
    meta = zw.meta(sid)
    for key in ("parent_session_id", "parent_run_id", "spawn_depth", "lifecycle"):
        meta.pop(key, None)
    (zw.session_dir(sid) / "meta.json").write_text(json.dumps(meta))
    (row,) = zw.json("ls")
    assert (row["parent_session_id"], row["spawn_depth"], row["lifecycle"]) == (None, 1, "linked")
    meta["spawn_depth"] = 0  # out of bounds: the file is damaged, said so
    (zw.session_dir(sid) / "meta.json").write_text(json.dumps(meta))
    assert zw.json("ls")[0]["status"] == "damaged"


def test_show_reads_its_own_subtree_and_leaves_an_unrelated_session_alone(zw) -> None:
    """``show`` gives a session's children and its subtree's totals as ``ls`` rolls them up,
    from its own subtree only: an unrelated session whose supervisor was lost is left as it is
    on disk (``show`` is about another session), where a listing reconciles it."""
    import signal

    shells = {"FAKE_SHELL_1": "zwarm spawn 'level two' --name lvl2"}
    root = zw.spawn("level one", "--name", "lvl1", env_extra=zw.replay("codex_simple", **shells))
    rows = settled(zw, "lvl1", "lvl2")
    other = zw.spawn("hang", env_extra={**zw.replay("codex_simple"), "FAKE_HANG": "1"})
    wait_until(lambda: zw.meta(other)["turns"][-1].get("agent"), message="agent recorded")
    os.kill(zw.meta(other)["turns"][-1]["supervisor"]["pid"], signal.SIGKILL)
    meta = zw.session_dir(other) / "meta.json"
    before = meta.read_bytes()

    shown = zw.json("show", root)
    assert shown["children"] == [rows["lvl2"]["id"]]
    for key in ("tree_sessions", "tree_usage", "tree_cost_usd", "tree_unpriced"):
        assert shown[key] == rows["lvl1"][key], key
    assert shown["tree_sessions"] == 2
    assert [(c["id"], c["status"]) for c in shown["child_sessions"]] == [
        (rows["lvl2"]["id"], "completed")
    ]
    assert zw.json("show", rows["lvl2"]["id"])["children"] == []
    assert meta.read_bytes() == before  # not read as a row, not reconciled: untouched

    listed = {r["id"]: r for r in zw.json("ls")}  # a listing does reconcile it
    assert listed[other]["status"] == "failed" and "supervisor lost" in listed[other]["error"]
