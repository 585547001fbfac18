"""The ``pick`` tool's ``queue=true``, called as the orchestrator calls it (a ``Toolbox`` on
the ``zw`` world): the winner goes through the merge queue on the user's trusted ``[merge]
check`` only (the model names no check: the tool has no such argument, and a queue without
a configured check is refused), and ``zwarm merges run`` merges it (``pick --queue`` at the
command line: tests/workspace/test_bestof.py)."""

from __future__ import annotations

from typing import Any

from tests.orchestrator.helpers import err, ok
from tests.support import ZW
from tests.support.fleet import configure
from tests.support.workspace import make_repo
from tests.workspace.test_bestof import BUG, CHECK, TEST, UNSANDBOXED, settled, start
from zwarm.orchestrator.tools import Toolbox


def test_pick_queue_uses_only_the_trusted_merge_check_and_merges_run_merges_it(zw: ZW) -> None:
    calc = make_repo(zw.cwd / "repo", zw.env)
    calc.write("src/calc.py", BUG)
    calc.write("tests/test_calc.py", TEST)
    calc.commit("calc with a bug")
    configure(zw, UNSANDBOXED)  # no [merge] check yet
    set_id = start(zw, calc, ["bigger", "correct"], "--check", CHECK)
    settled(zw, set_id)

    def pick(**more: Any) -> dict[str, Any]:  # a Toolbox on the config as it is now
        tb = Toolbox(zw.api(), source="bot")
        return tb.dispatch("pick", {"set_id": set_id, "queue": True, **more})

    # the model cannot name the check, nor skip it
    for bad in ({"check": "true"}, {"checks": ["true"]}, {"no_check": True}):
        assert "unknown argument" in err(pick(**bad)), bad
    # no trusted [merge] check: refused, nothing changed
    why = err(pick())
    assert "check" in why and "[merge] check" in why, why
    assert len(calc.worktrees()) == 3 and zw.json("compare", set_id)["picked"] is None
    assert zw.run("merges").stdout.strip() in ("", "no merge queue") or not zw.json("merges")
    # the user's check, trusted: the winner is queued on it (the base passes it)
    configure(zw, UNSANDBOXED + '[merge]\ncheck = ["test -f src/calc.py"]\n')
    got = ok(pick())
    assert got["picked"] == 2 and got["worktrees_removed"] == [1], got
    assert got["queue"]["queued"] and got["queue"]["target"], got
    # queued on the trusted check, and run through the queue (pick runs it at once; a later
    # `merges run` finds it merged and merges nothing twice)
    entries = [e for q in zw.json("merges") for e in q["entries"]]
    assert [(e["checks"], e["state"]) for e in entries] == [(["test -f src/calc.py"], "merged")], (
        entries
    )
    assert (calc.path / "src" / "calc.py").read_text() == BUG.replace("a - b", "a + b")
    res = zw.run("merges", "run")
    assert res.returncode == 0, res.stderr
    assert [e["state"] for q in zw.json("merges") for e in q["entries"]] == ["merged"]
    assert calc.git("log", "--format=%s", "-n", "5", "main").count("\n") >= 2
