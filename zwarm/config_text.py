"""The ``config.toml`` that ``zwarm init`` writes: every key, its value, and one line saying
what it does.

Owns the one-line description of each of zwarm's own keys (``DOCS``) and of the keys every
agent table has (``COMMON_DOCS``); an agent's own keys are described by the agent, a
launcher's by the launcher (``Setting.doc``). Must stay true: the text written parses back
(``tomllib``) to exactly the config it was made from; every key line is directly below its
comment line; nothing here names an agent or a launcher; ``tomli_w`` is imported only here,
when writing.
"""

from __future__ import annotations

import re
from typing import Any

from zwarm.config import FAMILY, Config, schema

HEAD = """\
# .zwarm/config.toml, written by `zwarm init`: every key zwarm reads, each with what it does.
# Unknown keys and wrong types are errors naming this file and the key. Keys that decide what
# runs (agent commands and sandboxes, hooks, the orchestrator's endpoint) take effect only
# once you have reviewed the file with `zwarm trust`; a limit (caps, budgets, prices) may be
# lowered freely, raised only so. .zwarm.example/config.toml says more.
"""

DOCS: dict[str, dict[str, str]] = {
    "defaults": {
        "adapter": "Agent used when neither --adapter nor a recognisable --model picks one.",
        "model": 'Model used when none is given; "" = let the agent use its own default.',
        "context": 'How inject continues: "summary" (a new run told the history) or "native".',
        "timeout": "Time limit of each turn, in seconds (follow-ups too); 0 = none.",
        "workspace": 'Where a session works: "shared" (its directory) or "worktree" (its own).',
        "host": 'Host the sessions run on ([hosts.NAME], over ssh); "" = this machine.',
    },
    "workspace": {
        "root": 'Where worktrees are made; "" = $XDG_DATA_HOME/zwarm/worktrees.',
        "setup": "Commands run in a new worktree before its first turn.",
        "copy": "Git-ignored files copied from the repository into a new worktree (.env...).",
        "link": "Git-ignored paths linked into a new worktree from the repository.",
    },
    "summary": {
        "budget_chars": "Characters of history a summary-mode follow-up prompt may carry.",
        "full_turns": "How many of the latest turns a follow-up summarises in full.",
    },
    "tools": {
        "allowed_roots": "Directories an orchestrator LLM may start agents in (and below).",
        "max_wait_s": "Longest one wait tool call blocks, in seconds.",
        "trajectory_chars": "Characters of trajectory one get_trajectory call returns at most.",
        "diff_chars": "Characters of diff one tool call returns at most.",
    },
    "orchestrator": {
        "base_url": 'Chat Completions endpoint of `zwarm orchestrate`; "" = api.openai.com.',
        "model": "Model of the orchestrator LLM.",
        "api_key_env": "Environment variable holding its API key.",
        "max_steps": "LLM calls in one invocation (--resume continues with as many more).",
        "max_tokens": "Stop when the run has used this many orchestrator tokens; 0 = no limit.",
        "max_cost_usd": "Stop when the run's cost (orchestrator + agents) passes this; 0 = none.",
        "bash_timeout_s": "Time limit of the orchestrator's read-only bash tool, in seconds.",
        "bash_writable": "true = the bash tool may write the project in zwarm's sandbox.",
        "prices": "Orchestrator model prices, USD per 1M tokens: {input, cached_input, output}.",
        "context_window": "The orchestrator model's context, in tokens; 0 = known by model.",
        "compact_at": "Compact the run's transcript past this share of the window; 0 = never.",
        "compact_model": 'Model that writes compaction summaries; "" = the orchestrator model.',
        "compact_keep": "Latest messages a compaction keeps verbatim (with the task).",
        "max_attempts": "Tries per model request on transient errors (5xx, 429, connection).",
        "retry_backoff_s": "First wait before a retry, in seconds (doubles, with jitter).",
    },
    "limits": {
        "max_running": "Sessions running at once in this state dir; more wait queued. 0 = any.",
        "max_cost": "Default budget of each session, USD: over it, it ends failed. 0 = none.",
        "max_tokens": "Default budget of each session, total tokens. 0 = none.",
        "max_cost_per_day": "New sessions queue once today's spend reaches this, USD. 0 = none.",
        "stall_s": "A turn whose agent writes nothing this long is shown stalled. 0 = never.",
        "on_stall": '"mark": only show it stalled; "kill": stop it, failed (reason stalled).',
        "on_usage_limit": '"fail"; "wait": park a turn hit by a usage limit; "switch": another '
        "account.",
        "usage_limit_fallback": "An account's cooldown when its agent gives no reset time, s.",
        "max_auto_resumes": "How many times a parked session is resumed by itself.",
        "resume_backoff_s": "Wait before resuming when the agent gives no reset time (doubles).",
        "max_spawn_depth": "Deepest delegation: a session started by an agent of depth N is "
        "N+1. 0 = any.",
    },
    "groups": {},
    "accounts": {},
    "hooks": {
        "on_finish": 'Run when a session ends, its JSON on stdin ("" = none; str: sh -c).',
        "on_fail": "Also run when a session ends failed (not killed); as on_finish.",
        "timeout_s": "Time limit of each hook, in seconds (then it is killed; see hooks.log).",
    },
    "launcher": {
        "default": "What runs new sessions' turns, an installed launcher: ",  # + their names
    },
    "sandbox": {
        "mode": '"bwrap": each turn in bubblewrap (its worktree writable, its endpoint only).',
        "ports": "More loopback ports its agents may reach (their *_BASE_URL ones always).",
        "read_only": "More absolute paths the agents may read inside the sandbox.",
        "hosts": 'More "host:port" the sandbox\'s proxy lets the agents reach by name.',
        "resolve": "Host name -> address for the sandbox's proxy, instead of DNS.",
        "memory": 'Each sandboxed turn\'s memory limit, e.g. "2G" ("" = none).',
        "cpus": "Each sandboxed turn's CPU limit, in CPUs (e.g. 1.5; 0 = none).",
        "pids": "Each sandboxed turn's limit on processes and threads (0 = none).",
    },
    "checks": {
        "unsandboxed": "true = run checks (code the agents wrote) unsandboxed where the "
        "sandbox cannot.",
    },
    "merge": {
        "check": 'What every merge queue entry must pass, e.g. ["pytest -q"] (each sh -c).',
        "mode": '"rebase" (each entry rebased onto the target) or "merge" (a merge commit).',
        "check_timeout_s": "Time limit of each check command, in seconds (then it fails).",
    },
}

COMMON_DOCS = {
    "command": 'The agent\'s executable: a string, or an argv list like ["npx", "codex"].',
    "model": "Model for this agent's sessions; \"\" = the agent's own default.",
    "dangerous": "true = no sandbox/permission checks for every session (shown as !danger).",
    "extra_args": "Extra arguments for every turn (the prompt always goes on stdin).",
    "env": "Extra environment variables for the agent.",
    "prices": "USD per 1M tokens by model: {input, cached_input, output}, for cost estimates.",
    "max_running": "This agent's sessions running at once; more wait queued. 0 = any.",
}

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+\Z")


def describe(table: str, key: str) -> str:
    """The one-line description of ``table.key``."""
    from zwarm import agents, launchers

    if (table, key) == ("launcher", "default"):
        text = DOCS[table][key] + ", ".join(f'"{n}"' for n in launchers.loaded()) + "."
        return text if len(text) <= 96 else text[:92] + ", ..."
    if table == "sandbox" and key not in DOCS[table]:
        return f'The {key} agent\'s own sandbox mode and limits, e.g. {{ memory = "1G" }}.'
    if table in DOCS:
        return DOCS[table].get(key, key)
    if table in launchers.names():
        got = launchers.settings_of(table).get(key)
        return (got.doc if got is not None else "") or f"The {table} launcher's {key!r} setting."
    setting = agents.get(table).config_schema().get(key)
    doc = setting.doc if setting is not None else ""
    return doc or COMMON_DOCS.get(key) or f"The {table} agent's {key!r} setting."


def commented(config: Config, tables: dict[str, dict[str, Any]] | None = None) -> str:
    """``config`` as TOML, each key under a comment saying what it does (``tables``: the
    schema, default ``schema()``)."""
    parts = [HEAD]
    for table, keys in (schema() if tables is None else tables).items():
        parts.append(f"\n[{table}]\n")
        if FAMILY in keys:  # a launcher's family of named tables: an example, then the members
            parts.append(_family(table, keys[FAMILY][1], config.data[table]))
            continue
        for key in keys or config.data[table]:  # [groups]: the configured groups
            parts.append(f"# {describe(table, key)}\n{key} = {value(config.data[table][key])}\n")
    return "".join(parts)


def _family(table: str, family: Any, members: dict[str, Any]) -> str:
    """A family's table (``[hosts]``): its doc, a commented-out example member (one inline
    table), each key's doc, then the configured members, one inline table each."""
    lines = [f"# {family.doc}\n"] if family.doc else []
    if family.example:
        lines.append(f"# For example ([{table}.a]; a key left out is unset):\n")
        lines.append(f"#   a = {value(dict(family.example))}\n")
    lines += [f"# {key}: {setting.doc}\n" for key, setting in family.settings.items()]
    lines += [f"{_key(name)} = {value(member)}\n" for name, member in members.items()]
    return "".join(lines)


def value(v: Any) -> str:
    """One TOML value, inline (tables as inline tables)."""
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = ", ".join(f"{_key(k)} = {value(x)}" for k, x in v.items())
        return "{ " + items + " }"
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    import tomli_w

    text = tomli_w.dumps({"v": v})
    return text[len("v = ") :].rstrip("\n")


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else value(k)
