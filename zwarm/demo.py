"""``zwarm demo``: a tour of the real machinery on a built-in scripted agent.

Owns the demo flow only. It creates ``./zwarm-demo/`` (or uses ``--state-dir``) with its own
config pointing the codex adapter at ``zwarm.demo_agent``, then runs spawn, wait, ls,
trajectory, inject, show through the same API and supervisor as every other session. It never
touches the user's own ``.zwarm/`` config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


def run_demo(state_dir: Path | None, keep: bool = True) -> int:
    from zwarm import render
    from zwarm.api import Zwarm, row
    from zwarm.env import Env

    root = Path(state_dir) if state_dir else Path.cwd() / "zwarm-demo" / ".zwarm"
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
    click.secho(
        f"\nDemo state is in {root}. Explore it: zwarm --state-dir {root} ls", fg="green"
    )
    return 0 if final["status"] == "completed" else 1


def say(command: str) -> None:
    click.secho(f"\n$ {command}", fg="cyan", bold=True)


def _write_config(api: object, root: Path) -> None:
    from zwarm.api import Zwarm

    assert isinstance(api, Zwarm)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    cfg = root / "config.toml"
    if not cfg.exists():
        import tomli_w

        doc = {"codex": {"command": [sys.executable, "-m", "zwarm.demo_agent"], "model": "demo"}}
        cfg.write_text("# written by zwarm demo: codex is the built-in scripted agent\n"
                       + tomli_w.dumps(doc))
        cfg.chmod(0o600)
