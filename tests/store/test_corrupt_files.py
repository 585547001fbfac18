"""Issue 5, fault 6: half-written and corrupt files.

Each damaged session is a copy of a real one with its meta.json broken in one way. ``ls``
must still show every other session, show the bad one as damaged with a clear message and
exit 0; every command on it fails with one clear line; none rewrites or deletes its data
(bytes compared before and after) -- except ``rm --force``, which is the explicit way out.
A turn file whose last line is cut (an agent killed mid-write) is tolerated, never altered.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_status, wait_until
from tests.support.faults import edit_meta, one_error_line, snapshot, spawn, turn_lines

pytestmark = pytest.mark.usefixtures("strays")


def _truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _rewrite(**changes: Any) -> Callable[[Path], None]:
    def go(p: Path) -> None:
        m = json.loads(p.read_bytes())
        m.update(changes)
        p.write_text(json.dumps(m))

    return go


def _bad_turn(p: Path) -> None:
    m = json.loads(p.read_bytes())
    m["status"] = "running"
    bad_ref = {"pid": "12", "start_ticks": 1, "boot_id": ""}
    m["turns"][0].update(status="running", supervisor=bad_ref)
    p.write_text(json.dumps(m))


# name -> (how to damage meta.json, words the damaged row's message must contain)
DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty": (lambda p: p.write_bytes(b""), "meta.json is empty"),
    "truncated": (_truncate, "not valid JSON: it ends early (truncated?)"),
    "unknown-status": (_rewrite(status="paused"), "unknown status 'paused'"),
    "newer-schema": (_rewrite(schema_version=99), "schema_version 99, newer than this zwarm"),
    "missing": (lambda p: p.unlink(), "meta.json is missing"),
    "not-an-object": (lambda p: p.write_text("[1, 2]"), "not a JSON object"),
    "invalid-utf8": (lambda p: p.write_bytes(b'{"id": "\xff\xfe"}'), "not valid UTF-8"),
    "missing-field": (_rewrite(adapter=None), "'adapter' is missing"),
    "bad-running-turn": (_bad_turn, "supervisor.pid' is not int"),
    "other-id": (_rewrite(id=str(uuid.UUID(int=7))), "names another session"),
}

# every command a user could aim at one session; none may change a damaged session's bytes
COMMANDS: list[tuple[str, ...]] = [
    ("show",),
    ("trajectory",),
    ("logs",),
    ("wait", "--timeout", "5"),
    ("inject", "{sid}", "more"),
    ("kill",),
    ("rm",),
]


@pytest.fixture
def world(zw: Any) -> dict[str, Any]:
    """Two good sessions (a completed one, a failed one) and one damaged copy per DAMAGE."""
    good = spawn(zw, "the good one", env=zw.replay("codex_simple"))
    failed = spawn(zw, "the failed one", env=zw.replay("codex_error"))
    wait_status(zw, good, "completed")
    wait_status(zw, failed, "failed")
    bad: dict[str, str] = {}
    for name, (damage, _) in DAMAGE.items():
        sid = str(uuid.uuid4())
        shutil.copytree(zw.session_dir(good), zw.session_dir(sid))
        (zw.session_dir(sid) / ".lock").unlink()
        m = zw.meta(sid)
        m["id"] = sid
        (zw.session_dir(sid) / "meta.json").write_text(json.dumps(m))
        damage(zw.session_dir(sid) / "meta.json")
        bad[name] = sid
    return {"good": good, "failed": failed, "bad": bad}


def test_ls_shows_everything_and_damaged_clearly(zw: Any, world: dict[str, Any]) -> None:
    before = {sid: snapshot(zw.session_dir(sid)) for sid in world["bad"].values()}
    res = zw.run("ls", "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["id"]: r for r in json.loads(res.stdout)}
    assert rows[world["good"]]["status"] == "completed"
    assert rows[world["failed"]]["status"] == "failed"
    for name, sid in world["bad"].items():
        r = rows[sid]
        assert r["status"] == "damaged" and r["damaged"] is True, (name, r)
        assert DAMAGE[name][1] in r["error"], (name, r["error"])
    assert len(rows) == 2 + len(DAMAGE)
    # the human table too: exit 0, every id there, the damaged ones say why
    human = zw.run("ls")
    assert human.returncode == 0 and "Traceback" not in human.stderr
    for sid in [world["good"], world["failed"], *world["bad"].values()]:
        assert sid[:8] in human.stdout
    assert human.stdout.count("damaged") >= len(DAMAGE)
    assert "meta.json is empty" in human.stdout
    assert [r["id"] for r in zw.json("ls", "--status", "damaged")] == sorted(
        world["bad"].values(), key=lambda s: ("", s)
    )
    for sid, snap in before.items():
        assert snapshot(zw.session_dir(sid)) == snap


def test_no_command_rewrites_or_deletes_damaged_data(zw: Any, world: dict[str, Any]) -> None:
    before = {sid: snapshot(zw.session_dir(sid)) for sid in world["bad"].values()}
    runs = []
    for name, sid in world["bad"].items():
        for cmd in COMMANDS:
            args = [a.format(sid=sid) for a in cmd]
            if "{sid}" not in cmd:
                args.insert(1, sid)
            runs.append((name, args))
    with ThreadPoolExecutor(3) as pool:  # independent sessions: run a few at once
        results = list(pool.map(lambda r: zw.run(*r[1]), runs))
    for (name, args), res in zip(runs, results, strict=True):
        err = one_error_line(res, "damaged", code=1)
        assert DAMAGE[name][1] in err or name == "invalid-utf8", (args, err)
    for sid, snap in before.items():
        assert snapshot(zw.session_dir(sid)) == snap, f"the data of {sid} changed"
    # bulk commands skip them and leave them alone
    zw.run("kill", "--all", check=True)
    zw.run("rm", "--finished", check=True)
    assert not zw.session_dir(world["good"]).exists()  # rm --finished did run
    for sid, snap in before.items():
        assert snapshot(zw.session_dir(sid)) == snap, f"the data of {sid} changed"
    # rm --force is the explicit way to delete one
    victim = world["bad"]["truncated"]
    zw.run("rm", "--force", victim, check=True)
    assert not zw.session_dir(victim).exists()
    assert len(zw.json("ls")) == len(DAMAGE) - 1  # the good and failed ones went too


@pytest.mark.parametrize("status", ["completed", "running"])
def test_turn_file_with_cut_last_line(zw: Any, status: str) -> None:
    """An agent killed mid-write leaves a cut last line: reads tolerate it, nobody fixes it."""
    if status == "completed":
        sid = spawn(zw, "t", env=zw.replay("codex_toolcall"))
        wait_status(zw, sid, "completed")
        log = zw.session_dir(sid) / "turns" / "turn_1.jsonl"
        data = log.read_bytes()
        log.write_bytes(data[: len(data) - 25])
    else:
        cut = zw.tmp / "cut.jsonl"
        lines = (Path(zw.sample("codex_toolcall"))).read_bytes().splitlines(True)
        cut.write_bytes(b"".join(lines[:4]) + lines[4][:30])
        sid = spawn(zw, "t", env={"FAKE_REPLAY": str(cut), "FAKE_HANG": "5"})
        log = zw.session_dir(sid) / "turns" / "turn_1.jsonl"
        wait_until(
            lambda: b"".join(turn_lines(zw, sid)).endswith(lines[4][:30]),
            message="cut line written",
        )
        zw.run("kill", sid, check=True)
    data = log.read_bytes()
    assert not data.endswith(b"\n")
    rows = zw.json("ls")
    assert rows[0]["status"] == ("completed" if status == "completed" else "killed")
    steps = zw.json("trajectory", sid)
    assert steps, "the complete lines still give steps"
    zw.json("show", sid)
    assert zw.run_bytes("logs", sid).stdout == data
    zw.run("inject", sid, "continue", env_extra=zw.replay("codex_simple"), check=True)
    wait_status(zw, sid, "completed")
    assert log.read_bytes() == data


def test_a_turn_never_overwrites_turn_files_its_record_does_not_know(zw: Any) -> None:
    """Issue 29: ``"turns": []`` in meta.json is damage (every session is created with its
    turn 1), so inject refuses it and turn_1.prompt survives; and a new turn never takes a
    number whose files exist (a record that lost turns, a start killed before its meta.json
    was saved): a log there is refused with one line, nothing overwritten or started; a
    prompt alone (a start killed before its meta.json was saved) is kept aside."""
    env = zw.replay("codex_simple")
    sid = spawn(zw, "the real task", env=env)
    wait_status(zw, sid, "completed")
    turns = zw.session_dir(sid) / "turns"
    before = snapshot(turns)
    edit_meta(zw, sid, lambda m: m.update(turns=[]))
    for args in (("inject", sid, "overwrite?"), ("retry", sid)):
        one_error_line(zw.run(*args, env_extra=env), "has no turns")
    assert snapshot(turns) == before and (turns / "turn_1.prompt").read_bytes() == b"the real task"
    assert zw.json("ls")[0]["status"] == "damaged"

    other = spawn(zw, "second task", env=env)
    wait_status(zw, other, "completed")
    stray = zw.session_dir(other) / "turns" / "turn_2.jsonl"
    stray.write_bytes(b'{"kept": true}\n')
    res = zw.run("inject", other, "more", env_extra=env)
    one_error_line(res, "turns/turn_2.jsonl exists but meta.json knows no turn 2")
    assert not (zw.session_dir(other) / "turns" / "turn_2.prompt").exists()
    assert stray.read_bytes() == b'{"kept": true}\n'
    assert len(zw.meta(other)["turns"]) == 1 and zw.calls() == 2
    stray.unlink()  # moved away: it goes on
    # a prompt alone: a start killed before its meta.json was saved (its turn never ran):
    # kept aside, never overwritten, and the turn goes on
    unsent = zw.session_dir(other) / "turns" / "turn_2.prompt"
    unsent.write_bytes(b"the killed start's prompt")
    zw.run("inject", other, "more", "--context", "native", env_extra=env, check=True)
    assert len(wait_status(zw, other, "completed")["turns"]) == 2
    aside = list((zw.session_dir(other) / "turns").glob("turn_2.prompt.unsent-*"))
    assert [p.read_bytes() for p in aside] == [b"the killed start's prompt"]
    assert unsent.read_bytes() == b"more"
