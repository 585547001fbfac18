"""Best-of sets (``spawn --best-of``, ``compare``, ``pick``): N attempts of one task in N
worktrees from one base, decided by zwarm's evidence, never by an agent's word.

The attempts differ through one fake-agent setting: ``{MODEL}`` in ``FAKE_SHELL`` and
``FAKE_REPLAY`` is the model the attempt runs (``--models``), so ``shell_for`` gives each
model its own change and ``replays`` its own answer and usage.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support import SAMPLES, ZW, wait_until
from tests.support.workspace import Repo

BUG = "def add(a, b):\n    return a - b\n"
TEST = (
    "import sys\nsys.path.insert(0, 'src')\nfrom calc import add\n"
    "assert add(2, 3) == 5, 'add is wrong'\nprint('ok')\n"
)
CHECK = "python3 tests/test_calc.py"
FIX = "sed -i 's/a - b/a + b/' src/calc.py"
SHELLS = {
    "correct": FIX,
    "breaks": "sed -i 's/a - b/a * b/' src/calc.py",
    "bigger": FIX + '; for i in $(seq 1 30); do echo "# note $i" >> src/calc.py; done',
    "budget": FIX,
    "cheat": "rm tests/test_calc.py; echo 'assert True' > tests/conftest.py",
    "hang": FIX,
    "swapped": "sed -i 's/a - b/b + a/' src/calc.py",
}


def shell_for(models: list[str]) -> str:
    """One FAKE_SHELL for every attempt: each model's change."""
    cases = " ".join(f"{m}) {SHELLS[m]} ;;" for m in models)
    return f"case '{{MODEL}}' in {cases} esac"


def replays(tmp: Path, models: list[str]) -> str:
    """A codex replay per model: the 'cheat' claims its tests pass, 'budget' used many tokens."""
    for m in models:
        lines = (SAMPLES / "codex_simple.jsonl").read_text().splitlines()
        if m == "cheat":
            lines[2] = lines[2].replace("Hi there! This is the fake server.", "All tests pass.")
        if m == "budget":
            lines[3] = lines[3].replace('"input_tokens":100', '"input_tokens":900000')
        (tmp / f"replay-{m}.jsonl").write_text("\n".join(lines) + "\n")
    return str(tmp / "replay-{MODEL}.jsonl")


@pytest.fixture
def calc(repo: Repo) -> Repo:
    repo.write("src/calc.py", BUG)
    repo.write("tests/test_calc.py", TEST)
    repo.commit("calc with a bug")
    return repo


def start(zw: ZW, repo: Repo, models: list[str], *args: str, **extra: str) -> str:
    env = {"FAKE_SHELL": shell_for(models), "FAKE_REPLAY": replays(zw.tmp, models), **extra}
    res = zw.run(
        "spawn", "fix add", "-C", str(repo.path), "--best-of", str(len(models)),
        "--models", ",".join(models), *args, env_extra=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    set_id = res.stdout.strip()
    assert set_id.startswith("set-"), res.stdout
    return set_id


def settled(zw: ZW, set_id: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """The set's view once no attempt runs (compare settles what the supervisors did not).
    ``env``: the spawn's, when attempts are queued (a queued turn gets the environment of the
    command whose scheduler pass starts it, docs/fleet.md)."""
    view: dict[str, object] = {}

    def done() -> bool:
        nonlocal view
        view = zw.json("compare", set_id, env_extra=env)
        return not any(a["pending"] for a in view["attempts"])  # type: ignore[union-attr]

    wait_until(done)
    return view


def by_attempt(view: dict[str, object]) -> dict[int, dict[str, object]]:
    return {a["attempt"]: a for a in view["attempts"]}  # type: ignore[index,union-attr]


# ---------------------------------------------------------------------------- spawn
def test_mismatched_agents_and_models_are_one_line_and_start_nothing(zw: ZW, calc: Repo) -> None:
    res = zw.run("spawn", "t", "-C", str(calc.path), "--best-of", "3", "--agents",
                 "codex,claude", "--models", "a,b,c")  # fmt: skip
    assert res.returncode == 1
    assert res.stderr.startswith("Error: --agents names 2 and --models 3")
    assert res.stderr.count("\n") == 1
    assert not (zw.state_dir / "sessions").exists() or not list(
        (zw.state_dir / "sessions").iterdir()
    )
    res = zw.run("spawn", "t", "-C", str(calc.path), "--check", "true")
    assert res.returncode == 1 and "--check belongs to a best-of set" in res.stderr
    res = zw.run("spawn", "t", "-C", str(calc.path), "--best-of", "2", "--protect", "./")
    assert res.returncode == 1 and "--protect . would restore the whole tree" in res.stderr
    res = zw.run("spawn", "t", "-C", str(calc.path), "--name", "set-abcd")
    assert res.returncode == 1 and "looks like a best-of set's id" in res.stderr  # inject SET


def test_attempts_run_round_robin_in_their_own_worktrees_from_one_base(zw: ZW, calc: Repo) -> None:
    set_id = start(zw, calc, ["correct", "breaks", "bigger"], "--agents", "codex,claude,codex")
    rows = {r["attempt"]: r for r in zw.json("ls") if r["set"] == set_id}
    assert sorted(rows) == [1, 2, 3]
    assert [rows[k]["adapter"] for k in (1, 2, 3)] == ["codex", "claude", "codex"]
    assert [rows[k]["model"] for k in (1, 2, 3)] == ["correct", "breaks", "bigger"]
    trees = {rows[k]["worktree"] for k in rows}
    assert len(trees) == 3 and None not in trees
    assert all(r["group"] is None for r in rows.values())  # the set is not a [groups] group
    base = calc.git("rev-parse", "HEAD").strip()
    assert zw.json("compare", set_id)["base"] == base
    assert set_id in zw.run("ls", check=True).stdout  # ls shows the set


def test_the_ledger_totals_a_set_by_its_id(zw: ZW, calc: Repo) -> None:
    """``usage --by set``: what a best-of set cost, its attempts together; the ledger's
    ``group`` stays the [groups] caps."""
    set_id = start(zw, calc, ["correct", "breaks"])
    alone = zw.spawn("alone", "-C", str(calc.path), env_extra=zw.replay("codex_simple"))
    settled(zw, set_id)
    zw.wait(alone)
    got = zw.json("usage", "--by", "set")
    rows = {r["key"]: r for r in got["rows"]}
    assert set(rows) == {set_id, "-"}
    assert (rows[set_id]["turns"], rows[set_id]["sessions"]) == (2, 2)
    assert (rows["-"]["turns"], rows["-"]["sessions"]) == (1, 1)
    assert rows[set_id]["total_tokens"] + rows["-"]["total_tokens"] == got["total"]["total_tokens"]
    assert set_id in zw.run("usage", "--by", "set", check=True).stdout


def test_protect_restores_the_base_and_flags_the_attempt_that_changed_it(
    zw: ZW, calc: Repo
) -> None:
    set_id = start(zw, calc, ["correct", "cheat"], "--protect", "tests")
    view = settled(zw, set_id)
    att = by_attempt(view)
    assert att[1]["protect_changed"] == [] and att[1]["flags"] == []
    assert att[2]["protect_changed"] == ["tests/conftest.py", "tests/test_calc.py"]
    assert "changed protected paths" in att[2]["flags"][0]
    assert att[2]["claim"] == "All tests pass."  # its word, kept, believed for nothing
    cheat = next(r for r in zw.json("ls") if r["set"] == set_id and r["attempt"] == 2)
    tree = Path(cheat["worktree"])
    assert (tree / "tests" / "test_calc.py").read_text() == TEST  # back from the base
    assert not (tree / "tests" / "conftest.py").exists()
    assert [a["attempt"] for a in view["attempts"]] == [1, 2]  # type: ignore[index,union-attr]
    folder = zw.tmp / "xdg-state" / "zwarm" / "sets" / set_id  # beside the launch pins

    def evidence() -> list[str]:
        return sorted(p.name for p in folder.iterdir() if p.name.endswith(("-1.json", "-2.json")))

    names = evidence()
    zw.json("compare", set_id)  # settled once: never again
    assert names == evidence() and len(names) == 2


def test_a_set_under_max_running_queues_its_attempts(zw: ZW, calc: Repo) -> None:
    from tests.support.fleet import configure

    configure(zw, "[limits]\nmax_running = 2\n")
    hold = zw.tmp / "hold"
    hold.touch()
    models = ["correct", "bigger", "correct", "bigger"]
    gate = zw.gated(hold)
    set_id = start(zw, calc, models, **gate)
    # the spawn's environment for every command that may start a queued attempt
    env = {"FAKE_SHELL": shell_for(models), "FAKE_REPLAY": replays(zw.tmp, models), **gate}
    rows = [r for r in zw.json("ls", env_extra=env) if r["set"] == set_id]
    assert sorted(r["status"] for r in rows) == ["queued", "queued", "running", "running"]
    assert all("max_running = 2" in r["wait"] for r in rows if r["status"] == "queued")
    hold.unlink()
    view = settled(zw, set_id, env)
    assert [a["status"] for a in view["attempts"]] == ["completed"] * 4  # type: ignore[index,union-attr]


def test_the_state_dirs_copy_of_a_set_decides_nothing(zw: ZW, calc: Repo) -> None:
    """An agent that can write the state dir (a shared session's) rewrites the set's index
    copy to run its own command as a check: zwarm runs the private record's, or nothing."""
    set_id = start(zw, calc, ["correct"], "--protect", "tests")
    settled(zw, set_id)
    index = zw.state_dir / "sets" / f"{set_id}.json"
    forged = json.loads(index.read_text())
    forged["checks"], forged["protect"] = ["touch /tmp/pwned-by-agent"], []
    index.write_text(json.dumps(forged))
    assert zw.json("compare", set_id)["checks"] == []  # the private record's
    private = zw.tmp / "xdg-state" / "zwarm" / "sets" / set_id / "set.json"
    private.write_text(json.dumps({**forged, "state_dir": "/elsewhere"}))
    res = zw.run("compare", set_id)
    assert res.returncode == 1 and "is another state dir's or set's" in res.stderr
    assert res.stderr.count("\n") == 1


# ---------------------------------------------------------------------------- pick
def test_pick_merges_the_smallest_passing_attempt_and_keeps_the_others_branches(
    zw: ZW, calc: Repo
) -> None:
    set_id = start(zw, calc, ["bigger", "correct", "budget"], "--max-tokens", "5000")
    view = settled(zw, set_id)
    att = by_attempt(view)
    assert att[3]["status"] == "failed" and "budget_exceeded" in att[3]["flags"][0]
    assert [a["attempt"] for a in view["attempts"]] == [2, 1, 3]  # type: ignore[index,union-attr]
    calc.write("src/calc.py", "local edit\n")  # every rule of merge holds: a dirty target
    res = zw.run("pick", set_id)
    assert res.returncode == 1 and "uncommitted" in res.stderr, res.stderr
    assert len(calc.worktrees()) == 4  # nothing removed
    calc.git("checkout", "--", "src/calc.py")
    res = zw.json("pick", set_id)
    assert (res["picked"], res["worktrees_removed"]) == (2, [1, 3])
    assert (calc.path / "src" / "calc.py").read_text() == BUG.replace("a - b", "a + b")
    assert len(calc.worktrees()) == 2  # the main one and the winner's
    rows = {r["attempt"]: r for r in zw.json("ls") if r["set"] == set_id}
    assert all(rows[k]["branch"] in calc.branches() for k in (1, 3))  # kept until rm
    assert "was picked already" in zw.run("pick", set_id).stderr
    assert "+# note 1" in zw.run("compare", set_id, "--diff", "2", "1", check=True).stdout
    zw.run("rm", "--force", rows[1]["id"], check=True)
    assert rows[1]["branch"] not in calc.branches()


def test_pick_refuses_when_no_attempt_passes_unless_one_is_named(zw: ZW, calc: Repo) -> None:
    set_id = start(zw, calc, ["budget", "budget"], "--max-tokens", "5000")
    settled(zw, set_id)
    res = zw.run("pick", set_id)
    assert res.returncode == 1
    assert res.stderr.startswith(f"Error: set {set_id}: no attempt passes its checks")
    assert zw.json("pick", set_id, "2")["picked"] == 2


def test_inject_to_a_set_reaches_every_attempt_still_in_the_running(zw: ZW, calc: Repo) -> None:
    set_id = start(zw, calc, ["correct", "budget", "bigger"], "--max-tokens", "5000")
    settled(zw, set_id)
    out = zw.run("inject", set_id, "also add a docstring", check=True).stdout.splitlines()
    assert [line.rsplit("(", 1)[1] for line in out] == ["attempt 1)", "attempt 3)"]
    view = settled(zw, set_id)
    rows = {r["attempt"]: r for r in zw.json("ls") if r["set"] == set_id}
    assert [rows[k]["turns"] for k in (1, 2, 3)] == [2, 1, 2]
    assert len(view["attempts"]) == 3  # type: ignore[arg-type]


def test_the_tools_start_compare_and_pick_a_set(zw: ZW, calc: Repo) -> None:
    from zwarm.orchestrator.tools import Toolbox

    models = ["bigger", "correct"]
    env = {"FAKE_SHELL": shell_for(models), "FAKE_REPLAY": replays(zw.tmp, models)}
    tb = Toolbox(zw.api(env), source="bot")
    args = {"task": "fix add", "cwd": str(calc.path), "best_of": 2, "models": models}
    started = tb.dispatch("best_of", {**args, "protect": ["tests"]})
    assert started["ok"] and len(started["attempts"]) == 2, started
    set_id = started["set_id"]
    settled(zw, set_id)
    seen = tb.dispatch("compare", {"set_id": set_id})
    assert [a["model"] for a in seen["attempts"]] == ["correct", "bigger"], seen
    assert "worktree" not in json.dumps(seen)
    picked = tb.dispatch("pick", {"set_id": set_id})
    assert picked["ok"] and picked["picked"] == 2, picked
    bad = tb.dispatch("compare", {"set_id": "set-zz"})
    assert not bad["ok"] and "not a set id" in bad["error"]


# ---------------------------------------------------------------------------- checks
UNSANDBOXED = "[checks]\nunsandboxed = true\n"


def test_checks_decide_the_ranking_and_pick_keeps_the_correct_small_one(zw: ZW, calc: Repo) -> None:
    """One correct, one breaking the test, one correct with a larger diff, one over budget,
    one deleting the failing test and claiming success: the correct small one wins."""
    from tests.support.fleet import configure

    configure(zw, UNSANDBOXED)
    models = ["breaks", "bigger", "cheat", "budget", "correct"]
    set_id = start(zw, calc, models, "--check", CHECK, "--protect", "tests", "--max-tokens", "5000")
    view = settled(zw, set_id)
    att = by_attempt(view)
    order = [a["model"] for a in view["attempts"]]  # type: ignore[index,union-attr]
    assert order[:2] == ["correct", "bigger"], order
    assert [att[k]["passed"] for k in (1, 2, 3, 4, 5)] == [False, True, False, False, True]
    assert (
        att[1]["checks"][0]["exit_code"] == 1
        and "add is wrong" in att[1]["checks"][0]["output_tail"]
    )
    assert att[3]["claim"] == "All tests pass." and att[3]["checks"][0]["exit_code"] == 1
    assert "changed protected paths" in att[3]["flags"][0]  # and its test came back: it fails
    assert att[4]["status"] == "failed" and att[4]["checks"][0]["passed"]  # passes, over budget
    assert not view["checks_sandboxed"] and not att[5]["checks"][0]["sandboxed"]
    table = zw.run("compare", set_id, check=True).stdout
    assert "✗" in table and "✓" in table and "unsandboxed" in table
    res = zw.json("pick", set_id)
    assert res["picked"] == 5
    assert (calc.path / "src" / "calc.py").read_text() == BUG.replace("a - b", "a + b")
    assert (calc.path / "tests" / "test_calc.py").read_text() == TEST


def test_a_hanging_check_is_killed_at_its_timeout_and_counts_as_failed(zw: ZW, calc: Repo) -> None:
    from tests.support.fleet import configure

    configure(zw, UNSANDBOXED)
    set_id = start(zw, calc, ["correct"], "--check", "sleep 300", "--check-timeout", "1")
    began = time.monotonic()
    view = settled(zw, set_id)
    check = by_attempt(view)[1]["checks"][0]
    assert check["timed_out"] and not check["passed"] and check["exit_code"] is None
    assert 1 <= check["duration_s"] < 30 and time.monotonic() - began < 60
    assert "no attempt passes" in zw.run("pick", set_id).stderr


def test_checks_without_a_sandbox_or_an_opt_in_are_refused_before_anything_starts(
    zw: ZW, calc: Repo
) -> None:
    from tests.support.fleet import configure

    configure(zw, '[sandbox]\nmode = "off"\n')
    res = zw.run("spawn", "t", "-C", str(calc.path), "--best-of", "2", "--check", CHECK)
    assert res.returncode == 1 and res.stderr.startswith("Error: checks run code the agents")
    assert "[checks] unsandboxed = true" in res.stderr and res.stderr.count("\n") == 1
    sessions = zw.state_dir / "sessions"
    assert zw.calls() == 0 and (not sessions.exists() or not list(sessions.iterdir()))
    assert calc.worktrees() == [str(calc.path)]


def test_checks_run_sandboxed_where_the_sandbox_holds(zw: ZW, calc: Repo) -> None:
    from tests.support.fleet import configure

    configure(zw, '[sandbox]\nmode = "bwrap"\n')
    models = ["correct"]
    env = {"FAKE_SHELL": shell_for(models), "FAKE_REPLAY": replays(zw.tmp, models)}
    check = "grep -q 'a + b' src/calc.py"  # no interpreter: the sandbox hides the home
    res = zw.run("spawn", "fix add", "-C", str(calc.path), "--best-of", "1", "--models",
                 "correct", "--check", check, "--sandbox", "off", env_extra=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "checks run sandboxed" in res.stderr
    view = settled(zw, res.stdout.strip())
    check = by_attempt(view)[1]["checks"][0]
    assert check["sandboxed"] and check["passed"], check


def test_a_settle_interrupted_is_run_again_and_recorded_once(zw: ZW, calc: Repo) -> None:
    """The supervisor killed while its checks run: the evidence is not there; compare runs
    them again, whole, and writes them once."""
    from tests.support.fleet import configure

    configure(zw, UNSANDBOXED)
    gate = zw.tmp / "gate"
    marks = zw.tmp / "marks"
    marks.mkdir()
    slow = f"touch {marks}/$$; while [ ! -e {gate} ]; do sleep 0.05; done; {CHECK}"
    set_id = start(zw, calc, ["correct"], "--check", slow)
    wait_until(lambda: list(marks.iterdir()))  # the supervisor's check runs
    sid = next(r["id"] for r in zw.json("ls") if r["set"] == set_id)
    sup = zw.meta(sid)["turns"][0]["supervisor"]["pid"]
    import os
    import signal

    os.kill(sup, signal.SIGKILL)
    gate.touch()
    view = settled(zw, set_id)
    assert by_attempt(view)[1]["passed"]
    assert len(list(marks.iterdir())) == 2  # run again, whole
    folder = zw.tmp / "xdg-state" / "zwarm" / "sets" / set_id
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(sid + "-")) == [
        f"{sid}-1.json"
    ]


def test_a_judge_breaks_a_tie_on_the_evidence_and_never_overrides_it(zw: ZW, calc: Repo) -> None:
    """Two attempts pass and change as many lines: --judge asks the orchestrator's endpoint,
    which sees both diffs, and its choice is merged and recorded; a choice outside the tie
    (here the failing attempt) is refused and nothing is merged."""
    from tests.fakes.chat_server import ChatReply, FakeChatServer
    from tests.support.fleet import configure

    configure(zw, UNSANDBOXED)
    models = ["correct", "swapped", "breaks"]
    set_id = start(zw, calc, models, "--check", CHECK, "--protect", "tests")
    view = settled(zw, set_id)
    assert sorted(view["ties"]) == [1, 2]  # type: ignore[call-overload]
    judged = '{"attempt": 3, "reason": "it is shortest"}'
    chosen = 'Here: {"attempt": 2, "reason": "b + a reads as the spec"}'
    with FakeChatServer([ChatReply(content=judged), ChatReply(content=chosen)]) as srv:
        env = {"ZWARM_ORCH_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-fake-judge-key",
               "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}  # fmt: skip
        res = zw.run("pick", set_id, "--judge", "judge-model", env_extra=env)
        assert res.returncode == 1 and "named no tied attempt" in res.stderr, res.stderr
        assert (calc.path / "src" / "calc.py").read_text() == BUG  # nothing merged
        res = zw.run("pick", set_id, "--judge", "judge-model", "--json", env_extra=env)
        assert res.returncode == 0, res.stderr
        sent = json.dumps(srv.requests[-1].body["messages"])
    assert json.loads(res.stdout)["picked"] == 2
    assert "+    return b + a" in sent and "+    return a + b" in sent and "a * b" not in sent
    assert (calc.path / "src" / "calc.py").read_text() == BUG.replace("a - b", "b + a")
    judge = zw.json("compare", set_id)["judge"]
    assert (judge["model"], judge["attempt"], sorted(judge["among"])) == ("judge-model", 2, [1, 2])
    assert judge["reason"] == "b + a reads as the spec"


def test_pick_can_queue_the_winner_for_the_merge_queue(zw: ZW, calc: Repo) -> None:
    """``pick --queue``: the winner goes through the merge queue (rebased, checked there,
    merged only green, on the queue's check); a queue with no check is refused, nothing
    changed."""
    from tests.support.fleet import configure

    configure(zw, UNSANDBOXED)
    set_id = start(zw, calc, ["bigger", "correct"], "--check", CHECK)
    settled(zw, set_id)
    res = zw.run("pick", set_id, "--queue")  # no [merge] check, no --check
    assert res.returncode != 0 and res.stderr.count("\n") == 1, res.stderr
    assert "check" in res.stderr
    assert len(calc.worktrees()) == 3 and zw.json("compare", set_id)["picked"] is None
    assert zw.run("pick", set_id, "--check", CHECK).returncode == 2  # --check needs --queue
    # the queue's own check (a red target blocks a queue: the base fails CHECK)
    got = zw.json("pick", set_id, "--queue", "--check", "test -f src/calc.py")
    assert got["picked"] == 2 and got["worktrees_removed"] == [1]
    assert got["queue"]["queued"] and got["queue"]["target"]
    assert (calc.path / "src" / "calc.py").read_text() == BUG.replace("a - b", "a + b"), got
    merges = zw.json("merges")
    assert merges and any(e["state"] == "merged" for q in merges for e in q["entries"]), merges
