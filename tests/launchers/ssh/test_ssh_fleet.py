"""The fleet's commands across hosts (issue 35): ``top`` and ``logs -f`` with sessions on two
hosts and a local one, a budget stopping a turn on a host as it stops a local one, the queue
(``[limits] max_running``) and ``--after`` counting and waiting for sessions on other hosts,
and ``zwarm serve``'s rows (``host``, a host that does not answer). Real zwarm subprocesses,
real sshd and ssh (``tests.support.hosts``); the agents are the fakes (tests/fakes/bin), run
on the host by the host's user."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
import tomli_w

from tests.launchers.ssh.test_ssh_launcher import CODEX, Hosts, on_host, remote_dirs
from tests.serve.test_dashboard import browser  # noqa: F401 (a fixture: the real Chromium)
from tests.support import FAKE_BIN, ZW, follow_until_released, wait_status, wait_until
from tests.support.fleet import jsonl

CLAUDE = str(FAKE_BIN / "claude")
SID = "11111111-2222-4333-8444-555555555555"


def _config(zw: ZW, bed: Any, limits: dict[str, Any] | None = None) -> str:
    hosts = {n: bed.config(f"host-{n}", cwd=str(bed.hosts[f"host-{n}"].repo)) for n in "ab"}
    table: dict[str, Any] = {"codex": {"command": CODEX}, "claude": {"command": CLAUDE},
                             "gemini": {"command": CODEX}}  # fmt: skip
    if limits:
        table["limits"] = limits
    return tomli_w.dumps({**table, "hosts": hosts})


@pytest.fixture
def hf(zw: ZW, ssh_hosts: Any) -> Iterator[Hosts]:
    zw.state_dir.mkdir()
    zw.write_config(_config(zw, ssh_hosts))
    yield Hosts(zw, ssh_hosts)


def _claude_stream(hz: Hosts, messages: int) -> str:
    """A claude run (where the hosts' user reads it) whose every model call reports 1,050
    tokens, then a successful result."""
    init = {"type": "system", "subtype": "init", "session_id": SID, "model": "claude-x"}
    calls = [
        {"type": "assistant", "message": {"id": f"msg_{i}", "model": "claude-x", "content": [
            {"type": "text", "text": f"step {i}"}], "usage": {"input_tokens": 1000,
            "output_tokens": 50}}}
        for i in range(messages)
    ]  # fmt: skip
    result = {"type": "result", "subtype": "success", "is_error": False, "result": "all done",
              "session_id": SID, "total_cost_usd": 0.01, "usage": {
                  "input_tokens": 1000 * messages, "output_tokens": 50 * messages}}  # fmt: skip
    path = jsonl(hz.shared / "claude_stream.jsonl", init, *calls, result)
    (hz.shared / "claude_stream.jsonl").chmod(0o644)
    return path


def _hung_claude(hz: Hosts, *where: str) -> str:
    """A claude session (on host ``where``, else here) whose agent printed its Bash call and
    hangs: something live to show."""
    env = hz.env(FAKE_REPLAY=hz.zw.sample("claude_toolcall"), FAKE_HANG="5")
    return hz.zw.spawn(*where, "--adapter", "claude", "run the tests", env_extra=env)


def test_top_and_logs_follow_show_sessions_on_two_hosts_and_here(hf: Hosts) -> None:
    zw = hf.zw
    a, b, here = _hung_claude(hf, "--host", "a"), _hung_claude(hf, "--host", "b"), _hung_claude(hf)
    live = "echo hello > out.txt && cat out.txt (running)"
    rows: dict[str, str] = {}

    def every_step_shown() -> bool:  # top, piped: one snapshot
        shown = zw.run("top", check=True).stdout.splitlines()
        rows.update({sid: next((x for x in shown if x.startswith(sid[:8])), "") for sid in
                     (a, b, here)})  # fmt: skip
        return all(live in row for row in rows.values())

    wait_until(every_step_shown, timeout=60)
    head = zw.run("top", check=True).stdout.splitlines()[2].split()
    assert head[:4] == ["ID", "NAME", "STATUS", "HOST"], head
    assert [rows[s].split()[3] for s in (a, b, here)] == ["a", "b", "-"], rows
    assert all(" running " in rows[s] for s in (a, b, here)), rows
    for sid in (a, b, here):
        zw.run("kill", sid, check=True)
    # logs -f on a host's turn: follows it live, ends when it ends, byte for byte
    hold = hf.shared / "go"
    sid = zw.spawn("--host", "b", "wait for it", env_extra=hf.env(FAKE_WAIT_FILE=str(hold)))
    wait_until(lambda: bool(on_host(hf.bed.user, sid)), timeout=30)
    out = follow_until_released(zw, sid, hold.touch)  # following while it runs on the host
    assert zw.meta(sid)["status"] == "completed"
    assert out == zw.turn_file(sid, 1).read_bytes() == zw.sample_bytes("codex_simple")


@pytest.mark.parametrize(
    ("budget", "said"), [(("--max-tokens", "1500"), "2,100 tokens"),
                         (("--max-cost", "1.5"), "$2.1000 spent")]
)  # fmt: skip
def test_a_budget_stops_a_turn_on_a_host_as_here_and_leaves_nothing_there(
    hf: Hosts, budget: tuple[str, str], said: str
) -> None:
    zw = hf.zw
    prices = {"claude-x": {"input": 1000.0, "cached_input": 0.0, "output": 1000.0}}
    zw.write_config(_config(zw, hf.bed) + tomli_w.dumps({"claude": {"prices": prices}}))
    env = hf.env(FAKE_REPLAY=_claude_stream(hf, 6), FAKE_LINE_DELAY="1.0")
    sid = zw.spawn("--host", "a", "--adapter", "claude", *budget, "build it", env_extra=env)
    m = wait_status(zw, sid, "failed", timeout=60)
    assert m["reason"] == "budget_exceeded" and said in m["error"], m["error"]
    assert "stopped while it streamed" in m["error"]
    log = zw.turn_file(sid, 1).read_text()
    assert '"step 1"' in log and '"result"' not in log  # stopped long before its end
    wait_until(lambda: not on_host(hf.bed.user, sid), timeout=15)  # its agent stopped there
    wait_until(lambda: sid not in remote_dirs(hf, "a"), timeout=30)  # nothing left there
    assert "failed (budget)" in zw.run("ls").stdout


def test_the_queue_and_after_count_and_wait_for_sessions_on_other_hosts(hf: Hosts) -> None:
    zw = hf.zw
    zw.write_config(_config(zw, hf.bed, limits={"max_running": 1}))
    hold = hf.shared / "go"
    env = hf.env(FAKE_WAIT_FILE=str(hold))
    first = zw.spawn("--host", "a", "first, on a", env_extra=env)
    wait_until(lambda: bool(on_host(hf.bed.user, first)), timeout=30)
    capped = zw.spawn("--host", "b", "capped, on b", env_extra=env)  # the cap counts host a's
    after = zw.spawn("--after", capped, "after b's, here", env_extra=env)
    later = zw.spawn("--host", "a", "--after", after, "after the local one, on a", env_extra=env)
    rows = {r["id"]: r for r in zw.json("ls")}
    assert [rows[s]["status"] for s in (first, capped, after, later)] == [
        "running", "queued", "queued", "queued"], rows  # fmt: skip
    assert not on_host(hf.bed.user, capped)
    hold.touch()
    done = [wait_status(zw, s, "completed", timeout=90) for s in (first, capped, after, later)]
    turns = [m["turns"][0] for m in done]
    for before, then in itertools.pairwise(turns):  # one at a time, in order
        assert before["ended_at"] <= then["started_at"], (before, then)
    assert [r["env"]["ZWARM_HOST"] for r in map(hf.recorded, (1, 2, 4))] == [
        "host-a", "host-b", "host-a"]  # fmt: skip
    assert "ZWARM_HOST" not in hf.recorded(3)["env"]  # the local one ran here


def test_serve_lists_host_sessions_with_their_host_and_an_unreachable_one(
    hf: Hosts,
    browser: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    """``/api/sessions`` rows carry ``host`` and, for a host that does not answer, ``ls``'s
    word; the dashboard's board says where each session runs (in the real Chromium)."""
    from tests.serve.test_dashboard import DESKTOP
    from tests.support.serve import start_server

    zw = hf.zw
    hold = hf.shared / "go"
    a = zw.spawn("--host", "a", "wait on a", env_extra=hf.env(FAKE_WAIT_FILE=str(hold)))
    b = zw.spawn("--host", "b", "done on b", env_extra=hf.env())
    wait_status(zw, b, "completed", timeout=60)
    wait_until(lambda: bool(on_host(hf.bed.user, a)), timeout=30)
    srv = start_server(zw)
    try:
        rows = {r["id"]: r for r in srv.get("/api/sessions").json()}
        assert (rows[a]["host"], rows[b]["host"]) == ("a", "b")
        assert srv.get(f"/api/sessions/{b}").json()["host"] == "b"
        page = browser.new_page(viewport=DESKTOP)
        page.set_default_timeout(60_000)
        page.goto(f"{srv.base}/#token={srv.token}")
        for sid, host in ((a, "a"), (b, "b")):
            flag = page.wait_for_selector(f"tr[data-id='{sid}'] .c-agent .host-flag")
            assert flag is not None and flag.text_content() == f"on {host}"
        hf.freeze("a")
        try:
            want = "unknown (host a unreachable)"

            def unreachable() -> bool:
                row = {r["id"]: r for r in srv.get("/api/sessions").json()}[a]
                return bool(row["status"] == "running" and row["shown_status"] == want)

            wait_until(unreachable, timeout=20)  # as ls says it
            assert {r["id"]: r for r in zw.json("ls")}[a]["shown_status"] == want
            shown = page.wait_for_selector(f"tr[data-id='{a}'] .c-status .st-unknown")
            assert shown is not None and shown.text_content() == want
            page.close()
        finally:
            hf.thaw("a")
        hold.touch()
        wait_status(zw, a, "completed", timeout=60)
        assert {r["id"]: r for r in srv.get("/api/sessions").json()}[a]["shown_status"] is None
    finally:
        srv.stop()


def test_gemini_on_a_host_is_refused_in_one_line(hf: Hosts) -> None:
    """Regression: a gemini turn on a host was sent ``GEMINI_CLI_HOME`` naming a directory of
    this machine, so gemini there ran with a home zwarm never wrote (usage statistics on,
    no auth type): refused until its home is made on the host."""
    zw = hf.zw
    r = zw.run("spawn", "--host", "a", "--adapter", "gemini", "task", env_extra=hf.env())
    assert r.returncode != 0 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("Error: gemini does not run on a host yet"), r.stderr
    assert not (zw.state_dir / "sessions").exists() or not os.listdir(zw.state_dir / "sessions")
    assert not remote_dirs(hf, "a")
