"""The agent conformance kit: the contract every registered agent must meet.

One parametrized suite, run for every agent the registry finds (codex, claude, the example toy
plugin, and any third-party plugin installed next to zwarm: see ``conftest.py``), over the
sample streams each agent supplies (``Agent.conformance_samples``). It checks what zwarm relies
on and never re-checks per agent:
- identity, config table and model routing are consistent;
- argv never holds the prompt (not even a 200 KiB one), and a resume id is checked first;
- parsing tolerates unknown event types, noise, invalid UTF-8, lone surrogates, a missing
  trailing newline and a truncated last line; an over-long line is skipped in bounded memory;
- ``scan_outcome`` gives the same answer as on the agent's own bytes whatever the JSON spacing
  (one pass; the old engine needed a second, re-encoded pass for this);
- usage (and cost) deltas over a native resume come out right under the agent's flags;
- failure rules: a terminal error event is a failure with the agent's own message (and a fatal
  error step); no terminal event is no status;
- the turn hooks (``launch_env``, ``after_turn``, ``reader``): the environment keeps every
  variable zwarm set, or the turn is refused in one line; nothing is written outside the
  session's own directory; after a turn, whatever its log holds, nothing raises; a turn is
  read by an agent of the same name, whatever its sidecar holds.
"""

from __future__ import annotations

import io
import json
import random
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zwarm import agents, engine
from zwarm.agents import jsonl
from zwarm.agents.base import (
    COMMON_SETTINGS,
    SIDECAR,
    Agent,
    AgentSetupError,
    ConformanceSamples,
    TurnFiles,
    UnsafeResumeId,
)
from zwarm.config import Config, validate
from zwarm.env import Env
from zwarm.model import Session, Status, Turn, TurnOutcome
from zwarm.model.steps import KINDS, Step
from zwarm.store import Store

# The fields each step kind must have (zwarm.model.steps).
STEP_FIELDS = {
    "message": {"text"},
    "reasoning": {"text"},
    "command": {"command", "exit_code", "output", "status"},
    "file_change": {"changes", "status"},
    "tool_call": {"id", "name", "arguments", "server"},
    "tool_result": {"id", "name", "result", "is_error"},
    "web_search": {"query"},
    "todo": {"items"},
    "error": {"message", "fatal"},
}
NOISE = [
    b"",
    b"\n",
    b"   \n",
    b"not json\n",
    b"\xff\xfe\x00garbage\n",
    b"[1,2]\n",
    b'"str"\n',
    b"42\n",
    b"null\n",
    b"{\n",
    b"[" * 100_000 + b"\n",
    b'{"x":' * 50_000 + b"\n",
]
UNKNOWN = [
    {"type": "zwarm.conformance.unknown", "payload": {"nested": [1, {"type": "x"}]}},
    {"event": "zwarm-conformance-unknown", "n": 1},
    {"zwarm_conformance": True},
]
LAYOUTS: dict[str, Callable[[Any], bytes]] = {
    "compact": lambda o: json.dumps(o, separators=(",", ":"), ensure_ascii=False).encode(),
    "spaced": lambda o: json.dumps(o, ensure_ascii=False).encode(),
    "wide": lambda o: b"  " + json.dumps(o, separators=(" , ", " : ")).encode() + b" \t\r",
}
PROMPT = "zwarm-conformance-prompt " + "0123456789abcdef" * (200 * 1024 // 16)


# --------------------------------------------------------------------------- helpers
def lines(stream: bytes) -> list[bytes]:
    return stream.splitlines(keepends=True)


def outcome(agent: Agent, stream: list[bytes]) -> TurnOutcome:
    return agent.outcome(list(stream))


def steps(agent: Agent, stream: list[bytes]) -> list[Step]:
    return list(agent.steps(list(stream)))


def streams(s: ConformanceSamples) -> dict[str, bytes]:
    named = {"completed": s.completed, "failed": s.failed}
    if s.resumed is not None:
        named["resumed_1"], named["resumed_2"] = s.resumed
    return named


def relayout(stream: bytes, encode: Callable[[Any], bytes]) -> list[bytes]:
    """Every JSON line of ``stream`` re-encoded by ``encode`` (other lines kept)."""
    out = []
    for line in lines(stream):
        try:
            out.append(encode(json.loads(line)) + b"\n")
        except ValueError:
            out.append(line)
    return out


def map_strings(value: Any, f: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return f(value)
    if isinstance(value, list):
        return [map_strings(v, f) for v in value]
    if isinstance(value, dict):
        return {k: map_strings(v, f) for k, v in value.items()}
    return value


def check_steps(got: list[Step]) -> None:
    for step in got:
        assert step["kind"] in KINDS, step
        assert STEP_FIELDS[step["kind"]] <= set(step), step


def check_utf8(value: Any) -> None:
    """``value`` can be written out as UTF-8 JSON (what trajectory --json and MCP do)."""
    json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")


def with_final(agent: Agent, replace: Callable[[str], Any]) -> tuple[str, list[bytes]]:
    """The completed sample's final message, and the sample with every string equal to it
    replaced by ``replace(final)`` (JSON-encoded; bytes markers are swapped in after)."""
    stream = agent.conformance_samples().completed
    final = agent.outcome(lines(stream)).final_message
    assert final, "the completed sample needs a final message"
    out = []
    for line in lines(stream):
        try:
            obj = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        changed = map_strings(obj, lambda s: replace(s) if s == final else s)
        out.append(json.dumps(changed).encode() + b"\n")
    return final, out


# --------------------------------------------------------------------------- identity, config
def test_identity_and_flags(agent: Agent) -> None:
    assert agents.get(agent.name) is agent
    assert agent.prompt_on_stdin is True
    cls = engine.manager_class(agent.name)
    assert cls.name == agent.name and type(cls.agent) is type(agent)
    for flag in (
        "native_resume",
        "usage_cumulative_on_resume",
        "cost_cumulative_on_resume",
        "reports_cost",
    ):
        assert isinstance(getattr(agent, flag), bool), flag
    assert agent.reports_cost or not agent.cost_cumulative_on_resume
    assert isinstance(agent.conformance_samples(), ConformanceSamples)


def test_config_table_defaults_validate(agent: Agent) -> None:
    schema = agent.config_schema()
    assert set(COMMON_SETTINGS) <= set(schema)
    table = agent.default_table()
    assert table["command"], "an agent needs a default command"
    for key, setting in schema.items():
        if setting.choices:
            assert table[key] in setting.choices, key
    data = validate({agent.name: table}, "conformance")
    assert data[agent.name] == table


def test_models_route_to_the_agent(agent: Agent) -> None:
    for model in agent.conformance_samples().models:
        assert agent.claims_model(model), model
        assert agents.agent_for_model(model) == agent.name, model


# --------------------------------------------------------------------------- argv
def _session(cwd: Path, agent: Agent, model: str | None, bypass: bool) -> Session:
    now = "2026-01-01T00:00:00+00:00"
    return Session(
        id="00000000-0000-4000-8000-000000000000",
        adapter=agent.name,
        task=PROMPT[:4000],
        cwd=str(cwd),
        created_at=now,
        updated_at=now,
        requested_model=model,
        bypass=bypass,
        turns=[Turn(1, Status.RUNNING, PROMPT[:16000], "task", now)],
    )


def test_argv_never_holds_the_prompt(agent: Agent, tmp_path: Path) -> None:
    config = Config(validate({}, "conformance"))
    mgr = engine.manager_class(agent.name)(Store(tmp_path / ".zwarm"), config, Env(cwd=tmp_path))
    models = [None, *agent.conformance_samples().models[:1]]
    resumes = [None, "01a1ffe7-1cd8-73d1-b100-1335f36dd616"] if agent.native_resume else [None]
    for model in models:
        for bypass in (False, True):
            for resume in resumes:
                argv = mgr.build_argv(mgr.options(_session(tmp_path, agent, model, bypass)), resume)
                assert all(isinstance(a, str) for a in argv) and argv
                joined = "\0".join(argv)
                assert "zwarm-conformance-prompt" not in joined
                assert "0123456789abcdef" * 4 not in joined
                assert len(joined) < 16 * 1024
                if resume:
                    assert resume in argv
        flags, disables = mgr.permissions(True)
        assert isinstance(flags, str) and disables is True
        flags, disables = mgr.permissions(False)
        assert isinstance(flags, str) and isinstance(disables, bool)


@pytest.mark.parametrize("bad", ["-", "--help", "", "a b", "../x", "x\n", "é", "x" * 200, 7])
def test_unsafe_resume_id_is_refused(agent: Agent, bad: Any) -> None:
    opts = agent.options(agent.default_table(), cwd="/w", model=None, dangerous=False)
    with pytest.raises(UnsafeResumeId):
        agent.argv(opts, bad)


def test_resume_needs_native_resume(agent: Agent) -> None:
    opts = agent.options(agent.default_table(), cwd="/w", model=None, dangerous=False)
    if agent.native_resume:
        assert "th-1" in agent.argv(opts, "th-1")
    else:
        with pytest.raises(UnsafeResumeId):
            agent.argv(opts, "th-1")


# --------------------------------------------------------------------------- failure rules
def test_completed_sample(agent: Agent) -> None:
    stream = lines(agent.conformance_samples().completed)
    got = outcome(agent, stream)
    assert got.status is Status.COMPLETED
    assert got.error is None and got.final_message
    check_steps(steps(agent, stream))


def test_terminal_error_is_failure_with_the_agents_message(agent: Agent) -> None:
    samples = agent.conformance_samples()
    stream = lines(samples.failed)
    got = outcome(agent, stream)
    assert got.status is Status.FAILED
    assert got.error == samples.failed_error
    trajectory = steps(agent, stream)
    check_steps(trajectory)
    fatal = [s for s in trajectory if s["kind"] == "error" and s["fatal"]]
    assert [s["message"] for s in fatal] == [samples.failed_error]


@pytest.mark.parametrize("name", ["completed", "failed"])
def test_no_terminal_event_no_status(agent: Agent, name: str) -> None:
    stream = lines(streams(agent.conformance_samples())[name])
    head = stream[:-1]
    cut = [*head, stream[-1][: len(stream[-1]) // 2]]
    without = outcome(agent, head)
    assert without.status is None
    assert outcome(agent, cut) == without  # a truncated last line counts for nothing
    assert steps(agent, cut) == steps(agent, head)


def test_no_trailing_newline_changes_nothing(agent: Agent) -> None:
    for stream in streams(agent.conformance_samples()).values():
        full = lines(stream)
        bare = lines(stream.rstrip(b"\r\n"))
        assert outcome(agent, bare) == outcome(agent, full)
        assert steps(agent, bare) == steps(agent, full)


def test_empty_stream(agent: Agent) -> None:
    assert outcome(agent, []) == TurnOutcome()
    assert steps(agent, []) == []


# --------------------------------------------------------------------------- tolerance
def test_unknown_events_and_noise_change_nothing(agent: Agent) -> None:
    extra = [LAYOUTS["compact"](u) + b"\n" for u in UNKNOWN] + NOISE
    for stream in streams(agent.conformance_samples()).values():
        clean = lines(stream)
        noisy: list[bytes] = []
        for i, line in enumerate(clean):
            noisy += [extra[i % len(extra)], line]
        noisy += extra
        assert outcome(agent, noisy) == outcome(agent, clean)
        assert steps(agent, noisy) == steps(agent, clean)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_scan_outcome_is_the_same_whatever_the_json_spacing(agent: Agent, layout: str) -> None:
    """Same answer as on the agent's own bytes, in one pass (old code: no status when spaced)."""
    for stream in streams(agent.conformance_samples()).values():
        own = lines(stream)
        other = relayout(stream, LAYOUTS[layout])
        assert agent.scan_outcome(other) == agent.scan_outcome(own)
        assert list(agent.iter_steps(other)) == list(agent.iter_steps(own))
        ascii_only = relayout(stream, lambda o: json.dumps(o).encode())
        assert agent.scan_outcome(ascii_only) == agent.scan_outcome(own)


def test_lone_surrogates_become_replacement_characters(agent: Agent) -> None:
    final, stream = with_final(agent, lambda s: s + "\ud83d")  # JavaScript's cut emoji
    got = outcome(agent, stream)
    assert got.final_message == final + "\ufffd"
    trajectory = steps(agent, stream)
    assert any(final + "\ufffd" in json.dumps(s, ensure_ascii=False) for s in trajectory)
    check_utf8(trajectory)


def test_surrogates_everywhere_never_break_anything(agent: Agent) -> None:
    for stream in streams(agent.conformance_samples()).values():
        mangled = []
        for line in lines(stream):
            obj = json.loads(line)
            mangled.append(json.dumps(map_strings(obj, lambda s: s + "\udc80")).encode() + b"\n")
        check_utf8(list(agent.steps(mangled)))
        o = agent.outcome(mangled)
        check_utf8([o.final_message, o.error, o.model, o.agent_session_id])


def test_invalid_utf8_is_replaced_not_dropped(agent: Agent) -> None:
    final, stream = with_final(agent, lambda s: s + " ZWARM-MARK")
    raw = [line.replace(b"ZWARM-MARK", b"\xff\xfe") for line in stream]
    assert outcome(agent, raw).final_message == final + " \ufffd\ufffd"


def test_arbitrary_bytes_never_raise(agent: Agent) -> None:
    rng = random.Random(1234)
    base = [line for s in streams(agent.conformance_samples()).values() for line in lines(s)]
    for _ in range(150):
        mangled = []
        for line in rng.sample(base, min(len(base), 6)):
            b = bytearray(line)
            for _ in range(rng.randint(0, 4)):
                if b:
                    b[rng.randrange(len(b))] = rng.randrange(256)
            mangled.append(bytes(b[: rng.randint(0, len(b))]))
        mangled.append(bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))))
        check_steps(list(agent.steps(mangled)))
        o = agent.outcome(mangled)
        assert o.status in (None, Status.COMPLETED, Status.FAILED)


def _write(path: Path, parts: list[bytes]) -> Path:
    with open(path, "wb") as f:
        f.writelines(parts)
    return path


def test_over_long_line_is_skipped_in_bounded_memory(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl, "LINE_CAP", 1 << 20)
    clean = lines(agent.conformance_samples().completed)
    big = b'{"type":"zwarm.big","event":"big","pad":"' + b"a" * (12 << 20) + b'"}\n'
    path = _write(tmp_path / "turn_1.jsonl", [clean[0], big, *clean[1:]])
    tracemalloc.start()
    try:
        with open(path, "rb") as f:
            got = list(agent.steps(f))
        with open(path, "rb") as f:
            result = agent.outcome(f)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 << 20, f"peak {peak:,} bytes for a 12 MiB line over a 1 MiB cap"
    assert result == outcome(agent, clean)
    notes = [s for s in got if s["kind"] == "error" and "skipped" in s["message"]]
    assert len(notes) == 1 and notes[0]["fatal"] is False and "line 2" in notes[0]["message"]
    assert [s for s in got if s is not notes[0]] == steps(agent, clean)


def test_a_skipped_last_line_is_said_when_there_is_no_status(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl, "LINE_CAP", 1 << 16)
    head = lines(agent.conformance_samples().completed)[:-1]
    got = agent.outcome(io.BytesIO(b"".join(head) + b"x" * (1 << 17)))
    assert got.status is None
    assert got.error is not None and "skipped" in got.error


# --------------------------------------------------------------------------- native resume
def test_native_resume_usage_and_cost_deltas(agent: Agent) -> None:
    samples = agent.conformance_samples()
    if not agent.native_resume:
        pytest.skip(f"{agent.name} does not resume its own sessions")
    assert samples.resumed is not None and samples.resumed_usage is not None
    first, second = (outcome(agent, lines(s)) for s in samples.resumed)
    assert first.agent_session_id and first.agent_session_id == second.agent_session_id
    assert first.usage is not None and second.usage is not None
    run = second.usage.minus(first.usage) if agent.usage_cumulative_on_resume else second.usage
    assert run == samples.resumed_usage
    if agent.reports_cost:
        assert first.cost_usd is not None and second.cost_usd is not None
        base = first.cost_usd if agent.cost_cumulative_on_resume else 0.0
        assert second.cost_usd - base == pytest.approx(samples.resumed_cost)


# --------------------------------------------------------------------------- turn hooks
SID = "00000000-0000-4000-8000-000000000000"
ZWARM_SET = {  # what the engine puts in every agent's environment (``agent_launch``)
    "ZWARM_SESSION_ID": SID,
    "ZWARM_PARENT_SESSION": SID,
    "ZWARM_AGENT_PATH": "/usr/bin:/bin",
    "ZWARM": "/home/u/.local/state/zwarm/bin/0/zwarm",
    "PATH": "/home/u/.local/state/zwarm/bin/0:/usr/bin:/bin",
}


def _turn(tmp_path: Path, agent: Agent, log: bytes | None) -> TurnFiles:
    d = tmp_path / "state" / "sessions" / SID
    (d / "turns").mkdir(parents=True)
    if log is not None:
        (d / "turns" / "turn_1.jsonl").write_bytes(log)
    ext = agent.turn_sidecar
    return TurnFiles(
        d, d / "turns" / "turn_1.jsonl", d / "turns" / f"turn_1.{ext}" if ext else None
    )


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_turn_sidecar_is_a_plain_extension(agent: Agent) -> None:
    assert agent.turn_sidecar is None or SIDECAR.match(agent.turn_sidecar)


def test_launch_env_keeps_what_zwarm_set_or_refuses_in_one_line(
    agent: Agent, tmp_path: Path
) -> None:
    turn = _turn(tmp_path, agent, None)
    (tmp_path / "work").mkdir()
    before = _files(tmp_path) - _files(turn.session_dir)
    env = {**ZWARM_SET, "ZWARM_DIR": str(tmp_path / "state")}
    table = validate({}, "conformance")[agent.name]
    try:
        got = agent.launch_env(
            table, dict(env), str(tmp_path / "work"), turn, {"HOME": str(tmp_path)}
        )
    except AgentSetupError as e:
        assert str(e) and "\n" not in str(e)
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in got.items())
        assert {k: got.get(k) for k in env} == env
    assert _files(tmp_path) - _files(turn.session_dir) == before  # nothing outside its dir


@pytest.mark.parametrize("log", ["completed", "failed", "noise", "missing"])
def test_after_turn_never_raises_and_the_turn_reads_alike(
    agent: Agent, tmp_path: Path, log: str
) -> None:
    samples = agent.conformance_samples()
    data = {"completed": samples.completed, "failed": samples.failed, "missing": None}.get(
        log, b"".join(NOISE[:10])
    )
    turn = _turn(tmp_path, agent, data)
    agent.after_turn(turn)
    reader = agent.reader(turn)
    assert isinstance(reader, Agent) and reader.name == agent.name
    check_steps(steps(reader, lines(samples.completed)))
    if turn.sidecar is not None:
        turn.sidecar.write_bytes(b"\xff not what the agent wrote" * 1000)
        reader = agent.reader(turn)  # a planted sidecar: read as nothing, never a crash
        assert isinstance(reader, Agent) and reader.name == agent.name
        check_steps(steps(reader, lines(samples.completed)))
