"""Bad input and bad state: one clear line on stderr, exit 1 (usage errors 2), no traceback,
nothing created or rewritten."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from zwarm.model import Session, Status, Turn
from zwarm.store import Store

NOW = "2026-01-01T00:00:00.000+00:00"


def one_line_error(res, expect: str, code: int = 1) -> None:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert expect in lines[0], lines[0]


def plant(zw, sid: str, status: Status = Status.COMPLETED) -> None:
    """A finished session with a chosen id, written through the store."""
    store = Store(zw.state_dir)
    store.ensure()
    s = Session(
        id=sid,
        adapter="codex",
        task="planted",
        cwd=str(zw.cwd),
        created_at=NOW,
        updated_at=NOW,
        turns=[Turn(1, status, "planted", "task", NOW, NOW)],
    )
    store.create(s, b"planted")


A = "abcd1000-0000-4000-8000-000000000001"
B = "abcd2000-0000-4000-8000-000000000002"


@pytest.mark.parametrize(
    "cmd",
    [["show"], ["trajectory"], ["logs"], ["wait"], ["kill"], ["rm"], ["inject", "{ref}", "msg"]],
)
def test_unknown_and_ambiguous_refs(zw, cmd: list[str]) -> None:
    plant(zw, A)
    plant(zw, B)

    def run(ref: str):
        args = [a.replace("{ref}", ref) for a in cmd] if "{ref}" in cmd else [*cmd, ref]
        return zw.run(*args)

    one_line_error(run("ffffffff"), "no session matches 'ffffffff'")
    res = run("abcd")
    one_line_error(res, "'abcd' matches 2 sessions")
    assert A in res.stderr and B in res.stderr
    one_line_error(run("../x"), "invalid session id or name")
    one_line_error(run("/etc/passwd"), "invalid session id or name")
    one_line_error(run("."), "invalid session id or name")
    assert sorted(r["id"] for r in zw.json("ls")) == [A, B]  # nothing changed


@pytest.mark.parametrize(
    ("args", "stdin", "expect"),
    [
        (["spawn", ""], None, "the prompt is empty"),
        (["spawn", "   \n"], None, "the prompt is empty"),
        (["spawn", "-"], b"", "the prompt is empty"),
        (["spawn", "-"], b"hello\x00world", "NUL"),
        (["spawn", "-"], b"caf\xe9 au lait", "not valid UTF-8"),
        (["spawn", "x", "-C", "/nonexistent/dir"], None, "does not exist"),
        (["spawn", "x", "--name", "../evil"], None, "invalid session name"),
        (["spawn", "x", "--name", "a b"], None, "invalid session name"),
        (["spawn", "x", "--timeout", "-1"], None, "--timeout must be a positive number"),
        (["spawn", "x", "--timeout", "0"], None, "--timeout must be a positive number"),
        (["spawn", "x", "--timeout", "nan"], None, "--timeout must be a positive number"),
        (["spawn", "x", "--timeout", "inf"], None, "--timeout must be a positive number"),
        # a launcher option's type and its bounds, in one wording (the type said "launcher
        # option slurm.cpus must be a number")
        (
            ["spawn", "x", "--launcher", "slurm", "--launcher-option", "cpus=abc"],
            None,
            "Error: --launcher-option: slurm.cpus must be a number, not 'abc'",
        ),
        (
            ["spawn", "x", "--launcher", "slurm", "--launcher-option", "cpus=-1"],
            None,
            "Error: --launcher-option: slurm.cpus must not be negative",
        ),
    ],
)
def test_bad_spawn_input(zw, args: list[str], stdin: bytes | None, expect: str) -> None:
    one_line_error(zw.run(*args, input=stdin), expect)
    assert not (zw.state_dir / "sessions").exists() or zw.json("ls") == []
    assert zw.calls() == 0


def test_cwd_that_is_a_file(zw) -> None:
    f = zw.tmp / "file.txt"
    f.write_text("x")
    one_line_error(zw.run("spawn", "x", "-C", str(f)), "is not a directory")


def test_missing_agent_binary(zw) -> None:
    env = {"PATH": "/nonexistent/bin:/usr/bin:/bin"}
    one_line_error(zw.run("spawn", "x", env_extra=env), "codex agent binary 'codex' not found")
    one_line_error(
        zw.run("spawn", "x", "--adapter", "claude", env_extra=env),
        "claude agent binary 'claude' not found",
    )
    assert not (zw.state_dir / "sessions").exists() or zw.json("ls") == []


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("[defaults\n", "invalid TOML"),
        ("[defaults]\nadapter = 'grok'\n", "defaults.adapter must be one of"),
        ("[codex]\nbogus = 1\n", "unknown key 'bogus' in [codex]"),
    ],
)
def test_invalid_config(zw, text: str, expect: str) -> None:
    zw.state_dir.mkdir()
    cfg = zw.state_dir / "config.toml"
    cfg.write_text(text)
    res = zw.run("spawn", "x")
    one_line_error(res, expect)
    assert str(cfg) in res.stderr
    assert cfg.read_text() == text
    assert not (zw.state_dir / "sessions").exists()


def test_same_name_twice(zw) -> None:
    sid = zw.spawn("x", "--name", "dup", env_extra=zw.replay("codex_simple"))
    one_line_error(zw.run("spawn", "y", "--name", "dup"), "a session named 'dup' already exists")
    assert [r["id"] for r in zw.json("ls")] == [sid]
    zw.wait(sid)


def test_same_name_racing_spawns_one_wins(zw) -> None:
    import subprocess

    from tests.support import ZWARM_BIN

    env = {**zw.env, **zw.replay("codex_simple")}
    procs = [
        subprocess.Popen(
            [str(ZWARM_BIN), "spawn", f"task {k}", "--name", "race"],
            env=env,
            cwd=zw.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1, 1, 1], outs
    winner = next(o for p, o in zip(procs, outs, strict=True) if p.returncode == 0)[0].strip()
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode:
            assert err.strip() == "Error: a session named 'race' already exists"
    rows = zw.json("ls")
    assert [(r["id"], r["name"]) for r in rows] == [(winner, "race")]  # losers left nothing
    assert zw.json("show", "race")["id"] == winner
    zw.wait(winner)


def test_trajectory_and_logs_bad_turn(zw) -> None:
    plant(zw, A)
    one_line_error(zw.run("trajectory", A, "--turn", "5"), "has no turn 5")
    one_line_error(zw.run("logs", A, "--turn", "0"), "has no turn 0")


def test_inject_bad_message(zw) -> None:
    plant(zw, A)
    one_line_error(zw.run("inject", A, ""), "the prompt is empty")
    one_line_error(zw.run("inject", A, "-", input=b"\xff\xfe"), "not valid UTF-8")
    one_line_error(zw.run("inject", A, "x", "--timeout", "-3"), "--timeout must be")
    assert zw.json("show", A)["turns"] == 1


def test_state_dir_is_a_file(zw) -> None:
    f = zw.tmp / "notadir"
    f.write_text("x")
    res = zw.run("--state-dir", str(f), "spawn", "x")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert f.read_text() == "x"


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["spawn"], "Missing argument"),
        (["kill"], "give session ids or --all"),
        (["rm"], "give session ids or --finished"),
        (["nosuchcommand"], "No such command"),
        (["spawn", "x", "--adapter", "grok"], "Invalid value for '--adapter'"),
        (["ls", "--status", "sleeping"], "Invalid value for '--status'"),
    ],
)
def test_usage_errors_exit_2(zw, args: list[str], expect: str) -> None:
    res = zw.run(*args)
    assert res.returncode == 2 and expect in res.stderr and "Traceback" not in res.stderr


# ---------------------------------------------------------------------------- damaged sessions
@pytest.mark.parametrize("damage", ["empty", "truncated", "unknown_status", "newer_schema"])
def test_damaged_session_reported_never_rewritten(zw, damage: str) -> None:
    plant(zw, A)
    plant(zw, B)
    meta = zw.session_dir(A) / "meta.json"
    raw = meta.read_bytes()
    doc = json.loads(raw)
    bad = {
        "empty": b"",
        "truncated": raw[: len(raw) // 2],
        "unknown_status": json.dumps({**doc, "status": "exploded"}).encode(),
        "newer_schema": json.dumps({**doc, "schema_version": 99}).encode(),
    }[damage]
    meta.write_bytes(bad)

    rows = {r["id"]: r for r in zw.json("ls")}
    assert rows[A]["status"] == "damaged" and rows[A]["error"]
    assert rows[B]["status"] == "completed"  # the others still list
    assert "damaged" in zw.run("ls", check=True).stdout
    assert [r["id"] for r in zw.json("ls", "--status", "damaged")] == [A]
    one_line_error(zw.run("show", A), "is damaged")
    one_line_error(zw.run("inject", A, "x"), "is damaged")
    one_line_error(zw.run("kill", A), "is damaged")
    one_line_error(zw.run("rm", A), "--force")
    assert meta.read_bytes() == bad  # reported, never rewritten
    zw.run("rm", "--finished", check=True)
    assert meta.read_bytes() == bad  # not removed as "finished" either
    assert zw.run("rm", A, "--force", check=True).stdout.strip() == f"{A} removed"
    assert not zw.session_dir(A).exists()


# ---------------------------------------------------------------------------- no state dir
def test_read_only_commands_without_state_dir_create_nothing(zw) -> None:
    empty = zw.tmp / "empty"
    empty.mkdir()
    env = {k: v for k, v in zw.env.items() if k != "ZWARM_DIR"}

    def run(*args: str):
        import subprocess

        from tests.support import ZWARM_BIN

        p = subprocess.run(
            [str(ZWARM_BIN), *args], env=env, cwd=empty, capture_output=True, text=True, timeout=120
        )
        assert "Traceback" not in p.stderr
        return p

    assert run("ls").stdout.strip() == "no sessions"
    assert run("ls", "--json").stdout.strip() == "[]"
    assert run("ls", "--status", "running", "--json").stdout.strip() == "[]"
    assert run("kill", "--all").returncode == 0
    assert run("kill", "--all", "--json").stdout.strip() == "[]"
    assert run("rm", "--finished").returncode == 0
    assert run("rm", "--finished", "--json").stdout.strip() == "[]"
    for args in (
        ["show", "abcd"],
        ["trajectory", "abcd"],
        ["logs", "abcd"],
        ["wait", "abcd"],
        ["kill", "abcd"],
        ["rm", "abcd"],
        ["inject", "abcd", "x"],
    ):
        res = run(*args)
        assert res.returncode == 1 and "no session matches" in res.stderr, args
    created = [p for p in zw.tmp.rglob(".zwarm")]
    assert created == [] and list(empty.iterdir()) == []
    assert not zw.state_dir.exists()


def test_nearest_ancestor_state_dir_is_used(zw) -> None:
    proj = zw.tmp / "proj"
    deep = proj / "a" / "b"
    deep.mkdir(parents=True)
    (proj / ".zwarm").mkdir()
    env = {k: v for k, v in zw.env.items() if k != "ZWARM_DIR"}
    env.update(zw.replay("codex_simple"))
    import subprocess

    from tests.support import ZWARM_BIN

    p = subprocess.run(
        [str(ZWARM_BIN), "spawn", "hi"],
        env=env,
        cwd=deep,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    sid = p.stdout.strip()
    assert (proj / ".zwarm" / "sessions" / sid).is_dir()
    assert not (deep / ".zwarm").exists()
    # and --state-dir beats both
    res = zw.run("--state-dir", str(proj / ".zwarm"), "wait", sid)
    assert res.returncode == 0
    assert os.listdir(proj / "a") == ["b"]


def test_init(zw) -> None:
    res = zw.run("init", "--yes", check=True)
    cfg = Path(zw.state_dir) / "config.toml"
    assert str(cfg) in res.stdout
    import tomllib

    from zwarm.config import defaults

    assert tomllib.loads(cfg.read_text()) == defaults().data
    assert cfg.stat().st_mode & 0o777 == 0o600
    one_line_error(zw.run("init", "--yes"), "already exists")
    cfg.write_text('[defaults]\nadapter = "claude"\n')
    zw.run("init", "--yes", "--force", check=True)
    assert tomllib.loads(cfg.read_text())["defaults"]["adapter"] == "claude"  # kept, completed
    assert tomllib.loads(cfg.read_text())["codex"]["sandbox"] == "workspace-write"
