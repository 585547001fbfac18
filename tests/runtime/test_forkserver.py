"""The fork server (``zwarm.runtime.forkserver``): turns after the first are forked from a
per-state-dir server, and nothing about a turn's reliability depends on it.

Through the real CLI: a second turn's supervisor is a child of the server, marked as the
session's supervisor, with the session's ``supervisor.log`` as stderr; ``kill`` stops it; the
server's death, or another session's supervisor's, leaves a running turn to finish; another
environment gets another server. Then the server and the requester alone: what a server
refuses (another user, a sandboxed process, a malformed request, its own code changed on
disk), when it exits
(idle, its state dir gone, another server at its address), and what a requester refuses (an
impostor's answer), falling back to a new interpreter.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import forkservers, wait_until
from zwarm.launchers import forking
from zwarm.launchers.local import supervisor_env
from zwarm.runtime import forkserver
from zwarm.system import procs

SID = "0123abcd-0000-4000-8000-00000000beef"


def _stat(pid: int) -> list[bytes]:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return data[data.rindex(b")") + 2 :].split()


def _cmdline(pid: int) -> list[bytes]:
    """``pid``'s command line. A live process's can read empty for a moment (the kernel
    could not read its memory then, on a loaded machine): read again until it is not, or
    the process is gone (then empty)."""

    def read() -> tuple[bytes] | None:
        try:
            data = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return (b"",)
        return (data,) if data or _gone(pid) else None

    (data,) = wait_until(read, message=f"a command line in /proc/{pid}/cmdline")
    return data.split(b"\0")


def _listening(pid: int) -> bool:
    """Whether server ``pid`` listens at the address its command line names (not if it is
    gone by now: a server that lost the race for its address exits at once)."""
    args = _cmdline(pid)
    return len(args) >= 2 and _listens(args[-2].decode())


def _listens(name: str) -> bool:
    """Whether a socket listens at server ``name``'s address (bound is not enough: a server
    listens once it has imported what its children need)."""
    want = f"@zwarm-forkserver-{os.geteuid()}-{name}"
    lines = Path("/proc/net/unix").read_text().splitlines()
    return any(ln.split()[-1] == want and ln.split()[3] == "00010000" for ln in lines[1:])


def _server(zw: Any, count: int = 1) -> list[int]:
    """The ``count`` servers of this test's state dir, once they listen."""

    def ready() -> list[int] | None:
        pids = forkservers(zw.state_dir)
        return pids if len(pids) == count and all(_listening(p) for p in pids) else None

    found: list[int] = wait_until(ready, message=f"{count} fork server(s) listening")
    return found


def _execd(pid: int) -> bool:
    """Whether supervisor ``pid`` is a new interpreter (no fork server is its parent)."""
    parent = int(_stat(pid)[1])
    return b"zwarm.runtime.supervisor" in _cmdline(pid) and not forkservers(Path("/"), [parent])


def _supervisor(zw: Any, sid: str) -> int:
    ref = wait_until(lambda: zw.meta(sid)["turns"][-1].get("supervisor"), message="supervisor")
    return int(ref["pid"])


def _gone(pid: int) -> bool:
    try:
        return _stat(pid)[0] in (b"Z", b"X")
    except OSError:
        return True


@pytest.fixture
def gate(zw: Any) -> Iterator[tuple[Path, dict[str, str]]]:
    """(hold file, env): agents started with ``env`` wait while the hold file exists."""
    hold = zw.tmp / "hold"
    yield hold, zw.gated(hold, **zw.replay("codex_simple"))
    hold.unlink(missing_ok=True)


def test_turns_after_the_first_are_forked_by_the_servers_and_run_as_any(zw, gate) -> None:
    hold, env = gate
    hold.touch()  # every check of a supervisor below is made while its turn is held
    first = zw.spawn("one", env_extra=env)  # no server yet: a new interpreter, one started
    assert _execd(_supervisor(zw, first))
    hold.unlink()
    (server,) = _server(zw)
    assert zw.wait(first).returncode == 0
    hold.touch()
    sid = zw.spawn("two", env_extra=env)
    sup = _supervisor(zw, sid)
    fields = _stat(sup)
    assert int(fields[1]) == server  # forked by it
    assert int(fields[2]) == int(fields[3]) == sup  # its own process group and session
    assert procs.has_marker(sup, sid, procs.SUPERVISOR_MARKER)
    assert not procs.has_marker(server, sid, procs.SUPERVISOR_MARKER)
    assert os.readlink(f"/proc/{sup}/fd/2") == str(zw.session_dir(sid) / "supervisor.log")
    assert os.readlink(f"/proc/{sup}/cwd") == "/"
    want = [b"-I", b"-m", b"zwarm.runtime.supervisor", bytes(zw.state_dir), sid.encode()]
    args = [a for a in _cmdline(sup) if a]  # shown as what it is, in ps and top
    assert args[1:] == want
    hold.unlink()
    assert zw.wait(sid).returncode == 0
    (row,) = [r for r in zw.json("ls") if r["id"] == sid]
    assert row["status"] == "completed"
    assert zw.json("trajectory", sid)  # the turn's output landed
    assert forkservers(zw.state_dir) == [server]  # one server, still serving


def _held_forked_turn(zw: Any, gate: tuple[Path, dict[str, str]]) -> tuple[int, str, int]:
    """(server, session id, supervisor): a first session's turn ran (and started the
    server); a second one's runs, held, under a supervisor the server forked."""
    hold, env = gate
    zw.wait(zw.spawn("one", env_extra=env))
    (server,) = _server(zw)
    hold.touch()
    sid = zw.spawn("two", env_extra=env)
    return server, sid, _supervisor(zw, sid)


def test_kill_stops_a_forked_supervisors_turn_and_the_server_serves_on(zw, gate) -> None:
    hold, env = gate
    server, sid, sup = _held_forked_turn(zw, gate)
    wait_until(lambda: zw.meta(sid)["turns"][-1].get("agent"), message="agent recorded")
    zw.run("kill", sid, check=True)
    assert zw.meta(sid)["status"] == "killed"
    wait_until(lambda: _gone(sup), message="the killed supervisor gone")
    third = zw.spawn("three", env_extra=env)  # held too: its supervisor is looked at live
    assert int(_stat(_supervisor(zw, third))[1]) == server
    hold.unlink()
    assert zw.wait(third).returncode == 0


def test_the_servers_death_leaves_its_running_turns_to_finish(zw, gate) -> None:
    hold, env = gate
    server, sid, sup = _held_forked_turn(zw, gate)
    os.kill(server, signal.SIGKILL)
    wait_until(lambda: _gone(server), message="server gone")
    hold.unlink()
    assert zw.wait(sid).returncode == 0
    assert zw.meta(sid)["status"] == "completed"
    # it records the outcome first, then runs its scheduler pass and exits: wait for that
    wait_until(lambda: _gone(sup), message="the orphaned supervisor exited")
    hold.touch()
    after = zw.spawn("three", env_extra=env)  # no server: a new interpreter again, and a server
    assert _execd(_supervisor(zw, after))
    hold.unlink()
    assert zw.wait(after).returncode == 0
    assert server not in _server(zw)


def test_one_forked_supervisors_death_never_touches_another_session(zw, gate) -> None:
    hold, env = gate
    zw.wait(zw.spawn("one", env_extra=env))
    _server(zw)
    hold.touch()
    a, b = zw.spawn("a", env_extra=env), zw.spawn("b", env_extra=env)
    sup_a = _supervisor(zw, a)
    for sid in (a, b):
        wait_until(lambda sid=sid: zw.meta(sid)["turns"][-1].get("agent"), message="agents")
    os.kill(sup_a, signal.SIGKILL)
    hold.unlink()
    assert zw.wait(b).returncode == 0
    rows = {r["id"]: r for r in zw.json("ls")}
    assert rows[b]["status"] == "completed"
    assert rows[a]["status"] == "failed"
    assert zw.json("show", a)["turns_detail"][-1]["reason"] == "supervisor_lost"


def test_a_forked_supervisor_runs_with_its_requesters_environment(zw, gate) -> None:
    hold, env = gate
    zw.wait(zw.spawn("one", env_extra=env))
    (server,) = _server(zw)
    hold.touch()
    sid = zw.spawn("two", env_extra={**env, "SOMETHING_ELSE": "42"})
    assert int(_stat(_supervisor(zw, sid))[1]) == server  # the same server
    hold.unlink()
    assert zw.wait(sid).returncode == 0
    first, second = (json.loads((zw.record / f"env{n}.json").read_text()) for n in (1, 2))
    assert "SOMETHING_ELSE" not in first and second["SOMETHING_ELSE"] == "42"
    assert second["ZWARM_SESSION_ID"] == sid
    assert "ZWARM_SUPERVISOR_OF" not in second
    zw.wait(zw.spawn("three", env_extra={**env, "LANG": "C.UTF-8-other"}))  # read at start-up
    assert len(_server(zw, count=2)) == 2


def test_what_a_child_inherits_besides_its_environment_picks_the_server(tmp_path: Path) -> None:
    import resource

    env = {"A": "1"}
    base = forking.address(tmp_path, sys.executable, env)
    assert forking.address(tmp_path, sys.executable, env) == base
    assert forking.address(tmp_path, sys.executable, {"A": "2"}) == base  # sent with a request
    for shaping in ("LD_PRELOAD", "LANG", "LC_ALL", "TZ", "TMPDIR", "MALLOC_ARENA_MAX"):
        assert forking.address(tmp_path, sys.executable, {**env, shaping: "x"}) != base
    assert forking.address(tmp_path / "x", sys.executable, env) != base
    mask = os.umask(0o077)
    try:
        assert forking.address(tmp_path, sys.executable, env) != base
    finally:
        os.umask(mask)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
    try:
        assert forking.address(tmp_path, sys.executable, env) != base
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert forking.address(tmp_path, sys.executable, env) == base


def test_switched_off_turns_run_as_new_interpreters(zw, gate) -> None:
    hold, env = gate
    off = {**env, "ZWARM_FORKSERVER": "0"}
    for task in ("one", "two"):
        hold.touch()
        sid = zw.spawn(task, env_extra=off)
        assert _execd(_supervisor(zw, sid))
        hold.unlink()
        assert zw.wait(sid).returncode == 0
    assert forkservers(zw.state_dir) == []


def test_one_server_starts_at_a_time_and_holds_the_start_lock_until_it_listens(
    zw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storm of first turns starts one server, not one per turn (the rest would exit at
    once, having lost the race to bind): the starter takes the state dir's start lock and
    hands it to the server, which holds it until it listens."""
    api = zw.api()
    api.store.ensure()
    launcher = api._launcher("local")
    environ = supervisor_env(api.env.environ, forking.PLACEHOLDER)
    name = forking.address(api.store.root, api.env.python, environ)
    started: list[list[str]] = []
    popen = subprocess.Popen

    def counting(argv: list[str], **kw: Any) -> Any:
        started.append(argv)
        return popen(argv, **kw)

    monkeypatch.setattr(subprocess, "Popen", counting)  # local imports it where it starts one
    for _ in range(5):
        launcher._start_server(name, environ)
    assert len(started) == 1 and "--lock" in started[0]
    with pytest.raises(forking.Busy):  # held by the server until it listens
        os.close(forking.start_lock(api.store.root) or -1)
    wait_until(lambda: _listens(name))
    fd = wait_until(lambda: _free(api.store.root))
    os.close(fd)


def _free(root: Path) -> int | None:
    try:
        return forking.start_lock(root)
    except forking.Busy:
        return None


def test_a_link_at_the_start_lock_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"mine")
    os.symlink(target, tmp_path / forking.START_LOCK)
    assert forking.start_lock(tmp_path) is None  # no lock: a server starts anyway
    assert target.read_bytes() == b"mine"


# --- the server alone ------------------------------------------------------------------------


def _start(state: Path, name: str, *extra: str, env: dict[str, str] | None = None) -> Any:
    environ = env if env is not None else supervisor_env(os.environ, forking.PLACEHOLDER)
    argv = [sys.executable, "-I", "-m", "zwarm.runtime.forkserver", *extra, str(state), name]
    return subprocess.Popen(argv, env=environ, cwd="/", stderr=subprocess.PIPE)


def _name() -> str:
    return os.urandom(16).hex()


def test_a_server_exits_when_idle_or_when_its_state_dir_goes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    idle = _start(state, _name(), "--idle", "0.5")
    assert idle.wait(timeout=30) == 0
    name = _name()
    gone = _start(state, name)
    wait_until(lambda: _listens(name))
    second = _start(state, name)  # its address is taken: exits at once, leaving the first
    assert second.wait(timeout=30) == 0
    assert gone.poll() is None
    state.rename(tmp_path / "moved")
    assert gone.wait(timeout=30) == 0


def test_a_detached_server_is_no_child_of_its_starter(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    name = _name()
    starter = _start(state, name, "--detach")
    assert starter.wait(timeout=30) == 0  # at once, the server running on
    (server,) = wait_until(lambda: forkservers(state))
    assert int(_stat(server)[1]) != os.getpid()
    wait_until(lambda: _listens(name))


def test_a_server_refuses_bad_command_lines(tmp_path: Path) -> None:
    for extra in [(), ("--lock", "1"), ("--lock", "x"), ("--idle", "soon")]:
        bad = _start(tmp_path, "not-a-name" if not extra else _name(), *extra)
        assert bad.wait(timeout=30) == 2, extra
        assert b"usage:" in bad.stderr.read()
    unmarked = _start(tmp_path, _name(), env=dict(os.environ))
    assert unmarked.wait(timeout=30) == 2
    assert b"placeholder" in unmarked.stderr.read()


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def _ask(msg: bytes, fds: list[int], code: dict[str, Any] | None = None) -> tuple[Any, bytes]:
    """What ``_answer`` returns and replies for a request of ``msg`` with ``fds``."""
    ours, theirs = _pair()
    with ours, theirs:
        if msg or fds:
            socket.send_fds(ours, [msg], fds)
        ours.shutdown(socket.SHUT_WR)
        me = forkserver.confinement(os.getpid())
        got = forkserver._answer(theirs, theirs, Path("/"), code or forkserver._code_key(), me)
        theirs.close()
        return got, ours.recv(100)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_server_refuses_malformed_requests_and_closes_what_it_was_sent(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.touch()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reg = os.open(log, os.O_WRONLY)
    pipe = os.open(fifo, os.O_RDWR)
    before = _open_fds()
    h, big = forking.header, forking.ENV_MAX + 1
    cases = [
        (b"../../etc".ljust(36, b"x") + b"00000000", [reg]),  # not a session id
        (h(SID, 0), []),  # no log
        (h(SID, 0), [reg, reg]),  # two
        (h(SID, 0), [pipe]),  # not a regular file
        (h(SID.upper(), 0), [reg]),
        (b"", []),
        (SID.encode()[:20], [reg]),  # a short header
        (SID.encode() + b"zzzzzzzz", [reg]),  # a length that is not one
        (h(SID, big), [reg]),  # an environment too large
        (h(SID, 10) + b"A=1\0", [reg]),  # cut short
        (h(SID, 4) + b"ABC\0", [reg]),  # an entry without '='
        (h(SID, 3) + b"=1\0", [reg]),  # no name
        (h(SID, 8) + b"A=1\0A=2\0", [reg]),  # a name twice
        (h(SID, 3) + b"A=1", [reg]),  # not NUL-ended
    ]
    for msg, fds in cases:
        got, reply = _ask(msg, fds)
        assert got == 0, msg
        assert reply in (b"refused: not a request", b""), (msg, reply)
        assert _open_fds() == before  # every fd it was sent, closed
    got, reply = _ask(h(SID, 4) + b"A=1\0", [reg], code={"/changed.py": (1, 2, 3)})
    assert got is None and reply == b"refused: zwarm changed on disk"
    assert _open_fds() == before
    os.close(reg)
    os.close(pipe)


def test_a_requests_environment_arrives_as_sent_whatever_its_bytes() -> None:
    env = {"A": "1", "EMPTY": "", "EQ": "a=b=c", "BYTES": os.fsdecode(b"\xff\xfe"), "Z" * 300: "y"}
    data = forking.encode_env(env)
    ours, theirs = _pair()
    with ours, theirs:
        head = forking.header(SID, len(data))
        ours.sendall(head + data)
        assert forkserver._request(theirs, b"") == (SID, env)


def _no_new_privs() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS: what a sandbox sets


@pytest.mark.parametrize("become", ["nobody", "sandboxed"])
def test_a_server_answers_no_other_user_and_no_sandboxed_process(tmp_path: Path, become) -> None:
    if become == "nobody" and os.geteuid() != 0:
        pytest.skip("needs root to act as another user")
    state = tmp_path / "state"
    state.mkdir()
    name = _name()
    server = _start(state, name)
    address = f"zwarm-forkserver-{os.geteuid()}-{name}"
    wait_until(lambda: _listens(name))
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # connect to the server as someone else, send a well-formed request
        try:
            os.setuid(65534) if become == "nobody" else _no_new_privs()
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(10)
                s.connect(f"\0{address}".encode())
                try:
                    socket.send_fds(s, [forking.header(SID, 0)], [log])
                    os.write(w, b"[" + s.recv(100) + b"]")
                except (BrokenPipeError, ConnectionResetError):  # closed before or unread
                    os.write(w, b"[]")
        except BaseException as e:
            os.write(w, repr(e).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 200) == b"[]"  # closed unanswered
    time.sleep(0.2)
    assert Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split() == []
    assert server.poll() is None  # and serving on
    server.kill()
    server.wait()
    os.close(log)
    os.close(r)


def test_exited_children_are_reaped_a_while_after_they_are_seen() -> None:
    kids = forkserver._Children()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    kids.add(pid)
    wait_until(lambda: _gone(pid), message="child exited")
    kids.reap(100.0)
    assert _stat(pid)[0] == b"Z"  # still readable
    kids.reap(100.0 + forkserver.ZOMBIE_S)
    assert not Path(f"/proc/{pid}").exists()
    assert not kids.live and not kids.dead


# --- the requester alone ---------------------------------------------------------------------


def _impostor(name: str, reply: bytes | None, hold: float = 0.0) -> threading.Thread:
    """A listener at ``name`` that answers one request with ``reply`` (None: nothing)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(forking.abstract(name))
    s.listen(1)

    def serve() -> None:
        with s:
            conn, _ = s.accept()
            with conn:
                _, fds, _, _ = socket.recv_fds(conn, 64, 2)
                for fd in fds:
                    os.close(fd)
                time.sleep(hold)
                if reply is not None:
                    conn.sendall(reply)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_a_requester_accepts_only_a_marked_child_of_the_server_it_asked(tmp_path: Path) -> None:
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(forking.Absent):
        forking.fork(_name(), SID, log, {})
    stranger = subprocess.Popen(["sleep", "30"])  # our child, but not marked
    try:
        for reply in (str(stranger.pid).encode(), str(os.getpid()).encode(), b"1", b"x", None):
            name = _name()
            t = _impostor(name, reply)
            assert forking.fork(name, SID, log, {}, timeout=5) is None, reply
            t.join()
        name = _name()
        t = _impostor(name, None, hold=3)
        started = time.monotonic()
        assert forking.fork(name, SID, log, {}, timeout=0.5) is None
        assert time.monotonic() - started < 2.5
        t.join()
    finally:
        stranger.kill()
        stranger.wait()
        os.close(log)


def test_a_sandbox_without_sockets_costs_a_turn_nothing(zw, gate, monkeypatch) -> None:
    def no_socket(*_: Any, **__: Any) -> None:
        raise PermissionError(1, "Operation not permitted")  # what a seccomp filter answers

    monkeypatch.setattr(socket, "socket", no_socket)
    assert forking.fork(_name(), SID, 2, {}) is None
    hold, env = gate
    hold.touch()
    sid = zw.api(env).spawn("task", adapter="codex", cwd=zw.cwd).id
    assert _execd(_supervisor(zw, sid))
    hold.unlink()
    assert zw.wait(sid).returncode == 0


def test_an_impostor_at_the_address_costs_a_turn_nothing(zw, gate, monkeypatch) -> None:
    name = _name()
    monkeypatch.setattr(forking, "address", lambda *_: name)
    t = _impostor(name, b"1")
    hold, env = gate
    hold.touch()
    sid = zw.api(env).spawn("task", adapter="codex", cwd=zw.cwd).id
    assert _execd(_supervisor(zw, sid))  # a new interpreter: as if there were no server
    hold.unlink()
    t.join(timeout=30)
    assert zw.wait(sid).returncode == 0
