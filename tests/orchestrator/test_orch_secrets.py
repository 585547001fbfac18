"""The orchestrator's API key stays in its memory: not in a delegated agent's environment, not
in the bash tool's, not readable from ``/proc/<orchestrator>/``, not in any file.

The ``/proc`` test runs ``zwarm orchestrate`` as an unprivileged user (root reads any /proc
entry, so as root it would prove nothing): as ``nobody`` through ``setpriv``/``runuser`` when
the tests run as root (CI does), as the current user otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.chat_server import FakeChatServer, call, final, reply
from tests.support import ZWARM_BIN, make_env, wait_until
from tests.support.orch import (
    delegated,
    env_for,
    files_containing,
    load_run,
    orchestrate,
    runs_in,
    sql,
)
from zwarm.orchestrator import guard, loop

SECRET = "sk-orch-only-6f1d2c9a"
SHARED = "sk-shared-openai-40b7e3"
NOBODY = 65534


def _no_secret_anywhere(srv: FakeChatServer, *roots: Path) -> None:
    for req in srv.requests:
        assert SECRET not in json.dumps(req.body), "the key reached the LLM transcript"
    for root in roots:
        assert files_containing(root, SECRET) == []


# ---------------------------------------------------------------------------- in this process
def test_the_key_is_taken_out_of_the_api_environment_and_hidden_from_reprs(zw) -> None:
    api = zw.api(
        env_extra={guard.ORCH_KEY_VAR: SECRET, "OPENAI_API_KEY": SHARED, "ZWARM_ORCH_MODEL": "m"}
    )
    p = loop.start(api, "a task", None, {})
    assert p.settings.api_key == SECRET
    assert SECRET not in repr(p.settings) and SECRET not in repr(p)
    assert guard.ORCH_KEY_VAR not in api.env.environ  # sessions started from now on lack it
    assert api.env.environ["OPENAI_API_KEY"] == SHARED  # the user's shared key: agents keep it
    assert files_containing(zw.state_dir, SECRET) == []


def test_delegated_agents_and_bash_never_get_the_orchestrator_key(zw, inproc) -> None:
    during: dict[str, Any] = {}

    def first(req: Any) -> Any:  # runs in this process while the command runs
        during["environ"] = os.environ.get(guard.ORCH_KEY_VAR)
        during["dumpable"] = guard.prctl_get(guard.PR_GET_DUMPABLE)
        return reply(call("delegate", task="show me your environment"))

    script = [
        first,
        lambda req: reply(call("wait", session_ids=delegated(req))),
        reply(call("bash", command="/usr/bin/env")),
        final("done"),
    ]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "go", **{guard.ORCH_KEY_VAR: SECRET, "OPENAI_API_KEY": SHARED})
    assert res.returncode == 0, res.stderr
    assert srv.requests[0].headers["authorization"] == f"Bearer {SECRET}"  # it was used
    assert during == {"environ": None, "dumpable": 0}  # gone from os.environ; /proc closed
    agent_env = json.loads((zw.record / "env1.json").read_text())
    assert guard.ORCH_KEY_VAR not in agent_env and SECRET not in agent_env.values()
    assert agent_env["OPENAI_API_KEY"] == SHARED  # codex reads it: shared keys stay shared
    bash = next(r for n, r in srv.requests[-1].all_results() if n == "bash")
    assert bash["exit_code"] == 0 and "PATH=" in bash["output"]
    assert SECRET not in bash["output"] and SHARED not in bash["output"]
    _no_secret_anywhere(srv, zw.state_dir)


# ---------------------------------------------------------------------------- as non-root
def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run this test: {reason}")
    pytest.skip(reason)


def _as_unprivileged() -> list[str]:
    """The argv prefix that runs a command as a non-root user ([] if this one is not root)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv"):
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"]
    _unavailable("running as root with neither setpriv nor runuser to drop to nobody")
    raise AssertionError("unreachable")


@pytest.fixture
def world() -> Iterator[dict[str, Any]]:
    """Directories an unprivileged user can write (pytest's tmp_path is root's, 0700).

    Only the orchestrator and the bash tool run as that user (sessions are the in-process
    test's): the interpreter may lie where only root can reach it, and ``setpriv`` execs the
    command before it drops its capabilities, but nothing exec'd after that could.
    """
    base = Path(tempfile.mkdtemp(prefix="zwarm-nonroot-"))
    try:
        work, state = base / "work", base / "state"  # state: created by zwarm, as that user
        work.mkdir()
        env = make_env(base, state, base / "record")
        env.update(XDG_CONFIG_HOME=str(base / "xdg-config"), XDG_STATE_HOME=str(base / "xdg-state"))
        if os.geteuid() == 0:
            for p in [base, *base.rglob("*")]:
                os.chown(p, NOBODY, NOBODY)
        yield {"base": base, "state": state, "env": env, "work": work}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_bash_cannot_read_the_orchestrators_proc_files(world) -> None:
    prefix = _as_unprivileged()
    probe = subprocess.run(
        [*prefix, str(ZWARM_BIN), "--version"],
        cwd=world["work"],
        env=world["env"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        _unavailable(f"the unprivileged user cannot run zwarm here: {probe.stderr.strip()}")
    peek = (
        "cat /proc/$PPID/environ; echo environ=$?; head -c 64 /proc/$PPID/mem >/dev/null; "
        "echo mem=$?; tr '\\0' '\\n' < /proc/$PPID/cmdline"
    )
    script = [reply(call("bash", command=peek)), final("done")]
    with FakeChatServer(script) as srv:
        env = {**world["env"], **env_for(srv), guard.ORCH_KEY_VAR: SECRET}
        res = subprocess.run(
            [*prefix, str(ZWARM_BIN), "orchestrate", "--quiet", "look around"],
            cwd=world["work"],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert res.returncode == 0, res.stderr
    assert srv.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    ((_, bash),) = srv.requests[1].last_results()
    out = bash["output"]
    assert "orchestrate" in out  # $PPID is the orchestrator: its cmdline is public
    assert "environ=1" in out and "mem=1" in out and "Permission denied" in out
    assert SECRET not in out and guard.ORCH_KEY_VAR not in out
    (run_dir,) = runs_in(world["state"])
    run, _ = load_run(run_dir)
    assert run["status"] == "finished"
    _no_secret_anywhere(srv, world["state"], world["work"])


# ---------------------------------------------------------------------------- every process
# every process's environment, then each ancestor of the bash command's (``/proc/<p>/stat``
# field 4 is the parent: read after the ")" that ends the command name, which may hold spaces);
# the ancestors' raw environments are also kept in the file RAW, which no redaction touches
PEEK = (
    "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done | grep -a sk- ; "
    "p=$$; : > {raw}; while [ \"$p\" -gt 1 ]; do echo \"ancestor $p: $(tr '\\0' ' ' < "
    "/proc/$p/cmdline | head -c 80)\"; tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -a "
    "sk- ; cat /proc/$p/environ >> {raw} 2>/dev/null; p=$(sed 's/.*) //' /proc/$p/stat | "
    "cut -d' ' -f2); done"
)


def test_no_process_zwarm_starts_nor_its_own_environment_shows_the_key(zw) -> None:
    """The model asks the bash tool for every process's environment and every ancestor's, while
    an agent of the run is running: the key is in none of them (zwarm re-executed itself
    without it), so not in what the model is sent, nor in the run store or any file."""
    raw = zw.tmp / "ancestors.env"
    agent_started = zw.record / "argv1.json"

    def peek(req: Any) -> Any:
        wait_until(agent_started.exists, message="the delegated agent to start")
        return reply(call("bash", command=PEEK.format(raw=raw)))

    script = [
        reply(call("delegate", task="hold on")),
        peek,
        lambda req: reply(call("end_session", session_id=delegated(req)[0])),
        final("done"),
    ]
    with FakeChatServer(script) as srv:
        res = orchestrate(zw, srv, "--quiet", "look", FAKE_HANG="1", **{guard.ORCH_KEY_VAR: SECRET})
    assert res.returncode == 0, res.stderr
    assert srv.requests[0].headers["authorization"] == f"Bearer {SECRET}"  # it was used
    (bash,) = srv.requests[-1].results("bash")
    assert bash["exit_code"] == 0 and "ancestor" in bash["output"]
    assert "orchestrate" in bash["output"]  # the walk went through zwarm's own process
    if os.geteuid() == 0:  # root reads every environment: zwarm's own block was in RAW
        assert b"ZWARM_ORCH_MODEL=fake-orchestrator" in raw.read_bytes()
    assert SECRET.encode() not in raw.read_bytes(), "zwarm's environment block holds the key"
    agent_env = json.loads((zw.record / "env1.json").read_text())
    assert SECRET not in json.dumps(agent_env)
    _no_secret_anywhere(srv, zw.state_dir, zw.cwd)


AGENT_TOKEN = "tok-agent-config-5d61a0"
USER_KEY = "sk-ant-user-env-93c2f1"


def test_every_secret_zwarm_knows_is_redacted_from_tool_results_and_the_store(zw, inproc) -> None:
    """A file an agent wrote holds the orchestrator's key (here the shared ``api_key_env``
    one, which agents keep), a configured agent env value under a secret-looking name and a
    secret-looking variable of the user's environment: the model and the store see each
    replaced by a marker, never the value; the rest of the output is intact."""
    zw.state_dir.mkdir()
    zw.write_config(f'[claude.env]\nSERVICE_TOKEN = "{AGENT_TOKEN}"\n')
    (zw.cwd / "leak.txt").write_text(f"key={SHARED}\ntoken={AGENT_TOKEN}\nuser={USER_KEY}\nend\n")
    script = [reply(call("bash", command="cat leak.txt")), final(f"done {SHARED}")]
    with FakeChatServer(script) as srv:
        res = inproc(srv, "go", OPENAI_API_KEY=SHARED, ANTHROPIC_API_KEY=USER_KEY)
    assert res.returncode == 0, res.stderr
    assert srv.requests[0].headers["authorization"] == f"Bearer {SHARED}"
    (bash,) = srv.requests[-1].results("bash")
    out = bash["output"].splitlines()
    assert out[0].startswith("key=[redacted") and "OPENAI_API_KEY" in out[0]
    assert out[1].startswith("token=[redacted") and out[2].startswith("user=[redacted")
    assert out[3] == "end"
    for value in (SHARED, AGENT_TOKEN, USER_KEY):
        assert all(value not in json.dumps(r.body) for r in srv.requests)
        assert files_containing(zw.state_dir, value) in ([], [zw.state_dir / "config.toml"])


def test_a_resumed_run_stored_before_redaction_is_sent_redacted(zw, inproc) -> None:
    """A transcript stored by an earlier zwarm holds a secret: resuming it sends the model
    the message with the secret replaced."""
    with FakeChatServer([reply(call("bash", command="true")), final("done")]) as srv:
        res = inproc(srv, "go", "--max-steps", "1", OPENAI_API_KEY=SHARED)
        assert res.returncode == 3, res.stderr
        (run,) = runs_in(zw.state_dir)
        body = json.dumps({"role": "tool", "tool_call_id": "x", "content": f"key {SHARED}"})
        sql(run, "UPDATE messages SET body = ? WHERE role = 'tool'", body)
        res = inproc(srv, "--resume", "last", OPENAI_API_KEY=SHARED)
    assert res.returncode == 0, res.stderr
    sent = json.dumps(srv.requests[-1].body)
    assert SHARED not in sent and "key [redacted OPENAI_API_KEY]" in sent


def test_a_key_exported_in_the_users_shell_reaches_no_process_zwarm_starts(zw) -> None:
    """Regression: with ``ZWARM_ORCH_API_KEY`` exported in the user's shell, every command but
    ``orchestrate`` (``spawn``, ``serve``, ``mcp``) handed it to the supervisors and agents it
    started: an agent found it in its own environment and in its supervisor's block."""
    env = zw.replay("codex_simple", FAKE_HANG="1", **{guard.ORCH_KEY_VAR: SECRET})
    sids = [zw.spawn("hold on", env_extra=env) for _ in range(2)]  # the 2nd: the fork server's
    for n in (1, 2):
        # argvN.json is written last, atomically: envN.json is complete once it exists
        wait_until((zw.record / f"argv{n}.json").exists, message=f"agent {n} to start")
        agent_env = json.loads((zw.record / f"env{n}.json").read_text())
        assert guard.ORCH_KEY_VAR not in agent_env and SECRET not in json.dumps(agent_env)
    for sid in sids:
        supervisor = zw.meta(sid)["turns"][0]["supervisor"]["pid"]
        block = Path(f"/proc/{supervisor}/environ").read_bytes()
        assert b"ZWARM_SUPERVISOR_OF=" in block  # the supervisor's own block, read
        assert SECRET.encode() not in block, "the supervisor's environment holds the key"
        zw.run("kill", sid, check=True)
    assert files_containing(zw.state_dir, SECRET) == []
