"""Where zwarm's per-user files live: the one resolver of the XDG base directories and of the
home directory (``xdg_dir``, ``xdg_runtime_dir``, ``user_home``, ``user_state_dir``), for
every module that keeps a file per user (trust, pins, launchers, serve's tokens, worktrees,
the row cache).

Must stay true: a relative ``$XDG_*`` or ``$HOME`` is never used (it would name a directory of
whatever project zwarm runs in); this module imports only the standard library (and
``zwarm.errors`` when it fails), so every other module may use it.
"""

import os
from collections.abc import Mapping
from pathlib import Path

# The XDG base directories (one rule for all of zwarm's per-user files): an absolute
# ``$XDG_*`` value, else its default under the user's home (``user_home``). A relative value
# is ignored, as the XDG spec says: it would name a directory of whatever project zwarm runs in.
XDG_DEFAULTS = {
    "XDG_CONFIG_HOME": ".config",  # the trust file
    "XDG_STATE_HOME": ".local/state",  # launch pins, launchers, serve's tokens (no runtime dir)
    "XDG_DATA_HOME": ".local/share",  # worktrees
    "XDG_CACHE_HOME": ".cache",  # the row cache
}


def user_home(environ: Mapping[str, str]) -> str:
    """The user's home: ``$HOME`` if absolute, else the password database's; ``InvalidInput``
    if neither is (a relative home would name a project directory)."""
    home = environ.get("HOME", "")
    if os.path.isabs(home):
        return home
    import pwd

    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        home = ""
    if not os.path.isabs(home):
        from zwarm.errors import InvalidInput

        raise InvalidInput("cannot locate the home directory: set HOME")
    return home


def xdg_dir(environ: Mapping[str, str], var: str) -> Path:
    """zwarm's directory in XDG base directory ``var`` (a key of ``XDG_DEFAULTS``):
    ``$VAR/zwarm`` when ``$VAR`` is absolute, else ``<home>/<default>/zwarm``."""
    base = environ.get(var, "")
    if not os.path.isabs(base):
        base = os.path.join(user_home(environ), XDG_DEFAULTS[var])
    return Path(base) / "zwarm"


def xdg_runtime_dir(environ: Mapping[str, str]) -> Path | None:
    """``$XDG_RUNTIME_DIR/zwarm`` when that variable is absolute (it has no default: None)."""
    run = environ.get("XDG_RUNTIME_DIR", "")
    return Path(run) / "zwarm" if os.path.isabs(run) else None


def user_state_dir(environ: Mapping[str, str]) -> Path:
    """``$XDG_STATE_HOME/zwarm`` (an absolute one; else ``~/.local/state/zwarm``): the user's
    own zwarm files (launch pins, launchers), where no agent's sandbox may write."""
    return xdg_dir(environ, "XDG_STATE_HOME")
