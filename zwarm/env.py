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

Also owns how zwarm starts Python (``python_argv``): every Python process zwarm starts (the
``--wait`` re-exec, supervisors, the fork server, the hook runner, a Slurm job's supervisor)
runs ``PYTHON -I -m MODULE``, isolated: no ``PYTHON*`` variable (``PYTHONPATH``,
``PYTHONSTARTUP``, ``PYTHONHOME``), no user site (nor its ``.pth`` files or
``usercustomize``), and neither the working directory nor a script's directory on
``sys.path``, so nothing an agent wrote in a folder it can write is imported; and where the
process needs no working directory it is started in ``NEUTRAL_CWD``. The one exception: an
interpreter whose user site is on (no virtualenv) keeps it (``-E -P``, ``isolated``), as
zwarm may be installed there; it lies in the user's home, outside every agent's writable
roots. ``PYTHON`` is the interpreter running zwarm (``sys.executable``: a virtualenv's own
``bin/python``, kept as its path so the virtualenv stays in effect), or the one the user
configured.

And how an agent reaches zwarm (``launcher``): a program ``zwarm`` that runs this zwarm
(``PYTHON -I -m zwarm``), kept in the user's state dir (``user_state_dir``, outside every
agent's writable roots), whatever PATH the agent's shell ends up with (codex runs commands
in a login shell, whose ``/etc/profile`` resets PATH).

Also owns the environment every process zwarm starts gets (``for_children``):
never the built-in orchestrator's own key (``ORCH_KEY_VAR``), wherever zwarm found it (a
user who exported it in their shell runs ``zwarm spawn``, ``serve`` or ``mcp`` with it; only
``zwarm orchestrate`` reads it, ``orchestrator.guard``), nor ``SOURCE_VAR``.
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
NEUTRAL_CWD = "/"  # where a process zwarm starts runs when it needs no working directory
ORCH_KEY_VAR = "ZWARM_ORCH_API_KEY"  # the orchestrator's alone: no process zwarm starts gets it
SOURCE_VAR = "ZWARM_SOURCE"  # names the caller of one ``zwarm mcp``: never its agents' servers


def for_children(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as a process zwarm starts (a supervisor, an agent, a hook) gets it: without
    the orchestrator-only key (``ORCH_KEY_VAR``), which only ``zwarm orchestrate`` reads, nor
    the caller name of a ``zwarm mcp`` (``SOURCE_VAR``): an agent's own MCP server is a
    caller of its own, never its orchestrator's."""
    return {k: v for k, v in environ.items() if k not in (ORCH_KEY_VAR, SOURCE_VAR)}


def python_argv(python: str, module: str, *args: str) -> list[str]:
    """The argv of a Python process zwarm starts: ``PYTHON -I -m MODULE ARGS`` (isolated)."""
    return [python, *isolated(python), "-m", module, *args]


def isolated(python: str) -> list[str]:
    """``-I``; for this interpreter with its user site on (zwarm installed with ``pip
    install --user``, which ``-I`` would not find), ``-E -P``: the same but for the user
    site, which lies in the user's home as a virtualenv's site-packages lies in it."""
    import site

    user_site = python == sys.executable and site.ENABLE_USER_SITE
    if user_site and os.path.isdir(site.getusersitepackages()):
        return ["-E", "-P"]
    return ["-I"]


def launcher(python: str, environ: Mapping[str, str]) -> Path | None:
    """An executable ``zwarm`` running this zwarm on ``python`` (``PYTHON -I -m zwarm``):
    ``<user_state_dir>/bin/<hash of PYTHON>/zwarm``, 0700, written (atomically) when missing
    or not exactly ours; None if it cannot be (an unwritable home: agents then have none)."""
    import shlex
    from _blake2 import blake2b

    from zwarm.errors import StoreError
    from zwarm.store.files import atomic_write, private_dir, read_file
    from zwarm.xdg import user_state_dir

    name = blake2b(os.fsencode(python), digest_size=8).hexdigest()
    path = user_state_dir(environ) / "bin" / name / "zwarm"
    argv = shlex.join(python_argv(python, "zwarm"))
    text = f'#!/bin/sh\n# written by zwarm: how its agents run it\nexec {argv} "$@"\n'
    want = os.fsencode(text)  # a path that is not UTF-8 is written as it is
    try:
        data, st = read_file(path, len(want))
        if data == want and st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700:
            return path
    except OSError:
        pass
    try:
        private_dir(path.parent)
        atomic_write(path, want, mode=0o700)
        os.chmod(path, 0o700)  # whatever the umask
    except (OSError, StoreError):
        return None
    return path


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
