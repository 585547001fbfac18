"""``zwarm init --upgrade``: the config.toml a zwarm 3.x ``.zwarm/`` maps onto.

Owns ``upgrade`` (3.x's settings, as ``zwarm.legacy_config`` names them, mapped onto today's keys:
model, reasoning effort, sandbox, timeout, adapter, compaction thresholds, parallel
delegations -> ``[limits] max_running``; what has no counterpart is said), ``plan`` (every
mapped value checked, the new file's text) and ``write``. Must stay true:
- it only proposes: every value it maps is checked by ``config.validate`` as if the user had
  written it, and a refused one is left out with the reason; ``full_danger`` and
  ``sandbox = "danger-full-access"`` are never mapped (running unsandboxed needs the explicit
  setting and ``zwarm trust``); the written file is untrusted like any other;
- the files it reads are untrusted input, read with the config file's size limit;
- the 3.x config.toml is never lost: kept as ``config.toml.zwarm3`` (never overwritten)
  before config.toml is replaced atomically, and only if it is still what was read.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zwarm.legacy_config import AGENT_FILES, BACKUP_SUFFIX, PROJECT_FILE, ZWARM3, split

_ADAPTERS = {"codex_mcp": "codex", "codex_exec": "codex", "claude_code": "claude"}
_UNSANDBOXED = "danger-full-access"


@dataclass
class Upgrade:
    """What ``upgrade`` found and proposes."""

    # (old setting, its value, new table, new key, new value), each still to be validated
    mapped: list[tuple[str, Any, str, str, Any]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # settings with no counterpart
    unsafe: list[str] = field(default_factory=list)  # never applied: said why


def read_toml(path: Path) -> dict[str, Any] | None:
    """A 3.x TOML file, or None if there is none; ``ConfigError`` if unreadable or invalid."""
    import tomllib

    from zwarm.config import MAX_CONFIG_BYTES
    from zwarm.errors import ConfigError
    from zwarm.system.files import read_file

    try:
        raw, _ = read_file(path, MAX_CONFIG_BYTES, follow=True)
        return tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConfigError(str(path), f"cannot read: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(str(path), f"invalid TOML: {e}") from None


def upgrade(doc: Mapping[str, Any], agents: Mapping[str, Mapping[str, Any]]) -> Upgrade:
    """What a 3.x ``config.toml`` (``doc``, as parsed) and its agent files (``agents``:
    ``{"codex": {...}, "claude": {...}}`` as parsed) map onto; values as written, each to be
    validated by the caller."""
    up = Upgrade()

    ex = _table(doc, "executor")
    orch = _table(doc, "orchestrator")
    comp = _table(orch, "compaction")
    found = {"executor": ex, "orchestrator": orch, "orchestrator.compaction": comp}
    values = {f"[{t}] {k}": v for t, keys in found.items() for k, v in keys.items()}
    values |= {f"{a}.toml {k}": v for a, keys in agents.items() for k, v in keys.items()}

    def carry(old: str, table: str, key: str, value: Any) -> None:
        up.mapped.append((old, values.get(old), table, key, value))

    if "adapter" in ex:
        new = _ADAPTERS.get(ex["adapter"]) if isinstance(ex["adapter"], str) else None
        if new is None:
            up.dropped.append(f"[executor] adapter = {_show(ex['adapter'])} (unknown adapter)")
        else:
            carry("[executor] adapter", "defaults", "adapter", new)
    if ex.get("model"):
        carry("[executor] model", "defaults", "model", ex["model"])
    if "timeout" in ex:
        carry("[executor] timeout", "defaults", "timeout", ex["timeout"])
    if "sandbox" in ex:
        if ex["sandbox"] == _UNSANDBOXED:
            up.unsafe.append(
                f'[executor] sandbox = "{_UNSANDBOXED}" is not applied: codex runs sandboxed '
                '("workspace-write"); running unsandboxed needs [codex] dangerous = true (or '
                "`zwarm spawn --dangerous`) and `zwarm trust`"
            )
        else:
            carry("[executor] sandbox", "codex", "sandbox", ex["sandbox"])
    effort = "reasoning_effort"
    codex = agents.get("codex", {})
    if "model_reasoning_effort" in codex:
        cfg = {"model_reasoning_effort": codex["model_reasoning_effort"]}
        carry("codex.toml model_reasoning_effort", "codex", "config", cfg)
    elif ex.get(effort):
        carry(f"[executor] {effort}", "codex", "config", {"model_reasoning_effort": ex[effort]})
    for agent, t in agents.items():
        if t.get("model"):
            carry(f"{agent}.toml model", agent, "model", t["model"])
        if "full_danger" in t:
            flag, now = "--dangerously-bypass-approvals-and-sandbox", "sandboxed"
            if agent == "claude":
                flag, now = "--dangerously-skip-permissions", "with its permission checks"
            was = f"{agent}.toml full_danger = {_show(t['full_danger'])}"
            if t["full_danger"]:  # 3.x: any true value (``.get("full_danger", False)``)
                up.unsafe.append(
                    f"{was} is not applied: zwarm 3.x ran every {agent} session with {flag} "
                    f"(no sandbox, no approvals); here {agent} runs {now} unless you set "
                    f"[{agent}] dangerous = true (or `zwarm spawn --dangerous`) and run "
                    "`zwarm trust`"
                )
            else:
                up.dropped.append(f"{was} (off, as here by default)")
        rest = sorted(set(t) - {"model", "full_danger", "model_reasoning_effort"})
        if rest:
            why = "codex -c overrides: [codex.config] takes them" if agent == "codex" else ""
            up.dropped.append(f"{agent}.toml {_names(rest)} ({why or 'no counterpart'})")
    if orch.get("lm"):
        carry("[orchestrator] lm", "orchestrator", "model", orch["lm"])
    if "max_steps" in orch:
        carry("[orchestrator] max_steps", "orchestrator", "max_steps", orch["max_steps"])
    if "parallel_delegations" in orch:
        v = orch["parallel_delegations"]
        carry("[orchestrator] parallel_delegations", "limits", "max_running", v)
    if comp.get("enabled") is False:
        carry("[orchestrator.compaction] enabled", "orchestrator", "compact_at", 0)
    else:
        pairs = (("max_tokens", "context_window"), ("threshold_pct", "compact_at"))
        for old, new in (*pairs, ("keep_last_n", "compact_keep")):
            if old in comp:
                carry(f"[orchestrator.compaction] {old}", "orchestrator", new, comp[old])
    for k in sorted(set(comp) - {"enabled", "max_tokens", "threshold_pct", "keep_last_n"}):
        up.dropped.append(f"[orchestrator.compaction] {_names([k])} (no counterpart)")
    used = {"lm", "max_steps", "parallel_delegations", "compaction"}
    rest = sorted((set(orch) & ZWARM3["orchestrator"]) - used)
    if rest:
        up.dropped.append(f"[orchestrator] {_names(rest)} (no counterpart)")
    gone = {"weave": "Weave tracing", "watchers": "watchers"}
    for table, what in gone.items():
        if table in doc:
            up.dropped.append(f"[{table}] ({what}: not part of this zwarm)")
    rest = sorted(set(ex) - {"adapter", "model", "timeout", "sandbox", effort})
    if rest:
        up.dropped.append(f"[executor] {_names(rest)} (no counterpart)")
    if "state_dir" in doc:
        up.dropped.append("state_dir (use --state-dir or ZWARM_DIR)")
    return up


@dataclass
class Plan:
    """An upgrade of the state dir ``root``: what it found, maps and would write."""

    root: Path
    found: list[str]  # the 3.x files read (names relative to root)
    up: Upgrade
    carried: list[str]  # "old = value -> [table] key = value", validated
    text: str  # the new config.toml
    raw: bytes | None  # the config.toml replaced (kept as BACKUP_SUFFIX), None if none
    needs_trust: list[str]  # its security settings ("table.key"), for `zwarm trust`

    @property
    def path(self) -> Path:
        return self.root / "config.toml"

    @property
    def backup(self) -> Path:
        return self.root / f"config.toml{BACKUP_SUFFIX}"


def plan(root: Path) -> Plan:
    """The upgrade of the 3.x settings in ``root`` (a state dir): ``InvalidInput`` if there
    are none, or if a backup of an earlier upgrade is in the way; ``ConfigError`` if a file
    cannot be read or zwarm's own part of config.toml is invalid."""
    import copy

    from zwarm import config as config_mod
    from zwarm.config_text import commented
    from zwarm.errors import ConfigError, InvalidInput
    from zwarm.system.files import read_file

    path = root / "config.toml"
    tables = config_mod.schema()
    doc = read_toml(path)
    raw = None
    if doc is not None:
        raw, _ = read_file(path, config_mod.MAX_CONFIG_BYTES, follow=True)
    agents = {}
    for name in AGENT_FILES:
        t = read_toml(root / name)
        if t is not None:
            agents[name.removesuffix(".toml")] = t
    own = copy.deepcopy(doc or {})
    names = split(own, tables)
    if not names and not agents:
        raise InvalidInput(f"no zwarm 3.x settings in {root}: nothing to upgrade")
    backup = root / f"config.toml{BACKUP_SUFFIX}"
    if raw is not None and os.path.lexists(backup):
        raise InvalidInput(
            f"{backup} already exists (an earlier upgrade's copy of the zwarm 3.x config): "
            "move it away to upgrade again"
        )
    found = (["config.toml"] if names else []) + [f"{a}.toml" for a in agents]
    data = config_mod.validate(own, str(path), tables)
    up = upgrade(doc or {}, agents)
    carried = []
    for old, was, table, key, value in up.mapped:
        try:
            checked = config_mod.validate({table: {key: value}}, "", tables)[table][key]
        except ConfigError as e:
            up.dropped.append(f"{old} = {_show(was)} (not carried over: {e.problem})")
            continue
        if isinstance(checked, dict):  # [codex] config: merged with what is there
            checked = {**data[table][key], **checked}
        data[table][key] = checked
        carried.append(f"{old} = {_show(was)} -> [{table}] {key} = {_show(value)}")
    if (root.parent / PROJECT_FILE).exists():
        up.dropped.append(
            f"../{PROJECT_FILE} (zwarm 3.x's project context for its orchestrator; not read "
            "here, left as it is)"
        )
    new = config_mod.Config(data)
    settings = config_mod.security_settings(data, config_mod.defaults().data)
    return Plan(root, found, up, carried, commented(new), raw, sorted(settings))


def write(p: Plan) -> None:
    """Write ``p``: the 3.x config.toml first kept as ``config.toml.zwarm3`` (never
    overwritten), then config.toml replaced atomically, if it is still what was read."""
    from zwarm import config as config_mod
    from zwarm.errors import InvalidInput, StoreError
    from zwarm.system.files import atomic_write, fsync_dir, read_file

    if p.raw is not None:
        try:
            now, _ = read_file(p.path, config_mod.MAX_CONFIG_BYTES, follow=True)
        except FileNotFoundError:
            now = None
        if now != p.raw:
            raise InvalidInput(f"{p.path} changed while upgrading: run it again")
        # the copy written whole and fsynced first, then linked in: never a partial backup,
        # never one over another, on disk before config.toml is replaced
        tmp = p.root / f".{p.backup.name}.{os.getpid()}.tmp"
        atomic_write(tmp, p.raw)
        try:
            os.link(tmp, p.backup)
        except FileExistsError:
            raise InvalidInput(f"{p.backup} already exists: move it away first") from None
        except OSError as e:
            raise StoreError(f"cannot write {p.backup}: {e.strerror}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        fsync_dir(p.root)
    atomic_write(p.path, p.text.encode("utf-8"))


def _table(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    t = doc.get(name)
    return dict(t) if isinstance(t, dict) else {}


def _names(keys: list[str]) -> str:
    """Keys a 3.x file has, as TOML writes them: one that is not bare is quoted and escaped
    (a file's key never puts a control character on the terminal)."""
    return ", ".join(k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _show(k) for k in keys)


def _show(v: Any) -> str:
    from zwarm.config_text import value

    try:
        return value(v)
    except (TypeError, ValueError):
        return repr(v)
