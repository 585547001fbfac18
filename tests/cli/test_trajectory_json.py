"""``zwarm trajectory --json`` over a long turn log (issue 16): the same JSON as the steps the
API gives, written while the log is still being read (never the whole array in memory).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from zwarm.agents import jsonl

N_ITEMS = 6000


def _codex_log(path: Path, escaped: bool) -> int:
    """A long codex turn log: messages and commands, as codex writes them (UTF-8), or with
    every other line written in ASCII (``\\u`` escapes) if ``escaped``."""
    rng = random.Random(5)
    out = [b'{"type":"thread.started","thread_id":"t"}\n', b'{"type":"turn.started"}\n']
    for i in range(N_ITEMS):
        text = "".join(rng.choice('ab \n\t"\\é😀\x1b') for _ in range(rng.randint(0, 300)))
        if i % 3 == 0:
            item = {"id": f"item_{i}", "type": "agent_message", "text": text}
        else:
            item = {"id": f"item_{i}", "type": "command_execution", "command": "ls",
                    "aggregated_output": text, "exit_code": i % 2}  # fmt: skip
        line = {"type": "item.completed", "item": item}
        ascii_only = escaped and i % 2 == 0
        out.append(json.dumps(line, ensure_ascii=ascii_only, separators=(",", ":")).encode())
        out[-1] += b"\n"
    path.write_bytes(b"".join(out))
    return len(out)


def _session(zw: Any, escaped: bool) -> str:
    sid: str = zw.spawn("task", env_extra=zw.replay("codex_simple"))
    assert zw.wait(sid).returncode == 0
    _codex_log(zw.turn_file(sid, 1), escaped)
    return sid


@pytest.mark.parametrize("escaped", [False, True])
def test_json_is_the_api_steps(zw: Any, escaped: bool) -> None:
    """Byte for byte what the stdlib encoder wrote of the API's steps for a log written as the
    CLIs write it; the same JSON values for any log (a string the agent wrote with ``\\u``
    escapes keeps them: its JSON is copied, not decoded and encoded again)."""
    sid = _session(zw, escaped)
    res = zw.run_bytes("trajectory", sid, "--json")
    assert res.returncode == 0
    steps = list(zw.api().trajectory(sid))
    assert len(steps) == N_ITEMS
    assert json.loads(res.stdout) == steps
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    old = ("[" + ",".join(dumps(s) + "\n" for s in steps) + "]\n").encode()
    assert (res.stdout == old) is not escaped


class _Out:
    """``sys.stdout`` for an in-process run: each binary write, with how many log lines had
    been read by then."""

    def __init__(self, read: list[int]) -> None:
        self.read = read
        self.writes: list[tuple[int, int]] = []  # (lines read, bytes)
        self.buffer = self

    def write(self, data: Any) -> int:
        self.writes.append((self.read[0], len(data)))
        return len(data)

    def flush(self) -> None:
        pass


def test_json_is_written_while_the_log_is_read(zw: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from zwarm.cli.commands import cli
    from zwarm.cli.output import OUT_CHUNK

    sid = _session(zw, escaped=True)
    read = [0]
    real = jsonl.read_lines

    def counting(source: Any, cap: int | None = None) -> Any:
        for line in real(source, cap):
            read[0] += 1
            yield line

    monkeypatch.setattr(jsonl, "read_lines", counting)
    for k, v in zw.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(zw.cwd)
    out = _Out(read)
    monkeypatch.setattr("sys.stdout", out)
    argv = ["--state-dir", str(zw.state_dir), "trajectory", sid, "--json"]
    cli.main(argv, prog_name="zwarm", standalone_mode=False)
    total = read[0]
    assert total == N_ITEMS + 2
    assert len(out.writes) > 3 and out.writes[0][0] < total // 2  # written as read
    assert max(size for _, size in out.writes) < OUT_CHUNK + 10_000  # one chunk at a time


def test_a_dropped_half_read_trajectory_closes_its_log_at_once(zw) -> None:
    """Without waiting for the cyclic GC (a long-lived API process must not hold logs open):
    the steps' generator holds no reference back to its ``Trajectory``."""
    import gc
    import os

    sid = zw.spawn("task", env_extra=zw.replay("codex_toolcall"))
    assert zw.wait(sid).returncode == 0
    api = zw.api()

    def logs_open() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += os.readlink(f"/proc/self/fd/{fd}").endswith("turn_1.jsonl")
            except OSError:
                pass
        return n

    gc.disable()
    try:
        it = api.trajectory(sid)
        assert next(it)["turn"] == 1 and logs_open() == 1
        del it
        assert logs_open() == 0
        for _ in iter(api.trajectory(sid)):
            break  # a for loop left early: the same
        assert logs_open() == 0
    finally:
        gc.enable()
