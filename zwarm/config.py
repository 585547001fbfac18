"""Configuration: ``.zwarm/config.toml``, its schema, defaults and validation.

Owns every configurable key, its default and its trust rule (``Rule``: it executes, it is a
limit, lower or higher is tighter, or it is free), and what a departure from a trusted value
is (``changes``: an executing value that is not the trusted one, a limit looser than it).
Must stay true:
- ``SCHEMA`` is the single list of zwarm's own keys, each with its rule; each agent's table
  (``[codex]``, ...) is the agent's ``config_schema()`` (``zwarm.agents``) and each launcher's
  (``[slurm]``) the launcher's ``settings`` (``zwarm.launchers``), a key's rule its
  ``Setting.trust`` (executing unless it says otherwise) and its shape ``Setting.pattern``,
  added by ``schema()``: nothing here names an agent or a launcher; a launcher's family of
  named tables (``[hosts.NAME]``, ``zwarm.rules.Family``) is one ``FAMILY`` key in its table,
  each member checked against the family's settings and trusted whole (it executes);
  ``.zwarm.example/config.toml`` documents every key of zwarm and of the agents and launchers
  that ship with it (a test checks they agree);
- a limit is compared as the engine uses it: 0 = none where it means that, a group's unset
  budget is ``[limits]``'s, a price left out is the agent's list price (unknown: nothing);
- an invalid file (TOML syntax, unknown key, wrong type or value) raises ``ConfigError`` naming
  the file and the problem, before anything is created; zwarm 3.x's tables and keys
  (``zwarm.legacy_config``) are not unknown: taken out unapplied, named in ``Config.legacy``;
- loading uses only ``tomllib``; ``tomli_w`` is imported only when writing.
"""

import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from zwarm.agents import DEFAULT_AGENT
from zwarm.errors import ConfigError
from zwarm.rules import (
    CAP,
    COUNT,
    EACH,
    EXECUTES,
    FREE,
    KILL_FIRST,
    PRICES,
    SANDBOX,
    SIZE,
    Rule,
    type_name,
)

if TYPE_CHECKING:
    from zwarm.rules import Family, Setting
    from zwarm.trust import ConfigSource


# key -> (expected python type(s), default, trust rule). Tables with free-form keys use dict.
SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], Any, Rule]]] = {
    "defaults": {
        "adapter": ((str,), DEFAULT_AGENT, FREE),
        "model": ((str,), "", FREE),
        "context": ((str,), "summary", FREE),
        "timeout": ((int, float), 0, CAP),
        "workspace": ((str,), "shared", FREE),
        "host": ((str,), "", EXECUTES),
    },
    "workspace": {
        "root": ((str,), "", EXECUTES),
        "setup": ((list,), [], EXECUTES),
        "copy": ((list,), [], EXECUTES),
        "link": ((list,), [], EXECUTES),
    },
    "summary": {
        "budget_chars": ((int,), 24000, FREE),
        "full_turns": ((int,), 2, FREE),
    },
    "tools": {
        "allowed_roots": ((list,), ["."], EXECUTES),
        "max_wait_s": ((int, float), 45, FREE),
        "trajectory_chars": ((int,), 12000, FREE),
        "diff_chars": ((int,), 12000, FREE),
    },
    "orchestrator": {
        "base_url": ((str,), "", EXECUTES),
        "model": ((str,), "", FREE),
        "api_key_env": ((str,), "OPENAI_API_KEY", EXECUTES),
        "max_steps": ((int,), 60, COUNT),
        "max_tokens": ((int,), 0, CAP),
        "max_cost_usd": ((int, float), 0, CAP),
        "bash_timeout_s": ((int, float), 60, FREE),
        # the bash tool's project writable in zwarm's sandbox (zwarm.orchestrator.bash)
        "bash_writable": ((bool,), False, EXECUTES),
        "prices": ((dict,), {}, PRICES),
        # the run's context (zwarm.orchestrator.compaction): 0 = known by model
        "context_window": ((int,), 0, FREE),
        "compact_at": ((int, float), 0.7, FREE),  # fraction of context_window; 0 = never compact
        "compact_model": ((str,), "", FREE),  # "" = the orchestrator's own model
        "compact_keep": ((int,), 10, FREE),  # latest messages kept verbatim
        # transient endpoint errors (zwarm.orchestrator.chat)
        "max_attempts": ((int,), 5, FREE),
        "retry_backoff_s": ((int, float), 1.0, FREE),
    },
    # fleet control (zwarm.engine.scheduler, zwarm.engine.limits); 0 = no limit
    "limits": {
        "max_running": ((int,), 0, CAP),  # sessions running at once in this state dir
        "max_cost": ((int, float), 0, CAP),  # default budget of a session, USD
        "max_tokens": ((int,), 0, CAP),  # default budget of a session, total tokens
        "max_cost_per_day": ((int, float), 0, CAP),  # new sessions queue once today's spend is this
        "stall_s": ((int, float), 0, CAP),  # a turn whose agent writes nothing this long is stalled
        "on_stall": ((str,), "mark", KILL_FIRST),  # "mark": show it stalled; "kill": stop it
        # "wait": park it until the limit resets; "switch": re-run it on another account
        "on_usage_limit": ((str,), "fail", FREE),
        # an account's cooldown when its agent gives no reset time (engine.accounts), seconds
        "usage_limit_fallback": ((int, float), 3600, FREE),
        "max_auto_resumes": ((int,), 3, COUNT),  # times a parked session is resumed by itself
        "resume_backoff_s": ((int, float), 60, FREE),  # first wait when no reset time is given
        "max_spawn_depth": ((int,), 3, CAP),  # delegation: deepest session (a root is 1); 0 = any
    },
    # [groups.NAME]: max_running, max_cost, max_tokens for the sessions spawned --group NAME
    "groups": {},
    # [accounts.<agent>.<name>]: env (executes), priority (free), max_running and budget_daily
    # (limits) of each login of an agent (zwarm.engine.accounts); ``changes`` compares them
    "accounts": {},
    # commands run when a session ends (zwarm.runtime.hooks): "" = none; a string runs with
    # /bin/sh -c, a list is an argv
    "hooks": {
        "on_finish": ((str, list), "", EXECUTES),
        "on_fail": ((str, list), "", EXECUTES),
        "timeout_s": ((int, float), 30, FREE),
    },
    # what runs a new session's turns (an entry point of zwarm.launchers; each launcher's own
    # table, [slurm], is the launcher's: ``schema()``)
    "launcher": {
        "default": ((str,), "local", EXECUTES),
    },
    # zwarm's own sandbox of each turn (zwarm.sandbox): mode "off" or "bwrap"; ports: loopback
    # ports its agent may reach besides those its *_BASE_URL names; read_only: more paths it
    # may read; hosts: more "host:port" its filtering proxy allows besides the agent's own API
    # hosts; resolve: host name -> address, used by the proxy instead of DNS (may be a
    # loopback or private address); memory, cpus, pids: the turn's limits
    # (zwarm.sandbox.limits; "" or 0 = none). [sandbox.<agent>]: one agent's own mode and
    # limits (a table per agent: ``schema()``)
    "sandbox": {
        "mode": ((str,), "off", SANDBOX),
        "ports": ((list,), [], EXECUTES),
        "read_only": ((list,), [], EXECUTES),
        "hosts": ((list,), [], EXECUTES),
        "resolve": ((dict,), {}, EXECUTES),
        "memory": ((str,), "", SIZE),
        "cpus": ((int, float), 0, CAP),
        "pids": ((int,), 0, CAP),
    },
    # commands that run code the agents wrote (zwarm.sandbox.run: best-of checks, the merge
    # queue's): in the sandbox where it holds, else only with unsandboxed = true (trusted)
    "checks": {
        "unsandboxed": ((bool,), False, EXECUTES),
    },
    # the merge queue (zwarm.engine.mergeq): check = the commands every entry must pass
    # (executing: they run code the agents wrote, see zwarm.sandbox.run); mode = "rebase" or
    # "merge" (each entry onto the target); check_timeout_s = each command's time limit
    "merge": {
        "check": ((list,), [], EXECUTES),
        "mode": ((str,), "rebase", FREE),
        "check_timeout_s": ((int, float), 600, FREE),
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
        ("accounts", "budget_daily"): Money,
    }


# the keys whose value a new session keeps in meta.json (``limits.settle``), by its schema type
STORED = _stored()

CHOICES = {
    ("defaults", "context"): ("summary", "native"),
    ("defaults", "workspace"): ("shared", "worktree"),
    ("limits", "on_stall"): ("mark", "kill"),
    ("limits", "on_usage_limit"): ("fail", "wait", "switch"),
    ("sandbox", "mode"): ("off", "bwrap"),  # records.SandboxMode
    ("merge", "mode"): ("rebase", "merge"),
}

_PRICE_KEYS = ("input", "cached_input", "output")
_HOOKS = ("on_finish", "on_fail")
_HOST_NAME = r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})\Z"  # [sandbox] resolve's keys
_HOST_PORT = r"^([A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})\Z"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: "$" allows a trailing newline


class Config(msgspec.Struct, frozen=True):
    """A validated configuration. ``data[table][key]`` always exists (defaults filled in).

    ``get``, ``command``, ``groups`` and the mapping ``table`` returns hand out a value as
    trust allows it (``source``; see ``zwarm.trust``), checked when the value is read: a key
    that executes only as trusted (else ``UntrustedConfig``), a limit never looser than trusted
    (``require_limits`` says which one a file loosens), a free key as it is. ``data`` itself is
    unchecked: read it only for free keys.
    """

    data: dict[str, dict[str, Any]]
    path: str | None = None
    source: "ConfigSource | None" = None  # neither compared nor shown (__eq__, __repr__)
    legacy: tuple[str, ...] = ()  # zwarm 3.x settings the file has, ignored (zwarm.legacy_config)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and (self.data, self.path) == (other.data, other.path)

    def __repr__(self) -> str:
        return f"Config(data={self.data!r}, path={self.path!r})"

    def get(self, table: str, key: str) -> Any:
        if self.source is not None:
            return self.source.value(table, key)
        return self.data[table][key]

    def table(self, table: str) -> Mapping[str, Any]:
        values = self.data[table]
        return values if self.source is None else self.source.view(table, values)

    def groups(self) -> Mapping[str, Mapping[str, Any]]:
        """``[groups.NAME]`` caps as they may be used: never looser than trusted (a group the
        trusted file had is there even if the file no longer has it)."""
        return self.data["groups"] if self.source is None else self.source.groups()

    def accounts(self, agent: str) -> dict[str, dict[str, Any]]:
        """``[accounts.<agent>.*]`` as they may be used (in the file's order): limits never
        looser than trusted; read an account's ``env`` with ``account_env``."""
        got = self.data["accounts"] if self.source is None else self.source.accounts()
        return dict(got.get(agent, {}))

    def account_env(self, agent: str, name: str) -> dict[str, str]:
        """Account ``name`` of ``agent``'s ``env`` as written (``${VAR}`` references left
        for ``engine.accounts`` to fill in): ``UntrustedConfig`` if it needs trust."""
        if self.source is not None:
            return self.source.account_env(agent, name)
        return dict(self.data["accounts"].get(agent, {}).get(name, {}).get("env", {}))

    def command(self, adapter: str) -> list[str]:
        cmd = self.get(adapter, "command")
        return [cmd] if isinstance(cmd, str) else list(cmd)

    def require(self, table: str) -> None:
        """``UntrustedConfig`` now if any value of ``table`` needs trust: for a command that
        will use the whole table later, elsewhere (an agent's, in its supervisor)."""
        if self.source is not None:
            self.source.require(table, self.data[table])

    def require_limits(self) -> None:
        """``LoosenedLimit`` now if the file loosens a limit past its trusted value: what a
        command that starts agents checks first (a read never sees the looser value anyway)."""
        if self.source is not None:
            self.source.require_limits()


Spec = tuple[tuple[type, ...], Any, Rule]  # (accepted types, default, trust rule)
# the one key of a family's table ([hosts.NAME]: a launcher's ``Family``): its Spec's default
# is the ``Family``; each NAME in the file is a member, checked against it
FAMILY = "*"
Data = dict[str, dict[str, Any]]  # table -> key -> value


def schema() -> dict[str, dict[str, Spec]]:
    """Every table and key: zwarm's own (``SCHEMA``), one table per installed agent, and one
    per installed launcher that has one."""
    from zwarm import agents, launchers

    out = dict(SCHEMA)
    out["sandbox"] = dict(SCHEMA["sandbox"])
    for name in agents.names():
        keys = agents.get(name).config_schema()
        out[name] = {key: (s.types, s.default, s.trust) for key, s in keys.items()}
        out["sandbox"][name] = ((dict,), {}, EACH)  # [sandbox.<agent>]: its own mode, limits
    for name, settings in launchers.tables().items():
        out[name] = {key: (s.types, s.default, s.trust) for key, s in settings.items()}
    for table, family in launchers.families().items():
        out.setdefault(table, family_spec(family))
    return out


def family_spec(family: "Family") -> dict[str, Spec]:
    """A family's table in a schema (``schema()``'s value for ``[hosts]``)."""
    return {FAMILY: ((dict,), family, EXECUTES)}


def family(table: str, tables: dict[str, dict[str, Spec]]) -> "Family | None":
    """The ``Family`` ``table`` is in ``tables``, or None: a table of keys (or none)."""
    spec = tables.get(table, {}).get(FAMILY)
    return None if spec is None else spec[1]


def _setting(table: str, key: str) -> "Setting | None":
    """A plugin's declaration of ``table.key`` (an agent's or a launcher's), or None."""
    from zwarm import agents, launchers

    if table in launchers.names():
        return launchers.settings_of(table).get(key)
    return agents.get(table).config_schema().get(key)


def _choices(table: str, key: str) -> tuple[Any, ...]:
    from zwarm import agents

    if (table, key) == ("defaults", "adapter"):
        return agents.names()
    if table in SCHEMA:
        return CHOICES.get((table, key), ())
    setting = _setting(table, key)
    return setting.choices if setting is not None else ()


def defaults() -> Config:
    return Config(_defaults(schema()))


def _defaults(tables: dict[str, dict[str, Spec]]) -> dict[str, dict[str, Any]]:
    return {
        t: {k: _copy(v[1]) for k, v in keys.items() if k != FAMILY} for t, keys in tables.items()
    }


def _copy(v: Any) -> Any:
    if isinstance(v, dict):
        return dict(v)
    if isinstance(v, list):
        return list(v)
    return v


# ---------------------------------------------------------------------------- trust rules
def rule(table: str, key: str, tables: dict[str, dict[str, Spec]] | None = None) -> Rule:
    """``table.key``'s trust rule: its ``Spec``'s; a group's caps are limits; a key nobody
    declared executes (default-deny)."""
    if table == "groups":
        return CAP
    if table == "accounts":
        return EXECUTES  # its env does; its limits are compared one by one (``changes``)
    keys = (schema() if tables is None else tables).get(table, {})
    spec = keys.get(key, keys.get(FAMILY))  # a family's member: the family's rule (executes)
    return EXECUTES if spec is None else spec[2]


def is_security_key(table: str, key: str) -> bool:
    """Whether ``table.key`` executes or decides (its value is used only as trusted)."""
    return rule(table, key).kind == EXECUTES.kind


def security_settings(
    data: Mapping[str, Mapping[str, Any]],
    default: Mapping[str, Mapping[str, Any]],
    tables: dict[str, dict[str, Spec]] | None = None,
) -> dict[str, Any]:
    """``{"table.key": value}`` of the values that are not free (they execute, or limit) and
    differ from the default: what ``zwarm trust`` shows and records (a group: ``groups.NAME``)."""
    tables = schema() if tables is None else tables
    out: dict[str, Any] = {}
    for table, values in data.items():
        base = default.get(table, {})
        for key, value in values.items():
            if rule(table, key, tables).kind != FREE.kind and not _same(key, value, base.get(key)):
                out[f"{table}.{key}"] = value
    return out


def _same(key: str, value: Any, other: Any) -> bool:
    if key == "command":  # command = "codex" is ["codex"] spelled as a string
        value = [value] if isinstance(value, str) else value
        other = [other] if isinstance(other, str) else other
    return bool(value == other and type(value) is type(other))


class Change(NamedTuple):
    """A value the trusted one does not cover: ``key`` (``table.key``, a group's cap, a model's
    price), the trusted value, the file's, and the key's rule."""

    key: str
    trusted: Any
    new: Any
    rule: Rule

    @property
    def limit(self) -> bool:
        return self.rule.kind != EXECUTES.kind


def changes(
    table: str,
    key: str,
    new: Mapping[str, Mapping[str, Any]],
    old: Mapping[str, Mapping[str, Any]],
    tables: dict[str, dict[str, Spec]],
) -> list[Change]:
    """How ``new``'s ``table.key`` departs from the trusted ``old`` (both full data): an
    executing value that is neither the trusted one nor the default, a limit looser than the
    trusted one; [] if it may be used."""
    if table == "groups":
        return [Change(f"groups.{g}.{k}", was, now, CAP) for g, k, was, now in _groups(new, old)]
    if table == "accounts":
        return _account_changes(new, old)
    r = rule(table, key, tables)
    if family(table, tables) is not None:  # a member: trusted whole; one taken out loosens nothing
        now, was = new[table].get(key), old[table].get(key)
        return (
            [] if now is None or _same(key, now, was) else [Change(f"{table}.{key}", was, now, r)]
        )
    now, was = new[table][key], old[table][key]
    if r.kind == FREE.kind:
        return []
    if r.kind == EXECUTES.kind:
        ok = _same(key, now, was) or at_default(table, key, now, tables)
        return [] if ok else [Change(f"{table}.{key}", was, now, r)]
    if r.kind == PRICES.kind:
        return _price_changes(table, now, was)
    if r.kind == EACH.kind:
        return _each_changes(table, key, new, old, tables)
    return [Change(f"{table}.{key}", was, now, r)] if _rank(r, now) > _rank(r, was) else []


def at_default(table: str, key: str, value: Any, tables: dict[str, dict[str, Spec]]) -> bool:
    """Whether ``value`` is ``table.key``'s built-in default (which never needs trust)."""
    spec = tables.get(table, {}).get(key)
    return spec is not None and _same(key, value, spec[1])


def all_changes(
    new: Mapping[str, Mapping[str, Any]],
    old: Mapping[str, Mapping[str, Any]],
    tables: dict[str, dict[str, Spec]],
) -> list[Change]:
    """Every departure of ``new`` from the trusted ``old`` (see ``changes``)."""
    out = changes("groups", "", new, old, tables) + changes("accounts", "", new, old, tables)
    for table, keys in tables.items():
        names = new[table] if FAMILY in keys else keys  # a family: each member in the file
        out += [c for key in names for c in changes(table, key, new, old, tables)]
    return out


def clamped_groups(
    new: Mapping[str, Mapping[str, Any]], old: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """``new``'s groups, each cap that is looser than trusted set to the trusted (effective)
    cap, and every trusted group there."""
    out = {name: dict(caps) for name, caps in new["groups"].items()}
    for name, key, was, _ in _groups(new, old):
        out.setdefault(name, {})[key] = was
    return out


def _account_changes(
    new: Mapping[str, Mapping[str, Any]], old: Mapping[str, Mapping[str, Any]]
) -> list[Change]:
    """How ``new``'s ``[accounts.<agent>.<name>]`` depart from the trusted ``old``: an ``env``
    that is neither empty nor the trusted one (it executes: it chooses a login, and a secret
    goes with it), a limit (``ACCOUNT_LIMITS``) looser than trusted (0 = none, the loosest;
    an account the trusted file did not have had none). An account the file drops takes no
    session any more: nothing is loosened. ``priority`` is free."""
    out = []
    now_a, was_a = new.get("accounts", {}), old.get("accounts", {})
    for agent in sorted(now_a):
        for name, acc in now_a[agent].items():
            was = was_a.get(agent, {}).get(name, {})
            env, trusted = acc.get("env", {}), was.get("env", {})
            if env and env != trusted:
                out.append(Change(f"accounts.{agent}.{name}.env", trusted, env, EXECUTES))
            for key in ACCOUNT_LIMITS:
                a, b = acc.get(key, 0), was.get(key, 0)
                if _rank(CAP, a) > _rank(CAP, b):
                    out.append(Change(f"accounts.{agent}.{name}.{key}", b, a, CAP))
    return out


def clamped_accounts(
    new: Mapping[str, Mapping[str, Any]], old: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """``new``'s accounts as they may be used: each limit looser than trusted set to the
    trusted one, and an ``env`` that needs trust replaced by ``None`` (whoever uses it raises
    ``UntrustedConfig``: ``Config.account_env``)."""
    out = {a: {n: dict(acc) for n, acc in names.items()} for a, names in new["accounts"].items()}
    for c in _account_changes(new, old):
        _, agent, name, key = c.key.split(".", 3)
        out[agent][name][key] = None if key == "env" else c.trusted
    return out


def _rank(r: Rule, v: Any) -> float:
    """Where ``v`` stands under at_most rule ``r``: higher is looser."""
    if r.order:
        return r.order.index(v) if v in r.order else math.inf
    if r.none is not None and v == r.none:
        return math.inf
    return float(size_bytes(v) if isinstance(v, str) else v)


def _each_changes(
    table: str,
    key: str,
    new: Mapping[str, Mapping[str, Any]],
    old: Mapping[str, Mapping[str, Any]],
    tables: dict[str, dict[str, Spec]],
) -> list[Change]:
    """How a table of limits (``EACH``: ``[sandbox.<agent>]``) loosens the trusted one: each
    key it or the trusted one sets, compared as used (its own value, else ``table``'s own:
    that key's own change, if any, is counted there)."""
    mine, was_mine = new[table][key] or {}, old[table][key] or {}
    out = []
    for k in sorted(set(mine) | set(was_mine)):
        r = rule(table, k, tables)
        now, was = mine.get(k, new[table][k]), was_mine.get(k, old[table][k])
        if _rank(r, now) > _rank(r, was):
            out.append(Change(f"{table}.{key}.{k}", was, now, r))
    return out


_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGT]?)\Z", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MIN_MEMORY = 1 << 20  # a memory limit below this would kill any agent at its start


def size_bytes(text: str) -> int:
    """A size as config.toml writes it ("512M", "2G", "1.5G", "1048576": bytes; K, M, G, T
    are powers of 1024) in bytes; ``ValueError`` if it is not one."""
    m = _SIZE.match(text.strip())
    if m is None:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _price_changes(table: str, now: Mapping[str, Any], was: Mapping[str, Any]) -> list[Change]:
    """Models whose price (the table's, else the list price) is lower than trusted in any
    part, or unknown now (it counts as nothing): each a change of ``table.prices.MODEL``."""
    listed = _list_prices(table)
    out = []
    for model in sorted(set(now) | set(was)):
        before, after = was.get(model) or listed(model), now.get(model) or listed(model)
        if before is None:
            continue  # no price was known: its cost counted as nothing, the loosest
        if after is None or any(after[k] < before[k] for k in _PRICE_KEYS):
            new = None if after is None else dict(after)
            out.append(Change(f"{table}.prices.{model}", dict(before), new, PRICES))
    return out


def _list_prices(table: str) -> Callable[[str], Mapping[str, float] | None]:
    from zwarm import agents

    if table in SCHEMA:  # [orchestrator]: the list price of whichever agent knows the model
        return agents.list_price
    return agents.get(table).default_prices.get


def _groups(
    new: Mapping[str, Mapping[str, Any]], old: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, str, Any, Any]]:
    """(group, cap, trusted, new) of each group cap looser than trusted, compared as the
    engine uses them: a budget a group leaves unset (or 0) is [limits]'s; max_running 0 none."""
    out = []
    now_g, was_g = new["groups"], old["groups"]
    for name in sorted(set(now_g) | set(was_g)):
        for key in GROUP_KEYS:
            now, was = now_g.get(name, {}).get(key), was_g.get(name, {}).get(key)
            if not now and not was:
                continue  # both follow [limits]: that key's own change, if any
            now, was = _group_cap(new, now, key), _group_cap(old, was, key)
            if _rank(CAP, now) > _rank(CAP, was):
                out.append((name, key, was, now))
    return out


def _group_cap(data: Mapping[str, Mapping[str, Any]], own: Any, key: str) -> Any:
    if own:
        return own
    return 0 if key == "max_running" else data["limits"][key]


def trusted_data(
    values: Mapping[str, Any], tables: dict[str, dict[str, Spec]], where: str
) -> dict[str, dict[str, Any]]:
    """The defaults with recorded trusted ``values`` (``{table: {key: value}}``, read from
    the trust file: validated here, ``ConfigError`` naming ``where``) over them; a table or
    key this zwarm does not have (a plugin since removed) is left out."""
    out = _defaults(tables)
    for table, keys in values.items():
        if table not in out or not isinstance(keys, dict):
            continue
        for key, value in keys.items():
            if table in ("groups", "accounts") or key in tables[table] or FAMILY in tables[table]:
                out[table][key] = _check(table, key, value, where, tables)
    return out


class Judge:
    """The trust rules of one schema, as ``zwarm.trust.ConfigSource`` asks for them (the
    functions above, with the tables bound)."""

    def __init__(self, tables: dict[str, dict[str, Spec]]) -> None:
        self.tables = tables

    def rule(self, table: str, key: str) -> Rule:
        return rule(table, key, self.tables)

    def at_default(self, table: str, key: str, value: Any) -> bool:
        return at_default(table, key, value, self.tables)

    def changes(self, table: str, key: str, new: Data, old: Data) -> list[Change]:
        return changes(table, key, new, old, self.tables)

    def all_changes(self, new: Data, old: Data) -> list[Change]:
        return all_changes(new, old, self.tables)

    def clamped_groups(self, new: Data, old: Data) -> dict[str, dict[str, Any]]:
        return clamped_groups(new, old)

    def clamped_accounts(self, new: Data, old: Data) -> dict[str, dict[str, dict[str, Any]]]:
        return clamped_accounts(new, old)

    def settings(self, data: Data) -> dict[str, Any]:
        return security_settings(data, _defaults(self.tables), self.tables)

    def defaults(self) -> Data:
        return _defaults(self.tables)

    def trusted(self, values: Mapping[str, Any], where: str) -> Data:
        return trusted_data(values, self.tables, where)


MAX_CONFIG_BYTES = 1 << 20


def load(
    path: Path,
    environ: Mapping[str, str] | None = None,
    tables: dict[str, dict[str, Spec]] | None = None,
) -> Config:
    """Load and validate ``path``; a missing file gives the defaults (checked against what was
    trusted all the same: a deleted file loosens nothing). ``environ`` locates the trust file
    (default ``os.environ``); it is read only when a value that is not free is used.
    ``tables``: the schema (default ``schema()``)."""
    from zwarm.system.files import read_file
    from zwarm.trust import ConfigSource

    tables = schema() if tables is None else tables  # once: each agent's table is asked of it
    try:
        raw, _ = read_file(path, MAX_CONFIG_BYTES, follow=True)  # a FIFO: refused, never a hang
    except FileNotFoundError:
        data = _defaults(tables)
        return Config(data, None, ConfigSource.of(path, b"", data, Judge(tables), environ))
    except OSError as e:
        raise ConfigError(str(path), f"cannot read: {e.strerror}") from None
    old: list[str] = []
    data = parse(raw, str(path), tables, old)
    source = ConfigSource.of(path, raw, data, Judge(tables), environ)
    return Config(data, str(path), source, tuple(old))


def parse(
    raw: bytes,
    where: str,
    tables: dict[str, dict[str, Spec]] | None = None,
    legacy_out: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """A config file's bytes, validated and merged over the defaults (``ConfigError``); the
    zwarm 3.x settings it holds are left out, named in ``legacy_out``."""
    import tomllib  # here: a state dir without a config file never loads it (~2 ms)

    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(where, f"invalid TOML: {e}") from None
    from zwarm import legacy_config

    tables = schema() if tables is None else tables
    old = legacy_config.split(doc, tables)  # zwarm 3.x's settings: never applied, the caller warns
    if legacy_out is not None:
        legacy_out.extend(old)
    return validate(doc, where, tables)


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
    if table == "accounts":
        return _check_accounts(key, value, where)
    fam = family(table, tables)
    if fam is not None:
        return check_member(table, fam, key, value, where)
    spec = tables[table].get(key)
    if spec is None:
        raise ConfigError(where, f"unknown key {key!r} in [{table}]")
    types = spec[0]
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        names = " or ".join(type_name(t) for t in types)
        raise ConfigError(where, f"{table}.{key} must be {names}, not {type_name(type(value))}")
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
    if table == "sandbox":
        _check_sandbox(key, value, name, where)
    if (table, key) == ("merge", "check") and not all(isinstance(x, str) and x for x in value):
        raise ConfigError(where, f"{name} must be a list of commands (non-empty strings)")
    if (table, key) == ("merge", "check_timeout_s") and value <= 0:
        raise ConfigError(where, f"{name} must be more than 0")
    if (table, key) == ("launcher", "default") and not re.match(_LAUNCHER_NAME, value):
        raise ConfigError(where, f"{name} must be a launcher name (local, slurm), not {value!r}")
    if table not in SCHEMA:
        _check_declared(_setting(table, key), value, name, where)
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


_LAUNCHER_NAME = r"^[a-z][a-z0-9_-]{0,31}\Z"


def _check_declared(setting: "Setting | None", value: Any, name: str, where: str) -> None:
    """A plugin's key with a shape (``Setting.shape_problem``: a launcher's values go to its
    commands as they are)."""
    why = None if setting is None else setting.shape_problem(name, value)
    if why is not None:
        raise ConfigError(where, why)


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


def _check_sandbox(key: str, value: Any, name: str, where: str) -> None:
    """[sandbox]: ``ports`` TCP port numbers; ``read_only`` absolute paths; ``hosts``
    ``host:port`` strings; ``resolve`` host names to IP addresses; ``memory`` a size of at
    least 1M ("" = none); an agent's table only ``OWN_SANDBOX_KEYS``, each checked as its
    [sandbox] namesake."""
    import ipaddress

    if key == "hosts":
        for h in value:
            m = re.match(_HOST_PORT, h) if isinstance(h, str) else None
            if m is None or not 0 < int(m[2]) < 65536:
                raise ConfigError(where, f"{name}: {h!r} must be host:port (api.example.com:443)")
        return
    if key == "resolve":
        for host, addr in value.items():
            try:
                ipaddress.ip_address(addr if isinstance(addr, str) else "")
            except ValueError:
                raise ConfigError(where, f"{name}.{host} must be an IP address") from None
            if not re.match(_HOST_NAME, host):
                raise ConfigError(where, f"{name}: {host!r} is not a host name")
        return
    if key == "ports" and not all(
        isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in value
    ):
        raise ConfigError(where, f"{name} must be a list of TCP port numbers (1-65535)")
    if key == "read_only" and not all(
        isinstance(p, str) and p.startswith("/") and "\x00" not in p for p in value
    ):
        raise ConfigError(where, f"{name} must be a list of absolute paths")
    if key == "memory" and value:
        try:
            small = size_bytes(value) < MIN_MEMORY
        except ValueError:
            raise ConfigError(where, f'{name} must be a size ("512M", "2G") or "" (none)') from None
        if small:
            raise ConfigError(where, f"{name} must be at least 1M, not {value!r}")
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in OWN_SANDBOX_KEYS:
                keys = ", ".join(OWN_SANDBOX_KEYS)
                raise ConfigError(where, f"unknown key {k!r} in [{name}] (use {keys})")
            types, _, _ = SCHEMA["sandbox"][k]
            if not isinstance(v, types) or isinstance(v, bool):
                kinds = " or ".join(type_name(t) for t in types)
                raise ConfigError(where, f"{name}.{k} must be {kinds}")
            modes = CHOICES[("sandbox", "mode")]
            if k == "mode" and v not in modes:
                raise ConfigError(where, f"{name}.mode must be one of {', '.join(modes)}")
            if isinstance(v, (int, float)) and not (math.isfinite(v) and v >= 0):
                raise ConfigError(where, f"{name}.{k} must be a non-negative number")
            _check_sandbox(k, v, f"{name}.{k}", where)


# the keys of an agent's own [sandbox.<agent>]: its mode and limits
OWN_SANDBOX_KEYS = ("mode", "memory", "cpus", "pids")


def check_member(table: str, fam: "Family", name: str, value: Any, where: str) -> dict[str, Any]:
    """``[table.NAME]``, a member of a launcher's family, checked (``Family.problem``)."""
    why = fam.problem(table, name, value)
    if why is not None:
        raise ConfigError(where, why)
    return dict(value)


# each a limit (CAP): lower is tighter, 0 = none (a budget: [limits]'s)
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


# [accounts.<agent>.<name>]: each a limit (CAP): lower is tighter, 0 = none
ACCOUNT_LIMITS = {"max_running": (int,), "budget_daily": (int, float)}
ACCOUNT_KEYS = ("env", "priority", *ACCOUNT_LIMITS)


def _check_accounts(agent: str, value: Any, where: str) -> dict[str, dict[str, Any]]:
    """``[accounts.<agent>]``: an installed agent's name, then one table per account (a
    session name's characters), each with only ``ACCOUNT_KEYS``: ``env`` a table of variables
    (a value may be a ``${VAR}`` reference to the user's environment), ``priority`` a whole
    number, the limits non-negative."""
    from zwarm import agents
    from zwarm.model.records import Priority, out_of_bounds

    if agent not in agents.names():
        known = ", ".join(agents.names())
        raise ConfigError(where, f"[accounts.{agent}]: not an installed agent ({known})")
    if not isinstance(value, dict):
        raise ConfigError(where, f"accounts.{agent} must be a table")
    out: dict[str, dict[str, Any]] = {}
    for name, acc in value.items():
        where_name = f"accounts.{agent}.{name}"
        if not re.match(_GROUP_NAME, name):
            raise ConfigError(where, f"account name {name!r}: use letters, digits, '.', '_', '-'")
        if not isinstance(acc, dict):
            raise ConfigError(where, f"{where_name} must be a table")
        for key, v in acc.items():
            if key not in ACCOUNT_KEYS:
                keys = ", ".join(ACCOUNT_KEYS)
                raise ConfigError(where, f"unknown key {key!r} in [{where_name}] (use {keys})")
            if key == "env":
                if not isinstance(v, dict):
                    raise ConfigError(where, f"{where_name}.env must be a table")
                for k, x in v.items():
                    if not _ENV_NAME.match(k) or not isinstance(x, str) or "\x00" in x:
                        raise ConfigError(
                            where, f"{where_name}.env.{k} must be a string (valid variable name)"
                        )
            elif key == "priority":
                bad = out_of_bounds(0.5, Priority)  # what any bad value is told
                if isinstance(v, bool) or out_of_bounds(v, Priority) is not None:
                    raise ConfigError(where, f"{where_name}.priority must be {bad}")
            else:
                ok = isinstance(v, ACCOUNT_LIMITS[key]) and not isinstance(v, bool)
                if not ok or not math.isfinite(v) or v < 0:
                    raise ConfigError(where, f"{where_name}.{key} must be a non-negative number")
                _check_stored(f"{where_name}.{key}", v, STORED.get(("accounts", key)), where)
        out[name] = dict(acc)
    return out


def _check_prices(name: str, value: dict[str, Any], where: str) -> None:
    for model, p in value.items():
        if not isinstance(p, dict) or set(p) != set(_PRICE_KEYS):
            raise ConfigError(where, f"{name}.{model} needs exactly {', '.join(_PRICE_KEYS)}")
        for k in _PRICE_KEYS:
            if not isinstance(p[k], (int, float)) or isinstance(p[k], bool) or p[k] < 0:
                raise ConfigError(where, f"{name}.{model}.{k} must be a non-negative number")


def dumps(config: Config) -> str:
    """The config as TOML text (tomli-w), every key present."""
    import tomli_w

    return tomli_w.dumps(config.data)
