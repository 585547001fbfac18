"""``zwarm serve``'s HTTP API over a real server: every route against what the CLI says, errors
and their status codes, the access token, Host and Origin checks, body limits, the OpenAPI
description, MCP at /mcp, and the token file."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until
from tests.support.serve import Server

pytestmark = pytest.mark.timeout(240)


def _done(zw: Any, sid: str) -> bool:
    return zw.meta(sid)["status"] in ("completed", "failed", "killed")


def test_every_route_answers_as_the_cli_does(zw, serve) -> None:
    srv: Server = serve(env_extra=zw.replay("codex_toolcall"))
    r = srv.post("/api/sessions", {"task": "write out.txt", "name": "first"})
    assert r.status == 201, r.body
    sid = r.json()["id"]
    assert r.json()["name"] == "first" and r.json()["source"] == "serve"
    wait_until(lambda: _done(zw, sid), message="the session to finish")

    listed = srv.get("/api/sessions")
    assert listed.status == 200 and listed.json() == zw.json("ls")
    assert srv.get("/api/sessions?name=fir*").json() == zw.json("ls", "--name", "fir*")
    assert srv.get("/api/sessions?status=running").json() == []
    assert [r["id"] for r in srv.get("/api/sessions?limit=1").json()] == [sid]
    assert srv.get(f"/api/sessions/{sid[:6]}").json() == zw.json("show", sid)

    traj = srv.get(f"/api/sessions/{sid}/trajectory?full=1").json()
    assert traj == {"steps": zw.json("trajectory", sid), "problems": []}
    kinds = [s["kind"] for s in traj["steps"]]
    assert kinds == ["reasoning", "message", "command", "message"]
    assert srv.get("/api/sessions/first/trajectory?turn=1").json()["steps"] == traj["steps"]

    r = srv.post(f"/api/sessions/{sid}/messages", {"message": "and again"})
    assert r.status == 200, r.body
    assert r.json()["state"] == "started" and r.json()["turn"] == 2
    wait_until(lambda: _done(zw, sid) and len(zw.meta(sid)["turns"]) == 2)
    assert srv.get(f"/api/sessions/{sid}").json()["turns"] == 2
    assert srv.get("/api/accounts").json() == zw.json("accounts") == []
    assert srv.get("/api/usage?by=day").json() == zw.json("usage", "--by", "day")
    bad = srv.get("/api/usage?by=colour")
    assert bad.status == 422 and "--by must be one of account" in bad.json()["error"], bad.body

    r = srv.delete(f"/api/sessions/{sid}")
    assert r.status == 200 and r.json() == {"removed": [sid]}
    assert srv.get(f"/api/sessions/{sid}").status == 404
    assert zw.json("ls") == []


def test_kill_and_remove_a_running_session(zw, serve) -> None:
    srv = serve(env_extra=zw.replay("codex_toolcall", FAKE_HANG="2"))
    sid = srv.post("/api/sessions", {"task": "hang"}).json()["id"]
    wait_until(lambda: len(zw.meta(sid)["turns"]) == 1 and zw.meta(sid)["status"] == "running")

    refused = srv.delete(f"/api/sessions/{sid}")
    assert refused.status == 409 and "kill it first" in refused.json()["error"]
    r = srv.post(f"/api/sessions/{sid}/kill")
    assert r.status == 200 and r.json()["status"] == "killed" and r.json()["id"] == sid
    assert zw.json("show", sid)["status"] == "killed"
    again = srv.post(f"/api/sessions/{sid}/kill")
    assert again.status == 409 and again.json()["type"] == "SessionStateError"
    cli = zw.run("kill", sid)
    assert again.json()["error"] in cli.stderr  # the same message as the CLI's

    sid2 = srv.post("/api/sessions", {"task": "hang again"}).json()["id"]
    wait_until(lambda: zw.meta(sid2)["status"] == "running")
    assert srv.delete(f"/api/sessions/{sid2}?force=1").json() == {"removed": [sid2]}


def test_errors_have_the_cli_message_and_a_status(zw, serve) -> None:
    srv = serve(env_extra=zw.replay("codex_simple"))
    r = srv.get("/api/sessions/nothere")
    assert r.status == 404 and r.json()["type"] == "SessionNotFound"
    assert r.json()["error"] in zw.run("show", "nothere").stderr

    sid = srv.post("/api/sessions", {"task": "hi"}).json()["id"]
    wait_until(lambda: _done(zw, sid))
    twin = _twin(zw, sid)  # another session whose id starts with the same 8 characters
    r = srv.get(f"/api/sessions/{sid[:8]}")
    assert r.status == 409 and r.json()["type"] == "AmbiguousSession"
    assert sorted(r.json()["candidates"]) == sorted([sid, twin])

    bad = [
        ("GET", "/api/sessions?status=sleeping", None, 422),
        ("GET", f"/api/sessions/{sid}/trajectory?turn=0", None, 422),
        ("GET", f"/api/sessions/{sid}/trajectory?turn=7", None, 422),
        ("GET", f"/api/sessions/{sid}/trajectory?full=maybe", None, 422),
        ("GET", "/api/sessions/bad%20ref", None, 422),
        ("POST", "/api/sessions", {"task": "   "}, 422),
        ("POST", "/api/sessions", {"task": 5}, 422),
        ("POST", "/api/sessions", {"task": "x", "colour": "red"}, 422),
        ("POST", "/api/sessions", {"task": "x", "timeout": -1}, 422),
        # past the bounds meta.json's schema declares: refused, no damaged session (issue 29)
        ("POST", "/api/sessions", {"task": "x", "timeout": 1e12}, 422),
        ("POST", "/api/sessions", {"task": "x", "max_tokens": 10**26}, 422),
        ("POST", "/api/sessions", {"task": "x", "max_cost": 1e12}, 422),
        ("POST", "/api/sessions", {"task": "x", "stall": 1e10}, 422),
        ("POST", "/api/sessions", {"task": "x", "max_cost": 0}, 422),
        ("POST", "/api/sessions", {"task": "x", "max_tokens": 0}, 422),
        ("POST", "/api/sessions", {"task": "x", "adapter": "nope"}, 422),
        ("POST", "/api/sessions", {"task": "x", "cwd": "/"}, 422),
        ("POST", "/api/sessions", {"task": "x", "name": "abcdef12"}, 422),
        ("POST", "/api/sessions", {"task": "x", "dangerous": True}, 403),
        ("POST", f"/api/sessions/{sid}/messages", {"text": "x"}, 422),
        ("GET", "/api/nothing", None, 404),
        ("PUT", "/api/sessions", None, 405),
    ]
    for method, path, body, status in bad:
        r = srv.request(method, path, body)
        assert r.status == status, (method, path, body, r.status, r.body)
        assert isinstance(r.json()["error"], str) and r.json()["error"], r.body

    r = srv.post("/api/sessions", raw=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status == 422 and "not a valid JSON" in r.json()["error"]
    r = srv.post("/api/sessions", raw=b'{"task":"x"}', headers={"Content-Type": "text/plain"})
    assert r.status == 415
    big = json.dumps({"task": "x" * (5 << 20)}).encode()
    r = srv.post("/api/sessions", raw=big, headers={"Content-Type": "application/json"})
    assert r.status == 413
    assert len(zw.json("ls")) == 2  # none of the refused spawns made a session
    r = srv.get(f"/api/sessions/{sid}/stream", headers={"Last-Event-ID": "x.1"})
    assert r.status == 422


def _twin(zw: Any, sid: str) -> str:
    """A copy of session ``sid`` under another id with the same first 8 characters."""
    twin = sid[:9] + "0000-4000-8000-000000000000"
    src, dst = zw.session_dir(sid), zw.session_dir(twin)
    shutil.copytree(src, dst)
    meta = (dst / "meta.json").read_text().replace(sid, twin)
    (dst / "meta.json").write_text(meta)
    return twin


def test_spawn_options_reach_the_session(zw, serve, tmp_path: Path) -> None:
    sub = zw.cwd / "sub"
    sub.mkdir()
    srv = serve("--allow-dangerous", env_extra=zw.replay("claude_simple"))
    body = {"task": "hi", "adapter": "claude", "model": "sonnet", "cwd": "sub", "timeout": 90,
            "dangerous": True, "priority": 3, "max_tokens": 50_000, "source": "my-bot"}  # fmt: skip
    r = srv.post("/api/sessions", body)
    assert r.status == 201, r.body
    s = zw.json("show", r.json()["id"])
    got = (s["adapter"], s["requested_model"], s["cwd"], s["source"])
    assert got == ("claude", "sonnet", str(sub), "my-bot")
    assert s["dangerous"] and s["priority"] == 3 and s["max_tokens"] == 50_000
    assert s["turns_detail"][0]["timeout"] == 90


def test_a_spawn_may_name_its_launcher(zw, serve) -> None:
    """Issue 31 (drift): the HTTP body had no ``launcher`` (``zwarm spawn --launcher``), so a
    client could not choose what runs a session's turns. Now the body is made from
    ``SpawnRequest``: the launcher named runs it, and one that is not installed is the API's
    error (naming the installed ones), not an unknown key."""
    srv = serve(env_extra=zw.replay("codex_simple"))
    r = srv.post("/api/sessions", {"task": "hi", "launcher": "local"})
    assert r.status == 201, r.body
    assert zw.json("show", r.json()["id"])["launcher"] == "local"
    r = srv.post("/api/sessions", {"task": "hi", "launcher": "nosuch"})
    assert r.status == 422 and "unknown launcher 'nosuch' (known: " in r.json()["error"], r.body
    r = srv.post("/api/sessions", {"task": "hi", "launcher_option": ["x=1"]})
    assert r.status == 422 and "takes no option 'x'" in r.json()["error"], r.body


def test_the_token_is_needed_everywhere_but_the_page(zw, server: Server) -> None:
    for method, path in [
        ("GET", "/api/sessions"),
        ("POST", "/api/sessions"),
        ("GET", "/api/info"),
        ("GET", "/api/openapi.json"),
        ("GET", "/api/events"),
        ("GET", "/api/sessions/x/stream"),
        ("DELETE", "/api/sessions/x"),
        ("POST", "/mcp"),
    ]:
        r = server.request(method, path, auth=False)
        assert r.status == 401, (method, path, r.status)
        assert r.headers.get("www-authenticate", "").startswith("Bearer")
        wrong = server.request(method, path, headers={"Authorization": "Bearer " + "x" * 43})
        assert wrong.status == 401, (method, path)
    for path in ("/", "/static/app.js", "/static/app.css"):
        r = server.get(path, auth=False)
        assert r.status == 200 and "set-cookie" not in r.headers, path
        assert "default-src 'none'" in r.headers["content-security-policy"]
    assert server.get("/static/../../meta.json", auth=False).status == 404
    assert server.get("/static/secret.txt", auth=False).status == 404


def test_host_and_origin_are_checked(zw, serve) -> None:
    srv = serve("--allow-host", "devbox.lan", "--allow-origin", "https://proxy.example")
    here = f"{srv.host}:{srv.port}"
    ok = [
        {},
        {"Host": f"localhost:{srv.port}"},
        {"Host": f"devbox.lan:{srv.port}"},
        {"Origin": f"http://{here}"},
        {"Origin": "https://proxy.example"},
        {"Sec-Fetch-Site": "same-origin"},
    ]
    for h in ok:
        assert srv.get("/api/sessions", headers=h).status == 200, h
    refused = [
        {"Host": f"attacker.example:{srv.port}"},  # a DNS-rebinding page
        {"Host": "attacker.example"},
        {"Host": ""},
        {"Origin": "http://attacker.example"},
        {"Origin": f"http://{here}.attacker.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
    ]
    for h in refused:
        r = srv.get("/api/sessions", headers=h)
        assert r.status == 403, (h, r.status)
        assert "error" in r.json()
        r = srv.post("/api/sessions", {"task": "x"}, headers=h)
        assert r.status == 403, h
        assert srv.get("/", headers=h, auth=False).status == 403, h
    assert zw.json("ls") == []


def test_openapi_describes_every_route(server: Server) -> None:
    from zwarm.serve import app, bodies

    spec = server.get("/api/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    routes = app.Server(app.Options(env=None, token="t")).routes()  # type: ignore[arg-type]
    served = {r.path for r in routes if r.path.startswith("/api")} | {"/mcp"}
    assert served == set(spec["paths"])
    props = spec["components"]["schemas"]["Spawn"]["properties"]
    assert set(props) == set(bodies.Spawn.__struct_fields__)
    assert "/api/sessions/{ref}/diff" in spec["paths"]  # Zwarm.diff has landed


def test_the_docs_table_names_every_route() -> None:
    """docs/serve.md's table of the HTTP API names every route the server has (the
    accounts, usage and merge queue routes were served but missing from it)."""
    from tests.support import ROOT
    from zwarm.serve import app

    doc = (ROOT / "docs" / "serve.md").read_text()
    routes = app.Server(app.Options(env=None, token="t")).routes()  # type: ignore[arg-type]
    served = {r.path for r in routes if r.path.startswith("/api")}
    missing = sorted(p for p in served if f"{p}`" not in doc and f"{p}?" not in doc
                     and f"{p}," not in doc)  # fmt: skip
    assert missing == [], missing


def test_info(server: Server, zw) -> None:
    info = server.get("/api/info").json()
    assert {"codex", "claude"} <= set(info["agents"]) and info["cwd"] == str(zw.cwd)
    assert info["allow_dangerous"] is False and info["mcp"] is True and info["diff"] is True


def test_diff_route(zw, serve) -> None:
    repo = zw.cwd
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("one\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    srv = serve(env_extra=zw.replay("codex_simple", FAKE_SHELL="echo two >> a.txt"))
    sid = srv.post("/api/sessions", {"task": "edit"}).json()["id"]
    wait_until(lambda: _done(zw, sid))
    d = srv.get(f"/api/sessions/{sid}/diff?text=1").json()
    assert [f["path"] for f in d["files"]] == ["a.txt"] and "+two" in d["text"]
    assert d == {**zw.json("diff", sid), "text": d["text"]}

    assert srv.get(f"/api/sessions/{sid}/diff?turn=3").status == 422
    stat_only = srv.get(f"/api/sessions/{sid}/diff?stat=1").json()
    assert stat_only == zw.json("diff", sid, "--stat")

    plain = zw.tmp / "plain"  # no git repository here
    plain.mkdir()
    zw.write_config(f'[tools]\nallowed_roots = [".", "{plain}"]\n')
    sid2 = srv.post("/api/sessions", {"task": "x", "cwd": str(plain)}).json()["id"]
    wait_until(lambda: _done(zw, sid2))
    r = srv.get(f"/api/sessions/{sid2}/diff")
    assert r.status == 409 and "no git workspace" in r.json()["error"]


def test_mcp_over_http(zw, server: Server) -> None:
    """zwarm's tools over MCP's streamable HTTP transport, with the same token."""
    accept = {"Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test-client", "version": "1"},
        },
    }
    r = server.post("/mcp", init, headers=accept)
    assert r.status == 200, r.body
    session = r.headers.get("mcp-session-id")
    assert _mcp_result(r.body)["serverInfo"]["name"] == "zwarm"
    h = {**accept, **({"mcp-session-id": session} if session else {})}
    h["mcp-protocol-version"] = "2025-06-18"
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert server.post("/mcp", note, headers=h).status in (200, 202)
    r = server.post("/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=h)
    names = {t["name"] for t in _mcp_result(r.body)["tools"]}
    assert {"delegate", "converse", "check_session", "wait"} <= names
    call = {"name": "list_sessions", "arguments": {}}
    r = server.post("/mcp", {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call},
                    headers=h)  # fmt: skip
    result = _mcp_result(r.body)
    assert result["isError"] is False and result["structuredContent"]["ok"] is True
    # each MCP session is a caller of its own, named without its (secret) session id
    you = result["structuredContent"]["you"]
    assert re.fullmatch(r"mcp:test-client/[0-9a-f]{6}", you) and session and session not in you


def _mcp_result(body: bytes) -> Any:
    text = body.decode()
    if text.lstrip().startswith("{"):
        return json.loads(text)["result"]
    datas = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return json.loads(datas[-1])["result"]


def _token_file(zw: Any, env_extra: dict[str, str] | None = None) -> Path:
    res = zw.run("serve", "--token-path", env_extra=env_extra, check=True)
    return Path(res.stdout.strip())


def test_token_file_is_private_kept_and_replaceable(zw, serve) -> None:
    first = serve()
    path = _token_file(zw)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text().strip() == first.token and len(first.token) >= 40
    assert f"the token is kept in {path}" in first.stderr()
    first.stop()
    again = serve()
    assert again.token == first.token
    again.stop()
    fresh = serve("--new-token")
    assert fresh.token != first.token
    assert fresh.get("/api/sessions").status == 200
    old = {"Authorization": f"Bearer {first.token}"}
    assert fresh.get("/api/sessions", headers=old).status == 401
    fresh.stop()
    os.chmod(path, 0o644)  # readable by others: not a secret any more, so replaced
    replaced = serve()
    assert replaced.token != fresh.token
    assert "replaced" in replaced.stderr() and "0600" in replaced.stderr()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_token_is_kept_where_agents_cannot_write(zw, serve, tmp_path: Path) -> None:
    """Not in the state dir nor the project (an agent's working folder): in the user's
    runtime dir when it is a private one, else in zwarm's user state dir; one per state dir."""
    state_home = Path(os.environ["XDG_STATE_HOME"]) / "zwarm" / "serve"
    path = _token_file(zw)
    assert not path.exists()  # --token-path makes nothing
    srv = serve()
    assert path.parent == state_home and path.read_text().strip() == srv.token
    for agents_reach in (zw.state_dir, zw.cwd):
        assert not path.is_relative_to(agents_reach), (path, agents_reach)
    assert not (zw.state_dir / "serve.token").exists()
    srv.stop()

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    at_run = serve(env_extra={"XDG_RUNTIME_DIR": str(run)})
    in_run = _token_file(zw, {"XDG_RUNTIME_DIR": str(run)})
    assert in_run.parent == run / "zwarm" and in_run.read_text().strip() == at_run.token
    assert stat.S_IMODE(in_run.stat().st_mode) == 0o600
    assert stat.S_IMODE(in_run.parent.stat().st_mode) == 0o700
    at_run.stop()
    for unusable in (0o755, 0o500):  # not private, not writable: not used
        os.chmod(run, unusable)
        assert _token_file(zw, {"XDG_RUNTIME_DIR": str(run)}).parent == state_home
    os.chmod(run, 0o700)

    inside = serve(env_extra={"XDG_STATE_HOME": str(zw.cwd / ".state")})  # a misconfiguration
    assert f"lies inside {zw.cwd.resolve()}, where this server's agents" in inside.stderr()
    assert "lies inside" not in srv.stderr()
    inside.stop()

    other = zw.tmp / "other" / ".zwarm"
    other.parent.mkdir()
    elsewhere = _token_file(zw, {"ZWARM_DIR": str(other)})
    assert elsewhere.parent == state_home and elsewhere != path


@pytest.mark.parametrize("planted", ["file", "link"])
def test_a_token_planted_in_the_state_dir_is_never_accepted(zw, serve, planted: str) -> None:
    """An agent can write the state dir (it lies in its working folder): a ``serve.token``
    there, where older versions kept the token, is never read, and serve removes it."""
    zw.state_dir.mkdir(mode=0o700, exist_ok=True)
    chosen = "A" * 43
    old = zw.state_dir / "serve.token"
    target = zw.tmp / "target.token"
    target.write_text(chosen + "\n")
    os.chmod(target, 0o600)
    if planted == "link":
        old.symlink_to(target)
    else:
        shutil.copy(target, old)
        os.chmod(old, 0o600)
    srv = serve()
    assert srv.token != chosen
    planted_token = {"Authorization": f"Bearer {chosen}"}
    assert srv.get("/api/sessions", headers=planted_token).status == 401
    assert srv.get("/api/sessions").status == 200
    assert not os.path.lexists(old)
    assert target.read_text() == chosen + "\n"  # a link is removed, never followed
    assert f"removed {old}" in srv.stderr()


def test_listening_elsewhere_warns(capsys) -> None:
    from zwarm.cli import serve as command

    command._tell("0.0.0.0", "/x/.zwarm", mcp=False)
    assert "reachable from other machines" in capsys.readouterr().err
    command._tell("127.0.0.1", "/x/.zwarm", mcp=False)
    command._tell("::1", "/x/.zwarm", mcp=False)
    assert "warning" not in capsys.readouterr().err


def test_a_port_in_use_is_one_line(zw, server: Server) -> None:
    res = zw.run("serve", "--port", str(server.port), timeout=60)
    assert res.returncode == 1
    assert res.stderr.startswith("Error: cannot listen on 127.0.0.1 port")
    assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1


@pytest.mark.perf
@pytest.mark.parametrize("args", [["--help"], ["serve", "--help"]])
def test_help_does_not_import_the_server(zw, args: list[str]) -> None:
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "zwarm", *args],
        capture_output=True,
        text=True,
        env=zw.env,
        cwd=zw.cwd,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in res.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "click" in imported
    for heavy in ("starlette", "uvicorn", "mcp", "anyio", "msgspec.json", "zwarm.serve.app"):
        assert heavy not in imported, heavy
    if args == ["--help"]:
        assert "serve" in res.stdout and not any(m.startswith("zwarm.serve") for m in imported)
    assert not re.search(r"Traceback", res.stdout + res.stderr)


def test_without_the_extra_it_says_what_to_install(monkeypatch) -> None:
    from click.testing import CliRunner

    from zwarm.cli.commands import cli

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    res = CliRunner().invoke(cli, ["serve"])
    assert res.exit_code == 1
    assert "pip install 'zwarm[serve]'" in res.output and "Traceback" not in res.output


def test_best_of_routes_start_compare_and_follow_up_a_set(zw, serve) -> None:
    from tests.support.workspace import make_repo

    repo = make_repo(zw.cwd / "repo", zw.env)
    env = {**zw.replay("codex_simple"), "FAKE_SHELL": "echo {MODEL} >> src/app.py"}
    srv = serve(env_extra=env)
    body = {"task": "edit", "cwd": str(repo.path), "best_of": 2, "models": ["a", "bb"]}
    r = srv.post("/api/sets", {**body, "protect": ["../etc"]})
    assert r.status == 422, r.json()  # a protected path stays inside the repository
    r = srv.post("/api/sets", body)
    assert r.status == 201, r.json()
    set_id = r.json()["set"]
    wait_until(
        lambda: not any(a["pending"] for a in srv.get(f"/api/sets/{set_id}").json()["attempts"])
    )
    v = srv.get(f"/api/sets/{set_id}?rank=time").json()
    assert v["rank"][0] == "time" and v == {
        **zw.json("compare", set_id, "--rank", "time"),
        "attempts": v["attempts"],
    }
    assert sorted(a["model"] for a in v["attempts"]) == ["a", "bb"]
    done = srv.post(f"/api/sets/{set_id}/messages", {"message": "more"}).json()["attempts"]
    assert [d["attempt"] for d in done] == [1, 2]
    assert srv.get("/api/sets/set-0000").status in (404, 400, 422)


def test_the_merge_queue_routes(zw, serve) -> None:
    """POST /api/merges queues and runs (the trusted [merge] check only: a body naming a
    check or no_check is refused), GET lists as `zwarm merges --json`, pause/resume, DELETE."""
    from tests.support.workspace import agent, make_repo

    repo = make_repo(zw.cwd / "repo", zw.env)
    sids = []
    for name, shell in (("ok", "echo ok > ok.txt"), ("no", "touch BROKEN"), ("later", "true")):
        sids.append(zw.spawn("t", "-C", str(repo.path), "--worktree", "--name", name,
                             env_extra=agent(shell)))  # fmt: skip
    zw.wait(*sids)
    zw.write_config('[checks]\nunsandboxed = true\n\n[merge]\ncheck = ["test ! -e BROKEN"]\n')
    srv: Server = serve()
    for bad in ({"sessions": ["ok"], "no_check": True}, {"sessions": ["ok"], "check": ["true"]},
                {"sessions": []}):  # fmt: skip
        r = srv.post("/api/merges", bad)
        assert r.status == 422, (bad, r.body)
    r = srv.post("/api/merges", {"sessions": ["ok", "no"]})
    assert r.status == 200, r.body
    done = [(d["branch"], d["state"]) for d in r.json()["run"]["done"]]
    assert done == [("zwarm/ok", "merged"), ("zwarm/no", "ejected")]
    assert srv.get("/api/merges").json() == zw.json("merges")
    assert srv.post("/api/merges/pause").json()["paused"] is True
    r = srv.post("/api/merges", {"sessions": ["later"]})
    assert r.json()["run"]["stopped"] == "paused"
    r = srv.delete("/api/merges/later")
    assert r.status == 200 and r.json()["removed"]["state"] == "removed"
    assert srv.post("/api/merges/resume").json()["paused"] is False
    assert srv.post("/api/merges/run").json()["runs"][0]["done"] == []
    r = srv.delete("/api/merges/later")
    assert r.status == 422 and "waits in no merge queue" in r.json()["error"]
    assert repo.git("show", "main:ok.txt") == "ok\n"
