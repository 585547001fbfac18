"""zwarm's own sandbox (``zwarm.sandbox``, issue 34): a turn spawned ``--sandbox bwrap`` runs
its agent in bubblewrap, writes its worktree and nothing else, sees neither the state dir nor
zwarm's per-user files nor the user's home, and the supervisor outside still records, snapshots
and kills it. Real programs throughout: bubblewrap, git, zwarm subprocesses, the fake agent
(its ``FAKE_SHELL`` plays a scripted agent trying to get out)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil

from tests.support import SAMPLES, ZW, wait_until
from tests.support.workspace import make_repo

# each probe prints "name=ok" if the escape worked, "name=no" if it failed
ESCAPES = {
    "write_outside": 'echo x > "$OUTSIDE/escaped"',
    "write_refs": 'echo 0 > "$REPO/.git/refs/heads/moved"',
    "write_objects": 'echo x > "$REPO/.git/objects/planted"',
    "read_state": 'cat "$STATE/config.toml"',
    "read_pins": 'ls "$PINS"',
    "read_home": 'cat "$USERHOME/secret"',
    "see_parent": 'grep -l "$SUPERVISOR" /proc/[0-9]*/cmdline',  # its parent, by its argv
    "reach_port": "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 9))'",
}


def _script() -> str:
    lines = [
        f"if {c} >/dev/null 2>&1; then echo {k}=ok; else echo {k}=no; fi"
        for k, c in ESCAPES.items()
    ]
    return "{ echo made > made.txt; " + "; ".join(lines) + "; } > probes.txt 2>&1"


def _config(zw: ZW, extra: str = "") -> None:
    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config(f'[sandbox]\nread_only = ["{SAMPLES}"]\n{extra}')


def _probe_env(zw: ZW, repo: Path, **extra: str) -> dict[str, str]:
    outside = zw.tmp / "outside"
    outside.mkdir(exist_ok=True)
    (Path(zw.env["HOME"]) / "secret").write_text("the user's\n")
    return {
        "FAKE_RECORD": "",  # outside the worktree: not writable in the sandbox
        "FAKE_SHELL": _script(),
        "OUTSIDE": str(outside),
        "REPO": str(repo),
        "STATE": str(zw.state_dir),
        "PINS": str(Path(zw.env["HOME"]) / ".local" / "state" / "zwarm" / "pins"),
        "USERHOME": zw.env["HOME"],
        "SUPERVISOR": "zwarm.runtime.supervisor",
        **zw.replay("codex_simple"),
        **extra,
    }


def _probes(tree: Path) -> dict[str, str]:
    text = (tree / "probes.txt").read_text()
    return dict(line.split("=", 1) for line in text.split() if "=" in line)


def test_sandboxed_turn_writes_its_worktree_and_nothing_else(zw: ZW) -> None:
    repo = make_repo(zw.cwd / "repo", zw.env)
    _config(zw)
    sid = zw.spawn(
        "--worktree",
        "--sandbox",
        "bwrap",
        "-C",
        str(repo.path),
        "probe",
        env_extra=_probe_env(zw, repo.path),
    )
    assert zw.wait(sid).returncode == 0
    show = zw.json("show", sid)
    assert show["sandbox"] == "bwrap" and show["status"] == "completed", show
    tree = Path(show["workspace"]["tree"])
    assert (tree / "made.txt").read_text() == "made\n"
    assert _probes(tree) == {k: "no" for k in ESCAPES}
    assert not (zw.tmp / "outside" / "escaped").exists()
    assert not (repo.path / ".git" / "objects" / "planted").exists()
    assert "moved" not in repo.git("for-each-ref")
    # the supervisor outside recorded the turn's changes (after snapshot, from the host)
    turn = show["turns_detail"][0]
    assert turn.get("changes") or turn.get("after"), turn
    row = next(r for r in zw.json("ls") if r["id"] == sid)
    assert row["sandbox"] == "bwrap", row


def test_shared_directory_keeps_git_metadata_read_only(zw: ZW) -> None:
    repo = make_repo(zw.cwd / "repo", zw.env)
    _config(zw)
    heads = repo.git("for-each-ref").strip()
    sid = zw.spawn(
        "--shared",
        "--sandbox",
        "bwrap",
        "-C",
        str(repo.path),
        "probe",
        env_extra=_probe_env(zw, repo.path),
    )
    assert zw.wait(sid).returncode == 0
    assert (repo.path / "made.txt").exists()
    assert _probes(repo.path) == {k: "no" for k in ESCAPES}
    assert repo.git("for-each-ref").strip() == heads


def test_kill_stops_a_sandboxed_turn_and_everything_in_it(zw: ZW) -> None:
    _config(zw)
    sid = zw.spawn(
        "--sandbox",
        "bwrap",
        "hang",
        env_extra={"FAKE_RECORD": "", "FAKE_HANG": "1", **zw.replay("codex_simple")},
    )
    agent: dict[str, Any] = {}

    def started() -> bool:
        t = zw.meta(sid)["turns"][0]
        agent.update(t.get("agent") or {})
        return bool(agent)

    wait_until(started)
    root = psutil.Process(agent["pid"])
    wait_until(lambda: any("/fakes/bin/" in _cmdline(p) for p in root.children(recursive=True)))
    tree = [root, *root.children(recursive=True)]
    zw.run("kill", sid, check=True)
    wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree))
    assert zw.json("show", sid)["status"] == "killed"


def _cmdline(p: psutil.Process) -> str:
    """``p``'s command line, "" once it is gone (the bridge's wait loops start short-lived
    ``sleep`` processes)."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def test_mode_comes_from_the_config_and_the_agents_own_table(zw: ZW) -> None:
    _config(zw, 'mode = "bwrap"\n[sandbox.claude]\nmode = "off"\n')
    env = {"FAKE_RECORD": "", **zw.replay("codex_simple")}
    boxed = zw.spawn("--adapter", "codex", "t", env_extra=env)
    zw.wait(boxed)
    assert zw.json("show", boxed)["sandbox"] == "bwrap"
    # the agent's own sandbox stands down inside zwarm's, and the session is not dangerous
    show = zw.json("show", boxed)
    assert show["dangerous"] is False
    plain = zw.spawn("--adapter", "codex", "--sandbox", "off", "t", env_extra=env)
    zw.wait(plain)
    assert zw.json("show", plain)["sandbox"] == "off"


def test_a_bad_sandbox_setting_is_one_error_line(zw: ZW) -> None:
    zw.state_dir.mkdir()
    for text, says in [
        ('[sandbox]\nmode = "docker"\n', "sandbox.mode must be one of off, bwrap"),
        ("[sandbox]\nports = [70000]\n", "TCP port numbers"),
        ('[sandbox.codex]\nmode = "x"\n', "sandbox.codex.mode must be one of"),
        ("[sandbox.codex]\nnet = 1\n", "unknown key 'net'"),
    ]:
        zw.write_config(text)
        res = zw.run("spawn", "t")
        assert res.returncode != 0 and says in res.stderr and "Traceback" not in res.stderr, (
            res.stderr
        )
    res = zw.run("spawn", "--sandbox", "nope", "t")
    assert res.returncode != 0 and "Traceback" not in res.stderr


def test_the_timeout_kills_a_sandboxed_turn(zw: ZW) -> None:
    _config(zw)
    env = {"FAKE_RECORD": "", "FAKE_HANG": "1", **zw.replay("codex_simple")}
    sid = zw.spawn("--sandbox", "bwrap", "--timeout", "1", "slow", env_extra=env)
    zw.wait(sid)
    wait_until(lambda: zw.meta(sid)["status"] in ("failed", "killed", "completed"))
    m = zw.meta(sid)
    assert m["status"] == "failed" and m["turns"][0]["error"] == "timeout: killed after 1 s", m


def test_zwarms_cache_is_hidden_even_where_it_lies_in_the_tree(zw: ZW) -> None:
    """Regression: zwarm's cache (``$XDG_CACHE_HOME/zwarm``: the preflight's remembered pass
    and the listing's row cache) was hidden only as part of the home; with
    ``XDG_CACHE_HOME`` outside the home (a scratch disk, as on clusters) and inside the
    folder a sandboxed agent writes, the agent could plant a preflight pass or cached rows."""
    proj = zw.cwd / "scratch"
    cache = proj / ".cache"
    (cache / "zwarm").mkdir(parents=True)
    (cache / "zwarm" / "kept").write_text("zwarm's\n")
    _config(zw)
    env = {"XDG_CACHE_HOME": str(cache)}
    plant = (
        f'cat "{cache}/zwarm/kept" > seen.txt 2>&1; '
        f'echo planted > "{cache}/zwarm/planted"; echo made > made.txt'
    )
    sid = zw.spawn(
        "--shared", "--sandbox", "bwrap", "-C", str(proj), "probe",
        env_extra={**env, "FAKE_RECORD": "", "FAKE_SHELL": plant, **zw.replay("codex_simple")},
    )  # fmt: skip
    zw.run("wait", sid, "--timeout", "120", env_extra=env, check=True, timeout=180)
    assert (proj / "made.txt").read_text() == "made\n"
    assert "zwarm's" not in (proj / "seen.txt").read_text()
    assert not (cache / "zwarm" / "planted").exists()
