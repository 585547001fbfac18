"""The example launcher plugin (examples/toy-launcher: ``nice``) end to end, through the real
``zwarm`` executable and the fake agents: installed by its entry point alone, it runs turns
under ``nice`` (its table's niceness, or the session's spawn option), its security-relevant
key needs trust, its options are checked as its table is, and a supervisor it lost is its own
failure reason, labelled by it in ``ls``.

These tests need ``examples/toy-launcher`` installed (``.ci/run`` installs it): they fail under
``CI=true`` without it and skip (with the reason) otherwise.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZW, wait_until
from zwarm import launchers


@pytest.fixture(autouse=True)
def _installed() -> None:
    if "nice" in launchers.loaded():
        return
    why = launchers.problems().get("nice") or "not installed (pip install -e examples/toy-launcher)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"launcher 'nice' {why}")
    pytest.skip(f"launcher 'nice' {why}")


def _nice(pid: int) -> int:
    """The nice value of process ``pid`` (/proc/PID/stat, field 19)."""
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return int(data[data.rindex(b")") + 2 :].split()[16])


def _gone(pid: int) -> bool:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return data[data.rindex(b")") + 2 :].split()[0] in (b"Z", b"X")


def _agent(zw: ZW, sid: str) -> dict[str, Any]:
    got: dict[str, Any] = wait_until(
        lambda: zw.meta(sid)["turns"][-1].get("agent"), message="agent recorded"
    )
    return got


def _row(zw: ZW, sid: str) -> dict[str, Any]:
    (row,) = [r for r in zw.json("ls") if r["id"] == sid]
    return row


def test_its_turns_run_under_nice_with_the_sessions_option(zw: ZW) -> None:
    base = os.nice(0)  # the test itself may run niced already
    hang = {**zw.replay("codex_simple"), "FAKE_HANG": "1"}
    sid = zw.spawn("hang", "--launcher", "nice", "--launcher-option", "niceness=7", env_extra=hang)
    agent = _agent(zw, sid)
    assert _nice(agent["pid"]) == min(19, base + 7)
    turn = zw.meta(sid)["turns"][-1]
    assert turn["launcher"] == "nice" and turn["handle"] == {"niceness": "7"}
    assert "nice niceness 7" in zw.run("show", sid, check=True).stdout
    zw.run("kill", sid, check=True)
    assert zw.meta(sid)["status"] == "killed"
    # the table's niceness by default ([launcher] default picks it), and a whole turn runs
    zw.write_config('[launcher]\ndefault = "nice"\n\n[nice]\nniceness = 3\n')
    sid = zw.spawn("hello", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    row = _row(zw, sid)
    assert row["status"] == "completed" and zw.meta(sid)["turns"][0]["handle"] == {"niceness": "3"}


def test_a_supervisor_it_lost_is_its_own_reason_labelled_by_it(zw: ZW) -> None:
    sid = zw.spawn(
        "hang", "--launcher", "nice", env_extra={**zw.replay("codex_simple"), "FAKE_HANG": "1"}
    )
    agent = _agent(zw, sid)
    sup = zw.meta(sid)["turns"][-1]["supervisor"]
    os.kill(sup["pid"], signal.SIGKILL)
    row = wait_until(lambda: (r := _row(zw, sid))["status"] == "failed" and r, message="reconciled")
    assert row["reason"] == "nice_lost" and "under nice" in row["error"]
    assert zw.meta(sid)["turns"][-1]["reason"] == "nice_lost"  # written back
    table = zw.run("ls", check=True).stdout
    assert "nice lost" in table
    wait_until(lambda: _gone(agent["pid"]), message="its orphaned agent terminated")


def test_its_security_key_needs_trust_and_its_options_are_checked(zw: ZW) -> None:
    zw.run("init", check=True)
    text = (zw.state_dir / "config.toml").read_text()
    assert "[nice]" in text and "# The nice program its turns' supervisors run under." in text
    assert '"local", "slurm", "ssh", "nice"' in text  # [launcher] default's line
    (zw.state_dir / "config.toml").write_text('[nice]\nprogram = "/usr/bin/nice"\n')  # untrusted
    res = zw.run("spawn", "t", "--launcher", "nice", env_extra=zw.replay("codex_simple"))
    assert res.returncode != 0 and "nice.program" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    zw.write_config('[nice]\nprogram = "/usr/bin/nice"\n')  # zwarm trust
    sid = zw.spawn("t", "--launcher", "nice", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    for option, said in [
        ("niceness=40", "nice.niceness must be from 0 to 19"),
        ("niceness=ten", "must be a number"),
        ("program=/bin/sh", "takes no option 'program'"),  # executes: never per session
    ]:
        res = zw.run("spawn", "t", "--launcher", "nice", "--launcher-option", option)
        assert res.returncode != 0 and said in res.stderr, (option, res.stderr)
        assert res.stderr.startswith("Error: ") and "Traceback" not in res.stderr
