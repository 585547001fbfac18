"""``zwarm demo``: a tour of the real machinery on a built-in scripted agent.

Owns the demo flow only. It works in a new temporary directory (or ``--keep DIR``, or
``--state-dir``) with its own config pointing the codex adapter at ``zwarm.cli.demo_agent``,
then runs spawn, wait, ls, trajectory, inject, show through the same API and supervisor as
every other session. It never touches the user's own ``.zwarm/`` config, and leaves nothing
behind in the current directory: a temporary directory is removed at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


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
    from zwarm.api import Zwarm, row
    from zwarm.cli import render
    from zwarm.env import Env

    work = root.parent
    work.mkdir(parents=True, exist_ok=True)
    api = Zwarm(env=Env(state_dir=root))
    _write_config(api, root)
    say('zwarm spawn "Summarise this directory in NOTES.md"')
    s = api.spawn("Summarise this directory in NOTES.md", cwd=work, adapter="codex")
    click.echo(s.id)
    say(f"zwarm wait {s.id[:8]}")
    api.wait([s.id], timeout=60)
    say("zwarm ls")
    render.session_table(api.sessions(), api.env.clock(), color=sys.stdout.isatty())
    say(f"zwarm trajectory {s.id[:8]}")
    render.steps(api.trajectory(s.id))
    say(f'zwarm inject {s.id[:8]} "Now list what you changed"')
    api.inject(s.id, "Now list what you changed")
    api.wait([s.id], timeout=60)
    say(f"zwarm show {s.id[:8]}")
    render.session_detail(api.show(s.id))
    final = row(api.get(s.id).to_dict())
    if kept:
        click.secho(
            f"\nDemo state is in {root}. Explore it: zwarm --state-dir {root} ls", fg="green"
        )
    else:
        api.rm([s.id], force=True)
        click.secho("\nDone; the demo's temporary directory is removed (--keep DIR keeps it).")
    return 0 if final["status"] == "completed" else 1


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
            "codex": {"command": [sys.executable, "-m", "zwarm.cli.demo_agent"], "model": "demo"}
        }
        head = "# written by zwarm demo: codex is the built-in scripted agent\n"
        data = (head + tomli_w.dumps(doc)).encode("utf-8")
        cfg.write_bytes(data)
        cfg.chmod(0o600)
        from zwarm.trust import trust_config

        trust_config(cfg, data, api.env.environ)  # exactly what zwarm wrote, nothing else
