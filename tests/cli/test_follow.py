"""``zwarm.ops.following``: growing turn logs read incrementally, each byte parsed once."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import SAMPLES
from zwarm import agents
from zwarm.model import Usage
from zwarm.ops import following as follow

pytestmark = pytest.mark.unit


class Mgr:
    """The two parser entry points a manager gives, counting the bytes each is handed."""

    usage_cumulative_on_resume = False

    def __init__(self, adapter: str) -> None:
        self.agent = agents.get(adapter)
        self.scanned = 0
        self.stepped: list[bytes] = []

    def scan_outcome(self, lines: Any) -> Any:
        lines = list(lines) if isinstance(lines, list) else lines
        if isinstance(lines, list):
            self.scanned += sum(len(x) for x in lines)
        return self.agent.outcome(lines)

    def iter_steps(self, lines: Any) -> Any:
        if isinstance(lines, list):
            self.stepped.extend(lines)
        return self.agent.steps(lines)


def grow(path: Path, data: bytes, seed: int, pause: float = 0.0) -> None:
    """Append ``data`` to ``path`` in random pieces (lines split anywhere)."""
    rng = random.Random(seed)
    pos = 0
    with open(path, "ab", buffering=0) as f:
        while pos < len(data):
            n = rng.randint(1, 97)
            f.write(data[pos : pos + n])
            pos += n
            if pause:
                time.sleep(pause)


@pytest.mark.parametrize("sample", ["codex_toolcall", "claude_toolcall"])
def test_live_log_gives_the_parser_whole_lines_as_they_come(tmp_path: Path, sample: str) -> None:
    data = (SAMPLES / f"{sample}.jsonl").read_bytes()
    adapter = sample.split("_")[0]
    path = tmp_path / "turn_1.jsonl"
    done = threading.Event()

    def writer() -> None:
        grow(path, data, seed=1, pause=0.001)
        done.set()

    t = threading.Thread(target=writer)
    t.start()  # the log does not exist yet when reading starts
    log = follow.LiveLog(path, done.is_set, poll_s=0.005)
    got = list(agents.get(adapter).steps(log))
    t.join()
    log.close()
    want = list(agents.get(adapter).steps(data.splitlines(keepends=True)))
    assert got == want and got
    assert log.pos == len(data)


def test_live_log_waits_for_whole_lines_and_gives_the_rest_when_the_turn_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follow, "ENDED_EVERY_S", 0.0)
    path = tmp_path / "log"
    path.write_bytes(b'{"a":1}\n{"b":')
    state = {"ended": False, "slept": 0}

    def sleep(_: float) -> None:  # the agent writes more, and the turn ends, while we wait
        state["slept"] += 1
        with open(path, "ab") as f:
            f.write(b"2}")
        state["ended"] = True

    log = follow.LiveLog(path, lambda: bool(state["ended"]), sleep=sleep)
    assert log.readline() == b'{"a":1}\n'
    assert log.readline() == b'{"b":2}'  # no newline: given once the turn has ended
    assert log.readline() == b""
    assert state["slept"] == 1
    log.close()


@pytest.mark.parametrize("sample", ["codex_toolcall", "claude_toolcall"])
def test_turn_watch_parses_each_byte_once(tmp_path: Path, sample: str) -> None:
    """A refresh costs what was appended since the last one, never the whole log again."""
    data = (SAMPLES / f"{sample}.jsonl").read_bytes()
    mgr = Mgr(sample.split("_")[0])
    path = tmp_path / "turn_1.jsonl"
    w = follow.TurnWatch(mgr, path)  # type: ignore[arg-type]
    w.poll()  # no log yet: nothing, no error
    assert w.latest is None
    rng = random.Random(7)
    pos = 0
    kinds = []
    while pos < len(data):
        n = rng.randint(1, 400)
        with open(path, "ab") as f:
            f.write(data[pos : pos + n])
        pos += n
        w.poll()
        if w.latest:
            kinds.append(w.latest["kind"])
    assert mgr.scanned == len(data)  # every byte scanned exactly once, over all polls
    assert b"".join(mgr.stepped) == data
    assert w.latest is not None and w.latest["kind"] == "message"
    assert "command" in kinds  # the command showed as the latest step while it was
    outcome = mgr.agent.outcome(data.splitlines(keepends=True))
    assert w.usage == outcome.usage  # the terminal event's usage: the turn's


def test_turn_watch_shows_the_usage_a_turn_reports_while_it_streams(tmp_path: Path) -> None:
    """Claude reports usage with every message: tokens so far grow before the turn ends."""
    lines = (SAMPLES / "claude_toolcall.jsonl").read_bytes().splitlines(keepends=True)
    path = tmp_path / "turn_1.jsonl"
    w = follow.TurnWatch(Mgr("claude"), path)  # type: ignore[arg-type]
    seen = []
    for line in lines[:-1]:  # everything but the result line
        with open(path, "ab") as f:
            f.write(line)
        w.poll()
        seen.append(w.usage.total_tokens if w.usage else 0)
    assert seen[-1] > 0 and seen == sorted(seen)  # grows as messages come
    assert w.final is None
    with open(path, "ab") as f:
        f.write(lines[-1])
    w.poll()
    assert w.final is not None and w.usage == w.final


def test_turn_watch_on_a_long_log_reads_its_tail_for_steps(tmp_path: Path) -> None:
    one = (SAMPLES / "codex_toolcall.jsonl").read_bytes().splitlines(keepends=True)
    filler = one[2] * (follow.TAIL_BYTES // len(one[2]) * 3)  # reasoning items
    data = b"".join(one[:2]) + filler + b"".join(one[2:])
    path = tmp_path / "turn_1.jsonl"
    path.write_bytes(data)
    mgr = Mgr("codex")
    w = follow.TurnWatch(mgr, path)  # type: ignore[arg-type]
    w.poll()
    assert sum(len(x) for x in mgr.stepped) <= follow.TAIL_BYTES
    assert w.latest is not None and w.latest["kind"] == "message"
    assert w.usage is not None and w.usage.total_tokens > 0  # the whole log was scanned once
    assert w.pos == len(data)


def test_tokens_so_far_add_the_running_turns_report() -> None:
    from zwarm.model import Session, Status, Turn

    s = Session(
        id="00000000-0000-4000-8000-000000000001",
        adapter="codex",
        task="t",
        cwd="/",
        created_at="2026-01-01T00:00:00Z",
        updated_at="2026-01-01T00:00:00Z",
    )
    t1 = Turn(1, Status.COMPLETED, "t", "task", "2026-01-01T00:00:00Z", usage=Usage(100, 0, 10))
    t2 = Turn(2, Status.RUNNING, "m", "summary", "2026-01-01T00:01:00Z")
    s.turns = [t1, t2]
    w = follow.TurnWatch(Mgr("codex"), Path("/nonexistent"))  # type: ignore[arg-type]
    assert follow.tokens_so_far(s, w) == 110
    w.final = Usage(50, 0, 5)
    assert follow.tokens_so_far(s, w) == 165
    assert follow.tokens_so_far(s, None) == 110
