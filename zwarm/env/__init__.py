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

Its clock's times are ISO 8601 text (``iso``/``parse_iso``). The other jobs of zwarm's
environment have a module each: ``python`` (how zwarm starts Python: isolated), ``launcher``
(how an agent reaches zwarm: ``"$ZWARM"``), ``children`` (the environment every process
zwarm starts gets). Must stay true: this package sits below the engine and the launchers,
above ``zwarm.trust`` (which judges a state dir) and ``zwarm.system``.
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
    cwd: Path = msgspec.field(default_factory=lambda: working_dir())
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
        """The rule alone, unchecked (but for a path that is not UTF-8, which zwarm cannot
        record: ``InvalidInput``, saying where it came from): only ``zwarm trust`` uses this
        directly."""
        if self.state_dir is not None:
            return _text(_abs(self.state_dir, self.cwd), "--state-dir or ZWARM_DIR")
        env_dir = self.environ.get("ZWARM_DIR")
        if env_dir:
            return _text(_abs(Path(env_dir), self.cwd), "ZWARM_DIR")
        for d in (self.cwd, *self.cwd.parents):
            if _dir_or_link(d / STATE_DIR_NAME):
                return _text(d / STATE_DIR_NAME, "the working directory")
        return _text(self.cwd / STATE_DIR_NAME, "the working directory")

    def now_iso(self) -> str:
        return iso(self.clock())


def working_dir() -> Path:
    """This process's working directory. One that was removed is still named (Linux keeps
    its path, ``/proc/self/cwd``): a command that needs it says which directory is missing,
    and one that does not (a state dir given) works; elsewhere ``InvalidInput``."""
    try:
        return Path(os.getcwd())
    except FileNotFoundError:
        try:
            where = os.readlink("/proc/self/cwd")
        except OSError:
            where = ""
        gone = " (deleted)"
        if where.startswith("/") and where.endswith(gone):
            return Path(where[: -len(gone)])
        from zwarm.errors import InvalidInput

        raise InvalidInput("the current directory no longer exists (it was removed)") from None


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


def _text(p: Path, source: str) -> Path:
    try:
        str(p).encode("utf-8")
    except UnicodeEncodeError:
        from zwarm.errors import InvalidInput

        shown = os.fsencode(p).decode("utf-8", "backslashreplace")
        raise InvalidInput(f"the state dir '{shown}' (from {source}) is not valid UTF-8") from None
    return p


def _abs(p: Path, cwd: Path) -> Path:
    p = p.expanduser()
    return p if p.is_absolute() else cwd / p
