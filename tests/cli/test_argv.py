"""argv building as pure functions: ``codex_argv`` and ``claude_argv``, the options a manager
builds from config, and the resume id check. The prompt never appears in argv: it goes on stdin.
(The contract every agent shares is in ``tests/agents/test_conformance.py``.)"""

from __future__ import annotations

import tomllib

import pytest

from zwarm.agents.base import AgentOptions, UnsafeResumeId
from zwarm.agents.claude import ClaudeAgent, claude_argv
from zwarm.agents.codex import CodexAgent, codex_argv, flatten_config, toml_value
from zwarm.config import Config, validate
from zwarm.engine import manager_class
from zwarm.env import Env
from zwarm.errors import InvalidInput
from zwarm.model import Session, Status, Turn
from zwarm.store import Store

pytestmark = pytest.mark.unit

CWD = "/work/proj"
CODEX = ["codex", "exec", "--json", "--skip-git-repo-check", "-C", CWD]  # every codex argv's head
CLAUDE = ["claude", "-p", "--output-format", "stream-json", "--verbose"]  # every claude argv's


def opts(**kw: object) -> AgentOptions:
    """Options as a manager builds them; ``config``, ``sandbox`` and ``permission_mode`` go
    into the agent's config table (``settings``)."""
    base: dict[str, object] = {"command": ("codex",), "cwd": CWD}
    settings = {k: kw.pop(k) for k in ("config", "sandbox", "permission_mode") if k in kw}
    if "config" in settings:
        settings["config"] = dict(settings["config"])  # type: ignore[call-overload]
    base.update(kw, settings=settings)
    return AgentOptions(**base)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- codex
def test_codex_defaults_exact() -> None:
    assert codex_argv(opts()) == [
        *CODEX,
        "-s",
        "workspace-write",
        "-",
    ]


def test_codex_model() -> None:
    assert codex_argv(opts(model="gpt-5")) == [
        *CODEX,
        "--model",
        "gpt-5",
        "-s",
        "workspace-write",
        "-",
    ]


def test_codex_no_model_means_no_model_flag() -> None:
    argv = codex_argv(opts(model=None))
    assert "--model" not in argv and "-m" not in argv


def test_codex_config_overrides_toml_encoded_and_flattened() -> None:
    config = (
        ("model_provider", "mock"),
        ("analytics", {"enabled": False}),
        (
            "model_providers",
            {"mock": {"base_url": "http://127.0.0.1:9/v1", "request_max_retries": 0}},
        ),
        ("sandbox_permissions", ["disk-full-read-access"]),
        ("temperature", 0.5),
        ("weird key", "x"),
    )
    argv = codex_argv(opts(config=config))
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert pairs == [
        'model_provider="mock"',
        "analytics.enabled=false",
        'model_providers.mock.base_url="http://127.0.0.1:9/v1"',
        "model_providers.mock.request_max_retries=0",
        "sandbox_permissions=" + toml_value(["disk-full-read-access"]),
        "temperature=0.5",
        '"weird key"="x"',
    ]
    # exec-level flags, in order, before the sandbox flag and the trailing "-"
    assert argv.index("-c") > argv.index("-C")
    assert argv[-3:] == ["-s", "workspace-write", "-"]


def test_toml_value_quotes_strings_and_escapes() -> None:
    assert toml_value("a") == '"a"'
    assert toml_value('say "hi"\n') == '"say \\"hi\\"\\n"'
    assert toml_value(True) == "true"
    assert toml_value(3) == "3"
    for v in ([1, "b"], [{"a": 1}], [[1, 2]], {"x": 1}.get("x")):
        assert tomllib.loads(f"v = {toml_value(v)}")["v"] == v  # what codex does with -c values


def test_flatten_config_nested() -> None:
    assert flatten_config([("a", {"b": {"c": 1}, "d": "x"})]) == [("a.b.c", 1), ("a.d", "x")]


def test_flatten_config_quotes_keys_that_are_not_bare() -> None:
    got = flatten_config([("a.b", 1), ("k\n", 2), ("t", {"x y": 3})])
    assert got == [('"a.b"', 1), ('"k\\n"', 2), ('t."x y"', 3)]


def test_codex_sandbox_choice_and_dangerous() -> None:
    assert codex_argv(opts(sandbox="read-only"))[-3:] == ["-s", "read-only", "-"]
    argv = codex_argv(opts(dangerous=True))
    assert "--dangerously-bypass-approvals-and-sandbox" in argv
    assert "-s" not in argv
    assert "--full-auto" not in argv  # no longer exists in codex


def test_codex_extra_args_before_stdin_marker() -> None:
    argv = codex_argv(opts(extra_args=("--disable", "plugins")))
    assert argv[-3:] == ["--disable", "plugins", "-"]
    assert argv.index("--disable") > argv.index("workspace-write")


def test_codex_resume_form() -> None:
    argv = codex_argv(opts(model="gpt-5", config=(("x", 1),)), resume_id="th-123")
    assert argv == [
        *CODEX,
        "--model",
        "gpt-5",
        "-c",
        "x=1",
        "-s",
        "workspace-write",
        "resume",
        "th-123",
        "-",
    ]


def test_codex_command_prefix_kept() -> None:
    argv = codex_argv(opts(command=("/usr/bin/python3", "-m", "fake")))
    assert argv[:4] == ["/usr/bin/python3", "-m", "fake", "exec"]


# ---------------------------------------------------------------------------- claude
def copts(**kw: object) -> AgentOptions:
    return opts(command=("claude",), **kw)


def test_claude_defaults_exact() -> None:
    assert claude_argv(copts()) == [
        *CLAUDE,
        "--permission-mode",
        "acceptEdits",
    ]


def test_claude_model_permission_dangerous() -> None:
    assert claude_argv(copts(model="sonnet", permission_mode="plan")) == [
        *CLAUDE,
        "--model",
        "sonnet",
        "--permission-mode",
        "plan",
    ]
    argv = claude_argv(copts(dangerous=True))
    assert "--dangerously-skip-permissions" in argv
    assert "--permission-mode" not in argv


def test_claude_resume_and_extra_args() -> None:
    argv = claude_argv(copts(extra_args=("--allowedTools", "Bash", "Edit")), resume_id="s-1")
    assert argv == [
        *CLAUDE,
        "--permission-mode",
        "acceptEdits",
        "--resume",
        "s-1",
        "--allowedTools",
        "Bash",
        "Edit",
    ]


def test_claude_no_model_flag_by_default() -> None:
    assert "--model" not in claude_argv(copts())


# ---------------------------------------------------------------------------- from config
def _session(tmp_dir: str, adapter: str, model: str | None, dangerous: bool = False) -> Session:
    return Session(
        id="00000000-0000-4000-8000-000000000000",
        adapter=adapter,
        task="PROMPT-SECRET",
        cwd=tmp_dir,
        created_at="2026-01-01T00:00:00+00:00",
        updated_at="2026-01-01T00:00:00+00:00",
        requested_model=model,
        dangerous=dangerous,
        bypass=dangerous,
        turns=[Turn(1, Status.RUNNING, "PROMPT-SECRET", "task", "2026-01-01T00:00:00+00:00")],
    )


@pytest.mark.parametrize("agent", ["codex", "claude"])
def test_options_from_config(tmp_path, agent: str) -> None:
    cls = manager_class(agent)
    doc = {
        "codex": {
            "command": ["my-codex", "--flag"],
            "sandbox": "read-only",
            "extra_args": ["--disable", "plugins"],
            "config": {"a": {"b": "c"}},
        },
        "claude": {
            "command": "my-claude",
            "permission_mode": "plan",
            "extra_args": ["--max-turns", "3"],
        },
    }
    mgr = cls(Store(tmp_path / ".zwarm"), Config(validate(doc, "cfg")), Env(cwd=tmp_path))
    s = _session(str(tmp_path), cls.name, "m1")
    argv = mgr.build_argv(mgr.options(s))
    assert "PROMPT-SECRET" not in " ".join(argv)
    assert argv[argv.index("--model") + 1] == "m1"
    if agent == "codex":
        assert argv[:2] == ["my-codex", "--flag"]
        assert argv[argv.index("-C") + 1] == str(tmp_path)
        assert 'a.b="c"' in argv
        assert argv[-4:] == ["read-only", "--disable", "plugins", "-"]
    else:
        assert argv[0] == "my-claude"
        assert argv[argv.index("--permission-mode") + 1] == "plan"
        assert argv[-2:] == ["--max-turns", "3"]
    dangerous = mgr.build_argv(mgr.options(_session(str(tmp_path), cls.name, None, True)))
    assert any(a.startswith("--dangerously-") for a in dangerous)
    assert "--model" not in dangerous


# ---------------------------------------------------------------------------- resume ids
@pytest.mark.parametrize(
    "bad",
    ["--help", "-x", "", "a b", "../../etc", "id\n", "x" * 129, "ok;rm", "é", "a/b"],
)
@pytest.mark.parametrize("agent", [CodexAgent(), ClaudeAgent()], ids=["codex", "claude"])
def test_unsafe_resume_id_never_reaches_argv(agent, bad: str) -> None:
    """A resume id comes from a file an agent can write: one that could be read as a flag
    (or is not an id at all) is refused, not passed on. Old code put it in argv as is."""
    with pytest.raises(UnsafeResumeId) as ei:
        agent.argv(opts(), bad)
    assert isinstance(ei.value, InvalidInput) and isinstance(ei.value, ValueError)
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("agent", [CodexAgent(), ClaudeAgent()], ids=["codex", "claude"])
def test_safe_resume_ids_pass(agent) -> None:
    for good in ("01a1ffe7-1cd8-73d1-b100-1335f36dd616", "th_1", "a.b:c-d", "x" * 128):
        assert good in agent.argv(opts(), good)


@pytest.mark.parametrize("agent", ["codex", "claude"])
def test_manager_argv_checks_the_resume_id(tmp_path, agent: str) -> None:
    cls = manager_class(agent)
    mgr = cls(Store(tmp_path / ".zwarm"), Config(validate({}, "cfg")), Env(cwd=tmp_path))
    with pytest.raises(UnsafeResumeId):
        mgr.build_argv(mgr.options(_session(str(tmp_path), cls.name, None)), "-rf")
