"""What a caller asks zwarm to start: ``SpawnRequest`` (a session) and ``MessageRequest`` (its
next turn), declared once with their bounds and help.

Owns every spawn and follow-up option: its name, type, bounds, default and help text. Every
front end is built from these: ``zwarm.api.Zwarm.spawn``/``inject`` take them; the CLI's
options and its click-free grammar come from one table over their fields
(``zwarm.cli.options``); the HTTP bodies (``zwarm.serve.bodies``) and the orchestrator tools'
``delegate``/``converse`` schemas (``zwarm.orchestrator``) are generated from them by
``subset``, each front end naming the fields it offers in an explicit list. Must stay true:
- a field is spelled here only; a front end never declares an option of its own for one;
- the bounds of a number a session keeps are those ``meta.json``'s schema declares
  (``records``), or tighter; they are checked when a front end decodes a request (HTTP,
  tools) and again by ``Zwarm``, which takes a request built in Python unchecked (a Struct's
  constructor checks nothing) and refuses it with one ``Error:`` line;
- like every module that defines a Struct here, no postponed annotations (``records``).
"""

from typing import Annotated, Any, Literal, get_args, get_origin

import msgspec
from msgspec import Meta, Struct

from zwarm.model.records import (
    MAX_ATTEMPTS,
    RUN_ID,
    AttemptNo,
    Priority,
    SandboxMode,
    Seconds,
)
from zwarm.model.sets import MAX_CHECKS, MAX_PROTECT, Protected

ContextMode = Literal["summary", "native"]
CONTEXT_MODES: tuple[str, ...] = get_args(ContextMode)
Prompt = Annotated[str, Meta(min_length=1, max_length=4 << 20)]
Short = Annotated[str, Meta(min_length=1, max_length=200)]
Budget = Annotated[float, Meta(gt=0, le=1e9)]  # records.Money, and positive
Tokens = Annotated[int, Meta(ge=1, le=2**53)]  # records.Count, and positive
Setting = Annotated[str, Meta(min_length=1, max_length=1100)]  # a launcher's KEY=VALUE
CheckCommand = Annotated[str, Meta(min_length=1, max_length=4096)]
Source = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,59}$")]


def _help(text: str) -> Meta:
    return Meta(description=text)


_TIMEOUT = "Kill the turn after this many seconds (default: [defaults] timeout)."
_CONTEXT = (
    "How a follow-up gets the earlier turns: summary (a fresh run with a compact summary) or "
    "native (resume the agent's own session)"
)
_BY_CONFIG = "; default: [defaults] context."


class SpawnRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """Start a session (``zwarm spawn``, ``POST /api/sessions``, the ``delegate`` tool).
    ``None`` is "not given": the config's default applies."""

    task: Annotated[
        Prompt,
        _help(
            "The task: everything the agent needs (goal, files, constraints, how to verify, "
            "what to report back); it sees nothing else."
        ),
    ]
    adapter: Annotated[
        Short | None, _help("Agent to run: codex, claude, gemini, or a plugin's.")
    ] = None
    model: Annotated[
        Short | None,
        _help("Model; an alias like sonnet, opus or gpt-5 also picks the adapter."),
    ] = None
    cwd: Annotated[
        Annotated[str, Meta(min_length=1, max_length=4096)] | None,
        _help(
            "Working directory (default: where zwarm runs); through the tools and HTTP it "
            "must be inside [tools] allowed_roots."
        ),
    ] = None
    name: Annotated[
        Annotated[str, Meta(max_length=64)] | None,
        _help("A unique name to refer to the session by (letters, digits, '.', '_', '-')."),
    ] = None
    timeout: Annotated[Seconds | None, _help(_TIMEOUT)] = None
    context: Annotated[ContextMode | None, _help(_CONTEXT + _BY_CONFIG)] = None
    dangerous: Annotated[
        bool | None, _help("Run the agent with its sandbox/permission bypass.")
    ] = None
    sandbox: Annotated[
        SandboxMode | None,
        _help(
            "zwarm's own sandbox for its turns: off, or bwrap (writes only its worktree, "
            "reaches only its model endpoint; default: [sandbox] mode)."
        ),
    ] = None
    notify: Annotated[bool, _help("A desktop notification when the session ends.")] = False
    worktree: Annotated[
        bool | None,
        _help(
            "Run in a new git worktree and branch of the repository, so parallel agents never "
            "overwrite each other (default: [defaults] workspace)."
        ),
    ] = None
    branch: Annotated[
        Short | None, _help("The worktree's new branch (default zwarm/<name or id>).")
    ] = None
    base: Annotated[Short | None, _help("What the worktree starts from (default: HEAD).")] = None
    host: Annotated[
        Annotated[str, Meta(pattern=r"^[a-z][a-z0-9_-]{0,63}\Z")] | None,
        _help(
            "The host its turns run on ([hosts.NAME]; the agent runs there over ssh, cwd is "
            "on the host; default: [defaults] host)."
        ),
    ] = None
    launcher: Annotated[
        Short | None,
        _help(
            "What runs its turns: local, slurm (each turn a job) or ssh (see host; default: "
            "[launcher] default)."
        ),
    ] = None
    launcher_option: Annotated[
        Annotated[tuple[Setting, ...], Meta(max_length=32)],
        _help(
            "KEY=VALUE: a setting of the launcher's table for this session (slurm: partition, "
            "time, ...; the free keys its launcher takes per session)."
        ),
    ] = ()
    detached: Annotated[
        bool,
        _help("Started by an agent: not killed or removed with its parent session."),
    ] = False
    after: Annotated[
        Annotated[tuple[Short, ...], Meta(max_length=100)],
        _help(
            "Start once these sessions have finished (all completed, else it fails without "
            "starting)."
        ),
    ] = ()
    after_any: Annotated[bool, _help("With after: start whatever their outcome.")] = False
    group: Annotated[
        Annotated[str, Meta(max_length=64)] | None,
        _help("Its group: [groups.NAME] caps and budgets apply (it must be declared)."),
    ] = None
    priority: Annotated[Priority, _help("Higher starts first when queued (default 0).")] = 0
    account: Annotated[
        Annotated[str, Meta(max_length=64)] | None,
        _help(
            "The account of its agent its turns run on ([accounts.<agent>.NAME]; default: the "
            "first by priority with headroom)."
        ),
    ] = None
    max_cost: Annotated[
        Budget | None,
        _help(
            "Budget in USD: past it the session is stopped (default: its group's, else [limits] "
            "max_cost)."
        ),
    ] = None
    max_tokens: Annotated[
        Tokens | None,
        _help(
            "Budget in tokens: past it the session is stopped (default: its group's, else "
            "[limits] max_tokens)."
        ),
    ] = None
    stall: Annotated[
        Seconds | None,
        _help("Mark it stalled after this many silent seconds (default: [limits] stall_s)."),
    ] = None
    source: Annotated[Source, _help("Who started it (shown by zwarm ls --source).")] = "cli"
    run: Annotated[
        Annotated[str, Meta(pattern=RUN_ID)] | None,
        _help("The orchestrator run starting it (a root of its own)."),
    ] = None
    # ------------------------------------------------------------ best-of sets (zwarm.ops.bestof)
    best_of: Annotated[
        AttemptNo | None,
        _help(
            "Run the task as N attempts, each in its own worktree from the same base, as a "
            "set: zwarm runs the checks when each turn ends; compare ranks them, pick merges one."
        ),
    ] = None
    agents: Annotated[
        Annotated[tuple[Short, ...], Meta(max_length=MAX_ATTEMPTS)],
        _help("With `best_of`: the attempts' agents, round-robin (with `models`: paired)."),
    ] = ()
    models: Annotated[
        Annotated[tuple[Short, ...], Meta(max_length=MAX_ATTEMPTS)],
        _help("With `best_of`: the attempts' models, round-robin (with `agents`: paired)."),
    ] = ()
    check: Annotated[
        Annotated[tuple[CheckCommand, ...], Meta(max_length=MAX_CHECKS)],
        _help(
            "With `best_of`: a command that decides (e.g. 'pytest -q'), run by zwarm in each "
            "attempt's worktree when its turn ends, sandboxed where it can be."
        ),
    ] = ()
    check_timeout: Annotated[
        Seconds | None,
        _help("With `best_of`: each check is killed after this many seconds (default 600)."),
    ] = None
    protect: Annotated[
        Annotated[tuple[Protected, ...], Meta(max_length=MAX_PROTECT)],
        _help(
            "With `best_of`: a path the checks read (tests, their config), restored from the "
            "base before the checks run; an attempt that changed one is flagged."
        ),
    ] = ()
    set_budget: Annotated[
        Budget | None,
        _help("With `best_of`: USD for the whole set, each attempt's budget its equal share."),
    ] = None


class MessageRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """Continue a session (``zwarm inject``, ``POST /api/sessions/{ref}/messages``, the
    ``converse`` tool): its next turn, queued if one runs."""

    message: Annotated[Prompt, _help("The follow-up instruction or question.")]
    context: Annotated[
        ContextMode | None, _help(_CONTEXT + "; default: the session's own mode.")
    ] = None
    timeout: Annotated[
        Seconds | None,
        _help(
            "Kill this turn after this many seconds (default: the session's own limit, given "
            "when it was started)."
        ),
    ] = None


# ---------------------------------------------------------------------- what front ends read
def field_help(cls: type[Struct]) -> dict[str, str]:
    """Each field's help text, by field name."""
    return {f.name: description(f.type) for f in msgspec.structs.fields(cls)}


def description(typ: Any) -> str:
    """The help text of a field's type (``msgspec.structs.fields``)."""
    for meta in getattr(typ, "__metadata__", ()):
        if isinstance(meta, Meta) and meta.description:
            return meta.description
    return ""


def bare_type(typ: Any) -> Any:
    """A field's type (``msgspec.structs.fields``) without its bounds, help or ``None``:
    ``str``, ``float``, ``int``, ``bool``, a ``Literal`` or a ``tuple``."""
    while True:
        if get_origin(typ) is Annotated:
            typ = get_args(typ)[0]
            continue
        args = [a for a in get_args(typ) if a is not type(None)]
        if get_origin(typ) is not Literal and len(args) == 1 and type(None) in get_args(typ):
            typ = args[0]  # X | None
            continue
        return typ


def subset(
    cls: type[Struct], name: str, fields: tuple[str, ...], defaults: dict[str, Any] | None = None
) -> type[Struct]:
    """A Struct named ``name`` with only ``cls``'s ``fields`` (their types, bounds and help;
    ``defaults`` overriding theirs): what one front end accepts, and its JSON schema. Decoded,
    it becomes ``cls`` with ``to_request``."""
    by_name = {f.name: f for f in msgspec.structs.fields(cls)}
    unknown = set(fields) - set(by_name)
    if unknown:
        raise ValueError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    spec: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for key in fields:
        f = by_name[key]
        if defaults and key in defaults:
            spec.append((key, f.type, defaults[key]))
        elif f.required:
            spec.append((key, f.type))
        else:
            spec.append((key, f.type, f.default))
    made = msgspec.defstruct(name, spec, kw_only=True, forbid_unknown_fields=True)
    made.__doc__ = cls.__doc__  # its JSON schema's description
    return made


def to_request(cls: type[Struct], body: Struct, **fixed: Any) -> Any:
    """The ``cls`` request a decoded ``subset`` body asks for, with the fields its front end
    sets itself (``fixed``)."""
    return cls(**msgspec.structs.asdict(body), **fixed)


def object_schema(cls: type[Struct]) -> dict[str, Any]:
    """``cls``'s JSON schema as one flat object (no references; an optional field's ``null``
    left out, as a tool's argument given as null counts as absent), for LLM tool schemas."""
    top = msgspec.json.schema(cls)
    body = top["$defs"][cls.__name__]
    props: dict[str, Any] = {}
    for key, spec in body["properties"].items():
        spec = {k: v for k, v in spec.items() if k not in ("default", "title")}
        options = [o for o in spec.pop("anyOf", []) if o != {"type": "null"}]
        if len(options) == 1:
            spec = {**options[0], **spec}
        elif options:
            spec["anyOf"] = options
        if "enum" in spec and all(isinstance(v, str) for v in spec["enum"]):
            spec.setdefault("type", "string")
        props[key] = spec
    return {
        "type": "object",
        "properties": props,
        "required": list(body.get("required", [])),
        "additionalProperties": False,
    }
