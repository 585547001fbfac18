"""``[hooks] on_finish``/``on_fail`` and ``spawn --notify``: run when a session ends, with its
JSON on stdin, under a time limit, logged; never changing the session; only from a trusted
config."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.support import wait_until

HOOK = """\
import json, os, sys
data = json.load(sys.stdin)
out = os.path.join({out!r}, os.environ["ZWARM_HOOK_EVENT"] + ".json")
env = {{k: v for k, v in os.environ.items() if k.startswith("ZWARM")}}
with open(out + ".tmp", "w") as f:
    json.dump({{"data": data, "env": env, "cwd": os.getcwd()}}, f)
os.rename(out + ".tmp", out)
print("hook says hello")
sys.exit(int(os.environ.get("HOOK_EXIT", "0")))
"""


def setup_hooks(zw: Any, extra: str = "", fail: bool = True) -> Path:
    """A hook script recording what it got into ``out/<event>.json``; config trusted."""
    out = zw.tmp / "hook-out"
    out.mkdir(exist_ok=True)
    script = zw.tmp / "hook.py"
    script.write_text(HOOK.format(out=str(out)))
    argv = json.dumps([sys.executable, str(script)])
    zw.state_dir.mkdir(exist_ok=True)
    text = f"[hooks]\non_finish = {argv}\n" + (f"on_fail = {argv}\n" if fail else "") + extra
    zw.write_config(text)
    return out


def keys(value: Any) -> list[str]:
    """Every key in a JSON document, at any depth."""
    if isinstance(value, dict):
        return [*value, *(k for v in value.values() for k in keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in keys(v)]
    return []


def hooks_log(zw: Any, sid: str) -> str:
    path = zw.session_dir(sid) / "hooks.log"
    return path.read_text() if path.exists() else ""


def logged(zw: Any, sid: str, text: str, timeout: float = 60) -> str:
    return str(
        wait_until(
            lambda: text in hooks_log(zw, sid) and hooks_log(zw, sid),
            timeout=timeout,
            message=f"{text!r} in hooks.log",
        )
    )


def test_on_finish_gets_the_session_json_and_on_fail_only_a_failure(zw: Any) -> None:
    out = setup_hooks(zw)
    sid = zw.spawn("good task", "--name", "hooked", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    got = wait_until(lambda: (out / "on_finish.json").exists() and out / "on_finish.json")
    rec = json.loads(got.read_text())
    assert rec["data"]["id"] == sid and rec["data"]["status"] == "completed"
    assert rec["data"]["turns_detail"][0]["message"] == "good task"  # as `show --json` prints
    assert rec["env"]["ZWARM_HOOK_SESSION"] == sid
    assert rec["env"]["ZWARM_HOOK_STATUS"] == "completed"
    assert rec["env"]["ZWARM_DIR"] == str(zw.state_dir)
    assert "ZWARM_SESSION_ID" not in rec["env"] and "ZWARM_SUPERVISOR_OF" not in rec["env"]
    assert rec["cwd"] == str(zw.state_dir.parent)
    log = logged(zw, sid, "on_finish: exit 0")
    assert "hook says hello" in log
    assert not (out / "on_fail.json").exists()

    bad = zw.spawn("t", env_extra={**zw.replay("codex_simple"), "FAKE_FAIL_ON": "t"})
    assert zw.wait(bad).returncode == 1
    logged(zw, bad, "on_fail: exit 0")
    rec = json.loads((out / "on_fail.json").read_text())
    assert rec["data"]["id"] == bad and rec["env"]["ZWARM_HOOK_STATUS"] == "failed"


def test_a_killed_session_runs_on_finish_not_on_fail(zw: Any) -> None:
    out = setup_hooks(zw)
    hold = zw.tmp / "hold"
    hold.touch()
    sid = zw.spawn("t", env_extra=zw.gated(hold, **zw.replay("codex_simple")))
    zw.run("kill", sid, check=True)
    logged(zw, sid, "on_finish: exit 0")
    assert json.loads((out / "on_finish.json").read_text())["data"]["status"] == "killed"
    assert "on_fail" not in hooks_log(zw, sid)


def test_a_failing_or_hanging_hook_never_affects_the_session(zw: Any) -> None:
    hang = json.dumps([sys.executable, "-c", "import time; print('stuck'); time.sleep(600)"])
    zw.state_dir.mkdir(exist_ok=True)
    zw.write_config(f'[hooks]\non_finish = {hang}\non_fail = "exit 7"\ntimeout_s = 4\n')
    env = {**zw.replay("codex_simple"), "FAKE_FAIL_ON": "BREAK"}
    sid = zw.spawn("t", env_extra=env)
    res = zw.run("wait", sid, "--json", check=True)  # the session ends as if no hook were set
    assert json.loads(res.stdout)["statuses"][sid] == "completed"
    logged(zw, sid, "stuck")  # the hook runs...
    sup = zw.meta(sid)["turns"][0]["supervisor"]["pid"]
    wait_until(lambda: not Path(f"/proc/{sup}").exists(), message="the supervisor gone")
    assert "killed" not in hooks_log(zw, sid)  # ...detached: its supervisor exited without it
    log = logged(zw, sid, "on_finish: killed after 4 s")
    assert zw.meta(sid)["status"] == "completed"
    assert log.index("stuck") < log.index("killed after")
    zw.run("inject", sid, "please BREAK", env_extra=env, check=True)  # the next turn runs fine
    wait_until(lambda: zw.meta(sid)["status"] == "failed")
    logged(zw, sid, "on_fail: exit 7")
    m = zw.meta(sid)
    assert len(m["turns"]) == 2 and m["turns"][1]["error"].startswith("agent exited with code 3")
    assert not [k for k in keys(m) if "hook" in k]  # nothing about hooks is recorded


def test_hooks_from_an_untrusted_config_never_run(zw: Any) -> None:
    out = setup_hooks(zw)
    cfg = zw.state_dir / "config.toml"
    other = zw.tmp / "other-hook.py"  # the same hook under another name: a changed command
    other.write_text((zw.tmp / "hook.py").read_text())
    cfg.write_text(cfg.read_text().replace(str(zw.tmp / "hook.py"), str(other)))
    sid = zw.spawn("t", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    log = logged(zw, sid, "on_finish: not run")
    assert "trust" in log
    assert not (out / "on_finish.json").exists()


def test_spawn_notify_sends_a_desktop_notification(zw: Any) -> None:
    bindir = zw.tmp / "notifybin"
    bindir.mkdir()
    record = zw.tmp / "notified.json"
    tool = bindir / "notify-send"
    tool.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    tool.chmod(0o755)
    env = {**zw.replay("codex_simple"), "PATH": f"{bindir}:{zw.env['PATH']}"}
    sid = zw.spawn("t", "--name", "ping", "--notify", env_extra=env)
    assert zw.wait(sid).returncode == 0
    argv = json.loads(wait_until(lambda: record.exists() and record.read_text()))
    assert argv[0] == "--app-name=zwarm" and argv[1] == "zwarm: ping completed"
    logged(zw, sid, "notify: exit 0")
    quiet = zw.spawn("t", env_extra=env)  # without --notify: nothing
    assert zw.wait(quiet).returncode == 0
    assert not (zw.session_dir(quiet) / "hooks.log").exists()
