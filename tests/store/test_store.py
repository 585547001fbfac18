"""The on-disk store: atomic writes, permissions, refs, names, locks, damaged meta.json."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zwarm.errors import (
    AmbiguousSession,
    DamagedSession,
    InvalidInput,
    InvalidRef,
    SessionNotFound,
    StoreError,
)
from zwarm.model import QueuedMessage, Session, Status, Turn
from zwarm.store import Store
from zwarm.system.files import atomic_write

NOW = "2026-01-01T00:00:00.000+00:00"


def make_session(sid: str, name: str | None = None, status: Status = Status.COMPLETED) -> Session:
    return Session(
        id=sid,
        adapter="codex",
        task="the task",
        cwd="/tmp",
        created_at=NOW,
        updated_at=NOW,
        name=name,
        turns=[Turn(1, status, "the task", "task", NOW)],
    )


def sid_(prefix: str, n: int = 0) -> str:
    """A valid uuid-shaped id starting with ``prefix`` (hex)."""
    base = f"{prefix}{n:x}".ljust(32, "0")[:32]
    return f"{base[:8]}-{base[8:12]}-4{base[13:16]}-8{base[17:20]}-{base[20:32]}"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / ".zwarm")
    s.ensure()
    return s


def add(store: Store, sid: str, name: str | None = None) -> Session:
    s = make_session(sid, name)
    store.create(s, b"the task")
    if name:
        store.claim_name(name, sid)
    return s


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


# ---------------------------------------------------------------------------- atomic writes
def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "f.json"
    atomic_write(p, b"old")
    atomic_write(p, b"new")
    assert p.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["f.json"]
    assert mode(p) == 0o600


@pytest.mark.subprocess
def test_atomic_write_failed_write_keeps_old_file(tmp_path: Path) -> None:
    """A write that fails half-way (file size limit: like a full disk) leaves the old file."""
    p = tmp_path / "meta.json"
    p.write_bytes(b'{"old": true}')
    script = textwrap.dedent(f"""
        import resource, signal, sys
        from pathlib import Path
        from zwarm.system.files import atomic_write
        from zwarm.errors import StoreError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        try:
            atomic_write(Path({str(p)!r}), b"x" * 100_000)
        except StoreError as e:
            print("StoreError:", e)
            sys.exit(3)
        sys.exit(0)
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "cannot write" in res.stdout and "meta.json" in res.stdout
    assert p.read_bytes() == b'{"old": true}'
    assert os.listdir(tmp_path) == ["meta.json"]  # the temp file was cleaned up


def test_atomic_write_failed_rename_keeps_old_file(tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "meta.json"
    p.write_bytes(b"old")

    def boom(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(StoreError, match="No space left"):
        atomic_write(p, b"new")
    monkeypatch.undo()
    assert p.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["meta.json"]


def test_failed_save_keeps_previous_session(store: Store, monkeypatch) -> None:
    sid = sid_("aa")
    add(store, sid)
    before = store.meta_path(sid).read_bytes()

    def boom(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(StoreError):
        store.update(sid, lambda s: setattr(s, "task", "changed"))
    monkeypatch.undo()
    assert store.meta_path(sid).read_bytes() == before
    assert store.load(sid).task == "the task"


# ---------------------------------------------------------------------------- permissions
def test_permissions_private(tmp_path: Path) -> None:
    root = tmp_path / ".zwarm"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    store = Store(root)
    store.ensure()
    sid = sid_("bb")
    add(store, sid, name="perm")
    for d in (
        root,
        store.sessions,
        store.names,
        store.session_dir(sid),
        store.session_dir(sid) / "turns",
    ):
        assert mode(d) == 0o700, d
    for f in (store.meta_path(sid), store.turn_path(sid, 1, "prompt"), store.names / "perm"):
        assert mode(f) == 0o600, f
    with store.lock(sid):
        pass
    assert mode(store.session_dir(sid) / ".lock") == 0o600


def test_ensure_refuses_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / ".zwarm").write_text("not a dir")
    with pytest.raises(StoreError, match="not a directory"):
        Store(tmp_path / ".zwarm").ensure()


# ---------------------------------------------------------------------------- resolving refs
def test_resolve_full_id_name_prefix(store: Store) -> None:
    a, b = sid_("abcd1"), sid_("abcd2")
    add(store, a, name="alpha")
    add(store, b)
    assert store.resolve(a) == a
    assert store.resolve("alpha") == a
    assert store.resolve("abcd1") == a
    assert store.resolve(b[:6]) == b


def test_resolve_ambiguous_lists_candidates(store: Store) -> None:
    a, b = sid_("abcd1"), sid_("abcd2")
    add(store, a)
    add(store, b)
    with pytest.raises(AmbiguousSession) as ei:
        store.resolve("abcd")
    assert ei.value.candidates == sorted([a, b])
    assert a in str(ei.value) and b in str(ei.value)


def test_resolve_short_prefix_and_unknown(store: Store) -> None:
    a = sid_("abcd1")
    add(store, a)
    with pytest.raises(SessionNotFound):
        store.resolve("abc")  # shorter than 4 characters
    with pytest.raises(SessionNotFound):
        store.resolve("ffff")
    with pytest.raises(SessionNotFound):
        store.resolve("no-such-name")


@pytest.mark.parametrize(
    "ref", ["../x", "/abs", "", ".", "..", "a\x00b", "abcd\n", "a/b", "-abcd", "a b", "x" * 200]
)
def test_resolve_invalid_refs(store: Store, tmp_path: Path, ref: str) -> None:
    # Things a path join would reach if refs were not validated first:
    (tmp_path / "x").mkdir()
    (tmp_path / ".zwarm" / "x").mkdir()
    with pytest.raises(InvalidRef):
        store.resolve(ref)


def test_name_file_pointing_outside_is_ignored(store: Store, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.names / "evil").write_text("../../outside")
    (store.names / "link").symlink_to(tmp_path / "target")
    (tmp_path / "target").write_text(sid_("cc"))  # a valid-looking id with no session
    with pytest.raises(SessionNotFound):
        store.resolve("evil")
    with pytest.raises(SessionNotFound):
        store.resolve("link")


def test_session_paths_refuse_non_ids(store: Store) -> None:
    for bad in ("../x", "abcd", "/etc", "00000000-0000-4000-8000-00000000000g"):
        with pytest.raises(InvalidRef):
            store.session_dir(bad)


def test_list_ids_ignores_stray_entries(store: Store) -> None:
    a = sid_("dd")
    add(store, a)
    (store.sessions / "notes.txt").write_text("x")
    (store.sessions / ".hidden").mkdir()
    assert store.list_ids() == [a]


def test_list_ids_without_state_dir(tmp_path: Path) -> None:
    s = Store(tmp_path / "nothing")
    assert s.list_ids() == []
    assert not (tmp_path / "nothing").exists()


# ---------------------------------------------------------------------------- names
@pytest.mark.parametrize(
    "name", ["", "-x", ".x", "a/b", "../a", "a b", "x" * 65, "a\nb", "job\n", sid_("ee")]
)
def test_invalid_names(store: Store, name: str) -> None:
    with pytest.raises(InvalidInput):
        store.claim_name(name, sid_("ee"))


def test_name_taken_and_released(store: Store) -> None:
    a, b = sid_("e1"), sid_("e2")
    add(store, a, name="job")
    store.create(make_session(b), b"t")
    with pytest.raises(InvalidInput, match="already exists"):
        store.claim_name("job", b)
    store.remove(a, "job")
    store.claim_name("job", b)  # free again after rm
    assert store.resolve("job") == b


def test_stale_name_claim_is_taken_over(store: Store) -> None:
    (store.names / "old").write_text(sid_("f0"))  # its session is gone
    b = sid_("f1")
    store.create(make_session(b), b"t")
    store.claim_name("old", b)
    assert store.resolve("old") == b


def test_release_name_only_own_claim(store: Store) -> None:
    a, b = sid_("f2"), sid_("f3")
    add(store, a, name="mine")
    store.release_name("mine", b)
    assert store.resolve("mine") == a


_RACE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from zwarm.store import Store
    from zwarm.errors import InvalidInput
    from zwarm.model import Session, Status, Turn
    root, sid, start = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    store = Store(root)
    now = "2026-01-01T00:00:00.000+00:00"
    s = Session(id=sid, adapter="codex", task="t", cwd="/tmp", created_at=now, updated_at=now,
                turns=[Turn(1, Status.COMPLETED, "t", "task", now)])
    store.create(s, b"t")
    while time.time() < start:
        pass
    try:
        store.claim_name("race", sid)
    except InvalidInput:
        sys.exit(7)
    sys.exit(0)
""")


@pytest.mark.subprocess
@pytest.mark.parametrize("stale", [False, True])
def test_name_claim_race_one_winner(store: Store, stale: bool) -> None:
    """Concurrent claims of one name (fresh, or over a stale claim): exactly one wins."""
    import time

    if stale:
        (store.names / "race").write_text(sid_("99"))
    ids = [sid_("a0", i) for i in range(6)]
    start = time.time() + 1.5
    procs = [
        subprocess.Popen([sys.executable, "-c", _RACE, str(store.root), sid, str(start)])
        for sid in ids
    ]
    codes = [p.wait(timeout=60) for p in procs]
    assert sorted(codes) == [0] + [7] * 5, codes
    winner = ids[codes.index(0)]
    assert store.resolve("race") == winner


# ---------------------------------------------------------------------------- locking
_UPDATER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from zwarm.store import Store
    from zwarm.model import QueuedMessage
    store = Store(Path(sys.argv[1]))
    for i in range(int(sys.argv[3])):
        store.update(sys.argv[2], lambda s: s.queue.append(
            QueuedMessage(f"{sys.argv[4]}-{i}", "summary", "2026-01-01T00:00:00Z")))
""")


@pytest.mark.subprocess
def test_concurrent_updates_never_lose_changes(store: Store) -> None:
    sid = sid_("12")
    add(store, sid)
    procs = [
        subprocess.Popen([sys.executable, "-c", _UPDATER, str(store.root), sid, "25", f"p{k}"])
        for k in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    got = [q.message for q in store.load(sid).queue]
    assert len(got) == 100
    for k in range(4):  # each writer's own changes stay in its order
        mine = [m for m in got if m.startswith(f"p{k}-")]
        assert mine == [f"p{k}-{i}" for i in range(25)]


def test_update_returns_fn_result(store: Store) -> None:
    sid = sid_("13")
    add(store, sid)
    assert store.update(sid, lambda s: len(s.turns)) == 1
    store.update(sid, lambda s: s.queue.append(QueuedMessage("m", "native", NOW)))
    assert store.load(sid).queue[0].context == "native"


def test_lock_of_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound), store.lock(sid_("14")):
        pass


# ---------------------------------------------------------------------------- damaged meta
def _meta(store: Store, sid: str) -> dict:
    return json.loads(store.meta_path(sid).read_bytes())


DAMAGES = {
    "empty": (lambda m, raw: b"", "empty"),
    "truncated": (lambda m, raw: raw[: len(raw) // 2], "not valid JSON"),
    "unknown_status": (
        lambda m, raw: json.dumps({**m, "status": "exploded"}).encode(),
        "unknown status",
    ),
    "newer_schema": (
        lambda m, raw: json.dumps({**m, "schema_version": 99}).encode(),
        "schema_version 99",
    ),
    "not_object": (lambda m, raw: b"[1, 2]", "not a JSON object"),
    "other_id": (lambda m, raw: json.dumps({**m, "id": sid_("77")}).encode(), "another session"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGES))
def test_damaged_meta_reported_not_rewritten(store: Store, kind: str) -> None:
    sid = sid_("de")
    add(store, sid)
    make, expect = DAMAGES[kind]
    bad = make(_meta(store, sid), store.meta_path(sid).read_bytes())
    store.meta_path(sid).write_bytes(bad)
    with pytest.raises(DamagedSession) as ei:
        store.load(sid)
    assert expect in str(ei.value)
    entry = store.read(sid)
    assert isinstance(entry, DamagedSession) and expect in entry.problem
    with pytest.raises(DamagedSession):
        store.update(sid, lambda s: None)
    assert store.meta_path(sid).read_bytes() == bad
    assert store.resolve(sid[:8]) == sid  # still addressable, e.g. for rm --force


def test_missing_meta_is_damaged_not_missing(store: Store) -> None:
    sid = sid_("df")
    add(store, sid)
    store.meta_path(sid).unlink()
    with pytest.raises(DamagedSession, match="missing"):
        store.load(sid)
    entry = store.read(sid)
    assert isinstance(entry, DamagedSession) and entry.problem == "meta.json is missing"
    with pytest.raises(SessionNotFound):
        store.load(sid_("dd", 1))


# ---------------------------------------------------------------------------- create / remove
def test_create_is_all_or_nothing(store: Store) -> None:
    sid = sid_("c1")
    store.create(make_session(sid), b"p")
    with pytest.raises(FileExistsError):
        store.create(make_session(sid), b"p")
    assert store.load(sid).id == sid  # the first one untouched


def test_create_failure_removes_partial_dir(store: Store) -> None:
    sid = sid_("c2")
    bad = make_session(sid)
    bad.created_at = object()  # type: ignore[assignment]  # json.dumps will raise TypeError
    with pytest.raises(TypeError):
        store.create(bad, b"p")
    assert not store.session_dir(sid).exists()


def test_remove_vanishes_and_releases_name(store: Store) -> None:
    sid = sid_("c3")
    add(store, sid, name="gone")
    store.remove(sid, "gone")
    assert not store.session_dir(sid).exists()
    assert not (store.names / "gone").exists()
    assert list((store.root / "trash").iterdir()) == []
    with pytest.raises(SessionNotFound):
        store.remove(sid, None)


# ---------------------------------------------------------------------------- planted files
def test_a_fifo_in_place_of_meta_json_is_damaged_not_a_hang(store: Store) -> None:
    """Regression: opening a FIFO planted as meta.json blocked every command forever."""
    sid = sid_("f1")
    add(store, sid)
    store.meta_path(sid).unlink()
    os.mkfifo(store.meta_path(sid))
    with pytest.raises(DamagedSession, match="not a regular file"):
        store.load(sid)
    got = store.read(sid)
    assert isinstance(got, DamagedSession)


def test_a_linked_meta_json_is_never_followed(store: Store, tmp_path: Path) -> None:
    sid, other = sid_("f2"), sid_("f3")
    add(store, sid)
    add(store, other)
    store.meta_path(sid).unlink()
    store.meta_path(sid).symlink_to(store.meta_path(other))
    with pytest.raises(DamagedSession, match="symbolic link"):
        store.load(sid)


def test_linked_session_dir_or_turns_dir_is_damaged(store: Store, tmp_path: Path) -> None:
    """An agent that swapped turns/ (or its whole session dir) for a link to another place
    must not get zwarm to write the next turn's files there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sid = sid_("f4")
    add(store, sid)
    turns = store.session_dir(sid) / "turns"
    turns.rename(tmp_path / "old-turns")
    turns.symlink_to(elsewhere)
    with pytest.raises(DamagedSession, match="turns/"):
        store.load(sid)
    with pytest.raises(DamagedSession), store.transaction(sid):
        pass
    sid2 = sid_("f5")
    add(store, sid2)
    d = store.session_dir(sid2)
    d.rename(tmp_path / "moved")
    d.symlink_to(tmp_path / "moved")
    with pytest.raises(DamagedSession, match="not a directory"):
        store.load(sid2)
    store.remove(sid2, None)  # the link goes; what it pointed to is untouched
    assert not os.path.lexists(d) and (tmp_path / "moved" / "meta.json").exists()


def test_an_oversized_meta_json_is_damaged_without_reading_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zwarm.store import sessions

    sid = sid_("f6")
    add(store, sid)
    monkeypatch.setattr(sessions, "MAX_META_BYTES", 100)
    with pytest.raises(DamagedSession, match="too large"):
        store.load(sid)


def test_write_private_replaces_a_planted_link_instead_of_writing_through(
    tmp_path: Path,
) -> None:
    from zwarm.system.files import write_private

    target = tmp_path / "victim"
    target.write_text("precious")
    link = tmp_path / "turn_2.prompt"
    link.symlink_to(target)
    write_private(link, b"prompt")
    assert target.read_text() == "precious"
    assert not link.is_symlink() and link.read_bytes() == b"prompt"
