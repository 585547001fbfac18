"""What a supervisor's turn no longer pays for (issue 16) still behaves exactly as before.

The codex parser compiles its whole-line markers and failure texts only when a log or a failed
turn needs them, and reads codex's compact lines without a regex; ``-c`` values that tomli-w
writes as they are skip importing it; the config asks each agent for its table once per load;
``jsonl`` makes its context variable and surrogate patterns when first used. Each test checks
the lean path gives the answer the old one gave.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from zwarm import agents, config
from zwarm.agents import jsonl
from zwarm.agents.codex import _key, toml_value
from zwarm.agents.codex import events as codex_events
from zwarm.errors import ConfigError
from zwarm.model import Reason, Status

# pins the old regexes and what a supervisor imports (docs/testing.md, perf)
pytestmark = pytest.mark.perf

# ------------------------------------------------------------------------- codex failures

# the patterns as they were compiled at import (before they became lazy)
OLD_FAILURES = {
    "usage_limit": (
        r"hit your usage limit|usage limit has been reached|^Quota exceeded\b|"
        r"To use Codex with your ChatGPT plan, upgrade",
        re.IGNORECASE,
    ),
    "rate_limited": (
        r"last status: 429\b|\b429 Too Many Requests|^rate limit exceeded\b",
        re.IGNORECASE,
    ),
    "context": (r"ran out of room in the model's context window", re.IGNORECASE),
    "auth": (r"\b(401 Unauthorized|403 Forbidden)\b|last status: 40[13]\b", 0),
    "overloaded": (
        r"Selected model is at capacity|currently experiencing high demand|"
        r"unexpected status 5\d\d\b|last status: 5\d\d\b",
        re.IGNORECASE,
    ),
    "retry_in": (
        r"try again in (?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)(ms|s))?\b",
        re.IGNORECASE,
    ),
    "try_at": (
        r"try again at (?:([A-Z][a-z]{2,8}) (\d{1,2})(?:st|nd|rd|th)?, (\d{4}) )?"
        r"(\d{1,2}):(\d{2}) ?([AP]M)",
        re.IGNORECASE,
    ),
}


def test_lazy_failure_patterns_are_the_old_ones() -> None:
    f = codex_events._failures()
    assert codex_events._failures() is f  # compiled once
    for name, (pattern, flags) in OLD_FAILURES.items():
        got = getattr(f, name)
        assert got.pattern == pattern, name
        assert got.flags == re.compile(pattern, flags).flags, name


@pytest.mark.parametrize(
    ("message", "want"),
    [
        ("You've hit your usage limit. Try again at 3:29 PM.", Reason.USAGE_LIMIT),
        ("Quota exceeded. Check your plan", Reason.USAGE_LIMIT),
        ("exceeded retry limit, last status: 429 Too Many Requests", Reason.RATE_LIMITED),
        ("rate limit exceeded, try again in 1.5s", Reason.RATE_LIMITED),
        ("Codex ran out of room in the model\u2019s context window.", Reason.CONTEXT_OVERFLOW),
        ("unexpected status 401 Unauthorized: bad key", Reason.AUTH_FAILED),
        ("Selected model is at capacity. Please try a different model.", Reason.OVERLOADED),
        ("stream error: unexpected status 503, try again in 6m0s", Reason.OVERLOADED),
        ("something else went wrong", None),
    ],
)
def test_classify_types_failures_as_before(message: str, want: Reason | None) -> None:
    now = 1_800_000_000.0
    reason, retry, reset = codex_events.classify(message, now)
    assert reason is want
    text = message.replace("\u2019", "'")
    old = {k: re.compile(p, f) for k, (p, f) in OLD_FAILURES.items()}
    if want is Reason.RATE_LIMITED or want is Reason.OVERLOADED:
        m = old["retry_in"].search(text)
        assert (retry is not None) == (m is not None and any(m.groups()))
    if want is Reason.USAGE_LIMIT:
        assert (reset is not None) == (old["try_at"].search(text) is not None)


GEMINI_OLD = {
    "quota_day": (r"quota.{0,200}(per[_ ]?day|daily)", re.I | re.S),
    "rate": (
        r'"code":\s*429\b|RESOURCE_EXHAUSTED|Resource has been exhausted|'
        r"Please wait and try again later\. To increase your limits|Possible quota limitations",
        re.I,
    ),
    "auth": (r'"code":\s*40[13]\b|UNAUTHENTICATED|PERMISSION_DENIED|API key not valid', 0),
    "overloaded": (r'"code":\s*5\d\d\b|"status":\s*"(INTERNAL|UNAVAILABLE)"|overloaded', re.I),
    "context": (r"input token count.{0,80}exceeds|exceeds the maximum number of tokens", re.I),
    "retry": (r"retry (?:after|in) (\d+(?:\.\d+)?)\s*s", re.I),
}


def test_gemini_lazy_failure_patterns_are_the_old_ones() -> None:
    from zwarm.agents.gemini import events as gemini_events

    f = gemini_events._failures()
    assert gemini_events._failures() is f
    for name, (pattern, flags) in GEMINI_OLD.items():
        got = getattr(f, name)
        assert (got.pattern, got.flags) == (pattern, re.compile(pattern, flags).flags), name
    assert gemini_events.classify('{"code": 429, "message": "quota per day"} retry in 2.5s') == (
        Reason.USAGE_LIMIT,
        2.5,
    )
    assert gemini_events.classify("RESOURCE_EXHAUSTED") == (Reason.RATE_LIMITED, None)
    assert gemini_events.classify("API key not valid") == (Reason.AUTH_FAILED, None)
    assert gemini_events.classify("input token count 9 exceeds") == (
        Reason.CONTEXT_OVERFLOW,
        None,
    )
    assert gemini_events.classify('"status": "UNAVAILABLE"') == (Reason.OVERLOADED, None)
    assert gemini_events.classify("nothing known") == (None, None)


# ------------------------------------------------------------------------- codex outcome

LINES = [
    b'{"type":"thread.started","thread_id":"01a2-b3"}\n',
    b'{"type":"turn.started"}\n',
    b'{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"ok"}}\n',
    b'{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,'
    b'"output_tokens":9,"reasoning_output_tokens":2}}\n',
    b'{"type":"turn.failed","error":{"message":"last status: 429 Too Many Requests"}}\n',
    b'{"type":"error","message":"reconnecting 1/5"}\n',
    b'{"type":"tu\\"rn.completed","usage":{}}\n',  # an escape in the type: not compact
    b'{"type":"turn.completed',  # no closing quote
    b'{"type":"',
    b'{ "type" : "turn.completed", "usage": {"input_tokens": 3}}\n',
    b'{"id":1,"type":"turn.failed","error":{"message":"boom"}}\n',
    b'{"id":1,"type":"thread.started","thread_id":"x-1"}\n',
    b'{"msg":{"type":"error","message":"nested"}}\n',
    b'{"type" :"item.completed","item":{"type":"agent_message","text":"spaced"}}\n',
    b"not json\n",
    b"\n",
]


def _outcome_without_fast_path(lines: list[bytes], monkeypatch: pytest.MonkeyPatch) -> Any:
    with monkeypatch.context() as m:
        m.setattr(codex_events, "_HEAD_TYPE", b"\x00never")  # every line takes the regex
        return codex_events.scan_outcome(lines, now=1_800_000_000.0)


@pytest.mark.parametrize("i", range(len(LINES)))
def test_compact_head_reads_as_the_regex_did(i: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for lines in ([LINES[i]], LINES[: i + 1], LINES[i:], [*LINES[i:], *LINES[:i]]):
        want = _outcome_without_fast_path(lines, monkeypatch)
        assert codex_events.scan_outcome(lines, now=1_800_000_000.0) == want


@pytest.mark.subprocess
def test_compact_turn_needs_no_pattern_compiled() -> None:
    code = (
        "import re, sys\n"
        "from zwarm.agents.codex import events\n"
        "compiled = []\n"
        "real = re.compile\n"
        "re.compile = lambda *a, **k: compiled.append(a) or real(*a, **k)\n"
        f"o = events.scan_outcome({LINES[:4]!r})\n"
        "assert o.status is events.Status.COMPLETED and o.final_message == 'ok', o\n"
        "assert o.agent_session_id == '01a2-b3', o\n"
        "assert events._markers.cache_info().currsize == 0\n"
        "assert events._failures.cache_info().currsize == 0\n"
        "assert compiled == [], compiled\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_failed_turn_is_still_typed() -> None:
    o = codex_events.scan_outcome([LINES[0], LINES[4]], now=1_800_000_000.0)
    assert o.status is Status.FAILED
    assert o.reason is Reason.RATE_LIMITED


# ------------------------------------------------------------------------- codex -c values

VALUES: list[Any] = [
    True,
    False,
    0,
    -7,
    10**30,
    "",
    "gpt-5.5",
    "http://127.0.0.1:41953/v1",
    "caf\u00e9 \u4e2d",
    'say "hi"',
    "back\\slash",
    "tab\there",
    "new\nline",
    "del\x7f",
    "nul\x00",
    "line\u2028sep",
    "\ud83d",
    1.5,
    float("inf"),
    ["a", 1],
    {"k": "v"},
]


def _old_toml_value(value: Any) -> str:
    """``toml_value`` as it was: always through tomli-w."""
    text = tomli_w.dumps({"v": value})
    if not text.startswith("v = "):
        raise ValueError(f"cannot encode {value!r} as an inline TOML value")
    return text[4:].rstrip("\n")


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_toml_value_is_what_tomli_w_writes(value: Any) -> None:
    try:
        want = _old_toml_value(value)
    except Exception as e:
        with pytest.raises(type(e), match=re.escape(str(e))):
            toml_value(value)
        return
    assert toml_value(value) == want


@pytest.mark.parametrize(
    "part", ["a", "model_providers", "A-z_09", "", "a.b", "a b", "é", "a\n", "١", "k\x00"]
)
def test_bare_keys_are_the_old_regex(part: str) -> None:
    bare = re.compile(r"^[A-Za-z0-9_-]+\Z").match(part) is not None
    assert _key(part) == (part if bare else toml_value(part))


# ------------------------------------------------------------------------- config


def test_every_agent_table_still_rejects_unknown_keys() -> None:
    for name in agents.names():
        with pytest.raises(ConfigError, match=rf"unknown key 'zz_nope' in \[{name}\]"):
            config.validate({name: {"zz_nope": 1}}, "c.toml")
        key = next(iter(agents.get(name).config_schema()))
        with pytest.raises(ConfigError, match=rf"{re.escape(name)}\.{key} must be"):
            config.validate({name: {key: object()}}, "c.toml")
    with pytest.raises(ConfigError, match=r"unknown table \[zz-none\]"):
        config.validate({"zz-none": {}}, "c.toml")
    with pytest.raises(ConfigError, match="unknown key 'nope' in \\[defaults\\]"):
        config.validate({"defaults": {"nope": 1}}, "c.toml")


def test_load_asks_for_the_schema_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.toml"
    doc = {"defaults": {"model": "m"}, "codex": {"model": "x"}, "groups": {"g": {"max_cost": 1}}}
    path.write_text(tomli_w.dumps(doc))
    calls = []
    real = config.schema

    def counted() -> Any:
        calls.append(1)
        return real()

    monkeypatch.setattr(config, "schema", counted)
    got = config.load(path, environ={})
    assert len(calls) == 1
    monkeypatch.setattr(config, "schema", real)
    want = config.validate(doc, str(path))
    assert got.data == want
    assert got == config.Config(want, str(path))
    assert want["codex"]["model"] == "x"
    assert want["groups"] == {"g": {"max_cost": 1}}
    assert got.source is not None
    monkeypatch.setattr(config, "schema", counted)
    # the group's cap is a limit (recorded when trusted); nothing executing differs
    assert got.source.settings == {"groups.g": {"max_cost": 1}}
    assert len(calls) == 1  # nor does a source ask for the schema again


def test_group_names_are_checked_as_before() -> None:
    assert config.validate({"groups": {"a.b-c_1": {}}}, "c")["groups"] == {"a.b-c_1": {}}
    for bad in ("-a", "a b", "a\n", "x" * 65):
        with pytest.raises(ConfigError, match="group name"):
            config.validate({"groups": {bad: {}}}, "c")


# ------------------------------------------------------------------------- jsonl


def test_raw_strings_is_per_context() -> None:
    seen: list[bool] = []
    assert not jsonl.raw_strings_wanted()
    with jsonl.raw_strings():
        assert jsonl.raw_strings_wanted()
        t = threading.Thread(target=lambda: seen.append(jsonl.raw_strings_wanted()))
        t.start()
        t.join()
        with jsonl.raw_strings():
            assert jsonl.raw_strings_wanted()
        assert jsonl.raw_strings_wanted()
    assert not jsonl.raw_strings_wanted()
    assert seen == [False]


def test_surrogates_still_cleaned() -> None:
    assert jsonl.decode(b'{"a":"x\\ud83d","\\udc00":1}') == {"a": "x\ufffd", "\ufffd": 1}
    assert jsonl.decode(b'{"a":"\\ud83d\\ude00"}') == {"a": "\U0001f600"}
    assert jsonl.clean_text("a\udfffb") == "a\ufffdb"


@pytest.mark.subprocess
def test_a_codex_supervisor_imports_less() -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from zwarm import config, agents\n"
        "from zwarm.agents.codex import events\n"
        "c = config.load(Path('/nonexistent/config.toml'))\n"
        "a = agents.get('codex')\n"
        "o = a.options(c.table('codex'), cwd='/', model=None, dangerous=False)\n"
        "a.argv(o)\n"
        "print(' '.join(m for m in ('copy', 'contextvars', 'tomli_w') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []
