"""The turn history (``zwarm.store.history``): finished turns leave meta.json, nothing is lost.

What a turn costs its supervisor must not grow with the turns before it (issue 16): these tests
prove the design (meta.json stays small, the supervisor's loads leave the history unread) and
that every reader still sees every turn, exactly, whatever was cut or tampered with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from zwarm.api import row
from zwarm.engine import limits, workspace
from zwarm.errors import DamagedSession, StoreError
from zwarm.model import Session, Status, Turn, Usage
from zwarm.model.records import Changes, Workspace
from zwarm.model.schema import decode, encode
from zwarm.store import Store, history

pytestmark = pytest.mark.unit

SID = "0f0f0f0f-0000-4000-8000-000000000001"
T0 = "2026-01-01T00:00:00+00:00"


def turn(n: int, text: str = "x" * 2000) -> Turn:
    t = Turn(n, Status.COMPLETED, f"message {n}", "task" if n == 1 else "summary", T0)
    t.ended_at = T0
    t.usage = Usage(100 * n, 10, n, 0)
    t.cost_usd = 0.001 * n
    t.final_message = f"answer {n} {text}"
    t.agent_session_id = "thread-1"
    t.reported_usage = Usage(1000 * n, 0, 10 * n, 0)
    t.changes = Changes(n, n, 0)
    t.before = f"{n:040x}"
    return t


@pytest.fixture
def store(tmp_path: Path) -> Store:
    st = Store(tmp_path / ".zwarm")
    st.ensure()
    s = Session(SID, "codex", "the task", "/tmp", T0, T0, turns=[turn(1)])
    st.create(s, b"the task")
    return st


def add_turns(store: Store, upto: int, history_: bool = False) -> None:
    for n in range(store.load(SID, history=False).count + 1, upto + 1):
        with store.transaction(SID, history=history_) as s:
            s.turns.append(turn(n))


def meta(store: Store) -> dict:  # type: ignore[type-arg]
    return json.loads((store.session_dir(SID) / "meta.json").read_bytes())


def reference(n: int) -> Session:
    """The same session with every turn in meta.json (how schema 2 kept it)."""
    s = Session(SID, "codex", "the task", "/tmp", T0, T0, turns=[turn(i) for i in range(1, n + 1)])
    s.refresh()
    return s


@pytest.mark.parametrize("whole", [False, True])
def test_finished_turns_move_to_the_history_and_every_reader_still_sees_them(
    store: Store, whole: bool
) -> None:
    add_turns(store, 40, history_=whole)
    m = meta(store)
    assert m["turns"][0]["n"] == 1 and len(m["turns"]) <= 1 + history.KEEP + history.BATCH
    assert m["archive"]["turns"] >= 30
    full, ref = store.load(SID), reference(40)
    assert [t.n for t in full.turns] == list(range(1, 41))
    assert [t.to_dict() for t in full.turns] == [t.to_dict() for t in ref.turns]
    head = store.load(SID, history=False)
    assert head.head_only and head.count == 40 and len(head.turns) < 12
    for got in (full, head):
        assert got.usage == ref.usage and got.cost_usd == ref.cost_usd
        assert got.last_message == ref.last_message and got.status is Status.COMPLETED
        assert got.spent() == pytest.approx(ref.spent())
    assert row(head) == row(full) == row(ref)  # ls reads the head only: the same row


def test_meta_json_stays_the_same_size_however_many_turns(store: Store) -> None:
    """The supervisor loads and saves meta.json a few times per turn: flat means its size
    does not grow with the turns before (only the archive's per-turn change stats do, a
    few bytes each)."""
    add_turns(store, 30)
    size30 = (store.session_dir(SID) / "meta.json").stat().st_size
    add_turns(store, 300)
    size300 = (store.session_dir(SID) / "meta.json").stat().st_size
    assert size300 < size30 + 270 * 64
    assert size300 < 300 * 2000 / 10  # every turn holds ~2 KB of text: nearly all archived


def test_the_supervisor_path_never_reads_the_history(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_turns(store, 60)

    def boom(*_: object) -> None:
        raise AssertionError("the history was read")

    monkeypatch.setattr(history, "read", boom)
    add_turns(store, 80)  # head-only transactions, archiving on the way
    head = store.load(SID, history=False)
    assert head.count == 80 and head.turn(80) is not None and head.turn(5) is None
    monkeypatch.undo()
    assert [t.n for t in store.load(SID).turns] == list(range(1, 81))


def test_a_crash_between_the_history_and_meta_json_loses_and_duplicates_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_turns(store, 15)
    before = (store.session_dir(SID) / history.NAME).stat().st_size
    import zwarm.store.sessions as sessions_mod

    real = sessions_mod.atomic_write

    def die(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sessions_mod, "atomic_write", die)
    with pytest.raises(OSError), store.transaction(SID, history=False) as s:
        for n in range(16, 26):
            s.turns.append(turn(n))
    assert (store.session_dir(SID) / history.NAME).stat().st_size > before  # appended...
    monkeypatch.setattr(sessions_mod, "atomic_write", real)
    assert store.load(SID).count == 15  # ... but not believed: meta.json is the truth
    add_turns(store, 40)
    assert [t.n for t in store.load(SID).turns] == list(range(1, 41))


def test_a_tampered_history_is_damage_for_whoever_needs_it_never_a_wrong_turn(
    store: Store,
) -> None:
    add_turns(store, 20)
    path = store.session_dir(SID) / history.NAME
    good = path.read_bytes()
    lines = good.split(b"\n")
    for bad, why in [
        (b"\n".join([lines[1], lines[0], *lines[2:]]), "is turn 3, not turn 2"),
        (good[:-40], "shorter than meta.json says"),
        (good.replace(b'"completed"', b'"completex"', 1), "not a valid turn"),
    ]:
        path.write_bytes(bad)
        with pytest.raises(DamagedSession, match=why):
            store.load(SID)
        assert isinstance(store.read(SID), Session)  # a listing needs only meta.json
    path.unlink()
    path.symlink_to("/etc/passwd")
    with pytest.raises(DamagedSession, match="symbolic link"):
        store.load(SID)
    target = path.parent / "elsewhere"
    target.write_bytes(b"keep")
    path.unlink()
    path.symlink_to(target)
    with pytest.raises(DamagedSession, match="symbolic link"):
        add_turns(store, 40)  # a save that archives never writes through the link
    assert target.read_bytes() == b"keep"
    os.unlink(path)
    path.write_bytes(good)
    n = store.load(SID, history=False).count  # the turns saved before archiving was refused
    assert n >= 20 and [t.n for t in store.load(SID).turns] == list(range(1, n + 1))


def test_an_archived_turn_is_never_changed_by_a_save(store: Store) -> None:
    add_turns(store, 20)
    saved = (store.session_dir(SID) / "meta.json").read_bytes()
    with pytest.raises(StoreError, match="archived turn"), store.transaction(SID) as s:
        s.turns[3].final_message = "rewritten"
    assert (store.session_dir(SID) / "meta.json").read_bytes() == saved
    assert store.load(SID).turns[3].final_message != "rewritten"


def test_turn_numbers_out_of_order_are_damage() -> None:
    s = reference(3)
    s.turns[2].n = 5
    with pytest.raises(ValueError, match="out of order: turn 5 is where turn 3 should be"):
        decode(encode(s))


def test_what_the_engine_needs_of_archived_turns_is_in_the_archive(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = 1767225600.0 + 3600  # an hour after T0: every turn ended today
    monkeypatch.setattr(history.time, "time", lambda: now)  # archived then
    add_turns(store, 30)
    head, full = store.load(SID, history=False), store.load(SID)
    nxt = Turn(31, Status.RUNNING, "more", "native", T0, agent_session_id="thread-1")
    for s in (head, full):  # a native resume subtracts what the agent reported before
        got = s.resumed(nxt, "thread-1")
        assert got is not None and got.reported_usage == turn(30).reported_usage
    first = Turn(1, Status.COMPLETED, "t", "task", T0)  # a turn 1 without a snapshot
    head.turns[0], full.turns[0] = first, first
    ws = Workspace("shared", "/r", "/r")
    assert workspace.start_of(head, ws) == workspace.start_of(full, ws) == f"{2:040x}"
    assert limits.spent_today([head], now) == pytest.approx(limits.spent_today([full], now))
    assert row(head)["turn_changes"] == row(full)["turn_changes"]
    a = store.load(SID, history=False).archive
    assert a is not None and len(a.recent) == a.turns  # every archived cost, kept for the day
    monkeypatch.setattr(history.time, "time", lambda: now + 3 * 86400)
    add_turns(store, 50)  # archived 3 days after they ended: no day's spend needs them
    a = store.load(SID, history=False).archive
    assert a is not None and a.turns > 30 and a.recent == []


def test_a_version_2_file_with_many_turns_reads_and_is_archived_by_its_next_save(
    store: Store,
) -> None:
    d = reference(25).to_dict()
    d.pop("archive")
    d["schema_version"] = 2
    (store.session_dir(SID) / "meta.json").write_text(json.dumps(d))
    assert store.load(SID).count == 25 and store.read(SID).count == 25  # type: ignore[union-attr]
    with store.transaction(SID, history=False) as s:
        assert not s.head_only and len(s.turns) == 25
    assert meta(store)["archive"]["turns"] > 0
    assert [t.to_dict() for t in store.load(SID).turns] == [
        t.to_dict() for t in reference(25).turns
    ]
