"""Issue 29, critical 1: no Python process zwarm starts imports anything an agent wrote.

A module is planted under the name of every module a zwarm process imports (derived: every
top-level name in ``sys.modules`` once every zwarm module is imported, plus ``sitecustomize``,
``usercustomize`` and the optional dependencies) in every folder an agent can write: the
project (its working folder, a git repository whose commit carries the planted files into the
session's worktree), the worktree, the state dir, its parent, the session dir, ``$TMPDIR``
and ``$HOME``; a ``.pth`` file and ``usercustomize`` go into ``$HOME``'s user site, and
``PYTHONPATH``/``PYTHONSTARTUP``/``PYTHONUSERBASE`` in the environment point at planted
folders. Then every command that starts a Python process runs (spawn and inject with and
without ``--wait``, wait, retry, resume, a hook runner, the fork server and its forked
supervisors, serve, orchestrate, the Slurm job script's interpreter) and no planted module
may run. The top-level command itself is started isolated (``python -I -m zwarm``, as the
re-exec is): what the user's own shell runs is the user's. The fake agents run isolated too
(they are the agent, whose own imports are its business, not zwarm's).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.chat_server import FakeChatServer, call, final, reply
from tests.support import FAKE_BIN, ROOT, SAMPLES, ZWARM_BIN, wait_status, wait_until
from tests.support.orch import delegated, env_for
from tests.support.serve import first_line
from tests.support.workspace import make_repo

pytestmark = pytest.mark.usefixtures("strays")

EXTRA = ("sitecustomize", "usercustomize", "openai", "rich", "tomli_w", "psutil", "tomllib")
PLANT = """import os, sys
with open(os.path.join({markers!r}, "%d-" % os.getpid() + __name__), "w") as f:
    f.write(__file__ + " " + repr(sys.orig_argv))
"""


@functools.cache
def imported_names() -> tuple[str, ...]:
    """Every top-level module name a zwarm process may import: all of zwarm's modules
    imported in a fresh isolated interpreter, then ``sys.modules`` read."""
    code = (
        "import importlib, pkgutil, sys, zwarm\n"
        "for m in pkgutil.walk_packages(zwarm.__path__, 'zwarm.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "print(' '.join(sorted({n.split('.')[0] for n in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], cwd="/", capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    names = {*out.stdout.split(), *EXTRA} - {"__main__", "__mp_main__"}
    assert {"zwarm", "click", "msgspec", "json", "encodings"} <= names
    return tuple(sorted(names))


class World:
    """The ``zw`` world with modules planted everywhere an agent can write."""

    def __init__(self, zw: Any) -> None:
        self.zw = zw
        self.markers = zw.tmp / "markers"
        self.markers.mkdir()
        self.repo = make_repo(zw.cwd / "project", zw.env)
        self.project = self.repo.path
        self.plant(self.project)
        self.repo.commit("planted")  # carried into every worktree made from it
        site = zw.tmp / "home" / ".local" / "lib"
        site /= f"python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
        for where in (zw.tmp, zw.state_dir, zw.tmp / "tmpdir", zw.tmp / "home", site):
            self.plant(where)
        (site / "planted.pth").write_text(f"import os; os.mkdir({str(self.markers / 'pth')!r})\n")
        startup = zw.tmp / "startup.py"
        startup.write_text(PLANT.format(markers=str(self.markers)))
        self.plant(zw.tmp / "pythonpath")
        self.plant(zw.tmp / "userbase")
        agents = zw.tmp / "agentbin"  # the fake agents, run isolated: they are not zwarm
        agents.mkdir()
        for name in ("codex", "claude"):
            (agents / name).write_text(
                f'#!/bin/sh\nexec {sys.executable} -I {FAKE_BIN / name} "$@"\n'
            )
            (agents / name).chmod(0o755)
        self.env = {
            **zw.env,
            "PATH": f"{agents}{os.pathsep}{zw.env['PATH']}",
            "PYTHONPATH": str(zw.tmp / "pythonpath"),
            "PYTHONSTARTUP": str(startup),
            "PYTHONUSERBASE": str(zw.tmp / "userbase"),
            "FAKE_REPLAY": str(SAMPLES / "codex_simple.jsonl"),
        }

    def plant(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        code = PLANT.format(markers=str(self.markers))
        for name in imported_names():
            (where / f"{name}.py").write_text(code)

    def plant_in_session(self, sid: str) -> None:
        """The session dir, its turns dir and its worktree (once made)."""
        self.plant(self.zw.session_dir(sid))
        self.plant(self.zw.session_dir(sid) / "turns")
        tree = self.zw.meta(sid).get("workspace", {}).get("tree")
        if tree:
            self.plant(Path(tree))

    def zwarm(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """``python -I -m zwarm ARGS`` in the project, with the planted environment."""
        return subprocess.run(
            [sys.executable, "-I", "-m", "zwarm", *args],
            cwd=self.project,
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=180,
        )

    def ok(self, *args: str, **extra: str) -> str:
        res = self.zwarm(*args, **extra)
        assert res.returncode == 0, (args, res.stdout, res.stderr)
        return res.stdout

    def ran(self) -> list[str]:
        """What a planted module, startup file or .pth recorded: nothing, if none ran."""
        return [f"{p.name}: {p.read_text() if p.is_file() else ''}" for p in self.markers.iterdir()]


def test_wait_spawn_inject_retry_resume_and_hooks_import_nothing_planted(zw: Any) -> None:
    """Regression: ``spawn --wait``/``inject --wait`` re-ran zwarm as ``python -m zwarm`` in
    the project, so a ``click.py`` the agent wrote there ran as the user, unsandboxed."""
    w = World(zw)
    zw.write_config('[hooks]\non_finish = ["/bin/true"]\n[limits]\non_usage_limit = "wait"\n')
    # the first turn: a new interpreter as supervisor, a fork server started; the re-exec
    out = w.ok("spawn", "--worktree", "--wait", "the task", "--name", "planted")
    sid = out.split()[0]
    assert wait_status(zw, sid, "completed")["workspace"]["mode"] == "worktree"
    w.plant_in_session(sid)
    assert "completed" in w.ok("inject", "--wait", sid, "more")  # forked by the server
    w.ok("inject", sid, "again")
    assert "completed" in w.ok("wait", sid)
    # a failed turn retried, a parked one resumed
    failed = w.ok("spawn", "--shared", "fails", FAKE_FAIL_ON="fails").strip()
    wait_status(zw, failed, "failed")
    w.plant_in_session(failed)
    w.ok("retry", failed)
    wait_status(zw, failed, "completed")
    text = (SAMPLES / "limits_claude_usage_limit.jsonl").read_text()
    limited = zw.tmp / "limited.jsonl"
    limited.write_text(text.replace("1795447801", str(int(zw.api().env.clock()) + 3600)))
    parked = w.ok("spawn", "--shared", "--adapter", "claude", "limited", FAKE_REPLAY=str(limited))
    parked = parked.strip()
    wait_status(zw, parked, "parked")
    w.plant_in_session(parked)
    w.ok("resume", parked, FAKE_REPLAY=str(SAMPLES / "claude_simple.jsonl"))
    wait_status(zw, parked, "completed")
    for s in (sid, failed, parked):  # every session's hook runner has run
        log = zw.session_dir(s) / "hooks.log"
        wait_until(lambda log=log: log.is_file() and "exit 0" in log.read_text(), message="hooks")
    assert w.ran() == []


def test_serve_orchestrate_and_the_slurm_job_import_nothing_planted(zw: Any) -> None:
    """Every other command that starts Python processes: serve (its spawns), orchestrate
    (its delegations), and the interpreter a Slurm job script runs."""
    from zwarm.launchers.slurm import job_script

    w = World(zw)
    zw.state_dir.mkdir(mode=0o700, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-m", "zwarm", "serve", "--port", "0"],
        cwd=w.project,
        env=w.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        base, _, token = first_line(proc, 60).partition("/#token=")
        import urllib.request

        req = urllib.request.Request(
            f"{base}/api/sessions",
            data=json.dumps({"task": "served"}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=60) as r:
            served = json.loads(r.read())["id"]
        wait_status(zw, served, "completed")
    finally:
        proc.terminate()
        proc.wait(30)
    script = [
        reply(call("delegate", task="delegated", name="orch")),
        lambda req: reply(call("wait", session_ids=delegated(req), all=True)),
        final("done"),
    ]
    with FakeChatServer(script) as srv:  # with a key: re-executed without it in its block
        res = w.zwarm("orchestrate", "the run", **env_for(srv, ZWARM_ORCH_API_KEY="sk-x"))
    assert res.returncode == 0, res.stderr
    job = job_script(sys.executable, str(zw.state_dir), "0" * 8 + "-0000-0000-0000-" + "0" * 12, 1)
    subprocess.run(["/bin/sh", "-c", job], cwd=w.project, env=w.env, timeout=60)
    assert w.ran() == []


def test_the_wait_reexec_runs_this_interpreter_isolated_in_the_root(zw: Any) -> None:
    """``spawn --wait TASK`` re-executes itself without the prompt in its argv: the same
    interpreter (a virtualenv's own ``bin/python``, so the virtualenv stays in effect), with
    ``-I``, in ``/`` (regression: ``python -m zwarm`` in the project)."""
    hold = zw.tmp / "hold"
    hold.touch()
    proc = subprocess.Popen(
        [str(ZWARM_BIN), "spawn", "--wait", "a secret task"],
        cwd=zw.cwd,
        env={**zw.env, **zw.gated(hold, **zw.replay("codex_simple"))},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def reexeced() -> list[bytes] | None:
            argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:-1]
            return argv if b"_turn-result" in argv else None

        argv = wait_until(reexeced, message="the re-exec")
        assert argv[1:4] == [b"-I", b"-m", b"zwarm"]  # the venv's own python, as it was run
        assert Path(os.fsdecode(argv[0])).parent == Path(sys.executable).parent
        assert b"a secret task" not in b" ".join(argv)
        assert os.readlink(f"/proc/{proc.pid}/cwd") == "/"
        assert os.readlink(f"/proc/{proc.pid}/exe") == os.path.realpath(sys.executable)
    finally:
        hold.unlink()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


def test_a_user_site_install_runs_its_turns_and_its_agents_reach_it(zw: Any) -> None:
    """Regression: zwarm installed in the user site (``pip install --user``, no virtualenv)
    is not found by ``python -I``: every supervisor died at once (``supervisor lost``), and
    ``--wait`` and ``"$ZWARM"`` could not run. Such an interpreter keeps its user site (in
    the user's home, as a virtualenv's site-packages is), and nothing else (``-E -P``)."""
    import sysconfig

    base = os.path.realpath(sys.executable)  # the interpreter the virtualenv was made from
    home = zw.tmp / "home"
    site = home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site /= "site-packages"
    site.mkdir(parents=True)
    # zwarm and what it needs, found only through the user site, as after pip install --user
    (site / "zwarm-user.pth").write_text(f"{ROOT}\n{sysconfig.get_paths()['purelib']}\n")
    env = {**zw.env, **zw.replay("codex_simple"), "HOME": str(home)}
    env["FAKE_SHELL"] = '"$ZWARM" --version > version.txt'
    res = subprocess.run(
        [base, "-m", "zwarm", "spawn", "--wait", "task"],
        cwd=zw.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0 and "completed" in res.stdout, res.stderr
    assert (zw.cwd / "version.txt").read_text().startswith("zwarm ")
    with FakeChatServer([final("done")]) as srv:  # re-executed without its key in the block
        extra = env_for(srv, ZWARM_ORCH_API_KEY="sk-x")
        orch = subprocess.run(
            [base, "-m", "zwarm", "orchestrate", "the run"],
            cwd=zw.cwd,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert orch.returncode == 0 and orch.stdout.strip() == "done", orch.stderr
