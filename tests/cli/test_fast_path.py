"""The click-free fast path (``zwarm.cli.fast``) keeps its contract.

Proves, for ``ls``, ``trajectory SESSION --json``, ``show SESSION --json`` and ``logs
SESSION``: every argv in the fast grammar gets from the console script (``run``: the fast
path) exactly the answer the click CLI (``main``) gives, stdout bytes, stderr bytes and exit
status, over one world of finished, failed, running, named, damaged and log-less sessions,
and for errors (no session, no turn, a state dir that is a file or missing); whatever is
doubtful (help, ``--``, repeated, unknown or malformed options...) is declined, so click
answers it; the grammar's options, flags, choices and arguments are the click commands' own
(it cannot drift from them); and an answered command imports neither click nor
``dataclasses``, while a declined one does load click.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import click
import pytest

from tests.support import ZW, ZWARM_BIN, kill_leftovers, make_env, stop_forkservers, wait_until
from zwarm.cli import fast
from zwarm.cli.commands import cli

CLICK = "import sys; from zwarm.cli import main; sys.argv[0] = 'zwarm'; main()"
RUN = "import sys; from zwarm.cli import {entry}; sys.argv = ['zwarm', *sys.argv[1:]]; {entry}()"
OLD = "2020-01-02T03:04:05.000+00:00"  # a creation time whose age ("Nd") the test cannot see move


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ZW, dict[str, str]]]:
    """One world for every equivalence case, and its sessions by role."""
    tmp = tmp_path_factory.mktemp("fast")
    (tmp / "work").mkdir()
    env = make_env(tmp, tmp / "state", tmp / "record")
    env.update({f"XDG_{k}_HOME": str(tmp / f"xdg-{k.lower()}") for k in ("CONFIG", "STATE")})
    env.update({f"XDG_{k}_HOME": str(tmp / f"xdg-{k.lower()}") for k in ("DATA", "CACHE")})
    zw = ZW(tmp=tmp, state_dir=tmp / "state", cwd=tmp / "work", env=env, record=tmp / "record")
    claude = zw.replay("claude_simple")
    try:
        ids = {
            "done": zw.spawn("hello", env_extra=zw.replay("codex_simple")),
            "tools": zw.spawn("use tools", env_extra=zw.replay("codex_toolcall")),
            "named": zw.spawn("hi", "--name", "alpha-one", "--adapter", "claude", env_extra=claude),
            "failed": zw.spawn("bad", env_extra={**zw.replay("codex_error"), "FAKE_EXIT": "1"}),
            "damaged": zw.spawn("to damage", env_extra=zw.replay("codex_simple")),
            "nolog": zw.spawn("to lose its log", env_extra=zw.replay("codex_simple")),
        }
        zw.wait(*ids.values())
        ids["running"] = zw.spawn("hang", env_extra={**zw.replay("codex_simple"), "FAKE_HANG": "1"})
        wait_until(lambda: zw.meta(ids["running"])["turns"][-1].get("agent"), message="agent")
        for sid in ids.values():  # ages fixed: the table is the same a second later
            meta = zw.meta(sid)
            meta["created_at"] = OLD
            (zw.session_dir(sid) / "meta.json").write_text(json.dumps(meta))
        statuses = {r["id"]: r["status"] for r in zw.json("ls")}
        assert statuses[ids["failed"]] == "failed" and statuses[ids["running"]] == "running"
        assert statuses[ids["done"]] == statuses[ids["named"]] == "completed"
        (zw.session_dir(ids["damaged"]) / "meta.json").write_bytes(b'{"id": "broken')
        zw.turn_file(ids["nolog"], 1).unlink()
        (tmp / "a-file").write_text("not a state dir")
        yield zw, ids
    finally:
        kill_leftovers(zw)
        stop_forkservers(tmp)


# (argv, expected exit status); {done}, {done8}... are session ids and 8-character prefixes,
# {state} the world's state dir, {file} a regular file, {missing} a path that does not exist.
CASES: list[tuple[tuple[str, ...], int]] = [
    (("ls", "--json"), 0), (("ls",), 0), (("ls", "--tree"), 0), (("ls", "--json", "--tree"), 0),
    (("ls", "--json", "--status", "completed"), 0), (("ls", "--status=damaged", "--json"), 0),
    (("ls", "--status", "running"), 0), (("ls", "--json", "--limit", "2"), 0),
    (("ls", "--limit=3", "--tree"), 0), (("ls", "--json", "--name", "alpha*"), 0),
    (("ls", "--json", "--adapter", "codex"), 0), (("ls", "--source", "cli", "--json"), 0),
    (("--state-dir", "{state}", "ls", "--json"), 0), (("--state-dir={state}", "ls", "--json"), 0),
    (("--state-dir={missing}", "ls", "--json"), 0), (("--state-dir", "{missing}", "ls"), 0),
    (("--state-dir", "{file}", "ls", "--json"), 1), (("trajectory", "{done}", "--json"), 0),
    (("trajectory", "--json", "{tools8}"), 0), (("trajectory", "alpha-one", "--json"), 0),
    (("trajectory", "{tools}", "--json", "--turn", "1"), 0),
    (("trajectory", "{tools}", "--json", "--full"), 0), (("trajectory", "{running}", "--json"), 0),
    (("trajectory", "nosuchsession", "--json"), 1),
    (("trajectory", "{done}", "--json", "--turn", "99"), 1),
    (("trajectory", "{nolog}", "--json"), 1), (("trajectory", "{damaged}", "--json"), 1),
    (("--state-dir", "{file}", "trajectory", "{done}", "--json"), 1),
    (("show", "{done}", "--json"), 0), (("show", "--json", "alpha-one"), 0),
    (("show", "{running}", "--json"), 0), (("show", "{failed}", "--json"), 0),
    (("show", "nosuchsession", "--json"), 1), (("show", "{damaged}", "--json"), 1),
    (("logs", "{done}"), 0), (("logs", "{tools}", "--turn", "1"), 0),
    (("logs", "--turn=1", "{named}"), 0), (("logs", "{nolog}"), 1),
    (("logs", "nosuchsession"), 1), (("logs", "{done}", "--turn", "99"), 1),
]  # fmt: skip


def _argv(template: tuple[str, ...], zw: ZW, ids: dict[str, str]) -> list[str]:
    names = {"state": str(zw.state_dir), "file": str(zw.tmp / "a-file")}
    names |= {"missing": str(zw.tmp / "no" / "such"), **ids}
    names |= {f"{k}8": v[:8] for k, v in ids.items()}
    return [t.format(**names) for t in template]


def _both(
    zw: ZW, argv: list[str], env: dict[str, str], stdin: bytes = b""
) -> tuple[tuple[int, bytes, bytes], ...]:
    """(exit status, stdout, stderr) of ``argv`` from the console script, then from click."""
    assert fast.parse(argv, env) is not None, f"not on the fast path: {argv}"
    run = [[str(ZWARM_BIN), *argv], [sys.executable, "-c", CLICK, *argv]]
    out = [
        subprocess.run(a, input=stdin, env=env, cwd=zw.cwd, capture_output=True, timeout=120)
        for a in run
    ]
    return tuple((p.returncode, p.stdout, p.stderr) for p in out)


@pytest.mark.parametrize(("template", "code"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_the_fast_answer_is_clicks_byte_for_byte(
    world: tuple[ZW, dict[str, str]], template: tuple[str, ...], code: int
) -> None:
    zw, ids = world
    argv = _argv(template, zw, ids)
    via_fast, via_click = _both(zw, argv, zw.env)
    assert via_fast == via_click
    assert via_fast[0] == code, via_fast
    if code:  # one "Error: " line per problem, never a traceback, nothing half-written
        assert via_fast[2].startswith(b"Error: ") and b"Traceback" not in via_fast[2]
    else:
        assert via_fast[1] and not via_fast[2], via_fast


SPAWN_REFUSED = [
    ("spawn", "-"), ("spawn", "-", "--name", "x"), ("spawn", "t", "--after", "nosuchsession"),
    ("spawn", "t", "-C", "{missing}"),
    ("spawn", "t", "--name", "alpha-one"), ("--state-dir", "{file}", "spawn", "t"),
    ("spawn", ""), ("spawn", "t", "--timeout", "0"), ("spawn", "t", "--launcher", "nosuch"),
    ("spawn", "t", "--name", "bad name"), ("spawn", "t", "--max-cost", "99999999999"),
]  # fmt: skip


@pytest.mark.parametrize("template", SPAWN_REFUSED, ids=" ".join)
def test_a_refused_spawn_is_clicks_byte_for_byte(
    world: tuple[ZW, dict[str, str]], template: tuple[str, ...]
) -> None:
    """A spawn the API refuses: the same one error line and status both ways, and no session
    made by either (the world's sessions are unchanged)."""
    zw, ids = world
    stdin = b"not UTF-8: \xff" if "-" in template else b""
    via_fast, via_click = _both(zw, _argv(template, zw, ids), zw.env, stdin)
    assert via_fast == via_click
    assert via_fast[0] == 1 and via_fast[1] == b"", via_fast
    assert via_fast[2].startswith(b"Error: ") and via_fast[2].count(b"\n") == 1, via_fast
    assert sorted(r["id"] for r in zw.json("ls")) == sorted(ids.values())


# what two spawns of the same argv may differ in: their identity and times
_OWN_KEYS = {"id", "created_at", "updated_at", "agent_session_id", "name", "last_message"}


@pytest.mark.parametrize(
    "argv",
    [["t"], ["t", "--json"], ["t", "--json", "-m", "gpt-5", "--notify", "--priority", "2"],
     ["-"], ["-", "--json"]],
    ids=" ".join,
)  # fmt: skip
def test_a_spawn_is_clicks(zw: ZW, argv: list[str]) -> None:
    """A spawn answered by the fast path starts the same session click starts and prints
    the same: its id, or its row (the same but for its identity and times)."""
    env = {**zw.env, **zw.replay("codex_simple")}
    outs = []
    for runner in ([str(ZWARM_BIN)], [sys.executable, "-c", CLICK]):
        assert fast.parse(["spawn", *argv], env) is not None
        p = subprocess.run(
            [*runner, "spawn", *argv], input=b"t", env=env, cwd=zw.cwd, capture_output=True
        )
        assert p.returncode == 0 and p.stderr == b"", p
        outs.append(p.stdout.decode())
    if "--json" not in argv:
        assert all(re.fullmatch(r"[0-9a-f-]{36}\n", o) for o in outs), outs
        sids = [o.strip() for o in outs]
    else:
        rows = [json.loads(o) for o in outs]
        assert [{k: v for k, v in r.items() if k not in _OWN_KEYS} for r in rows] == [
            {k: v for k, v in rows[1].items() if k not in _OWN_KEYS}
        ] * 2
        sids = [r["id"] for r in rows]
    assert zw.wait(*sids).returncode == 0
    metas = [zw.meta(sid) for sid in sids]
    assert metas[0]["task"] == metas[1]["task"] == "t"
    assert {m["status"] for m in metas} == {"completed"}


@pytest.mark.parametrize("where", ["env", "cwd", "both"])
def test_the_state_dir_from_the_environment_or_cwd(
    world: tuple[ZW, dict[str, str]], where: str
) -> None:
    """ZWARM_DIR names the state dir (``--state-dir`` wins over it); without either, the
    ``.zwarm`` found from the working directory (none here: an empty listing)."""
    zw, ids = world
    env = {k: v for k, v in zw.env.items() if k != fast.STATE_DIR_ENV}
    argv = ["ls", "--json"]
    if where != "cwd":
        env[fast.STATE_DIR_ENV] = str(zw.state_dir if where == "env" else zw.tmp / "a-file")
    if where == "both":
        argv = ["--state-dir", str(zw.state_dir), *argv]
    via_fast, via_click = _both(zw, argv, env)
    assert via_fast == via_click
    rows = json.loads(via_fast[1])
    assert len(rows) == (0 if where == "cwd" else len(ids)), via_fast


DECLINED = [
    [], ["--help"], ["ls", "--help"], ["-h"], ["ls", "-h"], ["--version"], ["ls", "-w"],
    ["ls", "--watch"], ["ls", "--json", "--json"], ["ls", "--limit", "0"], ["ls", "--limit", "x"],
    ["ls", "--limit", "-1"], ["ls", "--limit"], ["ls", "--limit", "+3"], ["ls", "--limit", " 3"],
    ["ls", "--status", "bogus"], ["ls", "--status", "Running"], ["ls", "--name", "-x"],
    ["ls", "--name", ""], ["ls", "--name="], ["ls", "--", "--json"], ["ls", "extra"],
    ["ls", "--json=1"], ["ls", "--tree=yes"], ["ls", "--jso"], ["ls", "-j"],
    ["trajectory", "s"], ["trajectory", "--json"], ["trajectory", "s", "t", "--json"],
    ["trajectory", "s", "--json", "-f"], ["trajectory", "s", "--json", "--follow"],
    ["trajectory", "s", "--json", "--turn", "１"], ["trajectory", "s", "--json", "--turn", "-1"],
    ["trajectory", "s", "--json", "--turn"], ["trajectory", "s", "--json", "--full", "--full"],
    ["ls", "--json", "--state-dir", "x"], ["--state-dir", "a", "--state-dir", "b", "ls"],
    ["--state-dir", "ls"], ["--state-dir=", "ls"], ["--state-dir", "-x", "ls"],
    ["--json", "ls"], ["-x", "ls"], ["inject", "s", "x"], ["show", "s"], ["show", "--json"],
    ["show", "s", "--json", "--full"], ["logs", "s", "-f"], ["logs", "s", "--follow"],
    ["logs", "s", "--json"], ["logs"], ["logs", "s", "t"], ["LS"],
    ["spawn"], ["spawn", "--fix it"], ["spawn", "-", "-"], ["spawn", "a", "b"],
    ["spawn", "t", "--wait"],
    ["spawn", "t", "--help"], ["spawn", "t", "-m", "x", "--model", "y"], ["spawn", "t", "-mx"],
    ["spawn", "t", "-m=x"], ["spawn", "t", "-C"], ["spawn", "t", "-C", "-"],
    ["spawn", "t", "--worktree", "--shared"], ["spawn", "t", "--shared=1"],
    ["spawn", "t", "--adapter", "nosuchagent"], ["spawn", "t", "--adapter", "Codex"],
    ["spawn", "t", "--timeout", "1e3"], ["spawn", "t", "--timeout", "inf"],
    ["spawn", "t", "--timeout", "-1"], ["spawn", "t", "--timeout", "."],
    ["spawn", "t", "--timeout", "1.2.3"], ["spawn", "t", "--max-cost", "nan"],
    ["spawn", "t", "--priority", "-5"], ["spawn", "t", "--priority", "+5"],
    ["spawn", "t", "--max-tokens", "1_000"], ["spawn", "t", "--stall", "٣"],
    ["spawn", "t", "--context", "task"], ["spawn", "t", "--context", "Native"],
    ["spawn", "t", "--after", "a", "--after", "b"], ["spawn", "t", "--after-any=1"],
    ["spawn", "t", "--json", "--json"], ["spawn", "t", "--dangerous", "--dangerous"],
    ["spawn", "t", "-c", "x"], ["spawn", "t", "--detach"],
    ["spawn", "t", "--launcher-option", "a=1", "--launcher-option", "b=2"],
]  # fmt: skip


@pytest.mark.parametrize("argv", DECLINED, ids=[" ".join(a) or "(none)" for a in DECLINED])
def test_doubtful_argv_is_declined(argv: list[str]) -> None:
    assert fast.parse(argv, {}) is None
    assert fast.parse(argv, {fast.STATE_DIR_ENV: "/somewhere"}) is None


def test_an_empty_zwarm_dir_is_declined() -> None:
    assert fast.parse(["ls", "--json"], {fast.STATE_DIR_ENV: ""}) is None
    call = fast.parse(["--state-dir", "d", "ls", "--json"], {fast.STATE_DIR_ENV: ""})
    assert call is not None and call.state_dir == "d"


def test_accepted_argv_parses_to_the_bodys_arguments() -> None:
    call = fast.parse(["--state-dir=d", "ls", "--limit=3", "--json"], {})
    assert call is not None and (call.command, call.state_dir) == ("ls", "d")
    assert call.kwargs == {"status": None, "name": None, "adapter": None, "source": None,
                           "limit": 3, "as_json": True, "as_tree": False}  # fmt: skip
    call = fast.parse(["ls", "--status", "killed", "--name=a*", "--tree"], {"ZWARM_DIR": "e"})
    assert call is not None and call.state_dir == "e"
    assert (call.kwargs["status"], call.kwargs["name"], call.kwargs["as_tree"]) == (
        "killed", "a*", True)  # fmt: skip
    call = fast.parse(["--state-dir", "d", "ls"], {"ZWARM_DIR": "e"})
    assert call is not None and call.state_dir == "d" and call.kwargs["as_json"] is False
    assert (call := fast.parse(["ls"], {})) is not None and call.state_dir is None
    call = fast.parse(["trajectory", "--full", "3f2a", "--turn=2", "--json"], {})
    assert call is not None and call.command == "trajectory"
    assert call.kwargs == {"session": "3f2a", "turn": 2, "full": True, "as_json": True}


def _options(cmd: click.Command) -> dict[str, click.Option]:
    return {o: p for p in cmd.params if isinstance(p, click.Option) for o in p.opts}


def _negations(cmd: click.Command) -> dict[str, click.Option]:
    return {o: p for p in cmd.params if isinstance(p, click.Option) for o in p.secondary_opts}


def _command(name: str) -> click.Command:
    cmd = cli.get_command(click.Context(cli), name)  # spawn's is loaded when run
    assert cmd is not None
    return cmd


@pytest.mark.parametrize("name", [*sorted(fast.GRAMMARS), "spawn"])
def test_the_grammar_is_the_click_commands(name: str) -> None:
    """Every name the grammar takes is the click command's, for the keyword click passes it
    as: a value option one value (a multiple one, once), a flag or its negation a flag; the
    arguments are click's; a keyword's default is click's. (Spawn's grammar and its click
    options are both made from ``zwarm.cli.options``: this tests that generator.)"""
    grammar, cmd = fast.grammar(name), _command(name)
    assert grammar is not None
    options, negations = _options(cmd), _negations(cmd)
    for flag, key in grammar.flags.items():
        assert flag in options and options[flag].is_flag and options[flag].name == key, flag
    for flag, key in grammar.off.items():
        assert flag in negations and negations[flag].name == key, flag
    for opt, (_, key) in grammar.values.items():
        o = options[opt]
        assert not o.is_flag and o.nargs == 1 and o.name == key, opt
    click_args = tuple(p.name for p in cmd.params if isinstance(p, click.Argument))
    assert click_args == grammar.args
    keys = {k for _, k in grammar.values.values()} | set(grammar.flags.values())
    assert grammar.needs <= keys
    given = cmd.make_context(name, ["x"] * len(grammar.args)).params  # what click passes
    for key in keys | set(grammar.off.values()):
        want = grammar.defaults.get(key, False if key in grammar.flags.values() else None)
        got = given[key]
        assert (tuple(got) if isinstance(got, list) else got) == want, key
    if "--status" in grammar.values:
        status = options["--status"].type
        assert isinstance(status, click.Choice)
        assert tuple(status.choices) == fast.STATUSES


SPAWN_ARGV = [
    ["t"], ["--json", "a task"], ["t", "-m", "sonnet", "-C", "/tmp/x", "--name", "n1"],
    ["t", "--model=gpt-5", "--adapter", "codex", "--timeout", "1.5", "--context", "summary"],
    ["--dangerous", "t", "--notify", "--detached", "--shared", "--launcher", "local"],
    ["t", "--worktree", "--branch", "b/1", "--base", "main"], ["t", "--after", "a, b,,c"],
    ["t", "--after=x", "--after-any", "--group", "g", "--priority", "7", "--max-cost", "2"],
    ["t", "--max-tokens", "400000", "--stall", "300", "--timeout=.5", "--max-cost=3."],
    ["t", "--context=native", "--adapter=claude", "-C", "rel/dir"], [""], ["-"],
    ["t", "--launcher-option", "time=7", "--launcher=local"],
    ["--json", "-", "--name", "from-stdin"],
]  # fmt: skip


@pytest.mark.parametrize("argv", SPAWN_ARGV, ids=" ".join)
def test_spawn_parses_as_click_parses_it(argv: list[str]) -> None:
    """The keywords the fast path passes ``fast.spawn`` are exactly the ones click passes
    ``spawn`` (after its callbacks), for the same argv."""
    call = fast.parse(["spawn", *argv], {})
    assert call is not None and call.command == "spawn", argv
    ctx = _command("spawn").make_context("spawn", list(argv))
    want = {k: (tuple(v) if isinstance(v, list) else v) for k, v in ctx.params.items()}
    assert want.pop("wait_") is False
    assert call.kwargs == want


def test_the_global_state_dir_option_is_clicks() -> None:
    (option,) = [p for p in cli.params if "--state-dir" in p.opts]
    assert isinstance(option, click.Option) and option.envvar == fast.STATE_DIR_ENV
    assert not option.is_flag and option.opts == ["--state-dir"]


CLICK_MODULE = re.compile(r"\|\s*click(\.\S+)?$", re.M)
HEAVY_MODULE = re.compile(r"\|\s*(inspect|dataclasses)$", re.M)


def _imports(zw: ZW, code: str, *args: str) -> str:
    """``-X importtime``'s report of ``python -c code args`` (asserts exit 0 and output)."""
    argv = [sys.executable, "-X", "importtime", "-c", code, *args]
    res = subprocess.run(argv, env=zw.env, cwd=zw.cwd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "import time:" in res.stderr, res.stderr[-2000:]
    assert res.stdout or code == "import zwarm.cli.fast", res
    return res.stderr


@pytest.mark.perf
@pytest.mark.parametrize(
    ("entry", "template", "loads_click"),
    [
        ("run", ("ls", "--json"), False),
        ("run", ("ls",), False),
        ("run", ("trajectory", "{tools}", "--json"), False),
        ("run", ("show", "{tools}", "--json"), False),
        ("run", ("logs", "{tools}"), False),
        ("run", ("ls", "--help"), True),  # declined: click answers
        ("main", ("ls", "--json"), True),  # main never takes the fast path
    ],
)
def test_the_fast_path_imports_no_click(
    world: tuple[ZW, dict[str, str]], entry: str, template: tuple[str, ...], loads_click: bool
) -> None:
    """No click, and no ``dataclasses``, in a whole answered command. (``inspect`` is loaded
    anyway, by msgspec through typing_extensions: only ``fast`` itself is kept from it.)"""
    zw, ids = world
    report = _imports(zw, RUN.format(entry=entry), *_argv(template, zw, ids))
    assert bool(CLICK_MODULE.search(report)) is loads_click
    if not loads_click:
        assert re.search(r"\|\s*dataclasses$", report, re.M) is None


# what only signals, waits for or starts a process, or reads a config: a reading command
# never needs it (bench/README.md, "Start-up": ~3 ms); _posixsubprocess and selectors come with them
PROCESS_MODULE = re.compile(
    r"\|\s*(threading|subprocess|_posixsubprocess|signal|select|selectors|tomllib)$", re.M
)


@pytest.mark.perf
@pytest.mark.parametrize(
    "template",
    [
        ("trajectory", "{tools}", "--json"),
        ("show", "{tools}", "--json"),
        ("logs", "{tools}"),
        ("ls", "--json"),
    ],
)
def test_a_reading_command_loads_nothing_to_run_processes(
    world: tuple[ZW, dict[str, str]], template: tuple[str, ...]
) -> None:
    """With a session running in the state dir. Regressions: the /proc scan that threads
    share, made at import, loaded threading into every ``trajectory``; the local launcher,
    loaded to ask whether running sessions live, loaded subprocess (and signal, threading,
    select) into ``ls`` and ``show``."""
    zw, ids = world
    report = _imports(zw, RUN.format(entry="run"), *_argv(template, zw, ids))
    assert PROCESS_MODULE.findall(report) == []


@pytest.mark.perf
def test_a_spawn_imports_no_click(zw: ZW) -> None:
    report = _imports(zw, RUN.format(entry="run"), "spawn", "t")
    assert CLICK_MODULE.search(report) is None


@pytest.mark.perf
def test_importing_fast_loads_nothing_heavy(world: tuple[ZW, dict[str, str]]) -> None:
    report = _imports(world[0], "import zwarm.cli.fast")
    assert re.search(r"\|\s*zwarm\.cli\.fast$", report, re.M)  # the report is of the import
    assert CLICK_MODULE.search(report) is None
    assert HEAVY_MODULE.search(report) is None, HEAVY_MODULE.findall(report)
