"""``zwarm pick --judge MODEL``: an LLM breaks a tie among a best-of set's attempts.

Owns the judge's prompt and reading its answer. The evidence decides first
(``ops.bestof.ties``: the attempts that all passed, none flagged, changed lines within 10%
of the best's); only among those does the judge choose, through the orchestrator's endpoint
(``[orchestrator]``: base URL and key, as ``zwarm orchestrate`` resolves them, the model
given). Must stay true: it never overrides the evidence (``Zwarm.pick`` refuses a choice
outside the tie); what the attempts wrote reaches the model only as their diffs, each cut to
``DIFF_CHARS`` and redacted of every secret a run redacts (``loop.known_secrets``), and only to
that endpoint; an answer that names no tied attempt is an error, never a silent default.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from zwarm.errors import OrchestratorError

if TYPE_CHECKING:
    from zwarm.api import Zwarm

DIFF_CHARS = 12_000  # of each tied attempt's diff, in the judge's prompt
SYSTEM = (
    "You break a tie between attempts at one coding task. They passed the same checks and "
    "changed about as many lines: the evidence cannot choose. Read the task and each "
    "attempt's diff, and choose the one a careful reviewer would merge (correctness beyond "
    "the checks, clarity, fit with the code around it). Answer with one JSON object and "
    'nothing else: {"attempt": <its number>, "reason": "<one or two sentences>"}.'
)


def decide(api: Zwarm, ref: str, model: str) -> dict[str, Any] | None:
    """The judge's choice among the attempts of set ``ref`` tied on the evidence
    (``model``, ``attempt``, ``reason``, ``among``), or None when nothing ties."""
    from zwarm.orchestrator.chat import OpenAIChat
    from zwarm.orchestrator.loop import known_secrets, resolve_settings
    from zwarm.text import elide

    v = api.compare(ref)
    tied = v["ties"]
    if not tied:
        return None
    url = "[orchestrator] base_url (or ZWARM_ORCH_BASE_URL)"  # pick has no --base-url
    settings = resolve_settings(api, {"model": model}, url_flag=url)
    secrets = known_secrets(api, settings)
    parts = [f"The task:\n{v['task']}\n"]
    rows = {a["attempt"]: a for a in v["attempts"]}
    for n in tied:
        diff = api.diff(rows[n]["session"], hunks=False, text=True)["text"]
        shown = elide(diff, DIFF_CHARS, sep="\n")
        parts.append(f"Attempt {n} ({rows[n]['lines']} lines changed):\n```diff\n{shown}\n```\n")
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": secrets.redact("\n".join(parts))},
    ]
    reply = OpenAIChat(settings).complete(messages, [])
    text = str(reply.message.get("content") or "")
    answer = _answer(text)
    if answer is None or answer.get("attempt") not in tied:
        raise OrchestratorError(
            f"the judge ({model}) named no tied attempt ({', '.join(map(str, tied))}) in its "
            f"answer: {text[:200]!r}; nothing merged (pick without --judge, or name one)"
        )
    return {"model": model, "attempt": answer["attempt"], "reason": str(answer.get("reason", "")),
            "among": tied}  # fmt: skip


def _answer(text: str) -> dict[str, Any] | None:
    """The JSON object in the judge's answer (alone, or the first ``{...}`` in it)."""
    for candidate in (text.strip(), *re.findall(r"\{[^{}]*\}", text)):
        try:
            got = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(got, dict):
            return got
    return None
