"""Issue 5, fault 7: the disk fills up while zwarm writes.

Two ways to make the write fail: a real full filesystem (a 1 MiB tmpfs mounted for the test;
skipped with the reason when mounting is refused), and RLIMIT_FSIZE in the zwarm process
(always available: writes past the limit fail with EFBIG). In every case the old meta.json
survives byte for byte, no temp file is left, the command fails with one clear line, a
failed spawn leaves no half-created session (nor a claimed name), and everything works again
once there is room.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import resource
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZWARM_BIN, wait_status, wait_until
from tests.support.faults import alive, one_error_line, snapshot, spawn, supervisor_ref

pytestmark = pytest.mark.usefixtures("strays")


def _tmp_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name.endswith(".tmp")]


def _run_limited(zw: Any, limit: int, *args: str) -> subprocess.CompletedProcess[str]:
    """Run zwarm with RLIMIT_FSIZE=limit (Python ignores SIGXFSZ, so writes get EFBIG)."""

    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [str(ZWARM_BIN), *args],
        env=zw.env,
        cwd=zw.cwd,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=preexec,
    )


def test_meta_write_fails_old_meta_survives(zw: Any) -> None:
    sid = spawn(zw, "first", "--name", "keep", env=zw.replay("codex_simple"))
    wait_status(zw, sid, "completed")
    path = zw.session_dir(sid) / "meta.json"
    before = path.read_bytes()
    assert len(before) > 1024  # the limit below lets small files through, not meta.json
    res = _run_limited(zw, 1024, "inject", sid, "more", "--context", "native")
    one_error_line(res, "meta.json", "File too large")
    assert path.read_bytes() == before
    assert _tmp_files(zw.state_dir) == []
    assert not (
        zw.session_dir(sid) / "turns" / "turn_2.prompt"
    ).exists()  # nothing saved, none kept
    # spawn under the same limit: no half-created session, the name is not taken
    res = _run_limited(zw, 1024, "spawn", "second", "--name", "other")
    one_error_line(res, "File too large")
    assert [p.name for p in (zw.state_dir / "sessions").iterdir()] == [sid]
    assert not (zw.state_dir / "names" / "other").exists()
    # with room again, everything works and the inject runs with its own prompt
    zw.run(
        "inject",
        sid,
        "more",
        "--context",
        "native",
        env_extra=zw.replay("codex_simple"),
        check=True,
    )
    m = wait_status(zw, sid, "completed")
    assert [t["message"] for t in m["turns"]] == ["first", "more"]
    assert zw.recorded()[1] == b"more"
    sid2 = spawn(zw, "second", "--name", "other", env=zw.replay("codex_simple"))
    assert wait_status(zw, sid2, "completed")["name"] == "other"


@pytest.fixture
def small_fs(zw: Any) -> Iterator[Any]:
    """``zw`` with its state dir on a fresh 1 MiB tmpfs (skipped if mounting is refused)."""
    mnt = zw.tmp / "smallfs"
    mnt.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {res.stderr.strip() or res.returncode}")
    state = mnt / "state"
    world = dataclasses.replace(zw, state_dir=state, env={**zw.env, "ZWARM_DIR": str(state)})
    try:
        yield world
    finally:
        with contextlib.suppress(Exception):
            world.api().kill(all_=True)
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(fs: Path) -> Path:
    """Fill the filesystem until a write fails with ENOSPC; returns the filler file."""
    filler = fs / "filler"
    with open(filler, "wb", buffering=0) as f:
        block = b"\0" * 65536
        while True:
            try:
                f.write(block)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        while True:  # the last, smaller gap
            try:
                f.write(b"\0" * 512)
            except OSError:
                break
    return filler


def test_disk_full_tmpfs(small_fs: Any) -> None:
    zw = small_fs
    release = zw.tmp / "release"  # on the normal disk
    a = spawn(zw, "done before the disk filled", env=zw.replay("codex_simple"))
    wait_status(zw, a, "completed")
    b = spawn(
        zw,
        "running when the disk fills",
        env=zw.replay("codex_simple", FAKE_WAIT_FILE=str(release)),
    )
    sup_b = supervisor_ref(zw, b)
    wait_until(lambda: zw.meta(b)["turns"][0].get("agent"), message="agent of b recorded")
    filler = _fill(zw.state_dir.parent)
    snap_a, meta_b = snapshot(zw.session_dir(a)), (zw.session_dir(b) / "meta.json").read_bytes()

    res = zw.run("inject", a, "more")
    one_error_line(res, "No space left on device")
    assert snapshot(zw.session_dir(a)) == snap_a
    res = zw.run("spawn", "new", "--name", "newname", env_extra=zw.replay("codex_simple"))
    one_error_line(res, "No space left on device")
    assert sorted(p.name for p in (zw.state_dir / "sessions").iterdir()) == sorted([a, b])
    assert not (zw.state_dir / "names" / "newname").exists()
    rows = {r["id"]: r["status"] for r in zw.json("ls")}
    assert rows == {a: "completed", b: "running"}

    # b's turn ends while the disk is full: its supervisor cannot record the outcome
    release.touch()
    wait_until(lambda: not alive(sup_b), message="b's supervisor gave up")
    assert (zw.session_dir(b) / "meta.json").read_bytes() == meta_b  # the old meta.json, intact
    assert snapshot(zw.session_dir(a)) == snap_a
    assert _tmp_files(zw.state_dir) == []

    # room again: the next command reconciles b, and a continues normally
    filler.unlink()
    rows = {r["id"]: r for r in zw.json("ls")}
    assert rows[a]["status"] == "completed"
    assert rows[b]["status"] == "failed" and rows[b]["error"].startswith("supervisor lost")
    zw.run("inject", a, "more", env_extra=zw.replay("codex_simple"), check=True)
    assert len(wait_status(zw, a, "completed")["turns"]) == 2


def test_rm_on_a_full_disk_removes_the_session(small_fs: Any) -> None:
    """Issue 29: removing frees space, so ``rm`` works on a full disk (tmpfs, ENOSPC) and under
    RLIMIT_FSIZE 0, also for sessions whose turn ended while the disk was full (lost: ending
    them on disk first would need room; they are ended in memory and deleted)."""
    zw = small_fs
    release = zw.tmp / "release"  # on the normal disk
    a = spawn(zw, "done", "--name", "first", env=zw.replay("codex_simple"))
    wait_status(zw, a, "completed")
    lost = [
        spawn(zw, f"running {i}", env=zw.replay("codex_simple", FAKE_WAIT_FILE=str(release)))
        for i in range(3)
    ]
    sups = [supervisor_ref(zw, sid) for sid in lost]
    for sid in lost:
        wait_until(lambda sid=sid: zw.meta(sid)["turns"][0].get("agent"), message="agent")
    filler = _fill(zw.state_dir.parent)
    release.touch()  # the turns end while the disk is full: their supervisors cannot record it
    for sup in sups:
        wait_until(lambda sup=sup: not alive(sup), message="supervisor gave up")
    # what will be recorded once there is room: failed (supervisor lost), not damaged
    rows = {r["id"]: r for r in zw.json("ls")}
    assert [rows[sid]["status"] for sid in lost] == ["failed"] * 3, rows
    assert all(rows[sid]["error"].startswith("supervisor lost") for sid in lost)
    res = zw.run("rm", lost[0])
    assert res.returncode == 0 and res.stdout.split()[0] == lost[0], res.stderr
    res = _run_limited(zw, 0, "rm", lost[1])
    assert res.returncode == 0 and res.stdout.split()[0] == lost[1], res.stderr
    res = zw.run("rm", "--finished")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()[::2]) == sorted([lost[2], a])
    assert list((zw.state_dir / "sessions").iterdir()) == []
    assert not (zw.state_dir / "names" / "first").exists()
    assert _tmp_files(zw.state_dir) == []
    filler.unlink()
    assert zw.json("ls") == []


def test_temp_files_of_killed_writes_are_cleaned(zw: Any) -> None:
    """Issue 29: a write killed mid-way leaves ``.meta.json.<pid>.<hex>.tmp`` (60 MB for a
    large session) forever. The next transaction on the session removes such files once their
    writer is gone or they are an hour old; a live writer's recent one, another name, a link
    (its target untouched) and a directory are left alone."""
    import os
    import time

    sid = spawn(zw, "first", env=zw.replay("codex_simple"))
    wait_status(zw, sid, "completed")
    d = zw.session_dir(sid)
    gone = _dead_pid()
    stale = {
        f".meta.json.{gone}.0badc0de.tmp": b"x" * (8 << 20),  # its writer was killed
        f".history.jsonl.{gone}.00000001.tmp": b"y" * 1024,
        f".meta.json.{os.getppid()}.00000002.tmp": b"old",  # a live pid, but a day old
    }
    kept = {
        f".meta.json.{os.getppid()}.00000003.tmp": b"being written",  # a live writer's
        f".meta.json.{gone}.tmp": b"not our pattern",
        "notes.tmp": b"not ours",
    }
    for name, data in {**stale, **kept}.items():
        (d / name).write_bytes(data)
    day = time.time() - 86400
    os.utime(d / f".meta.json.{os.getppid()}.00000002.tmp", (day, day))
    victim = zw.tmp / "victim"
    victim.write_bytes(b"precious")
    link = d / f".meta.json.{gone}.0000000a.tmp"
    link.symlink_to(victim)
    os.utime(link, (day, day), follow_symlinks=False)
    (d / f".meta.json.{gone}.0000000b.tmp").mkdir()
    zw.run("inject", sid, "more", env_extra=zw.replay("codex_simple"), check=True)
    wait_status(zw, sid, "completed")
    names = set(os.listdir(d))
    assert not names & set(stale), names & set(stale)
    assert set(kept) <= names and all((d / n).read_bytes() == kept[n] for n in kept)
    assert link.is_symlink() and victim.read_bytes() == b"precious"
    assert (d / f".meta.json.{gone}.0000000b.tmp").is_dir()
    # what a spawn killed before its rename left in sessions/: swept by a later spawn once it
    # is an hour old (a young one may be another spawn's, still at work)
    sessions = d.parent
    old, young = sessions / f".new-{'1' * 8}-1111-4111-8111-{'1' * 12}", sessions / f".new-{sid}"
    for stage in (old, young):
        (stage / "turns").mkdir(parents=True)
        (stage / "turns" / "turn_1.prompt").write_bytes(b"p" * 100000)
    os.utime(old, (day, day))
    spawn(zw, "another", env=zw.replay("codex_simple"))
    assert not old.exists() and young.is_dir()


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid
