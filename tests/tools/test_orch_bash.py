"""The orchestrator's ``bash`` tool: cwd confinement, timeout (whole group), bounded output."""

from __future__ import annotations

import os
import time

import pytest

from tests.conftest import wait_until
from tests.tools.helpers import err, ok, write_config
from zwarm.orch_bash import BASH_TOOL, OUTPUT_HEAD, OUTPUT_TAIL
from zwarm.tools import Toolbox


@pytest.fixture
def box(zw):
    def make(**env: str) -> Toolbox:
        return Toolbox(zw.api(env_extra=env), "orchestrate:test", extra=[BASH_TOOL])

    return make


def test_runs_in_the_working_directory(zw, box) -> None:
    (zw.cwd / "sub").mkdir()
    (zw.cwd / "sub" / "f.txt").write_text("content\n")
    r = ok(box().dispatch("bash", {"command": "pwd; cat sub/f.txt; echo $((6*7)); exit 3"}))
    assert r["exit_code"] == 3 and r["timed_out"] is False
    assert r["output"] == f"{zw.cwd.resolve()}\ncontent\n42\n"
    r = ok(box().dispatch("bash", {"command": "pwd", "cwd": "sub"}))
    assert r["output"].strip() == str((zw.cwd / "sub").resolve())
    assert "outside the allowed roots" in err(box().dispatch("bash", {"command": "ls", "cwd": "/"}))
    assert "must not be empty" in err(box().dispatch("bash", {"command": ""}))


def test_command_text_is_bash_argv_not_interpolated(zw, box) -> None:
    weird = "echo 'a b' \"$HOME\" `echo x`; printf '%s\\n' \"$0\""
    r = ok(box().dispatch("bash", {"command": weird}))
    assert r["output"].splitlines() == [f"a b {zw.env['HOME']} x", "/bin/bash"]


def test_api_key_is_not_passed_to_the_command(zw, box) -> None:
    write_config(zw, '[orchestrator]\napi_key_env = "MY_ORCH_KEY"\n')
    b = box(MY_ORCH_KEY="sekrit", ZWARM_ORCH_API_KEY="sekrit2", OTHER="visible")
    r = ok(
        b.dispatch(
            "bash", {"command": "echo ${MY_ORCH_KEY:-none} ${ZWARM_ORCH_API_KEY:-none} $OTHER"}
        )
    )
    assert r["output"].strip() == "none none visible"


def test_timeout_kills_the_whole_group(zw, box, tmp_path) -> None:
    write_config(zw, "[orchestrator]\nbash_timeout_s = 1\n")
    pidfile = tmp_path / "bg.pid"
    started = time.monotonic()
    r = ok(
        box().dispatch(
            "bash", {"command": f"sleep 300 & echo $! > {pidfile}; sleep 300", "timeout_s": 60}
        )
    )
    assert time.monotonic() - started < 30
    assert r["timed_out"] is True and r["exit_code"] is None and "killed after 1 s" in r["note"]
    bg = int(pidfile.read_text())

    def gone() -> bool:
        try:
            os.kill(bg, 0)
        except ProcessLookupError:
            return True
        return _is_zombie(bg)

    wait_until(gone, message="the background sleep to be killed")


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_background_leftovers_are_killed_after_a_normal_exit(zw, box, tmp_path) -> None:
    pidfile = tmp_path / "bg.pid"
    r = ok(box().dispatch("bash", {"command": f"sleep 300 & echo $! > {pidfile}; echo done"}))
    assert r["exit_code"] == 0 and r["output"] == "done\n"
    bg = int(pidfile.read_text())
    wait_until(
        lambda: _is_zombie(bg) or not os.path.exists(f"/proc/{bg}"),
        message="the leftover background process to be killed",
    )


def test_long_output_keeps_head_and_tail(zw, box) -> None:
    cmd = "for i in $(seq 1 20000); do echo line-$i; done"
    r = ok(box().dispatch("bash", {"command": cmd}))
    out = r["output"]
    assert out.startswith("line-1\nline-2\n") and out.rstrip().endswith("line-20000")
    assert r["output_cut_bytes"] > 100_000
    assert f"[... {r['output_cut_bytes']} bytes of output cut ...]" in out
    assert len(out.encode()) < OUTPUT_HEAD + OUTPUT_TAIL + 100
