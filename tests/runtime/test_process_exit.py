"""zwarm's own process ends without tearing its modules and objects down (``output.leave``:
5-15 ms of a short command) once its command is done, click's commands and the fast path's
alike, with the command's exit status and all its output; a program that calls ``main``
ends the usual way. The probe registers an exit handler before the process becomes zwarm's
own: it runs only if the process ends the usual way (``tests/cli/test_cli_exit.py`` proves
when the quick way is refused)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.support import ZW

PROBE = """
import atexit, os, sys
atexit.register(lambda: os.write(2, b"torn-down\\n"))
import zwarm.cli as cli
sys.argv = ["zwarm", *sys.argv[2:]]
getattr(cli, ENTRY)()
"""


def _probe(zw: ZW, entry: str, *args: str) -> subprocess.CompletedProcess[str]:
    code = PROBE.replace("ENTRY", repr(entry))
    return zw.python(code, "-", *args, env_extra=zw.replay("codex_simple"), timeout=60)


@pytest.mark.parametrize(
    "args",
    [("show", "SID"), ("show", "SID", "--json"), ("ls", "--json"), ("trajectory", "SID")],
    ids=["click", "fast", "listing", "click-trajectory"],
)
def test_a_command_ends_without_teardown_and_with_all_its_output(
    zw: ZW, args: tuple[str, ...]
) -> None:
    sid = zw.spawn("t", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    res = _probe(zw, "run", *(sid if a == "SID" else a for a in args))
    assert res.returncode == 0, res.stderr
    assert "torn-down" not in res.stderr
    again = zw.run(*(sid if a == "SID" else a for a in args), check=True).stdout
    assert _timeless(res.stdout) == _timeless(again)


def _timeless(text: str) -> str:
    """``text`` with its times relative to now ("(10 s ago)", "(just now)") as one mark: the
    two runs compared may be seconds apart on a loaded machine."""
    return re.sub(r"\((?:just now|[^()]* ago)\)", "(AGO)", text)


def test_a_spawn_ends_without_teardown_and_its_session_is_whole(zw: ZW) -> None:
    res = _probe(zw, "run", "spawn", "t", "--json")
    assert res.returncode == 0, res.stderr
    assert "torn-down" not in res.stderr
    sid = json.loads(res.stdout)["id"]
    assert zw.wait(sid).returncode == 0
    assert zw.meta(sid)["status"] == "completed"


@pytest.mark.parametrize("args", [("show", "0000dead"), ("wait", "--bogus")], ids=str)
def test_a_failing_command_keeps_its_status_and_error(zw: ZW, args: tuple[str, ...]) -> None:
    res = _probe(zw, "run", *args)
    want = zw.run(*args)
    assert res.returncode == want.returncode != 0
    assert res.stderr.replace("torn-down\n", "") == want.stderr
    assert "torn-down" not in res.stderr


def test_a_program_calling_main_ends_the_usual_way(zw: ZW) -> None:
    res = _probe(zw, "main", "ls", "--json")
    assert res.returncode == 0, res.stderr
    assert res.stderr.endswith("torn-down\n")
