"""The environment zwarm runs in: working directory, environment variables, clock, state dir.

Owns the rule that finds ``.zwarm/``. Everything that would otherwise read ``os.environ``,
``os.getcwd()`` or the clock takes an ``Env``, so tests build one instead of monkeypatching.
Rule (must stay true): ``--state-dir`` > ``$ZWARM_DIR`` > nearest ancestor of cwd holding a
``.zwarm/`` > ``./.zwarm`` (created only by commands that write).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

STATE_DIR_NAME = ".zwarm"


@dataclass
class Env:
    cwd: Path = field(default_factory=lambda: Path(os.getcwd()))
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    state_dir: Path | None = None  # explicit --state-dir
    clock: Callable[[], float] = time.time
    python: str = sys.executable

    def find_state_dir(self) -> Path:
        """Where ``.zwarm/`` is or would be created (it may not exist)."""
        if self.state_dir is not None:
            return _abs(self.state_dir, self.cwd)
        env_dir = self.environ.get("ZWARM_DIR")
        if env_dir:
            return _abs(Path(env_dir), self.cwd)
        for d in (self.cwd, *self.cwd.parents):
            if (d / STATE_DIR_NAME).is_dir():
                return d / STATE_DIR_NAME
        return self.cwd / STATE_DIR_NAME

    def now_iso(self) -> str:
        return iso(self.clock())


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def parse_iso(s: str) -> float:
    return datetime.fromisoformat(s).timestamp()


def _abs(p: Path, cwd: Path) -> Path:
    p = p.expanduser()
    return p if p.is_absolute() else cwd / p
