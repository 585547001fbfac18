"""What a model reads about zwarm's tools (issue 33): Claude Code and Codex hide MCP tools
behind a tool-search tool, so each description must say what zwarm is and when to use the
tool, in the words a model searches with; the MCP server's instructions say how the tools fit
together (worktrees, diffs, merge, wait called again)."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from zwarm.config import SCHEMA
from zwarm.orchestrator import mcp_server
from zwarm.orchestrator.tools import MAX_WAIT_S, TOOLS

pytestmark = pytest.mark.unit

DESCRIPTIONS = {t.name: t.description for t in TOOLS}
NEEDS = {  # what each description must mention (lower case)
    "delegate": ["background coding agent", "codex", "claude code", "gemini cli", "wait"],
    "converse": ["follow-up", "background agent session", "queued", "wait"],
    "check_session": ["background agent session", "call wait rather than polling"],
    "list_sessions": ["background agent sessions", "state dir", "new"],
    "get_trajectory": ["background agent", "step by step", "verify"],
    "wait": ["background agent sessions", "polling", f"at most {MAX_WAIT_S:g} s", "wait again"],
    "end_session": ["stop", "background agent session"],
    "get_diff": ["background agent session", "changed", "before merge"],
    "comment": ["review comment", "get_diff", "converse"],
    "merge": ["worktree session", "get_diff", "conflict"],
    "merge_queue": ["worktree sessions", "rebased", "check", "ejects", "review comment"],
    "best_of": ["attempts", "worktree", "check commands", "protect", "compare", "pick"],
    "compare": ["best-of set", "evidence", "not on what the agents said", "checks"],
    "pick": ["best-of set", "merge", "refused", "none passes"],
}


def test_each_description_says_zwarm_and_what_its_tool_is_for() -> None:
    assert set(NEEDS) == set(DESCRIPTIONS)
    for name, text in DESCRIPTIONS.items():
        assert text.startswith("zwarm: "), name
        missing = [w for w in NEEDS[name] if w not in text.lower()]
        assert missing == [], f"{name}: {missing}"


def test_the_wait_cap_said_is_the_configured_default() -> None:
    assert SCHEMA["tools"]["max_wait_s"][1] == MAX_WAIT_S


def test_the_instructions_say_how_the_tools_fit_together() -> None:
    text = mcp_server.INSTRUCTIONS.lower()
    for words in ("background", "codex", "claude code", "gemini cli", "worktree", "get_diff",
                  "merge", f"at most {MAX_WAIT_S:g} s", "call it again"):  # fmt: skip
        assert words in text, words


STOP = {"a", "an", "and", "for", "in", "is", "it", "its", "of", "on", "or", "the", "to", "with"}


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP]


def _bm25(query: str, docs: dict[str, str], k1: float = 1.2, b: float = 0.75) -> list[str]:
    """``docs``' names, best match of ``query`` first (Okapi BM25, as tool searches rank)."""
    bags = {n: Counter(_words(f"{n.replace('_', ' ')} {text}")) for n, text in docs.items()}
    avg = sum(sum(c.values()) for c in bags.values()) / len(bags)
    scores = dict.fromkeys(docs, 0.0)
    for term in set(_words(query)):
        having = sum(1 for c in bags.values() if term in c)
        idf = math.log(1 + (len(bags) - having + 0.5) / (having + 0.5))
        for name, c in bags.items():
            tf, size = c[term], sum(c.values())
            scores[name] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * size / avg))
    return sorted(scores, key=lambda n: -scores[n])


def test_a_search_for_a_background_coding_agent_finds_delegate() -> None:
    """The query of issue 33 (a search that found Claude's own Task tools, never zwarm's),
    ranked over zwarm's tools: delegate comes first."""
    for query in (
        "start a background coding agent on a task",
        "run codex on a task in the background",
        "delegate work to claude code",
    ):
        assert _bm25(query, DESCRIPTIONS)[0] == "delegate", query
    assert _bm25("wait for a background agent to finish", DESCRIPTIONS)[0] == "wait"
    assert _bm25("merge a worktree branch", DESCRIPTIONS)[0] == "merge"
