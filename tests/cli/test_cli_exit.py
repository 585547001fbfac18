"""``zwarm.cli.output.leave``: zwarm's own process ends without tearing its modules and
objects down (``os._exit``, 5-15 ms of a short command) only when the interpreter's exit would
do nothing else: no thread but daemons running, no exit handler registered since the process
became zwarm's own, stdout and stderr its own and flushed. Otherwise it ends the usual way
(``SystemExit``), and what the exit had to do is done."""

from __future__ import annotations

import atexit
import io
import threading
from collections.abc import Iterator

import pytest

from zwarm.cli import output

pytestmark = pytest.mark.unit


class QuickExit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _quick_exit(code: int) -> None:
    raise QuickExit(code)


@pytest.fixture
def own(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process made zwarm's own, ``os._exit`` caught."""
    monkeypatch.setattr(output, "_OWN", {"process": False, "handlers": 0})
    monkeypatch.setattr("os._exit", _quick_exit)
    output.own_process()
    yield


def _leave(
    monkeypatch: pytest.MonkeyPatch, code: str | int | None, stream: type[io.StringIO] = io.StringIO
) -> None:
    """``output.leave(code)`` with the process's own stdout and stderr (stand-ins set in the
    test's body: pytest holds the real ones, and sets its own again once setup is done)."""
    for name in ("stdout", "stderr"):
        s = stream()
        monkeypatch.setattr(f"sys.{name}", s)
        monkeypatch.setattr(f"sys.__{name}__", s)
    output.leave(code)


@pytest.mark.parametrize("code", [None, 0, 1, 2, 130])
def test_nothing_left_ends_the_quick_way_with_the_commands_status(
    own: None, monkeypatch: pytest.MonkeyPatch, code: int | None
) -> None:
    with pytest.raises(QuickExit) as e:
        _leave(monkeypatch, code)
    assert e.value.code == (code or 0)


def test_a_running_thread_is_waited_for(own: None, monkeypatch: pytest.MonkeyPatch) -> None:
    go, done = threading.Event(), []

    def work() -> None:
        go.wait(10)
        done.append(1)

    t = threading.Thread(target=work)
    t.start()
    try:
        with pytest.raises(SystemExit) as e:
            _leave(monkeypatch, 0)
        assert e.value.code == 0
    finally:
        go.set()
        t.join()
    assert done == [1]


def test_a_daemon_thread_does_not_hold_the_exit(own: None, monkeypatch: pytest.MonkeyPatch) -> None:
    go = threading.Event()
    t = threading.Thread(target=go.wait, args=(10,), daemon=True)
    t.start()
    try:
        with pytest.raises(QuickExit):
            _leave(monkeypatch, 0)
    finally:
        go.set()
        t.join()


def test_an_exit_handler_registered_since_start_is_left_to_run(
    own: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def handler() -> None:
        pass

    atexit.register(handler)
    try:
        with pytest.raises(SystemExit):
            _leave(monkeypatch, 0)
    finally:
        atexit.unregister(handler)


def test_a_program_calling_main_ends_the_usual_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "_OWN", {"process": False, "handlers": atexit._ncallbacks()})
    monkeypatch.setattr("os._exit", _quick_exit)
    with pytest.raises(SystemExit):
        _leave(monkeypatch, 0)


def test_a_swapped_stdout_ends_the_usual_way(own: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.__stdout__", io.StringIO())  # stdout is no longer the process's
    monkeypatch.setattr("sys.stdout", io.StringIO())
    with pytest.raises(SystemExit):
        output.leave(0)


@pytest.mark.parametrize("code", ["Error: a message", 256, -1])
def test_a_status_that_is_not_a_byte_ends_the_usual_way(
    own: None, monkeypatch: pytest.MonkeyPatch, code: str | int
) -> None:
    with pytest.raises(SystemExit) as e:
        _leave(monkeypatch, code)
    assert e.value.code == code


def test_a_stdout_that_cannot_flush_ends_the_usual_way(
    own: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Closed(io.StringIO):
        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(SystemExit):
        _leave(monkeypatch, 0, Closed)
