"""The listing index (``.zwarm/index.json``): ``ls`` rows served from it are exactly what
reading every meta.json gives, and any change to a meta.json, however made, is seen."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from zwarm import procs
from zwarm.api import Zwarm
from zwarm.env import Env
from zwarm.index import ListingIndex
from zwarm.models import ProcRef, Status
from zwarm.store import Store, file_key

from .test_store import make_session, sid_

LATER = 10.0  # seconds the test clock runs ahead: files written now count as settled


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / ".zwarm"


def api(state: Path, ahead: float = LATER) -> Zwarm:
    return Zwarm(env=Env(state_dir=state, cwd=state.parent, clock=lambda: time.time() + ahead))


def add(store: Store, n: int, status: Status = Status.COMPLETED, **fields: Any) -> str:
    sid = sid_("ab", n)
    s = make_session(sid, status=status)
    s.status = status
    for k, v in fields.items():
        setattr(s, k, v)
    store.create(s, b"the task")
    return sid


def uncached_rows(state: Path) -> list[dict[str, Any]]:
    """The rows as reading every meta.json gives them (no index involved)."""
    z = api(state)
    return [z._row(z.store.read_raw(sid)) for sid in sorted(z.store.list_ids())]


def rows(state: Path, ahead: float = LATER) -> list[dict[str, Any]]:
    return sorted(api(state, ahead).sessions(), key=lambda r: r["id"])


def entries(state: Path) -> dict[str, Any]:
    return json.loads((state / "index.json").read_bytes())["entries"]  # type: ignore[no-any-return]


@pytest.fixture
def store(state: Path) -> Store:
    s = Store(state)
    s.ensure()
    return s


def test_rows_from_the_index_equal_rows_from_meta(store: Store, state: Path) -> None:
    for n in range(5):
        add(store, n, Status.FAILED if n % 2 else Status.COMPLETED, task=f"task {n}")
    (state / "sessions" / sid_("ab", 9)).mkdir()  # damaged: no meta.json (never cached)
    first = rows(state)
    assert len(entries(state)) == 5
    assert first == rows(state) == uncached_rows(state)
    assert [r["status"] for r in first].count("damaged") == 1


def test_index_is_private_and_not_created_without_sessions(store: Store, state: Path) -> None:
    assert rows(state) == []
    assert not (state / "index.json").exists()
    add(store, 1)
    rows(state)
    assert stat.S_IMODE((state / "index.json").stat().st_mode) == 0o600
    assert [p.name for p in state.iterdir() if p.name.endswith(".tmp")] == []


def test_fresh_files_are_not_cached(store: Store, state: Path) -> None:
    """A meta.json written within the file-time granularity window is read every time."""
    add(store, 1)
    rows(state, ahead=0.0)
    assert not (state / "index.json").exists()


def test_a_saved_change_is_seen(store: Store, state: Path) -> None:
    sid = add(store, 1, task="old")
    assert rows(state)[0]["task"] == "old"

    def change(s: Any) -> None:
        s.task = "new"

    store.update(sid, change)
    assert rows(state)[0]["task"] == "new"
    assert entries(state)[sid][1]["task"] == "new"


def test_an_in_place_edit_of_the_same_size_and_mtime_is_seen(store: Store, state: Path) -> None:
    """Same inode, same size, mtime set back: the ctime still tells (nothing can reset it)."""
    sid = add(store, 1, task="aaaa")
    rows(state)
    meta = state / "sessions" / sid / "meta.json"
    st = meta.stat()
    data = meta.read_bytes().replace(b'"aaaa"', b'"bbbb"')
    with open(meta, "r+b") as f:
        f.write(data)
    os.utime(meta, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (meta.stat().st_ino, meta.stat().st_size) == (st.st_ino, st.st_size)
    assert rows(state)[0]["task"] == "bbbb"


def test_a_damaged_then_repaired_meta(store: Store, state: Path) -> None:
    sid = add(store, 1)
    meta = state / "sessions" / sid / "meta.json"
    good = meta.read_bytes()
    meta.write_bytes(good[: len(good) // 2])
    assert rows(state)[0]["status"] == "damaged"
    assert rows(state)[0]["status"] == "damaged"  # served from the index, still damaged
    meta.write_bytes(good)
    assert rows(state)[0]["status"] == "completed"


def test_running_sessions_are_never_cached(store: Store, state: Path) -> None:
    """A running row is reconciled on every read: alive (this process as its supervisor) it
    stays running and out of the index; once its supervisor is gone it is failed."""
    sid = sid_("ab", 1)
    s = make_session(sid, status=Status.RUNNING)
    s.turns[0].supervisor = procs.identify(os.getpid())
    store.create(s, b"the task")
    for _ in range(2):
        assert rows(state)[0]["status"] == "running"
        assert not (state / "index.json").exists()

    def lost(s: Any) -> None:
        s.turns[0].supervisor = ProcRef(os.getpid(), 1.0)  # another process's identity

    store.update(sid, lost)
    assert rows(state)[0]["status"] == "failed"  # reconciled, and written back
    assert rows(state)[0]["status"] == "failed"


def test_removed_sessions_leave_the_index(store: Store, state: Path) -> None:
    a, b = add(store, 1), add(store, 2)
    rows(state)
    assert set(entries(state)) == {a, b}
    store.remove(a, None)
    assert [r["id"] for r in rows(state)] == [b]
    assert set(entries(state)) == {b}


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b"[]",
        b'{"format": 999, "entries": {}}',
        b'{"format": 1, "zwarm": "0.0.0-other", "entries": {}}',
        b'{"format": 1, "zwarm": "%s", "entries": []}',
        b'{"format": 1, "zwarm": "%s", "entries": {"SID": 5}}',
        b'{"format": 1, "zwarm": "%s", "entries": {"SID": [[1, 2], {"status": "lie"}]}}',
        b'{"format": 1, "zwarm": "%s", "entries": {"SID": [[1, 2, 3, 4], "row"]}}',
    ],
)
def test_a_bad_index_is_ignored_and_rebuilt(store: Store, state: Path, content: bytes) -> None:
    from zwarm import __version__

    sid = add(store, 1)
    want = uncached_rows(state)
    if b"%s" in content:
        content = content % __version__.encode()
    (state / "index.json").write_bytes(content.replace(b"SID", sid.encode()))
    assert rows(state) == want
    assert rows(state) == want
    assert entries(state)[sid][1] == want[0]


def test_a_forged_entry_with_a_wrong_key_is_not_served(store: Store, state: Path) -> None:
    sid = add(store, 1)
    rows(state)
    doc = json.loads((state / "index.json").read_bytes())
    doc["entries"][sid][0][2] -= 1  # another mtime: another version of the file
    doc["entries"][sid][1]["status"] = "killed"
    (state / "index.json").write_text(json.dumps(doc))
    assert rows(state)[0]["status"] == "completed"


def test_unwritable_index_still_lists(store: Store, state: Path) -> None:
    add(store, 1)
    (state / "index.json").mkdir()  # cannot be replaced by a file
    assert [r["status"] for r in rows(state)] == ["completed"]


def test_key_is_the_identity_of_the_file_read(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"x")
    with open(p, "rb") as f:
        assert file_key(os.fstat(f.fileno())) == file_key(os.stat(p))
    idx = ListingIndex(tmp_path / "index.json", clock=lambda: time.time() + LATER)
    assert idx.get("s", file_key(os.stat(p))) is None
    idx.put("s", file_key(os.stat(p)), {"id": "s"})
    assert idx.get("s", file_key(os.stat(p))) == {"id": "s"}
    assert idx.get("s", None) is None  # the file is gone now: a miss, and the entry goes
    idx.save()
    assert json.loads((tmp_path / "index.json").read_bytes())["entries"] == {}
