"""The spawn and follow-up options are one request type offered by three front ends: a bad
value through ``zwarm serve``'s HTTP API is refused with the words the ``delegate`` and
``converse`` tools of ``zwarm mcp`` use for it (the HTTP body used to carry msgspec's own
"Expected `float` > 0.0 - at `$.timeout`"). Real servers, the MCP SDK's own client."""

from __future__ import annotations

import anyio
import pytest

from tests.support.mcp_client import connect
from tests.support.serve import Server

pytestmark = pytest.mark.timeout(240)

SPAWN_BAD = [
    {"task": ""},
    {"task": "x", "timeout": -1},
    {"task": "x", "timeout": 0},
    {"task": "x", "timeout": "soon"},
    {"task": "x", "max_cost": -1},
    {"task": "x", "max_tokens": 0},
    {"task": "x", "max_tokens": 1.5},
    {"task": "x", "stall": 0},
    {"task": "x", "priority": 99_999_999},
    {"task": "x", "context": "x"},
    {"task": "x", "notify": "yes"},
    {"task": "x", "after": [""]},
    {"task": "x", "launcher_option": "partition=a"},
    {"task": "x", "model": ""},
]
MESSAGE_BAD = [{"message": ""}, {"message": "x", "timeout": -2}, {"message": "x", "context": 1}]


def test_a_bad_option_reads_the_same_over_http_as_through_the_tools(zw, serve) -> None:
    srv: Server = serve()
    made = srv.post("/api/sessions", {"task": "a session to continue"})
    assert made.status == 201, made.body
    sid = made.json()["id"]
    http: list[str] = []
    for body in SPAWN_BAD:
        r = srv.post("/api/sessions", body)
        assert r.status == 422, (body, r.body)
        http.append(r.json()["error"])
    for body in MESSAGE_BAD:
        r = srv.post(f"/api/sessions/{sid}/messages", body)
        assert r.status == 422, (body, r.body)
        http.append(r.json()["error"])

    tools: list[str] = []

    async def main() -> None:
        async with connect(zw) as (_, call):
            for body in SPAWN_BAD:
                bad, d = await call("delegate", body)
                assert bad, (body, d)
                tools.append(d["error"])
            for body in MESSAGE_BAD:
                bad, d = await call("converse", {"session_id": sid, **body})
                assert bad, (body, d)
                tools.append(d["error"])

    anyio.run(main)
    for body, over_http, by_tool in zip([*SPAWN_BAD, *MESSAGE_BAD], http, tools, strict=True):
        assert over_http == f"invalid request body: {by_tool}", body


# A request the schema takes but zwarm refuses, and how each front end names its fields: the
# engine names the request field (``errors.naming``); the CLI spells it as its option, the
# HTTP API (and the tools: tests/orchestrator/test_tools.py) as the JSON key.
NAMED_BAD = [
    ({"after_any": True}, ["--after-any"], "after_any needs after", "--after-any needs --after"),
    ({"branch": "b1"}, ["--branch", "b1"], "branch and base need worktree",
     "--branch and --base need --worktree"),
    ({"group": "wbe"}, ["--group", "wbe"], "group 'wbe' is not declared (declared groups: web)",
     "--group 'wbe' is not declared (declared groups: web)"),
    ({"account": "nope"}, ["--account", "nope"], "account nope: claude has no such account",
     "--account nope: claude has no such account"),
]  # fmt: skip


def test_each_front_end_names_a_refused_field_its_own_way(zw, serve) -> None:
    from tests.support.fleet import configure

    configure(zw, "[groups.web]\nmax_running = 1\n")
    srv: Server = serve()
    for body, argv, over_http, at_cli in NAMED_BAD:
        r = srv.post("/api/sessions", {"task": "x", "adapter": "claude", **body})
        assert r.status in (409, 422) and r.json()["error"].startswith(over_http), (body, r.body)
        assert "--" not in r.json()["error"], r.body
        res = zw.run("spawn", "x", "--adapter", "claude", *argv)
        assert res.returncode == 1 and res.stderr.startswith(f"Error: {at_cli}"), res.stderr
    assert zw.json("ls") == []
