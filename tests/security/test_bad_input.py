"""Issue 5, bad input: refs and names, agent binaries, config files, prompts, working dirs.

Every bad input gets one clear error line (exit 1), and leaves nothing behind: no session,
no claimed name, no file touched outside ``.zwarm/sessions/`` (decoys that look like
sessions sit where ``../x`` and an absolute path would lead, and are compared byte for byte).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZWARM_BIN, wait_status, wait_until
from tests.support.faults import one_error_line, snapshot, spawn
from zwarm.errors import (
    AgentNotFound,
    AmbiguousSession,
    ConfigError,
    InvalidInput,
    InvalidRef,
    SessionNotFound,
    ZwarmError,
)

pytestmark = pytest.mark.usefixtures("strays")


def _sessions(zw: Any) -> list[str]:
    d = zw.state_dir / "sessions"
    return sorted(os.listdir(d)) if d.is_dir() else []


@pytest.fixture
def refs_world(zw: Any) -> dict[str, Any]:
    """A finished session, two sharing an id prefix, and decoy sessions outside sessions/."""
    good = spawn(zw, "the good one", "--name", "good", env=zw.replay("codex_simple"))
    wait_status(zw, good, "completed")
    twins = ["abcd0000-0000-4000-8000-000000000001", "abcd0000-0000-4000-8000-000000000002"]
    for t in twins:
        shutil.copytree(zw.session_dir(good), zw.session_dir(t))
        m = zw.meta(t)
        m.update(id=t, name=None)
        (zw.session_dir(t) / "meta.json").write_text(json.dumps(m))
    decoy_rel = zw.state_dir / "x"  # where sessions/../x leads
    decoy_abs = zw.tmp / "decoy"
    for d in (decoy_rel, decoy_abs):
        shutil.copytree(zw.session_dir(good), d)
    return {"good": good, "twins": twins, "abs": str(decoy_abs)}


def _bad_refs(w: dict[str, Any]) -> dict[str, tuple[str, type[ZwarmError], str]]:
    """name -> (ref, the error it must raise, words its message must contain)."""
    bad = "invalid session id or name"
    return {
        "dotdot": ("../x", InvalidRef, bad),
        "dotdot-into-sessions": (f"../sessions/{w['good']}", InvalidRef, bad),
        "absolute": (w["abs"], InvalidRef, bad),
        "empty": ("", InvalidRef, "empty"),
        "dot": (".", InvalidRef, bad),
        "dotdot-alone": ("..", InvalidRef, bad),
        "newline": ("go\nod", InvalidRef, bad),
        "trailing-newline": (w["good"] + "\n", InvalidRef, bad),
        "glob": ("*", InvalidRef, bad),
        "tilde": ("~", InvalidRef, bad),
        "names-dir": ("names", SessionNotFound, "no session matches"),
        "too-short-prefix": ("abc", SessionNotFound, "no session matches"),
        "ambiguous": ("abcd", AmbiguousSession, "matches 2 sessions: " + ", ".join(w["twins"])),
        "unknown-prefix": ("ffff0000", SessionNotFound, "no session matches"),
        "unknown-uuid": (str(uuid.UUID(int=12345)), SessionNotFound, "no session matches"),
    }


def test_bad_refs_api(zw: Any, refs_world: dict[str, Any]) -> None:
    """Every operation that takes a ref, through the API (NUL included: argv cannot hold it)."""
    api = zw.api()
    cases = _bad_refs(refs_world)
    cases["nul"] = ("go\x00od", InvalidRef, "invalid session id or name")
    ops = {
        "get": lambda r: api.get(r),
        "show": lambda r: api.show(r),
        "inject": lambda r: api.inject(r, "more"),
        "kill": lambda r: api.kill([r]),
        "rm": lambda r: api.rm([r]),
        "rm-force": lambda r: api.rm([r], force=True),
        "wait": lambda r: api.wait([r], timeout=1),
        "logs": lambda r: list(api.logs(r)),
        "trajectory": lambda r: list(api.trajectory(r)),
    }
    before = snapshot(zw.tmp / "state"), snapshot(Path(refs_world["abs"]))
    for name, (ref, err, words) in cases.items():
        for op, fn in ops.items():
            with pytest.raises(err) as e:
                fn(ref)
            assert words in str(e.value), (name, op, str(e.value))
            assert "\n" not in str(e.value).replace(repr(ref), ""), (name, op)
    assert (snapshot(zw.tmp / "state"), snapshot(Path(refs_world["abs"]))) == before


@pytest.mark.parametrize("command", ["show", "rm --force"])
def test_bad_refs_cli(zw: Any, refs_world: dict[str, Any], command: str) -> None:
    cases = _bad_refs(refs_world)
    before = snapshot(zw.tmp / "state"), snapshot(Path(refs_world["abs"]))
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda c: zw.run(*command.split(), c[0]), cases.values()))
    for (name, (_, _, words)), res in zip(cases.items(), results, strict=True):
        err = one_error_line(res, code=1)
        assert words.split(":")[0] in err, (name, err)
        assert res.stdout == ""
    assert (snapshot(zw.tmp / "state"), snapshot(Path(refs_world["abs"]))) == before


BAD_NAMES = [
    "../x",
    "/abs/path",
    "",
    ".",
    "..",
    "a\nb",
    "a/b",
    "a b",
    "x" * 65,
    str(uuid.UUID(int=99)),
    "-",
]


def test_bad_names(zw: Any) -> None:
    env = zw.replay("codex_simple")
    with ThreadPoolExecutor(3) as pool:
        results = list(
            pool.map(lambda n: zw.run("spawn", "task", "--name", n, env_extra=env), BAD_NAMES)
        )
    for res in results:
        one_error_line(res, "invalid session name", code=1)
    assert _sessions(zw) == []
    api = zw.api(env)
    with pytest.raises(InvalidInput, match="invalid session name"):
        api.spawn("task", name="a\x00b")
    assert _sessions(zw) == []
    names = zw.state_dir / "names"
    assert not names.exists() or [p.name for p in names.iterdir() if p.name != ".lock"] == []
    assert not (zw.tmp / "x").exists() and not (zw.state_dir / "x").exists()
    # a taken name: the second spawn fails cleanly and creates nothing
    first = spawn(zw, "one", "--name", "taken", env=env)
    res = zw.run("spawn", "two", "--name", "taken", env_extra=env)
    one_error_line(res, "already exists")
    assert _sessions(zw) == [first]


def test_missing_or_unusable_agent_binary(zw: Any) -> None:
    no_agents = {
        "PATH": os.pathsep.join(p for p in zw.env["PATH"].split(os.pathsep) if "fakes" not in p)
    }
    res = zw.run("spawn", "task", env_extra=no_agents)
    one_error_line(res, "codex agent binary 'codex' not found on PATH")
    res = zw.run("spawn", "task", "--adapter", "claude", env_extra=no_agents)
    one_error_line(res, "claude agent binary 'claude' not found on PATH")
    assert _sessions(zw) == []
    # inject with the binary gone: nothing changes
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    wait_status(zw, sid, "completed")
    before = snapshot(zw.session_dir(sid))
    one_error_line(zw.run("inject", sid, "more", env_extra=no_agents), "not found on PATH")
    assert snapshot(zw.session_dir(sid)) == before
    # a file that is not executable, named in config
    script = zw.tmp / "agent.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    zw.write_config(f'[codex]\ncommand = ["{script}"]\n')
    res = zw.run("spawn", "task")
    one_error_line(res, str(script), "is not executable")
    assert _sessions(zw) == [sid]
    # executable but unable to start (its interpreter is missing): the session says so
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    bad = spawn(zw, "task")
    m = wait_status(zw, bad, "failed")
    assert m["turns"][0]["error"].startswith(f"could not start agent '{script}'"), m
    assert zw.json("show", bad)["status"] == "failed"


CONFIGS = {
    "syntax": ("[codex\ncommand = 1\n", "invalid TOML"),
    "wrong-type": ('[codex]\ndangerous = "yes"\n', "codex.dangerous must be true/false"),
    "unknown-key": ("[codex]\nbogus = 1\n", "unknown key 'bogus' in [codex]"),
    "unknown-table": ("[bogus]\nx = 1\n", "unknown table [bogus]"),
    "bad-choice": ('[codex]\nsandbox = "none"\n', "codex.sandbox must be one of"),
    "not-utf8": (b"[codex]\nmodel = '\xff'\n", "invalid TOML"),
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_invalid_config(zw: Any, case: str) -> None:
    text, words = CONFIGS[case]
    zw.state_dir.mkdir(mode=0o700)
    cfg = zw.state_dir / "config.toml"
    cfg.write_bytes(text.encode() if isinstance(text, str) else text)
    res = zw.run("spawn", "task", env_extra=zw.replay("codex_simple"))
    err = one_error_line(res, str(cfg), words)
    assert err.startswith(f"Error: {cfg}: ")
    assert _sessions(zw) == []
    assert zw.calls() == 0
    with pytest.raises(ConfigError):
        zw.api().spawn("task")
    assert cfg.read_bytes() == (text.encode() if isinstance(text, str) else text)


def test_bad_prompts(zw: Any) -> None:
    env = zw.replay("codex_simple")
    cases = [
        (b"", "the prompt is empty"),
        (b"  \n\t\n", "the prompt is empty"),
        (b"hello\x00world", "NUL bytes"),
        (b"caf\xe9 au lait", "not valid UTF-8"),
    ]
    for data, words in cases:
        one_error_line(zw.run("spawn", "-", input=data, env_extra=env), words)
    one_error_line(zw.run("spawn", "", env_extra=env), "the prompt is empty")
    assert _sessions(zw) == []
    sid = spawn(zw, "task", env=env)
    wait_status(zw, sid, "completed")
    before = snapshot(zw.session_dir(sid))
    for data, words in cases:
        one_error_line(zw.run("inject", sid, "-", input=data, env_extra=env), words)
    assert snapshot(zw.session_dir(sid)) == before
    assert zw.calls() == 1


def _run_bytes(zw: Any, *argv: bytes, env: dict[bytes, bytes] | None = None) -> Any:
    """The installed zwarm with a bytes argv and environment, as a shell passes them."""
    given = {**zw.env, **zw.replay("codex_simple")}
    environ = {os.fsencode(k): os.fsencode(v) for k, v in given.items()}
    res = subprocess.run(
        [os.fsencode(ZWARM_BIN), *argv],
        env={**environ, **(env or {})},
        cwd=zw.cwd,
        capture_output=True,
        timeout=120,
    )
    out, err = res.stdout.decode(), res.stderr.decode()
    return subprocess.CompletedProcess(res.args, res.returncode, out, err)


def test_a_byte_that_is_not_utf8_in_argv_or_zwarm_dir_is_one_line(zw: Any) -> None:
    """Regression: a byte 0xff in the task argument (or any argument) or in ``ZWARM_DIR``
    crashed with a ``UnicodeEncodeError`` traceback (writing the launch pin), after creating
    the session's files."""
    for argv in (
        [b"spawn", b"caf\xff au lait"],
        [b"spawn", b"--wait", b"caf\xff"],
        [b"spawn", b"task", b"--model", b"gpt-\xff"],
        [b"ls", b"--status", b"\xff"],
    ):
        one_error_line(_run_bytes(zw, *argv), "not valid UTF-8", "\\xff")
    assert _sessions(zw) == [] and zw.calls() == 0
    sid = spawn(zw, "task", env=zw.replay("codex_simple"))
    wait_status(zw, sid, "completed")
    before = snapshot(zw.session_dir(sid))
    one_error_line(_run_bytes(zw, b"inject", sid.encode(), b"more \xff"), "not valid UTF-8")
    assert snapshot(zw.session_dir(sid)) == before
    bad = os.fsencode(zw.tmp) + b"/state-\xff"
    for argv in ([b"spawn", b"task"], [b"ls"], [b"ls", b"--json"], [b"show", sid.encode()]):
        res = _run_bytes(zw, *argv, env={b"ZWARM_DIR": bad})
        one_error_line(res, "the state dir", "state-\\xff", "is not valid UTF-8")
    assert not os.path.lexists(bad) and zw.calls() == 1
    with pytest.raises(InvalidInput, match="not valid UTF-8"):  # the API's callers too
        zw.api().spawn("caf\udcff")


def test_two_mib_prompt_goes_by_stdin(zw: Any) -> None:
    line = "".join(chr(0x41 + i % 26) for i in range(99)) + "é\n"
    prompt = (line * (2 * 1024 * 1024 // len(line.encode()) + 1)).encode()[: 2 * 1024 * 1024]
    prompt = prompt.decode("utf-8", "ignore").encode()
    assert len(prompt) > 2 * 1024 * 1024 - 4
    env = zw.replay("codex_simple")
    res = zw.run("spawn", "-", input=prompt, env_extra=env, check=True)
    sid = res.stdout.strip()
    m = wait_status(zw, sid, "completed")
    argv, got = zw.recorded()
    assert got == prompt
    assert sum(len(a) for a in argv["argv"]) < 1000
    assert m["task_truncated"] is True and len(m["task"]) < len(prompt)
    assert (zw.session_dir(sid) / "turns" / "turn_1.prompt").read_bytes() == prompt
    # and as a follow-up (native: the prompt is the message itself)
    zw.run("inject", sid, "-", "--context", "native", input=prompt, env_extra=env, check=True)
    wait_status(zw, sid, "completed")
    argv, got = zw.recorded()
    assert got == prompt and sum(len(a) for a in argv["argv"]) < 1000


def test_bad_working_dir(zw: Any) -> None:
    env = zw.replay("codex_simple")
    missing = zw.tmp / "nope"
    afile = zw.tmp / "a-file"
    afile.write_text("x")
    one_error_line(zw.run("spawn", "t", "-C", str(missing), env_extra=env), "does not exist")
    one_error_line(zw.run("spawn", "t", "-C", str(afile), env_extra=env), "is not a directory")
    assert _sessions(zw) == [] and zw.calls() == 0
    with pytest.raises(InvalidInput):
        zw.api(env).spawn("t", cwd=missing)
    with pytest.raises(AgentNotFound):
        zw.api({"PATH": "/nonexistent"}).spawn("t")


def test_a_removed_working_directory_is_named(zw: Any) -> None:
    """Regression: a working directory removed (before spawn, or between a session's turns)
    was reported as "No such file or directory" or "could not start agent 'codex'"."""
    env = zw.replay("codex_simple")
    gone = zw.tmp / "gone"
    gone.mkdir()
    proc = subprocess.Popen(  # a shell whose working directory is removed under it
        ["/bin/sh", "-c", f"cd {gone} && rmdir {gone} && exec {ZWARM_BIN} spawn task"],
        env={**zw.env, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=120)
    one_error_line(subprocess.CompletedProcess([], proc.returncode, out, err), f"'{gone}'")
    assert _sessions(zw) == [] and zw.calls() == 0
    # between turns: refused at once, naming it; nothing is recorded
    work = zw.tmp / "work2"
    work.mkdir()
    sid = spawn(zw, "task", "-C", str(work), env=env)
    wait_status(zw, sid, "completed")
    work.rmdir()
    before = snapshot(zw.session_dir(sid))
    for cmd in (["inject", sid, "more"], ["retry", sid]):
        one_error_line(zw.run(*cmd, env_extra=env), f"'{work}'", "no longer exists")
    assert snapshot(zw.session_dir(sid)) == before
    # removed while the follow-up waits behind a running turn: its supervisor names it
    work.mkdir()
    hold = zw.tmp / "hold"
    hold.touch()
    zw.run("inject", sid, "second", env_extra=zw.gated(hold, **env), check=True)
    wait_status(zw, sid, "running")
    zw.run("inject", sid, "third", env_extra=env, check=True)  # queued behind it
    work.rmdir()
    hold.unlink()

    def third_ended() -> dict[str, Any] | None:
        m = zw.meta(sid)
        return m if len(m["turns"]) == 3 and m["status"] == "failed" else None

    third = wait_until(third_ended, message="the third turn to end")["turns"][2]
    assert third["reason"] == "start_failed"
    assert third["error"] == f"could not enter the working directory '{work}': {os.strerror(2)}"


@pytest.mark.parametrize("where", ["state dir", "sessions dir"])
def test_state_dir_that_is_a_file(zw: Any, where: str) -> None:
    """A state dir (or its sessions/) that is a file is an error, never "no sessions"."""
    root = zw.tmp / "state-file"
    bad = root if where == "state dir" else root / "sessions"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("not a directory")
    env = zw.replay("codex_simple")
    for cmd in (["ls"], ["ls", "--json"], ["spawn", "t"], ["kill", "--all"], ["rm", "--finished"]):
        one_error_line(
            zw.run("--state-dir", str(root), *cmd, env_extra=env), f"{bad}", "ot a directory"
        )
    assert bad.read_text() == "not a directory" and zw.calls() == 0


def test_empty_after_is_refused(zw: Any) -> None:
    """Issue 29: ``--after ''`` or ``--after ','`` is a mistake, never "no dependency": one
    line, exit 1, no session (CLI, both its parsers, and the API)."""
    env = zw.replay("codex_simple")
    first = spawn(zw, "first", env=env)
    for value in ("", ",", " , ", f"{first},", f",{first}", f"{first},,{first}"):
        res = zw.run("spawn", "task", "--after", value, env_extra=env)
        one_error_line(res, "--after names an empty session")
        res = zw.run(
            "spawn", "task", "--after", value, "--json", "--adapter", "codex", env_extra=env
        )
        one_error_line(res, "--after names an empty session")
    for after in ([""], [" "], "", ","):
        with pytest.raises(InvalidInput, match=r"^after names an empty session"):  # its keyword
            zw.api().spawn("task", after=after)
    assert _sessions(zw) == [first]


HUGE = "99999999999999999999999999"


def test_numbers_past_the_schemas_bounds_are_refused_before_anything_is_written(
    zw: Any,
) -> None:
    """Issue 29: a number meta.json's schema would refuse to read back (``--max-tokens`` past
    2**53, a ``--timeout`` of 1e12 s) is refused with one line before a session exists, not
    stored to make a damaged session: through the CLI (both parsers), the API, the tools and
    the config's defaults."""
    from zwarm.orchestrator.tools import Toolbox

    env = zw.replay("codex_simple")
    for option, value in [
        ("--max-tokens", HUGE),
        ("--max-tokens", "0"),
        ("--max-cost", "1e12"),
        ("--max-cost", "nan"),
        ("--stall", "1e10"),
        ("--timeout", "1e12"),
        ("--timeout", "inf"),
        ("--priority", "2000000"),
    ]:
        for extra in ((), ("--json", "--adapter", "codex")):
            res = zw.run("spawn", "task", option, value, *extra, env_extra=env)
            one_error_line(res, f"{option.lstrip('-')} must be ")
    api = zw.api(env_extra=env)
    for kw in (
        {"max_tokens": int(HUGE)},
        {"timeout": 1e12},
        {"max_cost": 1e10},
        {"stall": float("nan")},
    ):
        with pytest.raises(InvalidInput, match="must be "):
            api.spawn("task", **kw)
    tb = Toolbox(api, "t")
    for args in ({"max_tokens": int(HUGE)}, {"timeout": 1e12}, {"max_cost": 1e10}):
        got = tb.dispatch("delegate", {"task": "task", **args})
        assert got["ok"] is False and "must be " in got["error"], got
    assert _sessions(zw) == []
    zw.state_dir.mkdir(exist_ok=True)
    for text in (
        f"[limits]\nmax_tokens = {HUGE}\n",
        "[limits]\nmax_tokens = 99999999999999999\n",
        "[defaults]\ntimeout = 1e12\n",
        "[limits]\nstall_s = 1e10\n",
        "[groups.g]\nmax_cost = 1e12\n",
    ):
        zw.write_config(text)
        res = zw.run("spawn", "task", env_extra=env)
        one_error_line(res, "config.toml")
    assert _sessions(zw) == []
    zw.write_config("[limits]\nmax_tokens = 9007199254740992\n")
    sid = spawn(zw, "task", env=env)
    assert wait_status(zw, sid, "completed")["max_tokens"] == 2**53
    assert zw.json("ls")[0]["status"] == "completed"
