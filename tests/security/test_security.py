"""Issue 5, security promises, each tested.

- ``.zwarm/`` is 0700 and everything under it 0600 (dirs 0700), even under umask 000;
- prompts never appear in any process's argv (every /proc/*/cmdline is searched while the
  supervisor and agent run), and zwarm never calls a shell (no ``shell=True``, ``os.system``
  or ``os.popen`` anywhere in zwarm/, checked on the AST);
- the dangerous agent modes are off by default, on only by config or flag, and shown in
  ``ls``/``show`` when on;
- the agent's environment is exactly the user's plus the configured additions (and zwarm's
  own: its markers, ZWARM, PATH led by the launcher's dir), and API keys
  never reach meta.json or any other file under the state dir.
"""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, ZWARM_BIN, wait_status, wait_until
from tests.support.faults import agent_ref, cmdline, spawn, supervisor_ref

pytestmark = pytest.mark.usefixtures("strays")


def _run_umask0(
    zw: Any, *args: str, env: dict[str, str] | None = None, input: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    res = subprocess.run(
        [str(ZWARM_BIN), *args],
        env={**zw.env, **(env or {})},
        cwd=zw.cwd,
        input=input,
        capture_output=True,
        timeout=60,
        preexec_fn=lambda: os.umask(0),
    )
    assert res.returncode == 0, (args, res.stderr)
    return res


def test_modes_0700_and_0600_even_under_umask_0(zw: Any) -> None:
    zw.state_dir.mkdir(mode=0o755)  # a user-made .zwarm/ with loose permissions
    os.chmod(zw.state_dir, 0o755)
    env = zw.replay("codex_simple")
    _run_umask0(zw, "init", "--yes")
    a = _run_umask0(zw, "spawn", "-", "--name", "alpha", env=env, input=b"a secret").stdout
    sid = a.decode().strip()
    wait_status(zw, sid, "completed")
    _run_umask0(zw, "inject", sid, "more", env=env)  # follow-up: digest cache, prompt 2
    wait_status(zw, sid, "completed")
    hung = _run_umask0(zw, "spawn", "hang", env=zw.replay("codex_simple", FAKE_HANG="1"))
    hid = hung.stdout.decode().strip()
    _run_umask0(zw, "kill", hid)
    gone = _run_umask0(zw, "spawn", "to remove", env=env).stdout.decode().strip()
    wait_status(zw, gone, "completed")
    _run_umask0(zw, "rm", gone)  # leaves the trash dir behind
    assert (zw.session_dir(sid) / "turns" / "turn_1.digest.json").exists()
    assert (zw.state_dir / "trash").is_dir()
    bad = []
    count = 0
    for dirpath, dirnames, filenames in os.walk(zw.state_dir):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            mode = stat.S_IMODE(p.lstat().st_mode)
            want = 0o700 if p.is_dir() else 0o600
            count += 1
            if mode != want:
                bad.append(f"{p.relative_to(zw.state_dir)}: {oct(mode)}")
    assert stat.S_IMODE(zw.state_dir.stat().st_mode) == 0o700
    assert bad == [] and count > 20, bad


_ORCH_UNDER_UMASK_0 = """
import os, sys
from pathlib import Path
os.umask(0)
from zwarm.api import Zwarm
from zwarm.orchestrator.runstore import RunStore
from zwarm.orchestrator.tools import Toolbox
api = Zwarm()
tb = Toolbox(api, "umask-test")
print(tb.dispatch("wait", {"all": True, "timeout_s": 0.1}))
rs = RunStore.open(api.state_dir)
with rs.lock("20261127-000000-abcd"):
    pass
"""


def test_every_dir_zwarm_makes_is_0700_under_umask_0_outside_the_state_dir_too(zw: Any) -> None:
    """Issue 29: under umask 000, the directories zwarm makes with their parents (the
    orchestrator's, the launch pins' ``$XDG_STATE_HOME/zwarm``, the trust file's) were 0777;
    every directory zwarm makes is 0700, every file 0600."""
    xdg = zw.tmp / "fresh"  # none of these exists yet: zwarm makes them all
    env = {
        "XDG_STATE_HOME": str(xdg / "state" / "deep"),
        "XDG_CONFIG_HOME": str(xdg / "config" / "deep"),
        "XDG_CACHE_HOME": str(xdg / "cache" / "deep"),
        **zw.replay("codex_simple"),
    }
    _run_umask0(zw, "init", "--yes", env=env)
    sid = _run_umask0(zw, "spawn", "task", env=env).stdout.decode().strip()
    wait_status(zw, sid, "completed")
    _run_umask0(zw, "ls", env=env)
    (zw.state_dir / "config.toml").write_text("[limits]\nmax_running = 2\n")
    _run_umask0(zw, "trust", "--yes", env=env)
    res = subprocess.run(
        [sys.executable, "-c", _ORCH_UNDER_UMASK_0],
        env={**zw.env, **env},
        cwd=zw.cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    made = [xdg / "state", xdg / "config", zw.state_dir / "orchestrator"]
    made += [xdg / "cache"] if (xdg / "cache").exists() else []  # the listing's, if it kept one
    bad, count = [], 0
    launchers = xdg / "state" / "deep" / "zwarm" / "bin"  # the agents' "$ZWARM": programs
    for root in made:
        assert root.is_dir(), root
        for p in [root, *root.rglob("*")]:
            mode = stat.S_IMODE(p.lstat().st_mode)
            want = 0o700 if p.is_dir() or p.parent.parent == launchers else 0o600
            count += 1
            if mode != want:
                bad.append(f"{p}: {oct(mode)}")
    assert (xdg / "state" / "deep" / "zwarm" / "pins").is_dir()
    assert (xdg / "config" / "deep" / "zwarm").is_dir()
    assert (zw.state_dir / "orchestrator" / "locks").is_dir()
    assert bad == [] and count > 12, bad


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_prompts_never_in_any_argv(zw: Any, adapter: str) -> None:
    canary = f"PROMPT-CANARY-{adapter}-7f3a9c"
    queued = f"QUEUED-CANARY-{adapter}-1b2d"
    env = zw.replay(f"{adapter}_simple", FAKE_HANG="1")
    res = zw.run(
        "spawn", "-", "--adapter", adapter, input=f"do {canary} now", env_extra=env, check=True
    )
    sid = res.stdout.strip()
    zw.run("inject", sid, "-", input=f"then {queued}", env_extra=env, check=True)
    agent, sup = agent_ref(zw, sid), supervisor_ref(zw, sid)
    assert b"zwarm.runtime.supervisor" in cmdline(sup[0]) and cmdline(agent[0])  # both running
    hits = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            c = cmdline(int(d.name))
            if canary.encode() in c or queued.encode() in c:
                hits.append((d.name, c))
    assert hits == []
    wait_until(lambda: zw.calls() >= 1)  # the agent records what it read just after reading
    _, prompt = zw.recorded()
    assert canary.encode() in prompt  # it did reach the agent, by stdin
    zw.run("kill", sid, check=True)


SHELL_CALLS = {
    ("os", "system"),
    ("os", "popen"),
    ("subprocess", "getoutput"),
    ("subprocess", "getstatusoutput"),
    ("os", "execl"),
    ("os", "spawnl"),
}


def test_no_shell_anywhere_in_zwarm() -> None:
    files = sorted((ROOT / "zwarm").rglob("*.py"))
    assert len(files) > 10
    found = []
    popen_calls = 0
    for f in files:
        tree = ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "shell" and not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is False
                ):
                    found.append(f"{f.name}:{node.lineno} shell={ast.unparse(kw.value)}")
            fn = node.func
            if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name):
                if (fn.value.id, fn.attr) in SHELL_CALLS:
                    found.append(f"{f.name}:{node.lineno} {fn.value.id}.{fn.attr}")
                if fn.attr == "Popen":
                    popen_calls += 1
                    first = node.args[0] if node.args else None
                    if isinstance(first, (ast.Constant, ast.JoinedStr)):
                        found.append(f"{f.name}:{node.lineno} Popen of a string")
    assert popen_calls >= 2  # the scan does see zwarm's process starts
    assert found == []


FLAGS = {
    "codex": "--dangerously-bypass-approvals-and-sandbox",
    "claude": "--dangerously-skip-permissions",
}
SAFE = {"codex": ["-s", "workspace-write"], "claude": ["--permission-mode", "acceptEdits"]}


def _has(argv: list[str], seq: list[str]) -> bool:
    return any(argv[i : i + len(seq)] == seq for i in range(len(argv)))


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_dangerous_modes_off_by_default_shown_when_on(zw: Any, adapter: str) -> None:
    env = zw.replay(f"{adapter}_simple")
    safe = spawn(zw, "safe", "--adapter", adapter, env=env)
    wait_status(zw, safe, "completed")
    argv = zw.recorded()[0]["argv"]
    assert FLAGS[adapter] not in argv and _has(argv, SAFE[adapter])
    flagged = spawn(zw, "flagged", "--adapter", adapter, "--dangerous", env=env)
    wait_status(zw, flagged, "completed")
    argv = zw.recorded()[0]["argv"]
    assert FLAGS[adapter] in argv and not _has(argv, SAFE[adapter])
    zw.write_config(f"[{adapter}]\ndangerous = true\n")
    configured = spawn(zw, "configured", "--adapter", adapter, env=env)
    wait_status(zw, configured, "completed")
    assert FLAGS[adapter] in zw.recorded()[0]["argv"]
    (zw.state_dir / "config.toml").unlink()
    # a follow-up keeps the session's mode, whatever the config says now
    zw.run("inject", flagged, "more", env_extra=env, check=True)
    wait_status(zw, flagged, "completed")
    assert FLAGS[adapter] in zw.recorded()[0]["argv"]
    zw.run("inject", safe, "more", env_extra=env, check=True)
    wait_status(zw, safe, "completed")
    assert FLAGS[adapter] not in zw.recorded()[0]["argv"]
    # shown in ls and show
    rows = {r["id"]: r["dangerous"] for r in zw.json("ls")}
    assert rows == {safe: False, flagged: True, configured: True}
    table = zw.run("ls", check=True).stdout.splitlines()
    for sid, on in rows.items():
        line = next(ln for ln in table if ln.startswith(sid[:8]))
        assert ("!danger" in line) == on, line
    assert zw.json("show", flagged)["dangerous"] is True
    assert "DANGEROUS" in zw.run("show", flagged, check=True).stdout
    assert "DANGEROUS" not in zw.run("show", safe, check=True).stdout


UNSAFE_CONFIG = {
    "codex": 'sandbox = "danger-full-access"',
    "claude": 'permission_mode = "bypassPermissions"',
}


@pytest.mark.parametrize("adapter", ["codex", "claude"])
def test_unsafe_configured_modes_are_shown_as_dangerous(zw: Any, adapter: str) -> None:
    """A sandbox or permission mode that disables the checks is flagged like the bypass flag."""
    env = zw.replay(f"{adapter}_simple")
    zw.state_dir.mkdir(mode=0o700)
    zw.write_config(f"[{adapter}]\n{UNSAFE_CONFIG[adapter]}\n")
    sid = spawn(zw, "unsafe", "--adapter", adapter, env=env)
    wait_status(zw, sid, "completed")
    argv = zw.recorded()[0]["argv"]
    assert FLAGS[adapter] not in argv  # no bypass flag: the configured mode is what runs
    assert zw.json("ls")[0]["dangerous"] is True
    shown = zw.run("show", sid, check=True).stdout
    assert "DANGEROUS" in shown and UNSAFE_CONFIG[adapter].split('"')[1] in shown


def test_agent_env_is_users_plus_configured(zw: Any) -> None:
    zw.state_dir.mkdir(mode=0o700)
    zw.write_config('[codex.env]\nZW_ADDED = "from config"\nZW_BOTH = "config wins"\n')
    user = {**zw.env, **zw.replay("codex_simple"), "ZW_USER": "u", "ZW_BOTH": "user"}
    res = subprocess.run(
        [str(ZWARM_BIN), "spawn", "task"],
        env=user,
        cwd=zw.cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    wait_status(zw, res.stdout.strip(), "completed")
    n = max(int(p.stem[4:]) for p in zw.record.glob("argv*.json"))
    got = json.loads((zw.record / f"env{n}.json").read_text())
    sid = res.stdout.strip()
    # plus the session marker by which kill verifies a process is the session's own, and
    # what makes a session the agent spawns its child, in the same state dir (engine.tree),
    # and how it runs zwarm: $ZWARM, a launcher in the user's state dir, its dir first on PATH,
    # and the PATH it was given (a child's agent is looked up there first)
    want = {**user, "ZW_ADDED": "from config", "ZW_BOTH": "config wins", "ZWARM_SESSION_ID": sid}
    want |= {"ZWARM_PARENT_SESSION": sid, "ZWARM_DIR": os.path.realpath(zw.state_dir)}
    launcher = Path(got["ZWARM"])
    assert launcher.parent.parent == Path(os.environ["XDG_STATE_HOME"]) / "zwarm" / "bin"
    want |= {"ZWARM": str(launcher), "PATH": f"{launcher.parent}:{user['PATH']}"}
    want |= {"ZWARM_AGENT_PATH": user["PATH"]}  # where its children's agents are looked up
    assert got == want


def test_api_keys_never_written_to_state(zw: Any) -> None:
    keys = {"OPENAI_API_KEY": "sk-openai-CANARY-5e1f", "ANTHROPIC_API_KEY": "sk-ant-CANARY-9d0c"}
    configured = "sk-configured-CANARY-77aa"
    zw.state_dir.mkdir(mode=0o700)
    cfg = zw.write_config(f'[claude.env]\nANTHROPIC_AUTH_TOKEN = "{configured}"\n')
    env = {**keys}
    ids = []
    for adapter, sample in [
        ("codex", "codex_simple"),
        ("claude", "claude_simple"),
        ("codex", "codex_error"),
        ("claude", "claude_error"),
    ]:
        ids.append(
            spawn(zw, f"task {sample}", "--adapter", adapter, env={**env, **zw.replay(sample)})
        )
    hung = spawn(
        zw,
        "hangs",
        "--adapter",
        "claude",
        env={**env, **zw.replay("claude_simple", FAKE_HANG="1", FAKE_STDERR="oops")},
    )
    for sid in ids:
        wait_until(lambda sid=sid: zw.json("show", sid)["status"] != "running")
    for sid in ids[:2]:
        zw.run("inject", sid, "more", env_extra={**env, **zw.replay("codex_simple")}, check=True)
    zw.run("kill", hung, env_extra=env, check=True)
    for sid in ids[:2]:
        wait_until(lambda sid=sid: zw.json("show", sid)["status"] != "running")
    # the keys did reach the agents (so this test can fail)
    seen = [json.loads(p.read_text()) for p in zw.record.glob("env*.json")]
    assert any(e.get("OPENAI_API_KEY") == keys["OPENAI_API_KEY"] for e in seen)
    assert any(e.get("ANTHROPIC_AUTH_TOKEN") == configured for e in seen)
    leaks = []
    for p in zw.state_dir.rglob("*"):
        if p.is_file() and p != cfg:
            data = p.read_bytes()
            for secret in [*keys.values(), configured]:
                if secret.encode() in data:
                    leaks.append(f"{p.relative_to(zw.state_dir)} holds {secret}")
    assert leaks == []
