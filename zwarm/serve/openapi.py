"""The OpenAPI description of ``zwarm serve``'s HTTP API (served at ``/api/openapi.json``).

Owns the description only. Must stay true: the request bodies' schemas are made from the
Structs that validate them (``zwarm.serve.bodies``), and every route ``zwarm.serve.app``
serves is described here (``tests/serve`` checks both).
"""

from __future__ import annotations

from typing import Any

import msgspec

from zwarm import __version__
from zwarm.serve import bodies

JSON = "application/json"
SSE = "text/event-stream"


def spec(diff: bool, mcp: bool) -> dict[str, Any]:
    (spawn, message, best_of, merges), components = msgspec.json.schema_components(
        [bodies.Spawn, bodies.Message, bodies.BestOf, bodies.Merges],
        ref_template="#/components/schemas/{name}",
    )
    schemas = {**components, "Error": _ERROR, "Session": _SESSION}
    paths = {
        "/api/info": {"get": _op("What this server offers (agents, defaults, features).")},
        "/api/openapi.json": {"get": _op("This description.")},
        "/api/sessions": {
            "get": _op(
                "Every session as a row, oldest first (as `zwarm ls --json`).",
                params=[
                    _q("status", "Only sessions in this state."),
                    _q("name", "Only names matching this glob."),
                    _q("adapter", "Only this agent's sessions."),
                    _q("source", "Only sessions started by (a glob)."),
                    _q("limit", "Only the N newest.", "integer"),
                ],
                schema={"type": "array", "items": _ref("Session")},
            ),
            "post": _op(
                "Start a session (as `zwarm spawn`); its cwd must be inside [tools] allowed_roots.",
                body=spawn,
                status="201",
                schema=_ref("Session"),
            ),
        },
        "/api/sessions/{ref}": {
            "get": _op("A session and each of its turns (as `zwarm show --json`).", ref=True),
            "delete": _op(
                "Remove a session and its files (as `zwarm rm`).",
                ref=True,
                params=[_q("force", "Also a running (killed first) or damaged one.", "boolean")],
            ),
        },
        "/api/sessions/{ref}/trajectory": {
            "get": _op(
                "What the agent did, step by step: {steps, problems}.",
                ref=True,
                params=[
                    _q("turn", "Only this turn.", "integer"),
                    _q("full", "Do not cut long texts (else cut to 4,000 characters).", "boolean"),
                ],
            )
        },
        "/api/sessions/{ref}/messages": {
            "post": _op(
                "Continue a session (as `zwarm inject`); queued if a turn runs.",
                ref=True,
                body=message,
            )
        },
        "/api/sessions/{ref}/kill": {
            "post": _op("Kill a session's agent (its whole process tree).", ref=True)
        },
        "/api/sessions/{ref}/stream": {"get": _stream_op()},
        "/api/events": {"get": _events_op()},
        "/api/sets": {
            "post": _op(
                "Start a best-of set (as `zwarm spawn --best-of`): N attempts of one task, each "
                "in its own worktree; its cwd must be inside [tools] allowed_roots.",
                body=best_of,
                status="201",
            )
        },
        "/api/sets/{ref}": {
            "get": _op(
                "A best-of set's attempts ranked on zwarm's evidence (as `zwarm compare --json`).",
                ref=True,
                of_set=True,
                params=[_q("rank", "Keys to rank by first: checks, flags, lines, cost, time.")],
            )
        },
        "/api/sets/{ref}/messages": {
            "post": _op(
                "A follow-up to every attempt of a set still in the running (as `zwarm inject`).",
                ref=True,
                of_set=True,
                body=message,
            )
        },
        "/api/accounts": {
            "get": _op("Each agent account's state now (as `zwarm accounts --json`).")
        },
        "/api/usage": {
            "get": _op(
                "Tokens and cost of the recorded turns, totalled (as `zwarm usage --json`).",
                params=[
                    _q("by", "account (default), agent, model, day, group or set."),
                    _q("since", "Only turns from this local day on (YYYY-MM-DD)."),
                ],
            )
        },
        "/api/merges": {
            "get": _op(
                "The merge queues: entries with state (testing, waiting, held, merged, ejected, "
                "removed) and why (as `zwarm merges --json`).",
                params=[_q("target", "Only the queue of this branch.")],
                schema={"type": "array", "items": {"type": "object"}},
            ),
            "post": _op(
                "Queue finished worktree sessions for the merge queue and run it (as `zwarm "
                "merge --queue`); the checks are the trusted [merge] check.",
                body=merges,
            ),
        },
        "/api/merges/run": {
            "post": _op(
                "Process the merge queues now, to completion.",
                params=[_q("target", "Only the queue of this branch.")],
            )
        },
        "/api/merges/pause": {
            "post": _op(
                "Pause a merge queue.", params=[_q("target", "Only the queue of this branch.")]
            )
        },
        "/api/merges/resume": {
            "post": _op(
                "Resume a merge queue.", params=[_q("target", "Only the queue of this branch.")]
            )
        },
        "/api/merges/{ref}": {
            "delete": _op(
                "Take a session out of its merge queue.",
                ref=True,
                params=[_q("target", "Only the queue of this branch.")],
            )
        },
    }
    if diff:
        paths["/api/sessions/{ref}/diff"] = {
            "get": _op(
                "What a session (or one turn) changed in its git workspace.",
                ref=True,
                params=[
                    _q("turn", "Only this turn.", "integer"),
                    _q("text", "Include the unified diff.", "boolean"),
                    _q("stat", "Files and line counts only (no hunks).", "boolean"),
                ],
            )
        }
    if mcp:
        paths["/mcp"] = {
            "post": {
                "summary": "zwarm's orchestrator tools over MCP (streamable HTTP transport).",
                "responses": {"200": {"description": "MCP messages"}},
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": "zwarm", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"token": []}],
    }


_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "type": {"type": "string"}},
    "required": ["error"],
}
_SESSION = {
    "type": "object",
    "description": "A session row, as `zwarm ls --json` prints it.",
    "properties": {
        k: {"type": t}
        for k, t in {
            "id": "string",
            "name": ["string", "null"],
            "adapter": "string",
            "model": ["string", "null"],
            "status": "string",
            "task": "string",
            "turns": "integer",
            "usage": ["object", "null"],
            "cost_usd": ["number", "null"],
            "cost_complete": "boolean",
            "created_at": "string",
        }.items()
    },
    "additionalProperties": True,
}
_ERRORS = {
    "401": "no valid token",
    "403": "refused (Host, Origin, or not allowed)",
    "404": "no such session",
    "409": "ambiguous reference, or not in a state that allows it",
    "422": "bad input",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _q(name: str, about: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "description": about, "schema": {"type": kind}}


def _op(
    summary: str,
    *,
    ref: bool = False,
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    status: str = "200",
    schema: dict[str, Any] | None = None,
    of_set: bool = False,
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary}
    all_params = list(params or [])
    if ref:
        about = "A session id, a unique prefix of it (4+ characters), or its name."
        if of_set:
            about = "A best-of set's id (set-...), or a unique prefix of it (set- and 4+ digits)."
        all_params.insert(
            0, {"name": "ref", "in": "path", "required": True, "description": about,
                "schema": {"type": "string"}}
        )  # fmt: skip
    if all_params:
        op["parameters"] = all_params
    if body is not None:
        op["requestBody"] = {"required": True, "content": {JSON: {"schema": body}}}
    ok: dict[str, Any] = {"description": "done"}
    ok["content"] = {JSON: {"schema": schema or {"type": "object"}}}
    op["responses"] = {status: ok, **{k: _error(v) for k, v in _ERRORS.items()}}
    return op


def _error(about: str) -> dict[str, Any]:
    return {"description": about, "content": {JSON: {"schema": _ref("Error")}}}


def _stream_op() -> dict[str, Any]:
    return {
        "summary": (
            "A session live, as server-sent events: `session` (the session now, then each "
            "change), `turn` (started, ended), `step` (each normalized step as it is written), "
            "`idle`, `removed`. A step's id is TURN.OFFSET.RANK; reconnect with Last-Event-ID "
            "(or ?after=) to get exactly what was missed."
        ),
        "parameters": [
            {"name": "ref", "in": "path", "required": True, "schema": {"type": "string"}},
            _q("after", "Resume after this event id (as Last-Event-ID)."),
            _q("turn", "Start at this turn (default 1).", "integer"),
            _q("until_idle", "End the stream once the session is idle.", "boolean"),
        ],
        "responses": {"200": {"description": "events", "content": {SSE: {}}}},
    }


def _events_op() -> dict[str, Any]:
    return {
        "summary": (
            "Every session's changes as server-sent events: `snapshot` (every row), then "
            "`session` (a row that changed, with `activity` and `live_tokens` while it runs) "
            "and `removed`. Reconnect with Last-Event-ID to get what was missed (or a new "
            "snapshot when it is no longer kept)."
        ),
        "parameters": [_q("after", "Resume after this event id (as Last-Event-ID).")],
        "responses": {"200": {"description": "events", "content": {SSE: {}}}},
    }
