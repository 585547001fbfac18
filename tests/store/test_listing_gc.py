"""The listing (``Zwarm.sessions``: ``ls``, ``top``, the tools) runs with the cyclic garbage
collector paused (a measured 10-20% of a 1,000-session listing), and always restores it."""

from __future__ import annotations

import gc
from typing import Any

import pytest


@pytest.mark.subprocess
def test_listing_pauses_gc_and_restores_it(zw: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = zw.spawn("task", env_extra=zw.replay("codex_simple"))
    zw.wait(sid)
    api = zw.api()
    seen: list[bool] = []
    read = api.store.read_keyed

    def spy(s: str) -> Any:
        seen.append(gc.isenabled())
        return read(s)

    monkeypatch.setattr(api.store, "read_keyed", spy)
    assert gc.isenabled()
    rows = api.sessions()
    assert [r["id"] for r in rows] == [sid] and rows[0]["status"] == "completed"
    assert seen == [False]  # paused while the rows are read
    assert gc.isenabled()  # and back on after


@pytest.mark.subprocess
def test_listing_restores_gc_after_an_error(zw: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = zw.spawn("task", env_extra=zw.replay("codex_simple"))
    zw.wait(sid)
    api = zw.api()

    def boom(s: str) -> Any:
        raise RuntimeError("disk gone")

    monkeypatch.setattr(api.store, "read_keyed", boom)
    with pytest.raises(RuntimeError):
        api.sessions()
    assert gc.isenabled()


def test_listing_leaves_a_disabled_gc_disabled(zw: Any) -> None:
    api = zw.api()
    gc.disable()
    try:
        api.sessions()
        assert not gc.isenabled()  # a caller that turned it off keeps it off
    finally:
        gc.enable()
