"""``zwarm demo``: a tour of the real machinery on a built-in scripted agent.

Owns the demo flow only. It works in a new temporary directory (or ``--keep DIR``, or
``--state-dir``) with its own config pointing the codex adapter at ``zwarm.cli.demo_agent``,
then runs the real commands (spawn, wait, ls, trajectory, inject --wait, show), each as its own
``zwarm`` process in that directory, so the transcript is exactly what they print. It never
touches the user's own ``.zwarm/`` config, and leaves nothing behind in the current directory:
a temporary directory is removed at the end.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import click

from zwarm.env.python import python_argv

TASK = "Summarise this directory in NOTES.md"
FOLLOW_UP = "Now list what you changed"


def run_demo(state_dir: Path | None, keep: Path | None = None) -> int:
    import shutil
    import tempfile

    if state_dir is None and keep is None:
        tmp = Path(tempfile.mkdtemp(prefix="zwarm-demo-"))
        try:
            return _tour(tmp / ".zwarm", kept=False)
        finally:
            _forget_trust(tmp / ".zwarm")
            shutil.rmtree(tmp, ignore_errors=True)
    root = Path(keep).absolute() / ".zwarm" if keep else Path(state_dir or ".zwarm").absolute()
    return _tour(root, kept=True)


def _tour(root: Path, kept: bool) -> int:
    from zwarm.api import Zwarm
    from zwarm.env import Env

    work = root.parent
    work.mkdir(parents=True, exist_ok=True)
    api = Zwarm(env=Env(state_dir=root))
    _write_config(api, root)
    zwarm = _Shell(root, work)
    sid = zwarm.run("spawn", TASK, capture=True).strip()
    if len(sid) != 36:
        return 1
    short = sid[:8]
    zwarm.run("wait", short)
    zwarm.run("ls")
    zwarm.run("trajectory", short)
    zwarm.run("inject", short, FOLLOW_UP, "--wait")
    ok = zwarm.run("show", short, capture=False, check=0)
    status = api.get(sid).status.value
    if kept:
        click.secho(
            f"\nDemo state is in {root}. Explore it: zwarm --state-dir {root} ls", fg="green"
        )
    else:
        api.rm([sid], force=True)
        click.secho("\nDone; the demo's temporary directory is removed (--keep DIR keeps it).")
    return 0 if status == "completed" and ok == "" else 1


class _Shell:
    """Runs ``zwarm ARGS`` in the demo directory as a user would, showing the command first."""

    def __init__(self, root: Path, work: Path) -> None:
        self.work = work
        self.env = {**os.environ, "ZWARM_DIR": str(root)}

    def run(self, *args: str, capture: bool = False, check: int | None = None) -> str:
        say("zwarm " + " ".join(shlex.quote(a) for a in args))
        sys.stdout.flush()
        res = subprocess.run(
            python_argv(sys.executable, "zwarm", *args),
            cwd=self.work,
            env=self.env,
            stdout=subprocess.PIPE if capture else None,
            text=True,
        )
        if capture:
            click.echo(res.stdout, nl=False)
            return str(res.stdout)
        return "" if check is None or res.returncode == check else f"exit {res.returncode}"


def _forget_trust(root: Path) -> None:
    """Drop the trust ``_write_config`` recorded for a temporary demo dir (best effort)."""
    from zwarm import trust
    from zwarm.errors import ZwarmError

    try:
        trust.revoke(root)
    except ZwarmError:
        pass


def say(command: str) -> None:
    click.secho(f"\n$ {command}", fg="cyan", bold=True)


def _write_config(api: object, root: Path) -> None:
    from zwarm.api import Zwarm

    assert isinstance(api, Zwarm)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    cfg = root / "config.toml"
    if not cfg.exists():
        import tomli_w

        doc = {
            "codex": {
                "command": python_argv(sys.executable, "zwarm.cli.demo_agent"),
                "model": "demo",
            }
        }
        head = "# written by zwarm demo: codex is the built-in scripted agent\n"
        data = (head + tomli_w.dumps(doc)).encode("utf-8")
        cfg.write_bytes(data)
        cfg.chmod(0o600)
        from zwarm.trust_plan import trust_config

        trust_config(cfg, data, api.env.environ)  # exactly what zwarm wrote, nothing else
