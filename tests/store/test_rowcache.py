"""The listing's row cache (``zwarm.store.rowcache``, issue 16): a warm listing reads no
``meta.json``, and the cache makes a listing faster, never different.

Most tests move the cache's clock a minute ahead (``later``), as if every file were a minute
old; without it, files younger than ``RACY_S`` are never cached (its own test, and the CLI
test, which waits for real).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from zwarm.api import Zwarm, row
from zwarm.cli import fast
from zwarm.env import Env
from zwarm.model import QueuedMessage, Session, Status, Turn, Usage
from zwarm.model.records import Archive, Changes, Workspace
from zwarm.model.rows import decode_row
from zwarm.ops import listing as api_mod
from zwarm.store import Store, rowcache
from zwarm.system.files import dir_file_key

T0 = "2026-01-01T00:00:00.000+00:00"
T1 = "2026-01-01T00:05:00.000+00:00"


def sid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-{n:012x}"


def turn(n: int, status: Status = Status.COMPLETED, **kw: Any) -> Turn:
    t = Turn(n, status, f"message {n}", "task" if n == 1 else "summary", T0, **kw)
    if status.finished:
        t.ended_at = T1
    return t


def sessions() -> list[Session]:
    """One session of each shape a row can take."""
    done = turn(1, usage=Usage(100, 10, 5, 1), cost_usd=0.25, final_message="done")
    failed = turn(1, Status.FAILED, error="boom", reason=None)
    out = [
        Session(sid(1), "codex", "plain", "/tmp", T0, T1, turns=[done]),
        Session(sid(2), "claude", "failed", "/tmp", T0, T1, name="f", model="opus", turns=[failed]),
        Session(
            sid(3),
            "codex",
            "a worktree and a queue",
            "/work",
            T0,
            T1,
            turns=[turn(1, changes=Changes(2, 10, 3)), turn(2, Status.KILLED)],
            queue=[QueuedMessage("later", "summary", T1)],
            workspace=Workspace("worktree", "/repo", "/repo/.wt", "zwarm/x", "a" * 40),
            changes=Changes(2, 10, 3),
            dangerous=True,
            source="mcp",
        ),
        Session(
            sid(4),
            "codex",
            "a child in a group",
            "/tmp",
            T0,
            T1,
            turns=[turn(1)],
            group="g1",
            priority=-3,
            after=[sid(1)],
            max_cost_usd=2.5,
            max_tokens=1000,
            parent_session_id=sid(1),
            spawn_depth=2,
            lifecycle="detached",
            auto_resumes=2,
        ),
        Session(sid(5), "codex", "queued", "/tmp", T0, T1, turns=[turn(1, Status.QUEUED)]),
        Session(
            sid(6),
            "claude",
            "parked",
            "/tmp",
            T0,
            T1,
            turns=[turn(1, Status.PARKED, parked_until=T1, wait="usage limit")],
        ),
        Session(sid(7), "codex", "run child", "/tmp", T0, T1, turns=[turn(1)]),
    ]
    out[6].parent_run_id = "20260101-000000-abcd"
    return out


def archived() -> Session:
    """A session loaded without its history (the archive's sums stand in for turns 2-4)."""
    a = Archive(turns=3, bytes=10, usage=Usage(5, 0, 5, 0), cost_usd=0.5, priced=3)
    a.changes = [Changes(1, 1, 1), None, Changes(0, 0, 0)]
    return Session(sid(8), "codex", "history", "/tmp", T0, T1, turns=[turn(1), turn(5)], archive=a)


@pytest.mark.parametrize("s", [*sessions(), archived()], ids=lambda s: s.task)
def test_the_row_schema_reads_back_every_row_exactly(s: Session) -> None:
    s.refresh()
    r = row(s)
    back = decode_row(msgspec.json.encode(r))
    assert back == r and list(back) == list(r)  # same values, same key order


@pytest.mark.parametrize(
    "change",
    [
        {"status": "bogus"},
        {"turns": -1},
        {"damaged": True},
        {"launcher_state": {"x": "y"}},
        {"id": "../../etc"},
        {"cwd": "relative"},
        {"created_at": "yesterday"},
        {"extra": 1},
    ],
)
def test_the_row_schema_refuses_what_a_row_cannot_be(change: dict[str, Any]) -> None:
    r = {**row(sessions()[0]), **change}
    with pytest.raises(ValueError, match="not a session row"):
        decode_row(msgspec.json.encode(r))


def test_the_row_schema_refuses_a_row_with_a_field_missing() -> None:
    r = row(sessions()[0])
    del r["launcher"]
    with pytest.raises(ValueError, match="not a session row"):
        decode_row(msgspec.json.encode(r))


# ------------------------------------------------------------------ listings with the cache
@pytest.fixture
def store(tmp_path: Path) -> Store:
    st = Store(tmp_path / ".zwarm")
    st.ensure()
    for s in sessions():
        st.create(s, b"task")
    return st


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache's clock a minute ahead: every file is old enough to be cached (and the
    tests' filesystem taken as local, whatever the machine's is)."""
    real = time.time_ns
    monkeypatch.setattr(rowcache.time, "time_ns", lambda: real() + 60 * 10**9)
    monkeypatch.setattr(rowcache, "local_fs", lambda dev: True)


def environ(store: Store) -> dict[str, str]:
    return {"XDG_CACHE_HOME": str(store.root.parent / "cache-home")}


def cache_file(store: Store) -> Path:
    return rowcache.location(environ(store), os.stat(store.sessions), api_mod._row_sources())


class Lister:
    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        env = Env(state_dir=store.root, environ=environ(store), cwd=store.root.parent)
        self.api = Zwarm(env=env)
        self.read: list[str] = []
        real = self.api.store.read_keyed

        def spy(s: str) -> Any:
            self.read.append(s)
            return real(s)

        monkeypatch.setattr(self.api.store, "read_keyed", spy)

    def rows(self) -> list[dict[str, Any]]:
        self.read.clear()
        return self.api.sessions()


@pytest.fixture
def lister(store: Store, monkeypatch: pytest.MonkeyPatch) -> Lister:
    return Lister(store, monkeypatch)


def uncached(store: Store) -> list[dict[str, Any]]:
    """The listing as it is without any cache (the cache file is moved aside meanwhile)."""
    p = cache_file(store)
    aside = p.with_name("aside")
    if os.path.lexists(p):
        os.rename(p, aside)
    try:
        env = Env(state_dir=store.root, environ=environ(store), cwd=store.root.parent)
        rows = Zwarm(env=env).sessions()
    finally:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(p)
        if os.path.lexists(aside):
            os.rename(aside, p)
    return rows


def cache_lines(store: Store) -> list[list[Any]]:
    p = cache_file(store)
    if not p.exists():
        return []
    return [json.loads(x) for x in p.read_bytes().splitlines()]


FINISHED = [sid(n) for n in (1, 2, 3, 4, 7)]


@pytest.mark.perf
def test_a_warm_listing_reads_no_finished_session_and_lists_the_same(
    store: Store, lister: Lister, later: None
) -> None:
    first = lister.rows()
    assert sorted(lister.read) == sorted(s.id for s in sessions())
    assert sorted(x[0] for x in cache_lines(store)) == FINISHED  # queued, parked: not cached
    second = lister.rows()
    assert sorted(lister.read) == [sid(5), sid(6)]  # only those
    assert second == first == uncached(store)
    assert len(cache_lines(store)) == len(FINISHED)  # nothing appended twice


def _rewrite_in_place(store: Store, s: str) -> None:
    """Change meta.json in place: same inode, same size, mtime put back as it was."""
    p = store.meta_path(s)
    st = p.stat()
    data = p.read_bytes().replace(b'"final_message":"done"', b'"final_message":"DONE"')
    assert len(data) == st.st_size
    time.sleep(0.02)  # past the clock tick of the first write (what RACY_S is for)
    with open(p, "r+b") as f:
        f.write(data)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


def _turns_link(store: Store, s: str) -> None:
    d = store.session_dir(s)
    shutil.rmtree(d / "turns", ignore_errors=True)
    os.symlink("/tmp", d / "turns")


def _dir_link(store: Store, s: str) -> None:
    d = store.session_dir(s)
    away = store.root.parent / "away"
    os.rename(d, away)
    os.symlink(away, d)


def _meta_link(store: Store, s: str) -> None:
    p = store.meta_path(s)
    copy = store.root.parent / "meta-copy.json"
    os.rename(p, copy)
    os.symlink(copy, p)


def _update(store: Store, s: str) -> None:
    time.sleep(0.02)

    def rename(x: Session) -> None:
        x.name = "renamed"

    store.update(s, rename)


def _remove(store: Store, s: str) -> None:
    shutil.rmtree(store.session_dir(s))


@pytest.mark.parametrize(
    "change", [_rewrite_in_place, _turns_link, _dir_link, _meta_link, _update, _remove]
)
def test_a_changed_session_is_listed_as_it_is_now(
    store: Store, lister: Lister, later: None, change: Any
) -> None:
    lister.rows()
    change(store, sid(1))
    rows = lister.rows()
    assert rows == uncached(store)
    mine = [r for r in rows if r["id"] == sid(1)]
    if change is _remove:
        assert not mine and sid(1) not in lister.read
    else:
        assert sid(1) in lister.read and sorted(lister.read) == [sid(1), sid(5), sid(6)]
    if change in (_turns_link, _dir_link, _meta_link):
        assert mine[0]["damaged"]
    if change is _rewrite_in_place:
        assert mine[0]["last_message"] == "DONE"


@pytest.mark.perf
def test_a_changed_meta_json_costs_one_stat(
    store: Store, lister: Lister, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session whose meta.json changed since its row was cached (every session that just
    ended, while agents run) is told by the file's stat alone: its directory is not looked
    at. An unchanged one takes both stats, and is believed only if both match."""
    lister.rows()
    _rewrite_in_place(store, sid(1))
    stats: list[str] = []
    real = os.stat

    def spy(path: Any, *args: Any, **kw: Any) -> os.stat_result:
        stats.append(str(path))
        return real(path, *args, **kw)

    monkeypatch.setattr(rowcache.os, "stat", spy)
    assert lister.rows() == uncached(store)
    assert sorted(lister.read) == [sid(1), sid(5), sid(6)]
    assert [p for p in stats if p.startswith(sid(1))] == [f"{sid(1)}/meta.json"]
    assert [p for p in stats if p.startswith(sid(2))] == [f"{sid(2)}/meta.json", sid(2)]


def test_a_tree_is_rolled_up_anew_over_cached_rows(
    store: Store, lister: Lister, later: None
) -> None:
    first = {r["id"]: r for r in lister.rows()}
    assert first[sid(1)]["children"] == [sid(4)] and first[sid(1)]["tree_sessions"] == 2
    second = {r["id"]: r for r in lister.rows()}  # both from the cache
    assert second == first and sid(1) not in lister.read and sid(4) not in lister.read
    _remove(store, sid(4))
    third = {r["id"]: r for r in lister.rows()}
    assert third[sid(1)]["children"] == [] and third[sid(1)]["tree_sessions"] == 1
    assert list(third.values()) == uncached(store)


def _printed(api: Zwarm, capsysbinary: pytest.CaptureFixture[bytes], **how: Any) -> bytes:
    """What ``zwarm ls --json`` prints (``fast.ls``, through the encoded listing)."""
    assert fast.ls(api, as_json=True, **how) == 0
    return capsysbinary.readouterr().out


@pytest.mark.parametrize("when", ["cold", "warm", "young"])
def test_an_encoded_listing_prints_exactly_the_rows(
    store: Store,
    lister: Lister,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
    when: str,
) -> None:
    """``ls --json`` prints each finished row outside any tree from the JSON made when its
    row was (``api.EncodedRow``), without keeping the row. The output is byte for byte what
    the whole rows encode to: every filter, cold (the rows made and cached), warm (read from
    the cache), young (too young to cache). The tree's parent (1) and child (4), the queued
    (5) and parked (6) sessions are rows, their listing fills them in."""
    if when != "young":
        real = time.time_ns
        monkeypatch.setattr(rowcache.time, "time_ns", lambda: real() + 60 * 10**9)
        monkeypatch.setattr(rowcache, "local_fs", lambda dev: True)
    if when == "warm":
        lister.rows()
    api = lister.api
    encoded = api.sessions(encoded=True)
    assert sorted(r["id"] for r in encoded if type(r) is api_mod.EncodedRow) == [
        sid(2),
        sid(3),
        sid(7),
    ]
    assert (cache_lines(store) == []) == (when == "young")
    for how in [{}, {"status": "completed"}, {"name": "f"}, {"adapter": "codex", "limit": 2}]:
        whole = api_mod.select_rows(api.sessions(how.get("status")), *_filters(how))
        assert _printed(api, capsysbinary, **how) == msgspec.json.encode(whole) + b"\n", how
    assert json.loads(_printed(api, capsysbinary)) == uncached(store)


def _filters(how: dict[str, Any]) -> list[Any]:
    return [how.get("name"), how.get("adapter"), None, how.get("limit")]


def test_a_row_that_cannot_be_encoded_is_not_cached() -> None:
    """A row msgspec cannot encode (a lone surrogate) makes no line; the others do."""
    assert rowcache._lines([(b"[1,", {"a": "\ud800"}), (b"[2,", {"a": 1}), (b"[3,", b"{}")]) == (
        b'[2,{"a":1}]\n[3,{}]\n'
    )


def test_files_younger_than_the_racy_window_are_not_cached(store: Store, lister: Lister) -> None:
    lister.rows()
    assert cache_lines(store) == []
    lister.rows()
    assert len(lister.read) == len(sessions())


def compact(x: Any) -> bytes:
    return json.dumps(x, separators=(",", ":")).encode()


def forge(store: Store, build: Any) -> list[dict[str, Any]]:
    """Append to the cache the line ``build(sid, its current key, its cached row, another
    session's row)`` makes for session 1, and list."""
    s = sid(1)
    key = list(dir_file_key(os.stat(store.session_dir(s)), os.stat(store.meta_path(s))))
    lines = {x[0]: x for x in cache_lines(store)}
    mine = {**lines[s][2], "last_message": "FORGED"}
    p = cache_file(store)
    p.write_bytes(p.read_bytes() + build(s, key, mine, lines[sid(2)][2]) + b"\n")
    return Lister(store, pytest.MonkeyPatch()).rows()


BAD_LINES = {
    "not json": lambda s, k, r, o: b"not json",
    "spaced": lambda s, k, r, o: json.dumps([s, k, r]).encode(),
    "fields missing": lambda s, k, r, o: compact([s, k, {"id": s}]),
    "a field too many": lambda s, k, r, o: compact([s, k, {**r, "x": 1}]),
    "bad status": lambda s, k, r, o: compact([s, k, {**r, "status": "bogus"}]),
    "running": lambda s, k, r, o: compact([s, k, {**r, "status": "running"}]),
    "bad cwd": lambda s, k, r, o: compact([s, k, {**r, "cwd": "rel"}]),
    "cut short": lambda s, k, r, o: compact([s, k, r])[:-1],
    "trailing": lambda s, k, r, o: compact([s, k, r]) + b"x",
    "an element more": lambda s, k, r, o: compact([s, k, r, 1]),
    "another key": lambda s, k, r, o: compact([s, [*k[:-1], k[-1] + 1], r]),
    "another's row": lambda s, k, r, o: compact([s, k, o]),
    "another's line": lambda s, k, r, o: compact([sid(2), k, r]),
    "not utf-8": lambda s, k, r, o: compact([s, k])[:-1] + b',{"id":"\xff"}]',
    "nested": lambda s, k, r, o: compact([s, k])[:-1] + b"," + b"[" * 100_000,
}


@pytest.mark.parametrize("bad", BAD_LINES, ids=list(BAD_LINES))
def test_a_tampered_cache_line_is_ignored(
    store: Store, lister: Lister, later: None, bad: str
) -> None:
    lister.rows()
    rows = forge(store, BAD_LINES[bad])
    assert rows == uncached(store) and "FORGED" not in json.dumps(rows)


def test_a_line_in_the_cache_format_is_believed(store: Store, lister: Lister, later: None) -> None:
    """The control of the test above: the same forged row, in exactly the form zwarm writes
    and with the session's current key, is used (which is why the cache lies outside the
    state dir, out of an agent's reach, as the launch pins are)."""
    lister.rows()
    rows = forge(store, lambda s, k, r, o: compact([s, k, r]))
    assert [r["last_message"] for r in rows if r["id"] == sid(1)] == ["FORGED"]


def test_cache_links_are_never_followed(
    store: Store, lister: Lister, later: None, tmp_path: Path
) -> None:
    lister.rows()
    p = cache_file(store)
    target = tmp_path / "target"
    target.write_bytes(p.read_bytes())
    os.unlink(p)
    os.symlink(target, p)  # the file is a link: neither read nor written through
    before = target.read_bytes()
    assert lister.rows() == uncached(store) and len(lister.read) == len(sessions())
    assert target.read_bytes() == before and p.is_symlink()

    os.unlink(p)
    elsewhere = tmp_path / "elsewhere"
    os.rename(p.parent, elsewhere)
    (elsewhere / p.name).write_bytes(before)
    os.symlink(elsewhere, p.parent)  # the dir is a link: the same
    assert lister.rows() == uncached(store) and len(lister.read) == len(sessions())
    assert (elsewhere / p.name).read_bytes() == before


def test_a_cache_that_cannot_be_written_costs_nothing(
    store: Store, lister: Lister, later: None
) -> None:
    d = cache_file(store).parent
    d.parent.mkdir(parents=True)
    d.write_bytes(b"a file where the dir should be")
    assert lister.rows() == uncached(store)
    assert lister.rows() == uncached(store) and len(lister.read) == len(sessions())


def test_the_cache_lies_outside_the_state_dir(store: Store, lister: Lister, later: None) -> None:
    lister.rows()
    p = cache_file(store)
    assert p.exists() and not p.resolve().is_relative_to(store.root.resolve())
    assert p.parent == store.root.parent / "cache-home" / "zwarm" / "rows"
    assert (
        stat.S_IMODE(p.parent.stat().st_mode) == 0o700 and stat.S_IMODE(p.stat().st_mode) == 0o600
    )


def test_dead_lines_are_dropped_by_a_compaction(
    store: Store, lister: Lister, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rowcache, "SLACK", 0)
    lister.rows()
    for n in (2, 3, 4):
        _remove(store, sid(n))
    lister.rows()  # 5 lines, 2 live: rewritten with the live ones
    assert sorted(x[0] for x in cache_lines(store)) == [sid(1), sid(7)]
    assert lister.rows() == uncached(store) and sorted(lister.read) == [sid(5), sid(6)]


def test_a_cache_over_its_size_limit_is_replaced(
    store: Store, lister: Lister, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    lister.rows()
    p = cache_file(store)
    size = p.stat().st_size
    monkeypatch.setattr(rowcache, "MAX_BYTES", size - 1)
    assert lister.rows() == uncached(store)  # ignored, and replaced by what fits: nothing
    assert p.stat().st_size == 0
    monkeypatch.setattr(rowcache, "MAX_BYTES", size * 2)
    lister.rows()
    assert len(cache_lines(store)) == len(FINISHED)


def test_rows_are_appended_a_batch_of_whole_lines_at_a_time(
    store: Store, lister: Lister, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold listing of 10,000 rows must not build its 14 MB of cache lines at once: they go
    out ``_BATCH`` rows per write, each write whole lines; the file is then as if written
    at once. A size limit reached mid-way stops the appends at a batch's end."""
    writes: list[bytes] = []
    real = rowcache._write_all

    def spy(fd: int, data: bytes) -> None:
        writes.append(bytes(data))
        real(fd, data)

    monkeypatch.setattr(rowcache, "_write_all", spy)
    monkeypatch.setattr(rowcache, "_BATCH", 2)
    first = lister.rows()
    assert [w.count(b"\n") for w in writes] == [2, 2, 1]
    assert all(w.endswith(b"\n") for w in writes)
    assert sorted(x[0] for x in cache_lines(store)) == FINISHED
    assert lister.rows() == first and sorted(lister.read) == [sid(5), sid(6)]
    first_batch = len(writes[0])
    os.unlink(cache_file(store))
    writes.clear()
    monkeypatch.setattr(rowcache, "MAX_BYTES", first_batch + 1)
    assert lister.rows() == first
    assert len(writes) == 1 and len(cache_lines(store)) == 2  # the first batch only


@pytest.mark.subprocess
def test_ls_json_from_the_cache_is_byte_for_byte_the_same(tmp_path: Path, store: Store) -> None:
    """Through the CLI, with the real racy window: the first listing (files too young) caches
    nothing, one RACY_S later everything finished is cached, and the output never changes."""
    if not rowcache.local_fs(os.stat(store.sessions).st_dev):
        pytest.skip("the tests' filesystem is not one the cache is used on")
    argv = [sys.executable, "-m", "zwarm", "--state-dir", str(store.root), "ls", "--json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZWARM_")}
    env.update(environ(store))

    def ls() -> bytes:
        return subprocess.run(argv, env=env, capture_output=True, check=True).stdout

    first = ls()
    assert cache_lines(store) == []
    time.sleep(rowcache.RACY_S + 0.1)
    assert ls() == first
    assert sorted(x[0] for x in cache_lines(store)) == FINISHED
    assert ls() == first


def test_only_a_local_filesystem_is_trusted_to_show_a_change(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_bytes(
        b"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        b"30 22 0:41 / /shared\\040space rw shared:9 - nfs4 srv:/x rw,vers=4.2\n"
        b"31 22 0:42 / /scratch rw - lustre 10.0.0.1@tcp:/fs rw\n"
        b"32 22 0:43 / /dev/shm rw - tmpfs tmpfs rw\n"
    )
    kinds = {os.makedev(8, 1): True, os.makedev(0, 41): False, os.makedev(0, 42): False}
    kinds |= {os.makedev(0, 43): True, os.makedev(9, 9): False}  # unknown: not trusted
    for dev, local in kinds.items():
        assert rowcache.local_fs(dev, str(info)) is local
    assert rowcache.local_fs(os.makedev(8, 1), str(tmp_path / "none")) is False


def test_no_cache_on_a_network_filesystem(
    store: Store, lister: Lister, later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rowcache, "local_fs", lambda dev: False)
    lister.rows()
    assert lister.rows() == uncached(store) and len(lister.read) == len(sessions())
    assert not cache_file(store).exists()


def test_rows_made_by_other_code_are_never_used_and_their_cache_goes(
    store: Store, lister: Lister, later: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An upgraded (or edited) zwarm may derive a row differently: it starts a cache of its
    own, and the old one is removed once the new one is written."""
    lister.rows()
    old = cache_file(store)
    assert old.exists()
    code = tmp_path / "api.py"
    code.write_text("another zwarm")
    monkeypatch.setattr(api_mod, "_row_sources", lambda: [str(code)])
    assert cache_file(store) != old
    assert lister.rows() == uncached(store) and len(lister.read) == len(sessions())
    assert not old.exists() and len(cache_lines(store)) == len(FINISHED)
    code.write_text("edited in place")  # same file, new size and mtime: another cache again
    assert lister.rows() == uncached(store) and len(lister.read) == len(sessions())
