"""The commands an orchestrator runs again and again, answered without click.

Owns the bodies of ``zwarm ls`` (but ``--watch``), ``trajectory SESSION --json`` and ``logs
SESSION`` (but ``-f``), ``show SESSION --json`` and ``spawn TASK`` (but ``--wait``), which
the click commands call too, and a strict argv grammar for them (``parse``; ``spawn``'s made
from the CLI's table of its options, ``zwarm.cli.options``, as click's are: never a second
copy), so that ``zwarm.cli.run`` can answer them before click is imported: click, and the
modules only it loads, cost ~20 ms, a fifth of a warm ``ls --json`` over 1,000 sessions and
of a spawn. Must stay true:
- the grammar accepts a subset of what the click CLI accepts (the same option names, values
  checked as click checks them) and, for it, the answer is the click CLI's exactly: the same
  stdout, stderr and exit status, because both run the same bodies and print through
  ``zwarm.cli.output``. Anything else (``--help``, an unknown or repeated option, ``--``, a
  value that is empty or starts with ``-``, ``-w``/``-f``, a number that is not plain
  digits, an agent that is not installed) is declined (None) and goes to click unchanged:
  this module never reports a usage error itself;
- it imports no click and nothing heavy at import time (no dataclasses: they import inspect).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from zwarm.cli import output

if TYPE_CHECKING:
    from zwarm.api import Zwarm

# what --status accepts: model.status.ROW_STATUSES, spelled out as importing zwarm.model would
# load msgspec on the fast path (tests/model/test_status_groups.py pins them equal)
STATUSES = ("running", "stalled", "queued", "parked", "completed", "failed", "killed", "damaged")
STATE_DIR_ENV = "ZWARM_DIR"  # what click's --state-dir reads when it is not given


def _any(value: str) -> str:
    return value


def _int(value: str) -> int | None:
    return int(value) if value.isascii() and value.isdigit() else None


def _positive(value: str) -> int | None:
    n = _int(value)
    return n if n is not None and n >= 1 else None


def _status(value: str) -> str | None:
    return value if value in STATUSES else None


def _float(value: str) -> float | None:
    """A plain decimal (ASCII digits, at most one point); signs, exponents, ``inf``, spaces
    are click's to read."""
    whole, _, frac = value.partition(".")
    digits = whole + frac
    return float(value) if digits.isascii() and digits.isdigit() else None


def _agent(value: str) -> str | None:
    """An installed agent's name (as ``--adapter`` checks it); another is click's to report."""
    from zwarm import agents

    try:
        agents.get(value)
    except ValueError:
        return None
    return value


Check = Callable[[str], Any]  # a value as click converts it, None if click might not accept it


class Grammar:
    """One command's accepted argv: options taking a value (by name: how it is checked, and
    the keyword it is passed as; a short name and a long one may share a keyword), flags
    (name: keyword, set True), their negations (``--shared``: keyword, set False),
    positional arguments, the keywords it needs (a command without them is click's) and the
    defaults that are not None (values) or False (flags), as click passes them. Each keyword
    is given at most once. A plain class: a NamedTuple or a dataclass costs this module's
    start-up milliseconds."""

    __slots__ = ("args", "defaults", "flags", "needs", "off", "values")

    def __init__(
        self,
        values: dict[str, tuple[Check, str]],
        flags: dict[str, str],
        args: tuple[str, ...] = (),
        needs: frozenset[str] = frozenset(),
        off: dict[str, str] | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        self.values, self.flags, self.args, self.needs = values, flags, args, needs
        self.off, self.defaults = off or {}, defaults or {}

    def keyword(self, name: str) -> str | None:
        """The keyword option ``name`` sets, None if it is not one of this command's."""
        if name in self.values:
            return self.values[name][1]
        return self.flags.get(name) or self.off.get(name)


GRAMMARS = {
    "ls": Grammar(
        values={
            "--status": (_status, "status"),
            "--name": (_any, "name"),
            "--adapter": (_any, "adapter"),
            "--source": (_any, "source"),
            "--limit": (_positive, "limit"),
        },
        flags={"--json": "as_json", "--tree": "as_tree"},
    ),
    "trajectory": Grammar(
        values={"--turn": (_int, "turn")},
        flags={"--json": "as_json", "--full": "full"},
        args=("session",),
        needs=frozenset({"as_json"}),
    ),
    "show": Grammar(
        values={}, flags={"--json": "as_json"}, args=("session",), needs=frozenset({"as_json"})
    ),
    "logs": Grammar(values={"--turn": (_int, "turn")}, flags={}, args=("session",)),
}


def grammar(command: str) -> Grammar | None:
    """``command``'s grammar: a reading command's from ``GRAMMARS``; ``spawn``'s made from
    the CLI's one table of its options (``zwarm.cli.options``, what click's are made from
    too), when a spawn is parsed (it loads the request's module, which a spawn needs anyway);
    None for any other command."""
    if command in GRAMMARS:
        return GRAMMARS[command]
    if command != "spawn":
        return None
    from zwarm.cli.options import described

    values: dict[str, tuple[Check, str]] = {}
    flags, off, defaults = {"--json": "as_json"}, {}, {}
    for d in described(command):
        if d.kind in ("flag", "pair"):
            on, _, no = d.decls[0].partition("/")
            flags[on] = d.field
            if no:
                off[no] = d.field
        else:
            values.update((name, (_check(d.kind, d.choices), d.field)) for name in d.decls)
        if d.default is not (False if d.kind in ("flag", "pair") else None):
            defaults[d.field] = d.default  # what click passes when the option is not given
    return Grammar(values, flags, args=("task",), off=off, defaults=defaults)


def _check(kind: str, choices: tuple[str, ...]) -> Check:
    """How the fast path reads a value of ``kind`` (``options.Described``)."""
    if kind == "choice":
        return lambda value: value if value in choices else None
    if kind == "multiple":  # given once (a repeated option is click's): click's tuple of it
        return lambda value: (value,)
    return _KINDS[kind]


_KINDS: dict[str, Check] = {"text": _any, "float": _float, "int": _int, "agent": _agent}


class Call:
    """A parsed command line: the command, the state dir it names (None: found from the
    working directory), and the command's keyword arguments."""

    __slots__ = ("command", "kwargs", "state_dir")

    def __init__(self, command: str, state_dir: str | None, kwargs: dict[str, Any]) -> None:
        self.command, self.state_dir, self.kwargs = command, state_dir, kwargs


def parse(argv: list[str], environ: Mapping[str, str]) -> Call | None:
    """``argv`` (without the program name) as a ``Call``, or None if it is not exactly one
    of the accepted forms (see the module docstring)."""
    state_dir, i = None, 0
    while i < len(argv) and argv[i].startswith("-"):
        got = _value(argv, i, "--state-dir")
        if got is None or state_dir is not None:
            return None
        state_dir, i = got
    command = grammar(argv[i]) if i < len(argv) else None
    if command is None:
        return None
    kwargs = _command_args(command, argv[i + 1 :])
    if kwargs is None:
        return None
    if state_dir is None and STATE_DIR_ENV in environ:
        state_dir = environ[STATE_DIR_ENV] or None
        if state_dir is None:  # set but empty: how click reads it is click's business
            return None
    return Call(argv[i], state_dir, kwargs)


def _name(arg: str) -> str:
    """The option an argument names: ``--name`` of ``--name=value``; a short one whole (click
    reads ``-mx`` and ``-m=x`` as ``-m`` with the value ``x`` or ``=x``: not ours)."""
    return arg.partition("=")[0] if arg.startswith("--") else arg


def _value(argv: list[str], i: int, name: str) -> tuple[str, int] | None:
    """The value of option ``name`` at ``argv[i]`` (``--name=value``, ``--name value``, ``-n
    value``) and the index after it; None if ``argv[i]`` is another option or the value is
    doubtful."""
    opt, eq, value = argv[i].partition("=") if name.startswith("--") else (argv[i], "", "")
    if opt != name:
        return None
    if not eq:
        if i + 1 >= len(argv):
            return None
        value, i = argv[i + 1], i + 1
    if not value or value.startswith("-"):
        return None
    return value, i + 1


def _command_args(grammar: Grammar, argv: list[str]) -> dict[str, Any] | None:
    """The keyword arguments ``argv`` (after the command's name) gives the command's body, or
    None if ``argv`` is not exactly in ``grammar``."""
    kwargs: dict[str, Any] = {k: None for _, k in grammar.values.values()}
    kwargs |= {k: False for k in grammar.flags.values()} | grammar.defaults
    seen: set[str] = set()
    args: list[str] = []
    i = 0
    while i < len(argv):
        if not argv[i].startswith("-") or argv[i] == "-":  # ``-``: an argument, as for click
            args.append(argv[i])
            i += 1
            continue
        key = grammar.keyword(_name(argv[i]))
        if key is None or key in seen:
            return None
        seen.add(key)
        i = _option(grammar, argv, i, kwargs)
        if i < 0:
            return None
    if len(args) != len(grammar.args) or not grammar.needs <= seen:
        return None
    return kwargs | dict(zip(grammar.args, args, strict=True))


def _option(grammar: Grammar, argv: list[str], i: int, kwargs: dict[str, Any]) -> int:
    """Put the flag or option at ``argv[i]`` into ``kwargs``: the index after it, -1 if it is
    not one of ``grammar``'s or its value is doubtful."""
    if argv[i] in grammar.flags:
        kwargs[grammar.flags[argv[i]]] = True
        return i + 1
    if argv[i] in grammar.off:
        kwargs[grammar.off[argv[i]]] = False
        return i + 1
    name = _name(argv[i])
    if name not in grammar.values:
        return -1
    got = _value(argv, i, name)
    check, key = grammar.values[name]
    value = check(got[0]) if got is not None else None
    if got is None or value is None:
        return -1
    kwargs[key] = value
    return got[1]


def answer(argv: list[str], environ: Mapping[str, str]) -> int | None:
    """Answer ``argv`` if it is one of the accepted forms: its exit status; None if it is
    not (click's to answer). Errors end as the click CLI ends them (``output.ending``)."""
    call = parse(argv, environ)
    if call is None:
        return None
    from zwarm.errors import ZwarmError

    try:
        if call.command == "ls":
            output.one_shot()
        return _BODIES[call.command](open_api(call.state_dir), **call.kwargs)
    except (KeyboardInterrupt, ZwarmError, OSError, MemoryError) as e:
        end = output.ending(e)
        if end is None:
            raise
        line, code = end
        if line is not None:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        return code


def open_api(state_dir: str | os.PathLike[str] | None) -> Zwarm:
    """The ``Zwarm`` of a command invocation, on ``state_dir`` (None: found from the working
    directory); its warnings go to stderr (``output.warn``), and so does its progress
    (``output.note``: no "warning:")."""
    from pathlib import Path

    from zwarm.api import Zwarm
    from zwarm.env import Env

    api = Zwarm(env=Env(state_dir=Path(state_dir) if state_dir is not None else None))
    api.on_warning = output.warn
    api.on_progress = output.note
    return api


def ls(api: Zwarm, status: str | None = None, name: str | None = None,
       adapter: str | None = None, source: str | None = None, limit: int | None = None,
       as_json: bool = False, as_tree: bool = False) -> int:  # fmt: skip
    """``zwarm ls`` but ``--watch``: the rows as JSON, the delegation trees, or the table."""
    from zwarm.ops.listing import EncodedRow, select_rows

    rows = api.sessions(status, encoded=as_json and not as_tree) if api.has_sessions() else []
    rows = select_rows(rows, name, adapter, source, limit)
    if as_tree:
        from zwarm.cli import tree

        runs = tree.run_parts(api.state_dir, rows)
        if as_json:
            output.emit_json(tree.tree_json(rows, runs))
            return 0
    if as_json:
        output.emit_json([r.raw if type(r) is EncodedRow else r for r in rows])
        return 0
    from zwarm.cli import render
    from zwarm.text import terminal_width

    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    if as_tree:
        tree.tree_table(rows, api.env.clock(), color=color, width=terminal_width(), runs=runs)
        return 0
    render.session_table(rows, api.env.clock(), color=color, width=terminal_width())
    return 0


def trajectory_json(api: Zwarm, session: str, turn: int | None = None, full: bool = False,
                    as_json: bool = True) -> int:  # fmt: skip
    """``zwarm trajectory SESSION --json`` but ``-f``: the steps as one JSON array, streamed;
    what could not be read follows on stderr (exit status 1). ``full`` changes nothing in
    JSON (nothing is shortened there)."""
    from zwarm.agents import jsonl

    steps = api.trajectory(session, turn)
    with jsonl.raw_strings():  # big strings copied as the agent wrote them
        output.stream_json_array(steps)
    if steps.problems:
        output.problem_lines(steps.problems)
        return 1
    return 0


def show_json(api: Zwarm, session: str, as_json: bool = True) -> int:
    """``zwarm show SESSION --json``: the session and every turn in full, one JSON line."""
    output.emit_json(api.show(session))
    return 0


def logs(api: Zwarm, session: str, turn: int | None = None, follow: bool = False) -> int:
    """``zwarm logs``: a turn's raw log, copied byte for byte when piped, control characters
    removed on a terminal; what could not be read follows on stderr (exit status 1)."""
    out = sys.stdout.buffer
    chunks = api.logs(session, turn, follow)
    cleaner = None
    if sys.stdout.isatty():
        from zwarm.text import ByteCleaner

        cleaner = ByteCleaner()
    for chunk in chunks:
        out.write(cleaner.feed(chunk) if cleaner else chunk)
        out.flush()
    if cleaner:
        out.write(cleaner.feed(b"", final=True))
    if chunks.problems:
        output.problem_lines(chunks.problems)
        return 1
    return 0


def spawn(api: Zwarm, task: str, as_json: bool = False, **opts: Any) -> int:
    """``zwarm spawn TASK`` but ``--wait``: start the session (``task``: the prompt, ``-``
    for stdin), print what ``started`` prints. ``opts``: the CLI's ``SpawnRequest`` fields
    (``zwarm.cli.options.SPAWN``)."""
    if opts.get("best_of") is not None:
        return best_of(api, task, as_json, opts)
    s = api.spawn(spawn_request(task, opts))
    started(api, s.id, as_json)
    return spawned(api, s)


def best_of(api: Zwarm, task: str, as_json: bool, opts: dict[str, Any]) -> int:
    """``zwarm spawn --best-of N``: start the set; print its id (stdout), where its checks
    run and each attempt (stderr), or its view as JSON."""
    v = api.best_of(spawn_request(task, opts))
    if as_json:
        output.emit_json(v)
        return 0
    if v["checks"]:
        where = "sandboxed" if v["checks_sandboxed"] else "UNSANDBOXED (you opted in here)"
        output.note(f"checks run {where} in each attempt's worktree when its turn ends")
    for a in sorted(v["attempts"], key=lambda a: a["attempt"]):
        shown = a["adapter"] + (f" {a['model']}" if a["model"] else "")
        output.note(f"attempt {a['attempt']}: {a['session']} ({shown}, {a['status']})")
    sys.stdout.write(v["set"] + "\n")
    sys.stdout.flush()
    return 0


def spawn_request(task: str, opts: dict[str, Any]) -> Any:
    """The ``SpawnRequest`` of a ``zwarm spawn`` command line (its task read if ``-``)."""
    from zwarm.model.requests import SpawnRequest

    return SpawnRequest(task=read_task(task), **opts)


def spawned(api: Zwarm, s: Any) -> int:
    """What a spawn says besides the id, on stderr (stdout stays the id or the row, for
    scripts), and its exit status: a queued session's place and what it waits for (0); a
    session that can never start (an ``--after`` session already failed: it ended at once)
    why, as an error (1)."""
    from zwarm.model import Status

    if s.status is Status.RUNNING:
        return 0
    s = api.get(s.id)  # the scheduler's pass may have moved it since
    t = s.current
    if s.status is Status.QUEUED and t is not None:
        place = api.queue_place(s.id).get("queue_position")
        output.note(f"queued #{place}: {t.wait or 'waiting to start'}")
    elif s.status.finished and s.status is not Status.COMPLETED:
        output.note(f"Error: session {s.id} will not run: {s.error or s.status.value}")
        return 1
    return 0


def read_task(task: str) -> str:
    """``task`` itself, or stdin (UTF-8) when it is ``-``; one clear error if it is not text."""
    if task != "-":
        return task
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        from zwarm.errors import InvalidInput

        raise InvalidInput(f"the prompt on stdin is not valid UTF-8 (byte {e.start})") from None


def started(api: Zwarm, sid: str, as_json: bool) -> None:
    """What a start without ``--wait`` prints (``spawn``, ``inject``): the session's id, or
    its row as JSON."""
    if as_json:
        from zwarm.api import row

        output.emit_json(row(api.get(sid)))
        return
    sys.stdout.write(sid + "\n")
    sys.stdout.flush()


_BODIES: dict[str, Callable[..., int]] = {
    "ls": ls,
    "trajectory": trajectory_json,
    "show": show_json,
    "logs": logs,
    "spawn": spawn,
}
