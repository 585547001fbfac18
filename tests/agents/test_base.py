"""What ``zwarm.agents.base.Agent`` does for every agent around its parser: bounded reading,
skipped-line notes in place, a failing plugin parser reported (never raised), outcome values
fit to store in meta.json, options, prices and cost."""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

import msgspec
import pytest

from zwarm.agents import jsonl
from zwarm.agents.base import Agent, AgentOptions, ConformanceSamples, Price, Setting
from zwarm.model import Status, Turn, TurnOutcome, Usage
from zwarm.model.steps import Step


class Echo(Agent):
    """One message step per JSON line's ``say``; the outcome is whatever ``OUTCOME`` says."""

    name: ClassVar[str] = "echo"
    native_resume: ClassVar[bool] = True
    settings: ClassVar[Mapping[str, Setting]] = {"level": Setting((int,), 1)}
    default_prices: ClassVar[Mapping[str, Price]] = {
        "m": {"input": 2.0, "cached_input": 1.0, "output": 4.0}
    }
    OUTCOME: ClassVar[dict[str, Any]] = {}
    FAIL_AT: ClassVar[int | None] = None

    def build_argv(self, opts: AgentOptions, resume_id: str | None) -> list[str]:
        return [*opts.command]

    def permissions(self, table: Mapping[str, Any], bypass: bool) -> tuple[str, bool]:
        return "", bypass

    def iter_steps(self, lines: Iterable[bytes]) -> Iterator[Step]:
        for i, line in enumerate(lines):
            if i == self.FAIL_AT:
                raise KeyError("boom")
            text = jsonl.str_((jsonl.decode(line) or {}).get("say"))
            if text:
                yield {"kind": "message", "text": text}

    def scan_outcome(self, lines: Iterable[bytes]) -> TurnOutcome:
        for i, _ in enumerate(lines):
            if i == self.FAIL_AT:
                raise RuntimeError("parser bug")
        return TurnOutcome(**self.OUTCOME)

    def conformance_samples(self) -> ConformanceSamples:
        return ConformanceSamples(b"", b"", "")


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> Echo:
    monkeypatch.setattr(Echo, "OUTCOME", {})
    monkeypatch.setattr(Echo, "FAIL_AT", None)
    return Echo()


def say(text: str) -> bytes:
    return b'{"say":"' + text.encode() + b'"}\n'


def test_a_skipped_line_is_a_note_where_it_was(echo: Echo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl, "LINE_CAP", 64)
    f = io.BytesIO(say("a") + b"x" * 100 + b"\n" + say("b") + b"y" * 70)
    got = list(echo.steps(f))
    assert [s.get("text") or s["message"][:21] for s in got] == [
        "a",
        "output line 2 skipped",
        "b",
        "output line 4 skipped",
    ]
    assert got[1] == {
        "kind": "error",
        "message": "output line 2 skipped unread: 101 bytes (over the 64-byte line limit)",
        "fatal": False,
    }


def test_a_failing_parser_is_reported_not_raised(
    echo: Echo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Echo, "FAIL_AT", 1)
    got = list(echo.steps([say("a"), say("b"), say("c")]))
    assert got == [
        {"kind": "message", "text": "a"},
        {"kind": "error", "message": "the echo parser failed: KeyError: 'boom'", "fatal": False},
    ]
    o = echo.outcome([say("a"), say("b")])
    assert o.status is None and o.error == "the echo parser failed: RuntimeError: parser bug"


HOSTILE = {
    "status": Status.COMPLETED,
    "agent_session_id": "--rm -rf",
    "model": "m" * 5000,
    "error": "e" * 100_000,
    "final_message": "f" * (3 << 20),
    "usage": Usage(10**30, 10**30, 2**60, 5),
    "cost_usd": math.inf,
}


def test_outcome_values_are_fit_to_store(echo: Echo, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent can report anything; meta.json refuses what is out of bounds, so a session
    would read back as damaged. Old code stored it all as reported."""
    monkeypatch.setattr(Echo, "OUTCOME", HOSTILE)
    o = echo.outcome([])
    assert o.agent_session_id is None and o.model is None and o.cost_usd is None
    assert o.error is not None and len(o.error) == 16_000 and o.error.endswith("…")
    assert o.final_message is not None and len(o.final_message) == 1 << 20
    assert o.usage == Usage(1 << 40, 1 << 40, 1 << 40, 5)
    turn = Turn(
        1,
        Status.COMPLETED,
        "task",
        "task",
        "2026-01-01T00:00:00+00:00",
        usage=o.usage,
        reported_usage=o.usage,
        error=o.error,
        final_message=o.final_message,
        agent_session_id=o.agent_session_id,
    )
    assert msgspec.json.decode(msgspec.json.encode(turn), type=Turn) == turn


@pytest.mark.parametrize("cost", [math.nan, -1.0, 2e9, math.inf])
def test_a_cost_out_of_bounds_is_no_cost(
    echo: Echo, monkeypatch: pytest.MonkeyPatch, cost: float
) -> None:
    monkeypatch.setattr(Echo, "OUTCOME", {"cost_usd": cost})
    assert echo.outcome([]).cost_usd is None


def test_a_safe_session_id_is_kept_only_by_agents_that_resume(
    echo: Echo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Echo, "OUTCOME", {"agent_session_id": "th-1"})
    assert echo.outcome([]).agent_session_id == "th-1"
    monkeypatch.setattr(Echo, "native_resume", False)
    assert echo.outcome([]).agent_session_id is None  # so a native follow-up uses a summary


def test_options_and_schema(echo: Echo) -> None:
    schema = echo.config_schema()
    assert schema["command"].default == ["echo"] and schema["level"].default == 1
    table = {**echo.default_table(), "command": "my-echo", "extra_args": ["-v"], "level": 3}
    opts = echo.options(table, cwd="/w", model="", dangerous=True)
    assert opts.command == ("my-echo",) and opts.extra_args == ("-v",) and opts.model is None
    assert opts.dangerous is True and opts.settings["level"] == 3
    with pytest.raises(TypeError):
        opts.settings["level"] = 4  # type: ignore[index]  # read-only


def test_prices_and_cost(echo: Echo) -> None:
    table = echo.default_table()
    usage = Usage(1_000_000, 500_000, 1_000_000)
    assert echo.estimate_cost(usage, "m", table) == pytest.approx(0.5 * 2 + 0.5 * 1 + 4)
    assert echo.cost_source("m", table) == "estimated"
    assert echo.estimate_cost(usage, "other", table) is None
    assert (
        echo.cost_source("other", table) == "unknown" and echo.cost_source(None, table) == "unknown"
    )
    table["prices"] = {"other": {"input": 1, "cached_input": 1, "output": 1}}
    assert echo.estimate_cost(usage, "other", table) == pytest.approx(2.0)
