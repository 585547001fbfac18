"""Configuration: ``.zwarm/config.toml``, its schema, defaults and validation.

Owns every configurable key and its default. Must stay true:
- ``SCHEMA`` is the single list of zwarm's own keys; each agent's table (``[codex]``, ...) is
  the agent's ``config_schema()`` (``zwarm.agents``), added by ``schema()``: nothing here names
  an agent; ``.zwarm.example/config.toml`` documents every key of zwarm and of the agents that
  ship with it (a test checks they agree);
- an invalid file (TOML syntax, unknown key, wrong type or value) raises ``ConfigError`` naming
  the file and the problem, before anything is created; zwarm 3.x's tables and keys
  (``zwarm.legacy``) are not unknown: taken out unapplied, named in ``Config.legacy``;
- loading uses only ``tomllib``; ``tomli_w`` is imported only when writing.
"""

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from zwarm.agents import DEFAULT_AGENT
from zwarm.errors import ConfigError

if TYPE_CHECKING:
    from zwarm.trust import ConfigSource

# key -> (expected python type(s), default). Tables with free-form keys use dict.
SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], Any]]] = {
    "defaults": {
        "adapter": ((str,), DEFAULT_AGENT),
        "model": ((str,), ""),
        "context": ((str,), "summary"),
        "timeout": ((int, float), 0),
        "workspace": ((str,), "shared"),
    },
    "workspace": {
        "root": ((str,), ""),
        "setup": ((list,), []),
        "copy": ((list,), []),
        "link": ((list,), []),
    },
    "summary": {
        "budget_chars": ((int,), 24000),
        "full_turns": ((int,), 2),
    },
    "tools": {
        "allowed_roots": ((list,), ["."]),
        "max_wait_s": ((int, float), 45),
        "trajectory_chars": ((int,), 12000),
        "diff_chars": ((int,), 12000),
    },
    "orchestrator": {
        "base_url": ((str,), ""),
        "model": ((str,), ""),
        "api_key_env": ((str,), "OPENAI_API_KEY"),
        "max_steps": ((int,), 60),
        "max_tokens": ((int,), 0),
        "max_cost_usd": ((int, float), 0),
        "bash_timeout_s": ((int, float), 60),
        "prices": ((dict,), {}),
        # the run's context (zwarm.orchestrator.compaction): 0 = known by model
        "context_window": ((int,), 0),
        "compact_at": ((int, float), 0.7),  # fraction of context_window; 0 = never compact
        "compact_model": ((str,), ""),  # "" = the orchestrator's own model
        "compact_keep": ((int,), 10),  # latest messages kept verbatim
        # transient endpoint errors (zwarm.orchestrator.chat)
        "max_attempts": ((int,), 5),
        "retry_backoff_s": ((int, float), 1.0),
    },
    # fleet control (zwarm.engine.scheduler, zwarm.engine.limits); 0 = no limit
    "limits": {
        "max_running": ((int,), 0),  # sessions running at once in this state dir
        "max_cost": ((int, float), 0),  # default budget of a session, USD
        "max_tokens": ((int,), 0),  # default budget of a session, total tokens
        "max_cost_per_day": ((int, float), 0),  # new sessions queue once today's spend is this
        "stall_s": ((int, float), 0),  # a turn whose agent writes nothing this long is stalled
        "on_stall": ((str,), "mark"),  # "mark": show it stalled; "kill": stop it, failed
        "on_usage_limit": ((str,), "fail"),  # "wait": park it until the limit resets
        "max_auto_resumes": ((int,), 3),  # times a parked session is resumed by itself
        "resume_backoff_s": ((int, float), 60),  # first wait when the agent gives no reset time
        "max_spawn_depth": ((int,), 3),  # delegation: deepest session (a root is 1); 0 = any
    },
    # [groups.NAME]: max_running, max_cost, max_tokens for the sessions spawned --group NAME
    "groups": {},
    # commands run when a session ends (zwarm.runtime.hooks): "" = none; a string runs with
    # /bin/sh -c, a list is an argv
    "hooks": {
        "on_finish": ((str, list), ""),
        "on_fail": ((str, list), ""),
        "timeout_s": ((int, float), 30),
    },
    # what runs a new session's turns (zwarm.runtime: an entry point of zwarm.launchers)
    "launcher": {
        "default": ((str,), "local"),
    },
    # the slurm launcher (zwarm.runtime.slurm): one batch job per turn; "" / 0 = Slurm's default
    "slurm": {
        "partition": ((str,), ""),
        "account": ((str,), ""),
        "qos": ((str,), ""),
        "time": ((str,), ""),  # per-turn wall limit (Slurm's format); --timeout also sets it
        "cpus": ((int,), 0),  # --cpus-per-task
        "mem": ((str,), ""),  # --mem, e.g. "4G"
        "extra_args": ((list,), []),  # more sbatch arguments
        "env": ((list,), []),  # names of variables exported to the job (never their values)
        "python": ((str,), ""),  # the interpreter with zwarm on the nodes; "" = this one
    },
}


def _stored() -> dict[tuple[str, str], Any]:
    from zwarm.model.records import Count, Money, Seconds

    return {
        ("defaults", "timeout"): Seconds,
        ("limits", "max_cost"): Money,
        ("limits", "max_tokens"): Count,
        ("limits", "stall_s"): Seconds,
        ("groups", "max_cost"): Money,
        ("groups", "max_tokens"): Count,
    }


# the keys whose value a new session keeps in meta.json (``limits.settle``), by its schema type
STORED = _stored()

CHOICES = {
    ("defaults", "context"): ("summary", "native"),
    ("defaults", "workspace"): ("shared", "worktree"),
    ("limits", "on_stall"): ("mark", "kill"),
    ("limits", "on_usage_limit"): ("fail", "wait"),
}

_PRICE_KEYS = ("input", "cached_input", "output")
_HOOKS = ("on_finish", "on_fail")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: "$" allows a trailing newline


class Config(msgspec.Struct, frozen=True):
    """A validated configuration. ``data[table][key]`` always exists (defaults filled in).

    ``get``, ``command`` and the mapping ``table`` returns hand out a security-relevant value
    that differs from the default only if the user trusted the file as read (``source``; else
    ``UntrustedConfig``, see ``zwarm.trust``), checked when the value is read; ``data`` itself
    is unchecked.
    """

    data: dict[str, dict[str, Any]]
    path: str | None = None
    source: "ConfigSource | None" = None  # neither compared nor shown (__eq__, __repr__)
    legacy: tuple[str, ...] = ()  # zwarm 3.x settings the file has, ignored (zwarm.legacy)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and (self.data, self.path) == (other.data, other.path)

    def __repr__(self) -> str:
        return f"Config(data={self.data!r}, path={self.path!r})"

    def get(self, table: str, key: str) -> Any:
        if self.source is not None:
            self.source.require(table, (key,))
        return self.data[table][key]

    def table(self, table: str) -> Mapping[str, Any]:
        values = self.data[table]
        return values if self.source is None else self.source.view(table, values)

    def command(self, adapter: str) -> list[str]:
        cmd = self.get(adapter, "command")
        return [cmd] if isinstance(cmd, str) else list(cmd)

    def require(self, table: str) -> None:
        """``UntrustedConfig`` now if any value of ``table`` needs trust: for a command that
        will use the whole table later, elsewhere (an agent's, in its supervisor)."""
        if self.source is not None:
            self.source.require(table, self.data[table])


Spec = tuple[tuple[type, ...], Any]  # (accepted types, default)


def schema() -> dict[str, dict[str, Spec]]:
    """Every table and key: zwarm's own (``SCHEMA``) and one table per installed agent."""
    from zwarm import agents

    out = dict(SCHEMA)
    for name in agents.names():
        keys = agents.get(name).config_schema()
        out[name] = {key: (s.types, s.default) for key, s in keys.items()}
    return out


def _choices(table: str, key: str) -> tuple[Any, ...]:
    from zwarm import agents

    if (table, key) == ("defaults", "adapter"):
        return agents.names()
    if table in SCHEMA:
        return CHOICES.get((table, key), ())
    setting = agents.get(table).config_schema().get(key)
    return setting.choices if setting is not None else ()


def defaults() -> Config:
    return Config(_defaults(schema()))


def _defaults(tables: dict[str, dict[str, Spec]]) -> dict[str, dict[str, Any]]:
    return {t: {k: _copy(v[1]) for k, v in keys.items()} for t, keys in tables.items()}


def _copy(v: Any) -> Any:
    if isinstance(v, dict):
        return dict(v)
    if isinstance(v, list):
        return list(v)
    return v


# ---------------------------------------------------------------------------- trust
# In an agent's table ([codex], [claude], a plugin's) every key decides what runs, with which
# environment or sandbox (command, env, extra_args, config, sandbox, permission_mode,
# dangerous, and any key a plugin adds) except these: default-deny, so a plugin's new key is
# protected without declaring anything.
AGENT_HARMLESS_KEYS = frozenset({"model", "prices", "max_running"})
# In zwarm's own tables: where the orchestrator sends its prompts (and which API key with
# them), which directories an orchestrator LLM may start agents in, and for worktrees: where
# zwarm makes (and deletes) them, the commands run in each, and the files copied into an
# agent's reach.
SECURITY_KEYS = frozenset(
    {
        ("orchestrator", "base_url"),
        ("orchestrator", "api_key_env"),
        ("tools", "allowed_roots"),
        ("workspace", "root"),
        ("workspace", "setup"),
        ("workspace", "copy"),
        ("workspace", "link"),
        ("hooks", "on_finish"),  # commands zwarm runs when a session ends
        ("hooks", "on_fail"),
        ("launcher", "default"),  # where every new session's agent runs
        ("slurm", "python"),  # what runs on the compute nodes
        ("slurm", "extra_args"),
        ("slurm", "env"),  # which of your variables leave for the cluster
        ("slurm", "account"),  # whose allocation pays
    }
)


def is_security_key(table: str, key: str) -> bool:
    if table in SCHEMA:  # zwarm's own tables; every other table is an agent's
        return (table, key) in SECURITY_KEYS
    return key not in AGENT_HARMLESS_KEYS


def security_settings(
    data: Mapping[str, Mapping[str, Any]], default: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """``{"table.key": value}`` of the security-relevant values that differ from the default."""
    out: dict[str, Any] = {}
    for table, values in data.items():
        base = default.get(table, {})
        for key, value in values.items():
            if is_security_key(table, key) and not _same(key, value, base.get(key)):
                out[f"{table}.{key}"] = value
    return out


def _same(key: str, value: Any, default: Any) -> bool:
    if key == "command" and isinstance(value, str):
        value = [value]  # command = "codex" is the default spelled as a string
    return bool(value == default and type(value) is type(default))


MAX_CONFIG_BYTES = 1 << 20


def load(path: Path, environ: Mapping[str, str] | None = None) -> Config:
    """Load and validate ``path``; a missing file gives the defaults. ``environ`` locates the
    trust file (default ``os.environ``); it is read only if a security-relevant value is used."""
    from zwarm.store.files import read_file

    try:
        raw, _ = read_file(path, MAX_CONFIG_BYTES, follow=True)  # a FIFO: refused, never a hang
    except FileNotFoundError:
        return defaults()
    except OSError as e:
        raise ConfigError(str(path), f"cannot read: {e.strerror}") from None
    import tomllib  # here: a state dir without a config file never loads it (~2 ms)

    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(str(path), f"invalid TOML: {e}") from None
    from zwarm import legacy
    from zwarm.trust import ConfigSource

    tables = schema()  # once: each agent's table is asked of the agent
    old = tuple(legacy.split(doc, tables))  # never applied: the caller warns
    data = validate(doc, str(path), tables)
    settings = security_settings(data, _defaults(tables))
    return Config(data, str(path), ConfigSource.of(path, raw, settings, environ), old)


def validate(
    doc: dict[str, Any], where: str, tables: dict[str, dict[str, Spec]] | None = None
) -> dict[str, dict[str, Any]]:
    """``doc`` checked against ``tables`` (default ``schema()``) and merged over the defaults."""
    tables = schema() if tables is None else tables
    out = _defaults(tables)
    for table, values in doc.items():
        if table not in out:
            raise ConfigError(where, f"unknown table [{table}] (not zwarm's, nor an agent's)")
        if not isinstance(values, dict):
            raise ConfigError(where, f"[{table}] must be a table")
        for key, value in values.items():
            out[table][key] = _check(table, key, value, where, tables)
    return out


def _check(table: str, key: str, value: Any, where: str, tables: dict[str, dict[str, Spec]]) -> Any:
    if table == "groups":
        return _check_group(key, value, where)
    spec = tables[table].get(key)
    if spec is None:
        raise ConfigError(where, f"unknown key {key!r} in [{table}]")
    types = spec[0]
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        names = " or ".join(_type_name(t) for t in types)
        raise ConfigError(where, f"{table}.{key} must be {names}, not {_type_name(type(value))}")
    choices = _choices(table, key)
    if choices and value not in choices:
        raise ConfigError(where, f"{table}.{key} must be one of {', '.join(choices)}")
    _check_shape(table, key, value, where)
    return value


def _check_shape(table: str, key: str, value: Any, where: str) -> None:
    name = f"{table}.{key}"
    if key in ("command", "extra_args", "allowed_roots", *_HOOKS) and isinstance(value, list):
        if not all(isinstance(x, str) for x in value):
            raise ConfigError(where, f"{name} must be a list of strings")
        if key == "command" and not value:
            raise ConfigError(where, f"{name} must not be empty")
    if key == "command" and isinstance(value, str) and not value:
        raise ConfigError(where, f"{name} must not be empty")
    if key == "env" and isinstance(value, dict):
        for k, v in value.items():
            if not _ENV_NAME.match(k) or not isinstance(v, str):
                raise ConfigError(where, f"{name}.{k} must be a string (valid variable name)")
    if key == "prices":
        _check_prices(name, value, where)
    if table == "workspace":
        _check_workspace(key, value, name, where)
    if table in ("launcher", "slurm"):
        _check_launcher(table, key, value, name, where)
    if (table, key) == ("orchestrator", "compact_at") and not 0 <= value <= 1:
        raise ConfigError(where, f"{name} must be between 0 and 1 (a fraction of the window)")
    if (table, key) == ("orchestrator", "max_attempts") and value < 1:
        raise ConfigError(where, f"{name} must be at least 1")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigError(where, f"{name} must be a finite number")
        if value < 0:
            raise ConfigError(where, f"{name} must not be negative")
        _check_stored(name, value, STORED.get((table, key)), where)


def _check_stored(name: str, value: Any, typ: Any, where: str) -> None:
    """A number a new session keeps in meta.json (``STORED``): 0 (none) or within the bounds
    meta.json's schema declares (``records.out_of_bounds``), so it never makes a damaged
    session."""
    if typ is None or value == 0:
        return
    from zwarm.model.records import out_of_bounds

    why = out_of_bounds(value, typ, positive=True)
    if why is not None:
        raise ConfigError(where, f"{name} must be 0 (none) or {why}")


_SLURM_PATTERNS = {  # what Slurm accepts there (one argv element each: never an option)
    ("launcher", "default"): (r"^[a-z][a-z0-9_-]{0,31}\Z", "a launcher name (local, slurm)"),
    ("slurm", "partition"): (r"^([A-Za-z0-9][A-Za-z0-9._,-]{0,199})?\Z", "a partition name"),
    ("slurm", "account"): (r"^([A-Za-z0-9][A-Za-z0-9._-]{0,199})?\Z", "an account name"),
    ("slurm", "qos"): (r"^([A-Za-z0-9][A-Za-z0-9._-]{0,199})?\Z", "a QOS name"),
    ("slurm", "time"): (
        r"^((\d+-)?\d+(:\d+){0,2}|UNLIMITED|INFINITE)?\Z",
        'a Slurm time ("30", "1:00:00", "2-00:00:00")',
    ),
    ("slurm", "mem"): (r"^(\d+[KMGT]?)?\Z", 'a Slurm memory size ("4G", "500M")'),
    ("slurm", "python"): (r"^(/[^\x00\n]*)?\Z", "an absolute path"),
}


def _check_launcher(table: str, key: str, value: Any, name: str, where: str) -> None:
    """[launcher] and [slurm]: values that go to sbatch as they are, so of Slurm's shapes;
    ``env`` variable names; ``extra_args`` strings (checked above)."""
    spec = _SLURM_PATTERNS.get((table, key))
    if spec is not None and not re.match(spec[0], value):
        raise ConfigError(where, f"{name} must be {spec[1]}, not {value!r}")
    if key == "env" and not all(isinstance(v, str) and _ENV_NAME.match(v) for v in value):
        raise ConfigError(where, f"{name} must be a list of environment variable names")


def _check_workspace(key: str, value: Any, name: str, where: str) -> None:
    """[workspace]: ``root`` absolute (or ~/...); ``setup`` commands (a string for /bin/sh, or
    an argv list); ``copy``/``link`` paths relative to the repository, never leaving it."""
    if key == "root" and value and not (value.startswith(("/", "~/")) or value == "~"):
        raise ConfigError(where, f"{name} must be an absolute path (or start with ~/)")
    if key == "setup":
        for cmd in value:
            argv = [cmd] if isinstance(cmd, str) else cmd
            ok = isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
            if not ok or not argv[0].strip() or any("\x00" in a for a in argv):
                raise ConfigError(where, f"{name}: each command is a string or a list of strings")
    if key in ("copy", "link"):
        for p in value:
            parts = p.split("/") if isinstance(p, str) else [".."]
            if not p or p.startswith("/") or ".." in parts or "\x00" in p:
                raise ConfigError(where, f"{name}: {p!r} must be a path inside the repository")


GROUP_KEYS = {"max_running": (int,), "max_cost": (int, float), "max_tokens": (int,)}
_GROUP_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"  # compiled when first used (re's cache)


def _check_group(name: str, value: Any, where: str) -> dict[str, Any]:
    """``[groups.NAME]``: a session name's characters; only ``GROUP_KEYS``, each >= 0."""
    if not re.match(_GROUP_NAME, name):
        raise ConfigError(where, f"group name {name!r}: use letters, digits, '.', '_', '-'")
    if not isinstance(value, dict):
        raise ConfigError(where, f"groups.{name} must be a table")
    for key, v in value.items():
        types = GROUP_KEYS.get(key)
        if types is None:
            keys = ", ".join(GROUP_KEYS)
            raise ConfigError(where, f"unknown key {key!r} in [groups.{name}] (use {keys})")
        ok = isinstance(v, types) and not isinstance(v, bool)
        if not ok or not math.isfinite(v) or v < 0:
            raise ConfigError(where, f"groups.{name}.{key} must be a non-negative number")
        _check_stored(f"groups.{name}.{key}", v, STORED.get(("groups", key)), where)
    return dict(value)


def _check_prices(name: str, value: dict[str, Any], where: str) -> None:
    for model, p in value.items():
        if not isinstance(p, dict) or set(p) != set(_PRICE_KEYS):
            raise ConfigError(where, f"{name}.{model} needs exactly {', '.join(_PRICE_KEYS)}")
        for k in _PRICE_KEYS:
            if not isinstance(p[k], (int, float)) or isinstance(p[k], bool) or p[k] < 0:
                raise ConfigError(where, f"{name}.{model}.{k} must be a non-negative number")


def _type_name(t: type) -> str:
    return {
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "true/false",
        list: "an array",
        dict: "a table",
    }.get(t, t.__name__)


def dumps(config: Config) -> str:
    """The config as TOML text (tomli-w), every key present."""
    import tomli_w

    return tomli_w.dumps(config.data)
