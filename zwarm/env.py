"""The environment zwarm runs in: working directory, environment variables, clock, state dir.

Owns the rule that finds ``.zwarm/``. Everything that would otherwise read ``os.environ``,
``os.getcwd()`` or the clock takes an ``Env``, so tests build one instead of monkeypatching.
Rule (must stay true): ``--state-dir`` > ``$ZWARM_DIR`` > nearest ancestor of cwd holding a
``.zwarm/`` > ``./.zwarm`` (created only by commands that write). The dir found, however it
was found, is then refused if another user could have written it (a symlink, not owned by the
effective uid, or group/world-writable) and the user has not allowed it (``zwarm.trust``).
Walking up *stops* at the first ``.zwarm`` that is a directory or a symlink, safe or not: an
unsafe one is an error, never silently skipped for another dir further up or ``./.zwarm``
(as git does), so the dir zwarm uses never depends on whose ``.zwarm`` sits where. A regular
file named ``.zwarm`` is not a state dir and is passed over, as before.
"""

import os
import stat
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import msgspec

STATE_DIR_NAME = ".zwarm"


class Env(msgspec.Struct):
    cwd: Path = msgspec.field(default_factory=lambda: Path(os.getcwd()))
    environ: Mapping[str, str] = msgspec.field(default_factory=lambda: dict(os.environ))
    state_dir: Path | None = None  # explicit --state-dir
    clock: Callable[[], float] = time.time
    python: str = sys.executable
    # told what a command is waiting for (a lock another process holds) once the wait is
    # long enough to be noticed; ``zwarm.api.Zwarm`` routes it to its ``warn``
    notice: Callable[[str], None] | None = None

    def find_state_dir(self) -> Path:
        """Where ``.zwarm/`` is or would be created (it may not exist); ``UnsafeStateDir`` if
        it exists and another user could have written it (see ``zwarm.trust``)."""
        path = self.locate_state_dir()
        if not _plainly_safe(path):  # the common case costs one lstat and no import
            from zwarm import trust

            trust.check_state_dir(path, self.environ)
        return path

    def locate_state_dir(self) -> Path:
        """The rule alone, unchecked: only ``zwarm trust`` uses this directly."""
        if self.state_dir is not None:
            return _abs(self.state_dir, self.cwd)
        env_dir = self.environ.get("ZWARM_DIR")
        if env_dir:
            return _abs(Path(env_dir), self.cwd)
        for d in (self.cwd, *self.cwd.parents):
            if _dir_or_link(d / STATE_DIR_NAME):
                return d / STATE_DIR_NAME
        return self.cwd / STATE_DIR_NAME

    def now_iso(self) -> str:
        return iso(self.clock())


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def parse_iso(s: str) -> float:
    return datetime.fromisoformat(s).timestamp()


def _plainly_safe(p: Path) -> bool:
    """Nothing there yet, or a directory (not a symlink) owned by the effective uid and not
    group/world-writable; anything else is for ``zwarm.trust`` to judge."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return True  # created later, by this user, 0700
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _dir_or_link(p: Path) -> bool:
    try:
        mode = os.lstat(p).st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) or stat.S_ISLNK(mode)


def _abs(p: Path, cwd: Path) -> Path:
    p = p.expanduser()
    return p if p.is_absolute() else cwd / p
