"""Every tool zwarm offers an LLM: its name, description, JSON Schema, handler and hints.

Owns ``TOOLS`` (in the order the surfaces list them) and the text a model reads about each
tool; ``delegate``'s and ``converse``'s arguments are the requests' fields named in
``DELEGATE`` and ``CONVERSE`` (those left out named with why), their schemas generated from
``zwarm.model.requests``, where each field's type, bounds and help are declared once. Must
stay true: a tool is declared here once and every surface (``zwarm tools``, ``zwarm mcp``,
``zwarm orchestrate``, ``Toolbox.dispatch``) is generated from it; each schema uses only what
``args`` checks; a description says what the tool does, when to use it and what it returns.
"""

from __future__ import annotations

from typing import Any

from zwarm import agents
from zwarm.config import SCHEMA
from zwarm.model import requests
from zwarm.model.requests import MessageRequest, SpawnRequest
from zwarm.orchestrator.tools.base import Tool, object_schema
from zwarm.orchestrator.tools.review import comment, get_diff, merge, merge_queue
from zwarm.orchestrator.tools.sessions import (
    LIST_LIMIT,
    check_session,
    converse,
    delegate,
    end_session,
    list_sessions,
)
from zwarm.orchestrator.tools.sets import best_of, compare, pick
from zwarm.orchestrator.tools.trajectory import get_trajectory
from zwarm.orchestrator.tools.waiting import wait


def _s(desc: str, **kw: Any) -> dict[str, Any]:
    return {"type": "string", "description": desc, **kw}


MAX_WAIT_S: float = SCHEMA["tools"]["max_wait_s"][1]  # what one wait call blocks, by default
_SESSION_ID = _s("Session id, unique id prefix (4+ chars) or session name.", minLength=1)

# what delegate and converse offer of the requests (zwarm.model.requests), which declare each
# field's type, bounds and help once; the fields left out, and why
DELEGATE = (
    "task", "adapter", "model", "cwd", "name", "timeout", "context", "notify", "worktree",
    "branch", "base", "host", "launcher", "launcher_option", "after", "after_any", "group",
    "priority", "account", "max_cost", "max_tokens", "stall", "detached",
)  # fmt: skip
DELEGATE_LEFT_OUT = {
    "dangerous": "bypassing the agent's sandbox is the user's decision ([<agent>] dangerous, "
    "zwarm spawn --dangerous), never a model's",
    "source": "who calls: the toolbox's source (mcp:<client>, orchestrate:<run>), not the model's",
    "run": "the orchestrator run calling: the toolbox's, not the model's to say",
    "sandbox": "zwarm's sandbox is the trusted config's ([sandbox] mode) or the user's "
    "(zwarm spawn --sandbox), never a model's to turn off",
    **dict.fromkeys(
        ("best_of", "agents", "models", "check", "check_timeout", "protect", "set_budget"),
        "a best-of set's: a set is started by its own call (Zwarm.best_of), not a session's",
    ),
}
# what best_of offers of SpawnRequest: the task, where, the set's own fields, and the caps
BEST_OF = (
    "task", "cwd", "base", "best_of", "agents", "models", "check", "check_timeout", "protect",
    "set_budget", "timeout", "context", "group", "priority", "max_cost", "max_tokens", "stall",
)  # fmt: skip
CONVERSE = ("message", "context", "timeout")
CONVERSE_LEFT_OUT: dict[str, str] = {}


def _delegate_schema() -> dict[str, Any]:
    """``SpawnRequest``'s ``DELEGATE`` fields; ``adapter`` one of the agents installed here."""
    schema = requests.object_schema(requests.subset(SpawnRequest, "delegate", DELEGATE))
    schema["properties"]["adapter"]["enum"] = list(agents.names())
    return schema


def _best_of_schema() -> dict[str, Any]:
    """``SpawnRequest``'s ``BEST_OF`` fields, ``best_of`` required."""
    schema = requests.object_schema(requests.subset(SpawnRequest, "best_of", BEST_OF))
    schema["required"] = ["task", "best_of"]
    return schema


_SET_ID = _s("A best-of set's id (set-...) or a unique prefix of it (set- and 4+ hex digits).")


def _converse_schema() -> dict[str, Any]:
    """The session, and ``MessageRequest``'s ``CONVERSE`` fields."""
    schema = requests.object_schema(requests.subset(MessageRequest, "converse", CONVERSE))
    schema["properties"] = {"session_id": _SESSION_ID, **schema["properties"]}
    schema["required"] = ["session_id", *schema["required"]]
    return schema


TOOLS: tuple[Tool, ...] = (
    Tool(
        "delegate",
        "zwarm: start a background coding agent (OpenAI Codex, Claude Code or Gemini CLI) "
        "on a task. Use it to hand coding work (a bug to fix, a feature, tests, a refactor, "
        "an investigation) to another agent that runs in the background while you keep "
        "working; start several for independent tasks (worktree=true gives each its own git "
        "worktree and branch, to review with get_diff and merge). Returns its session_id at "
        "once. Give a complete, self-contained task: the agent sees nothing else of this "
        "conversation. Then call wait to learn when it finishes.",
        _delegate_schema(),
        delegate,
    ),
    Tool(
        "converse",
        "zwarm: send a follow-up message to a background agent session (answer its question, "
        "ask for a fix, pass on review comments): it continues with the context of its "
        "earlier turns. If a turn is still running the message is queued and starts when it "
        "ends. Returns at once with state 'started' or 'queued' and the turn number; then "
        "call wait.",
        _converse_schema(),
        converse,
    ),
    Tool(
        "check_session",
        "zwarm: the state of one background agent session (to learn when sessions finish, "
        "call wait rather than polling this): status (running, stalled, queued, parked, "
        "completed, failed, killed), current turn, the agent's last message, error and its "
        "typed reason (rate_limited, usage_limit, budget_exceeded...), token usage, cost, "
        "queued messages, "
        "for a queued session its place in the queue and what it waits for, and the sessions "
        "it started (children) with its whole subtree's usage and cost.",
        object_schema({"session_id": _SESSION_ID}, ["session_id"]),
        check_session,
        read_only=True,
    ),
    Tool(
        "list_sessions",
        "zwarm: list the background agent sessions of the state dir this server serves "
        "(yours and others'), newest first, as compact rows, with that state dir and your "
        "caller name (you). Sessions that finished since you last looked are flagged new and "
        "listed in finished_since_last_look.",
        object_schema(
            {
                "status": _s(
                    "Only sessions with this status.",
                    enum=[
                        "running",
                        "stalled",
                        "queued",
                        "parked",
                        "completed",
                        "failed",
                        "killed",
                        "damaged",
                    ],
                ),
                "mine": {
                    "type": "boolean",
                    "description": "Only the sessions you started (default false).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": f"At most this many rows (default {LIST_LIMIT}).",
                },
            }
        ),
        list_sessions,
        read_only=True,
    ),
    Tool(
        "get_trajectory",
        "zwarm: what a background agent did in its session, step by step: messages, "
        "reasoning, shell commands with exit codes and output, file changes, tool calls, "
        "errors. Long outputs are shortened and, if the whole does not fit, the middle steps "
        "are left out; a note says what was cut. Use it to verify work, not just the agent's "
        "own claims.",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "turn": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Only this turn (default: all turns).",
                },
                "full": {
                    "type": "boolean",
                    "description": "Keep long texts much longer (default false).",
                },
            },
            ["session_id"],
        ),
        get_trajectory,
        read_only=True,
    ),
    Tool(
        "wait",
        "zwarm: wait for your background agents to finish: blocks until one of your "
        "background agent sessions finishes, instead of polling. Returns as soon as any of "
        "the given sessions finishes that you were not already told about (or, with "
        "all=true, when all have finished), or when the timeout passes: one call waits at "
        f"most {MAX_WAIT_S:g} s (the configured [tools] max_wait_s), then lists which "
        "finished and which still run; call wait again to keep waiting. Default sessions: "
        "every session you started that is running or finished without your being told.",
        object_schema(
            {
                "session_ids": {
                    "type": "array",
                    "items": _SESSION_ID,
                    "maxItems": 100,
                    "description": "Sessions to wait for (default: yours that run or have news).",
                },
                "timeout_s": {
                    "type": "number",
                    "minimum": 0,
                    "description": "Give up after this many seconds (capped).",
                },
                "all": {
                    "type": "boolean",
                    "description": "Wait for all of them instead of the first (default false).",
                },
            }
        ),
        wait,
        read_only=True,
    ),
    Tool(
        "end_session",
        "zwarm: stop a running background agent session (kills the agent and drops its "
        "queued messages). With "
        "delete=true also delete its files; a finished session can only be deleted.",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "delete": {
                    "type": "boolean",
                    "description": "Also delete the session's files (default false).",
                },
            },
            ["session_id"],
        ),
        end_session,
        destructive=True,
    ),
    Tool(
        "get_diff",
        "zwarm: exactly what a background agent session (or one of its turns) changed in its "
        "git working tree: the "
        "changed files with added/removed line counts and the unified diff, from snapshots "
        "zwarm takes before and after each turn. Review it before merge. Long diffs are "
        "cut to fit (a note names the files left out).",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "turn": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Only this turn (default: the whole session).",
                },
                "stat_only": {
                    "type": "boolean",
                    "description": "Only the files and line counts (default false).",
                },
            },
            ["session_id"],
        ),
        get_diff,
        read_only=True,
    ),
    Tool(
        "comment",
        "zwarm: attach a review comment to a line of a session's diff (get_diff). Open "
        "comments are sent to "
        "the agent, with the diff lines around them, at the start of your next converse.",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "path": _s("A changed file, relative to the repository's top.", minLength=1),
                "line": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The line (in the file as the session left it).",
                },
                "text": _s("What should change there, and why.", minLength=1),
            },
            ["session_id", "path", "line", "text"],
        ),
        comment,
    ),
    Tool(
        "merge",
        "zwarm: merge a finished worktree session's branch (its uncommitted work is "
        "committed first) into the main checkout's branch or another; review its get_diff "
        "first. Refused while it runs, or when "
        "it would write a file of the target that has uncommitted changes or that git does "
        "not track; a conflict is refused (nothing merged), listing the conflicting files, "
        "what was committed and what to do next.",
        object_schema(
            {
                "session_id": _SESSION_ID,
                "into": _s("The branch to merge into (default: the main worktree's)."),
                "squash": {
                    "type": "boolean",
                    "description": "One commit on the target instead of a merge (default false).",
                },
            },
            ["session_id"],
        ),
        merge,
    ),
    Tool(
        "merge_queue",
        "zwarm: the merge queue, for several finished worktree sessions at once: add their "
        "session ids and each is rebased onto the target branch in a temporary worktree, "
        "checked there with the user's configured [merge] check, and merged only if green, "
        "one after another; a conflict or a failing check ejects a session with a review "
        "comment (send=true: sent as its next turn, so its agent fixes it; converse or wait "
        "then). Without add, shows the queues: what was merged, waits, is held or was ejected "
        "and why. Review with get_diff first; the checks may take a while.",
        object_schema(
            {
                "add": {
                    "type": "array",
                    "items": _SESSION_ID,
                    "maxItems": 100,
                    "description": "Sessions to queue, in order (finished, with a worktree).",
                },
                "target": _s("The branch to merge into (default: the main worktree's)."),
                "priority": {
                    "type": "integer",
                    "minimum": -1000,
                    "maximum": 1000,
                    "description": "With add: higher goes first (default 0).",
                },
                "send": {
                    "type": "boolean",
                    "description": "With add: an ejected session gets its comment as its next "
                    "turn (default false).",
                },
                "run": {
                    "type": "boolean",
                    "description": "Process the queue now (default true with add, else false).",
                },
            },
        ),
        merge_queue,
    ),
    Tool(
        "best_of",
        "zwarm: run one coding task as N attempts at once (best_of), each by its own agent "
        "in its own git worktree from the same commit, agents and models round-robin over "
        "the lists given, so the best can be kept. Give check commands (e.g. 'pytest -q'): "
        "zwarm runs them itself in each attempt's worktree when its turn ends (sandboxed), "
        "and protect the test files they read (restored from the base; an attempt that "
        "changed them is flagged). Returns the set_id and each attempt's session_id at "
        "once; call wait on them, then compare, then pick.",
        _best_of_schema(),
        best_of,
    ),
    Tool(
        "compare",
        "zwarm: the attempts of a best-of set, ranked on the evidence zwarm gathered (not "
        "on what the agents said): every check passing first, then not flagged, then fewer "
        "changed lines, then lower cost, then shorter time. Each with its checks (exit code, "
        "a failed one's output tail), files and lines changed, tokens, cost and flags.",
        object_schema(
            {
                "set_id": _SET_ID,
                "rank": _s(
                    "Keys to rank by first, comma-separated: checks, flags, lines, cost, time."
                ),
            },
            ["set_id"],
        ),
        compare,
        read_only=True,
    ),
    Tool(
        "pick",
        "zwarm: merge the winner of a best-of set (the top-ranked attempt, or the one named) "
        "as merge does (every rule of merge holds), then remove the other attempts' "
        "worktrees, keeping their branches. Refused while an attempt runs or when none "
        "passes its checks, unless an attempt is named.",
        object_schema(
            {
                "set_id": _SET_ID,
                "attempt": {"type": "integer", "minimum": 1, "description": "The attempt."},
                "into": _s("The branch to merge into (default: the main worktree's)."),
                "squash": {
                    "type": "boolean",
                    "description": "One commit on the target instead of a merge (default false).",
                },
                "queue": {
                    "type": "boolean",
                    "description": "Through the merge queue instead (rebased, the user's [merge] "
                    "check run, merged only if green; default false).",
                },
            },
            ["set_id"],
        ),
        pick,
    ),
)

TOOL_NAMES = tuple(t.name for t in TOOLS)
