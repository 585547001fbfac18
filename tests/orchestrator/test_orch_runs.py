"""Orchestrator runs that last (issue 15): the SQLite run store, compaction, retries, clean
shutdown on SIGTERM, resume after SIGKILL at any step, ``orchestrate ls/show``, JSON runs of
earlier versions, and the run as its sessions' root.

The real ``zwarm orchestrate`` runs in this process (``inproc``) or as a subprocess, against
the scripted fake Chat Completions server (streamed replies, which it can cut mid-reply)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from typing import Any

import pytest

from tests.fakes.chat_server import ChatReply, ChatRequest, FakeChatServer, call, final, reply
from tests.orchestrator.helpers import write_config
from tests.support import ZWARM_BIN, wait_until
from tests.support.orch import delegated, env_for, load_run, orchestrate, runs, sql
from zwarm.orchestrator.runstore import RunStore

COMPACTING = "[orchestrator]\ncontext_window = 2000\nretry_backoff_s = 0.01\n"  # 70%: 1400
SUMMARY = "SUMMARY: listed sessions; none were running."


class Brain:
    """An index-free script: a summary request (no tools) gets ``SUMMARY``; a step request
    gets a list_sessions call until ``steps`` steps were answered, then the final reply.
    Each reply reports 100 prompt tokens per message it was sent (a growing context).
    ``hold``: the request number (0-based) that blocks until ``release`` is set."""

    def __init__(self, steps: int, hold: int | None = None) -> None:
        self.steps, self.hold = steps, hold
        self.answered = 0
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.seen = 0

    def __call__(self, req: ChatRequest) -> ChatReply:
        with self.lock:
            n, self.seen = self.seen, self.seen + 1
        if self.hold is not None and n == self.hold:
            self.release.wait(60)
        usage = (100 * len(req.messages), 10)
        if not req.tools:
            return final(SUMMARY, usage=usage)
        with self.lock:
            self.answered += 1
            done = self.answered > self.steps
        if done:
            return final("All done.", usage=usage)
        return reply(call("list_sessions"), usage=usage)


def orphans(messages: list[dict[str, Any]]) -> list[str]:
    """Tool results without their call before them, and calls without their result."""
    problems, open_calls = [], set()
    for m in messages:
        if m["role"] == "assistant":
            if open_calls:
                problems.append(f"calls without results: {sorted(open_calls)}")
            open_calls = {c["id"] for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            if m["tool_call_id"] not in open_calls:
                problems.append(f"result without its call: {m['tool_call_id']}")
            open_calls.discard(m["tool_call_id"])
    return problems + ([f"calls without results: {sorted(open_calls)}"] if open_calls else [])


# ---------------------------------------------------------------------------- compaction
def test_a_long_run_compacts_at_70_percent_and_keeps_what_it_must(zw, inproc) -> None:
    write_config(zw, COMPACTING)
    brain = Brain(steps=8)
    with FakeChatServer([brain] * 40) as srv:
        res = inproc(srv, "Check on the sessions, repeatedly.")
        reqs = srv.requests
    assert res.returncode == 0, res.stderr
    kinds = ["summary" if not r.tools else "step" for r in reqs]
    # step k is sent 2k messages (200k prompt tokens; +10 completion): after step 7 the
    # context is 1410 >= 0.7 * 2000, so the 8th step is preceded by one compaction
    assert kinds[:9] == ["step"] * 7 + ["summary", "step"]
    before, summary_req, after = reqs[6], reqs[7], reqs[8]
    assert len(before.messages) == 14
    # what the summary request carried: the task and the 4 oldest messages after it
    ask = summary_req.messages[-1]["content"]
    assert "Check on the sessions, repeatedly." in ask and "(3 to 6)" in ask
    # the next request: the system prompt, the task, the summary, the last 10 messages
    msgs = after.messages
    assert msgs[:2] == before.messages[:2]
    assert msgs[2]["role"] == "user" and msgs[2]["content"].startswith(
        "[zwarm: summary of messages 3-6 of this run"
    )
    assert msgs[2]["content"].endswith(SUMMARY)
    assert len(msgs) == 13 and msgs[3:11] == before.messages[6:]  # + step 7's call and result
    assert msgs[3]["role"] == "assistant" and orphans(msgs) == []
    assert all(orphans(r.messages) == [] for r in reqs)
    # the audit row; the compacted messages stay in the store, marked out
    (run_dir,) = runs(zw)
    ((first, last, n, seq, tok_before, tok_after, model, trigger),) = sql(
        run_dir,
        "SELECT first_seq, last_seq, messages, summary_seq, tokens_before, tokens_after, "
        "model, trigger FROM compactions ORDER BY id LIMIT 1",
    )
    assert (first, last, n, seq, tok_before) == (3, 6, 4, 17, 1410)
    assert 0 < tok_after < 1400 and (model, trigger) == ("fake-orchestrator", "auto")
    states = sql(run_dir, "SELECT seq, state FROM messages WHERE seq <= 6 ORDER BY seq")
    assert states == [(1, "active"), (2, "active")] + [(s, "compacted_out") for s in (3, 4, 5, 6)]
    run, transcript = load_run(run_dir)
    assert run["compactions"] >= 1 and transcript[2]["content"].startswith("[zwarm: summary")
    assert "compacted 4 messages into one summary: context 1,410 -> ~" in res.stderr
    # show: the transcript as sent; --all: the compacted messages too, and the audit
    shown = zw.run("orchestrate", "show", "last", check=True).stdout
    assert "[3] assistant" not in shown and "[17] user" in shown
    everything = zw.run("orchestrate", "show", "last", "--all", check=True).stdout
    assert "[3] assistant (compacted out)" in everything
    assert "compaction 1 (auto): messages 3-6 (4) -> summary 17; context 1410 -> ~" in everything
    data = zw.json("orchestrate", "show", run_dir.name, "--all")
    assert [m["seq"] for m in data["messages"]][:4] == [1, 2, 3, 4]
    assert data["compactions"][0]["summary_seq"] == 17
    kinds_stored = [r["kind"] for r in data["rounds"]]
    assert kinds_stored[:9] == ["step"] * 7 + ["compaction", "step"]


def test_compact_by_hand_and_nothing_to_compact_is_said(zw, inproc) -> None:
    write_config(zw, "[orchestrator]\ncompact_at = 0\n")  # never by itself
    with FakeChatServer([Brain(steps=8)] * 20) as srv:
        assert inproc(srv, "look around").returncode == 0
        (run_dir,) = runs(zw)
        _, before = load_run(run_dir)
        res = inproc(srv, "--compact", "last")
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith(f"run {run_dir.name}: compacted 6 messages into one summary")
        _, now = load_run(run_dir)
        # 19 messages: system, task, 8 steps (call + result), the final. The last 10 would
        # start with a result (index 9): its call (8) is kept with it, so 2-7 go
        assert len(before) == 19 and now[:2] == before[:2] and now[3:] == before[8:]
        assert orphans(now) == []
        again = inproc(srv, "--compact", "last")
    assert again.returncode == 0
    assert again.stdout.strip() == (
        f"run {run_dir.name}: nothing to compact: 1 message(s) between the task and the "
        "latest 10 (at least 4 are needed)"
    )
    (row,) = sql(run_dir, "SELECT trigger, messages FROM compactions")
    assert row == ("manual", 6)


def test_two_compactions_of_a_run_never_overlap(zw, inproc) -> None:
    with FakeChatServer([Brain(steps=6)] * 20) as srv:
        assert inproc(srv, "look around").returncode == 0
        (run_dir,) = runs(zw)
        rs = RunStore.open(zw.state_dir)
        assert rs is not None
        with rs, rs.lock(run_dir.name):  # another process compacting (or running) it
            res = inproc(srv, "--compact", run_dir.name)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"run {run_dir.name} is being run (or compacted) by another zwarm process" in res.stderr


# ---------------------------------------------------------------------------- retries
def test_transient_errors_are_retried_with_backoff(zw, inproc) -> None:
    write_config(zw, "[orchestrator]\nretry_backoff_s = 0.01\n")
    script = [ChatReply(status=503, error="overloaded"), ChatReply(status=503), final("Done.")]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "go", "--quiet")
        assert res.returncode == 0 and res.stdout.strip() == "Done."
        assert len(srv.requests) == 3
    lines = [ln for ln in res.stderr.splitlines() if "model request failed" in ln]
    assert len(lines) == 2 and "(attempt 1 of 5)" in lines[0] and "(attempt 2 of 5)" in lines[1]
    assert "503" in lines[0] and "retrying in" in lines[0]
    (run_dir,) = runs(zw)
    kinds = sql(run_dir, "SELECT kind, attempt FROM rounds ORDER BY n")
    assert kinds == [("step failed", 1), ("step failed", 2), ("step", 1)]


def test_429_is_retried_only_when_it_says_when(zw, inproc) -> None:
    write_config(zw, "[orchestrator]\nretry_backoff_s = 0.01\n")
    later = ChatReply(status=429, error="slow down", headers=(("retry-after", "0.05"),))
    with FakeChatServer([later, final("ok")]) as srv:
        assert inproc(srv, "go").returncode == 0 and len(srv.requests) == 2
    quota = ChatReply(status=429, error="You exceeded your current quota")
    with FakeChatServer([quota, final("never")]) as srv:
        res = inproc(srv, "go")
        assert res.returncode == 1 and len(srv.requests) == 1
    assert "rate limited with no retry time: not retried" in res.stderr.splitlines()[-1]


def test_errors_that_are_not_transient_or_persist_stop_the_run(zw, inproc) -> None:
    write_config(zw, "[orchestrator]\nretry_backoff_s = 0.01\nmax_attempts = 2\n")
    with FakeChatServer([ChatReply(status=401, error="bad key")]) as srv:
        res = inproc(srv, "go")
        assert res.returncode == 1 and len(srv.requests) == 1
    with FakeChatServer([ChatReply(status=500)] * 3) as srv:
        res = inproc(srv, "go")
        assert res.returncode == 1 and len(srv.requests) == 2
    assert res.stderr.strip().splitlines()[-1].endswith("(gave up after 2 attempts)")
    run, _ = load_run(runs(zw)[-1])
    assert run["status"] == "error" and "gave up after 2 attempts" in run["stop_reason"]


def test_a_reply_cut_mid_stream_keeps_its_text_and_is_retried(zw, inproc) -> None:
    write_config(zw, "[orchestrator]\nretry_backoff_s = 0.01\n")
    cut = ChatReply(content="partial answer that never ends", cut_after=2)
    with FakeChatServer([cut, final("Whole answer.")]) as srv:
        res = inproc(srv, "go")
        assert res.returncode == 0 and res.stdout.strip() == "Whole answer."
        assert [r.body["stream"] for r in srv.requests] == [True, True]
    assert "16 characters of a cut reply kept in the run store" in res.stderr
    (run_dir,) = runs(zw)
    ((kind, partial),) = sql(run_dir, "SELECT kind, partial FROM rounds WHERE error IS NOT NULL")
    assert (kind, partial) == ("step failed", "partial answer t")
    shown = zw.run("orchestrate", "show", "last", "--all", check=True).stdout
    assert "the cut reply had sent: partial answer t" in shown


def test_an_endpoint_that_cannot_stream_gets_plain_requests(zw, inproc) -> None:
    refused = final("never sent: the streamed request that takes this place gets a 400")
    script = [refused, reply(call("list_sessions")), final("ok")]
    with FakeChatServer(script, streaming=False) as srv:
        res = inproc(srv, "go")
        assert res.returncode == 0 and res.stdout.strip() == "ok"
        streamed = [bool(r.body.get("stream")) for r in srv.requests]
    assert streamed == [True, False, False]  # refused once, then plain requests only


# ---------------------------------------------------------------------------- shutdown, crash
def _spawn(zw: Any, srv: FakeChatServer, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(ZWARM_BIN), "orchestrate", *args],
        env={**zw.env, **env_for(srv)},
        cwd=zw.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_saves_the_run_and_resume_answers_the_open_call(zw, tmp_path) -> None:
    marker, pidfile = tmp_path / "started", tmp_path / "bash.pid"
    script: list[Any] = [
        reply(call("bash", command=f"echo $$ > {pidfile}; touch {marker}; sleep 300")),
        final("Recovered."),
    ]
    with FakeChatServer(script) as srv:
        proc = _spawn(zw, srv, "verify things")
        wait_until(marker.exists, message="the bash tool to start")
        proc.send_signal(signal.SIGTERM)
        _, errs = proc.communicate(timeout=60)
        assert proc.returncode == 143 and "Traceback" not in errs
        (run_dir,) = runs(zw)
        assert (
            f"terminated (SIGTERM); the run is saved; continue with: zwarm orchestrate "
            f"--resume {run_dir.name}" in errs
        )
        run, _ = load_run(run_dir)
        assert (run["status"], run["stop_reason"]) == ("interrupted", "stopped by SIGTERM")
        bash_pid = int(pidfile.read_text())
        assert not os.path.exists(f"/proc/{bash_pid}/cmdline") or _dead(bash_pid)
        res = orchestrate(zw, srv, "--resume", run_dir.name)
        assert res.returncode == 0 and res.stdout.strip() == "Recovered."
        ((name, lost),) = srv.requests[1].last_results()
    assert name == "bash" and lost["ok"] is False and "interrupted" in lost["error"]


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("hold", [1, 4, 7], ids=["step-2", "step-5", "compaction"])
def test_resume_after_sigkill_at_any_step(zw, hold: int) -> None:
    """Killed (SIGKILL) while request ``hold`` is in flight: a step, or the compaction's
    summary request (the 8th, see the compaction test); resumed, the run finishes whole."""
    write_config(zw, COMPACTING)
    brain = Brain(steps=9, hold=hold)
    with FakeChatServer([brain] * 60) as srv:
        proc = _spawn(zw, srv, "--quiet", "Check on the sessions, repeatedly.")
        try:
            wait_until(lambda: len(srv.requests) > hold, message=f"request {hold}")
            proc.kill()
            proc.wait(timeout=60)
        finally:
            brain.release.set()
        (run_dir,) = runs(zw)
        run, transcript = load_run(run_dir)
        assert run["status"] == "running" and orphans(transcript) == []
        res = orchestrate(zw, srv, "--resume", run_dir.name, "--quiet")
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "All done."
        assert all(orphans(r.messages) == [] for r in srv.requests[hold + 1 :])
    run, transcript = load_run(run_dir)
    assert (run["status"], run["invocations"]) == ("finished", 2)
    assert transcript[-1] == {"role": "assistant", "content": "All done."}
    assert run["compactions"] >= 1  # the resumed run compacted too (or had already)


# ---------------------------------------------------------------------------- ls, show, json runs
def test_ls_and_show_list_runs_and_read_json_runs_of_earlier_versions(zw, inproc) -> None:
    old = zw.state_dir / "orchestrator" / "20250101-120000-abcd"
    old.mkdir(parents=True)
    run = {
        "id": old.name, "task": "the old task", "model": "fake-orchestrator", "base_url": None,
        "cwd": str(zw.cwd), "created_at": "2025-01-01T12:00:00+00:00",
        "updated_at": "2025-01-01T12:01:00+00:00", "status": "step_limit", "steps": 1,
        "invocations": 1, "prompt_tokens": 100, "completion_tokens": 20, "cost_usd": None,
        "max_tokens": 0, "max_cost_usd": 0.0, "nudged": False, "summary": None,
        "stop_reason": "step limit reached (1 step)", "sessions": [],
        "source": f"orchestrate:{old.name}", "total_tokens": 120,
    }  # fmt: skip
    messages = [
        {"role": "system", "content": "old system prompt"},
        {"role": "user", "content": "the old task"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "list_sessions",
                                                          "arguments": "{}"}}]},
    ]  # fmt: skip
    (old / "run.json").write_text(json.dumps(run))
    (old / "messages.json").write_text(json.dumps(messages))
    bad = zw.state_dir / "orchestrator" / "20250101-120000-bad0"
    bad.mkdir()
    (bad / "run.json").write_text("{}")
    (bad / "messages.json").write_text("not json")
    listed = zw.run("orchestrate", "ls", "--json", check=True)
    (row,) = json.loads(listed.stdout)
    assert (row["id"], row["status"], row["total_tokens"]) == (old.name, "step_limit", 120)
    assert f"warning: JSON run {bad.name} was not imported: cannot read it" in listed.stderr
    with FakeChatServer([final("Continued.")]) as srv:
        res = inproc(srv, "--resume", old.name)
        assert res.returncode == 0 and res.stdout.strip() == "Continued."
        sent = srv.requests[0].messages
    assert sent[:3] == messages and sent[3]["role"] == "tool"  # the open call answered
    assert json.loads((old / "run.json").read_text()) == run  # left as it was
    table = zw.run("orchestrate", "ls", check=True).stdout.splitlines()
    assert table[0].split() == ["RUN", "STATUS", "STEPS", "TOKENS", "CONTEXT", "COST", "TASK"]
    assert table[1].startswith(f"{old.name}  finished") and table[1].endswith("the old task")


def test_a_damaged_store_is_one_line(zw, inproc) -> None:
    with FakeChatServer([final("ok")]) as srv:
        assert inproc(srv, "x").returncode == 0
        (run_dir,) = runs(zw)
        sql(run_dir, 'UPDATE messages SET body = \'{"role": "wizard"}\' WHERE seq = 2')
        res = zw.run("orchestrate", "show", "last")
        assert res.returncode == 1 and "Traceback" not in res.stderr
        assert res.stderr.strip() == (
            f"Error: run {run_dir.name} is damaged: message 2 is not a chat message with a "
            "known role"
        )
        (zw.state_dir / "orchestrator.db").write_bytes(b"this is not a database" * 100)
        for f in ("orchestrator.db-wal", "orchestrator.db-shm"):
            (zw.state_dir / f).unlink(missing_ok=True)
        res = inproc(srv, "--resume", "last")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "cannot be used: file is not a database" in res.stderr.strip().splitlines()[-1]


# ---------------------------------------------------------------------------- the run as a root
def test_a_runs_sessions_have_the_run_as_their_root(zw, inproc) -> None:
    script = [
        reply(call("delegate", task="one part", name="part")),
        lambda req: reply(call("wait", session_ids=delegated(req), all=True)),
        final("done"),
    ]
    with FakeChatServer(script) as srv:
        assert inproc(srv, "split it").returncode == 0
    (run_dir,) = runs(zw)
    (row,) = zw.json("ls")
    assert (row["parent_run_id"], row["parent_session_id"], row["spawn_depth"]) == (
        run_dir.name,
        None,
        1,
    )
    tree = zw.run("ls", "--tree", check=True).stdout.splitlines()
    assert tree[1].startswith(f"run {run_dir.name}") and "orchestrator run, 1 session" in tree[1]
    assert tree[2].startswith(f"└─ {row['id'][:8]} part")


def test_a_runs_row_in_the_tree_counts_the_orchestrator_too(zw, inproc) -> None:
    """The run's row in ``ls --tree`` (and ``--tree --json``) shows the orchestrator's own
    tokens and cost, and totals that are the run's: orchestrator plus every session under it
    (before: the sessions' alone, $0.0600 of a $0.0960 run)."""
    write_config(
        zw,
        '[orchestrator.prices]\n"fake-orchestrator" = { input = 100.0, cached_input = 0.0, '
        'output = 100.0 }\n[codex.prices]\n"gpt-5" = { input = 1000.0, cached_input = 0.0, '
        "output = 0.0 }\n",
    )
    script = [
        reply(call("delegate", task="one part", name="part", model="gpt-5")),
        lambda req: reply(call("wait", session_ids=delegated(req), all=True)),
        final("done"),
    ]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "split it", "--json")
    assert res.returncode == 0, res.stderr
    record = json.loads(res.stdout)
    # 3 calls of 100 + 20 tokens at $100/M: $0.036; the agent: 60 uncached tokens at $1000/M
    assert (record["cost_usd"], record["total_cost_usd"], record["unpriced_parts"]) == (
        0.036,
        0.096,
        0,
    )
    run_row, session = zw.json("ls", "--tree")
    assert (run_row["kind"], run_row["run_id"]) == ("run", record["id"])
    assert run_row["status"] == "finished"
    assert run_row["usage"]["total_tokens"] == 360 and run_row["cost_usd"] == 0.036
    assert (run_row["tree_cost_usd"], run_row["tree_unpriced"]) == (record["total_cost_usd"], 0)
    assert run_row["tree_usage"]["total_tokens"] == 360 + session["usage"]["total_tokens"]
    assert run_row["tree_sessions"] == 1 and session["name"] == "part"
    line = zw.run("ls", "--tree", check=True).stdout.splitlines()[1].split()
    assert line[:6] == ["run", record["id"], "finished", "360", "$0.0360", "469"]
    assert line[6] == "$0.0960"


def test_a_runs_unpriced_or_unknown_orchestrator_is_an_unknown_part(zw, inproc) -> None:
    write_config(
        zw, '[codex.prices]\n"gpt-5" = { input = 1000.0, cached_input = 0.0, output = 0.0 }\n'
    )
    script = [
        reply(call("delegate", task="priced", model="gpt-5")),
        lambda req: reply(call("wait", session_ids=delegated(req), all=True)),
        final("done"),
    ]
    with FakeChatServer(script) as srv:
        assert inproc(srv, "go").returncode == 0
    run_row, _ = zw.json("ls", "--tree")
    assert (run_row["cost_usd"], run_row["tree_cost_usd"], run_row["tree_unpriced"]) == (
        None,
        0.06,
        1,
    )
    assert "≥ $0.0600 (1 ?)" in zw.run("ls", "--tree", check=True).stdout
    (zw.state_dir / "orchestrator.db").unlink()  # the run is gone: its part is unknown
    for f in ("orchestrator.db-wal", "orchestrator.db-shm"):
        (zw.state_dir / f).unlink(missing_ok=True)
    run_row, _ = zw.json("ls", "--tree")
    assert (run_row["status"], run_row["usage"], run_row["tree_unpriced"]) == (None, None, 1)
    assert "≥ $0.0600 (1 ?)" in zw.run("ls", "--tree", check=True).stdout
