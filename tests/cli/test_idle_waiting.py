"""Waiting costs nothing (issue 16): ``wait``, ``logs -f``, ``trajectory -f`` and ``top`` on
an idle session (its agent runs but writes nothing) read nothing until a file of the session
changes, and then wake at once; a supervisor killed -9 (no file written) is still noticed by
the periodic look, which checks the processes, not the files. The same holds with inotify
unavailable (``ZWARM_NO_INOTIFY``: stat-keyed polls). Counted, not timed: each test counts the
session reads (``Zwarm.get``, ``Zwarm.sessions``) a waiter makes."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import zwarm.ops.waiting as api_mod
from tests.support import wait_until
from zwarm.cli import live, render
from zwarm.ops import following as follow
from zwarm.system import notify

LATE_LINE = (
    b'{"type":"item.completed","item":{"id":"item_9","type":"agent_message","text":"late"}}\n'
)
QUIET_S = 2.5  # how long a waiter is watched while nothing changes


@pytest.fixture(params=[False, True], ids=["inotify", "poll"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param:
        monkeypatch.setenv(notify.NO_INOTIFY, "1")
    yield "poll" if request.param else "inotify"


def hanging(zw: Any) -> str:
    """A running session whose agent printed one line and now writes nothing."""
    sid: str = zw.spawn("hang", env_extra={**zw.replay("codex_simple"), "FAKE_HANG": "1"})
    wait_until(lambda: zw.meta(sid)["turns"][-1].get("agent"), message="agent recorded")
    wait_until(lambda: zw.turn_file(sid, 1).read_bytes(), message="its first line")
    time.sleep(0.5)  # whatever the supervisor records after the agent's first line
    return sid


def counted(monkeypatch: pytest.MonkeyPatch, obj: Any, name: str) -> list[Any]:
    """Every call of ``obj.name`` (its first argument), the call itself unchanged."""
    calls: list[Any] = []
    real: Callable[..., Any] = getattr(obj, name)

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append(args[0] if args else None)
        return real(*args, **kw)

    monkeypatch.setattr(obj, name, counting)
    return calls


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        box["result"] = fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def append(zw: Any, sid: str, line: bytes) -> None:
    with open(zw.turn_file(sid, 1), "ab") as f:  # as the agent would
        f.write(line)


def test_wait_reads_an_idle_session_once_then_wakes_when_it_is_killed(
    zw: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_mod, "WAKE_S", 60.0)  # no periodic look within this test
    sid = hanging(zw)
    api = zw.api()
    reads = counted(monkeypatch, api, "get")
    res = api.wait([sid], timeout=QUIET_S)
    assert res["timed_out"] and res["statuses"] == {sid: "running"}
    assert reads == [sid]  # read once, then asleep until the timeout

    t, box = in_thread(lambda: api.wait([sid], timeout=120))
    wait_until(lambda: len(reads) == 2, message="the second wait's first read")
    zw.run("kill", sid, check=True)
    t.join(50)  # far less than the 60 s of a periodic look: woken by meta.json's change
    assert not t.is_alive(), f"wait did not wake up ({mode})"
    assert box["result"]["statuses"] == {sid: "killed"} and not box["result"]["timed_out"]
    assert len(reads) <= 4


def test_wait_notices_a_supervisor_killed_9_and_reads_only_the_lost(
    zw: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_mod, "WAKE_S", 0.5)
    sid = hanging(zw)
    api = zw.api()
    reads = counted(monkeypatch, api, "get")
    alive = counted(monkeypatch, api, "_alive")
    assert api.wait([sid], timeout=QUIET_S)["timed_out"]
    assert reads == [sid]  # the periodic looks asked whether it runs, and read nothing
    assert len(alive) >= 3

    t, box = in_thread(lambda: api.wait([sid], timeout=120))
    wait_until(lambda: len(reads) == 2, message="the second wait's first read")
    os.kill(zw.meta(sid)["turns"][0]["supervisor"]["pid"], signal.SIGKILL)  # writes nothing
    t.join(60)
    assert not t.is_alive(), "wait missed the supervisor's death"
    assert box["result"]["statuses"] == {sid: "failed"}
    assert "supervisor lost" in zw.meta(sid)["turns"][0]["error"]


def test_logs_follow_sleeps_while_idle_and_wakes_on_a_new_line(
    zw: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_mod, "WAKE_S", 60.0)
    sid = hanging(zw)
    api = zw.api()
    reads = counted(monkeypatch, api, "get")
    got: list[bytes] = []
    t, _ = in_thread(lambda: got.extend(api.logs(sid, None, True)))
    wait_until(lambda: got and len(reads) >= 2, message="the log's first line")
    settled = len(reads)
    time.sleep(QUIET_S)
    assert len(reads) == settled  # no meta.json read while nothing changed
    append(zw, sid, LATE_LINE)
    wait_until(lambda: LATE_LINE in b"".join(got), timeout=30, message="the new line")
    assert len(reads) == settled  # a log that grew is read; meta.json is not
    zw.run("kill", sid, check=True)
    t.join(50)
    assert not t.is_alive(), "logs -f did not end with the session"


def test_trajectory_follow_sleeps_while_idle_and_wakes_on_a_new_step(
    zw: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_mod, "WAKE_S", 60.0)
    sid = hanging(zw)
    api = zw.api()
    items: list[Any] = []
    reads = counted(monkeypatch, api, "get")
    t, _ = in_thread(lambda: items.extend(follow.follow(api, sid)))
    wait_until(lambda: len(reads) >= 2, message="follow started")
    time.sleep(0.5)
    settled = len(reads)
    time.sleep(QUIET_S)
    assert len(reads) == settled
    append(zw, sid, LATE_LINE)
    wait_until(lambda: any(isinstance(i, dict) and "late" in str(i) for i in items), timeout=30,
               message="the new step")  # fmt: skip
    zw.run("kill", sid, check=True)
    t.join(50)
    assert not t.is_alive(), "trajectory -f did not end with the session"
    assert isinstance(items[-1], follow.TurnEnd) and items[-1].session.status.value == "killed"


def test_top_reads_again_only_what_changed(
    zw: Any, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "FULL_EVERY_S", 60.0)
    sid = hanging(zw)
    api = zw.api()
    listed = counted(monkeypatch, api, "sessions")
    with live.Board(api) as board:
        assert listed == [None] and sid in board.running
        board.update()  # once more: what changed before its directory was watched
        assert len(listed) == 2
        time.sleep(1.0)
        board.update()
        assert len(listed) == 2  # nothing changed: nothing read
        append(zw, sid, LATE_LINE)

        def step_seen() -> bool:
            board.update()
            w = board.watches[(sid, 1)]
            return w.latest is not None and "late" in str(w.latest)

        wait_until(step_seen, timeout=30, message="the new step on the board")
        assert len(listed) == 2  # only the log that grew was read
        zw.run("kill", sid, check=True)
        wait_until(lambda: board.update() >= 0 and sid not in board.running, timeout=30,
                   message="the kill on the board")  # fmt: skip
        assert len(listed) >= 3
        shown = board.lines(live._Painter(render.console()), 100, 20)
    assert shown[0].startswith("zwarm top · 0 running · 1 sessions")
    assert " ".join(shown[2].split()) == "ID NAME STATUS TURN TIME TOKENS NOW / LAST"
    assert shown[3].startswith(sid[:8]) and "killed" in shown[3]
    assert all(len(x) <= 100 for x in shown)


def test_top_paints_each_distinct_cell_once(monkeypatch: pytest.MonkeyPatch) -> None:
    console = render.console()
    painted = counted(monkeypatch, console, "render_str")
    paint = live._Painter(console)
    for _ in range(3):
        assert paint.cell("[green]running[/]") == paint.cell("[green]running[/]")
        assert paint.cell("0:07") == ("0:07", 4)  # plain text: never rendered
        assert paint.cell("a long [bold]message[/] cut", 10)[1] == 10
    assert painted == ["[green]running[/]", "a long [bold]message[/] cut"]


@pytest.mark.parametrize("width", [30, 60, 80, 160])
def test_top_lines_never_pass_the_terminal_width(width: int) -> None:
    paint = live._Painter(render.console())  # not a terminal here: plain text
    head = tuple(name for name, _ in live._TOP_COLUMNS)
    row = ("0123abcd", "a-rather-long-na…", "[red]failed[/] [dim](supervisor_lost)[/]",
           "build-box", "12", "1:02:03", "1.2M", "[bold]$[/] " + "x" * 300)  # fmt: skip
    lines = live._table(paint, [head, row], width)
    assert all(len(x) <= width for x in lines), [len(x) for x in lines]
    assert lines[1].endswith("…")
    if width >= 60:
        assert lines[1].startswith("0123abcd  ")  # NAME and STATUS shrink first
    if width >= 160:
        assert "failed (supervisor_lost)" in lines[1]  # shrunk only when it must be
