"""How an agent reaches zwarm: the ``zwarm`` program ``"$ZWARM"`` names in its environment.

Owns ``launcher``: a program ``zwarm`` that runs this zwarm (``PYTHON -I -m zwarm``,
``env.python.python_argv``), kept in the user's state dir (``xdg.user_state_dir``, outside
every agent's writable roots), so an agent reaches zwarm however zwarm was installed and
whatever PATH its shell ends up with (codex runs commands in a login shell, whose
``/etc/profile`` resets PATH). Must stay true: the program is one per interpreter, 0700,
owned by the effective uid and exactly the text zwarm writes (anything else there is
rewritten, atomically, never through a link); when it cannot be written, agents get none
(None), never a program zwarm did not write.
"""

import os
from collections.abc import Mapping
from pathlib import Path

from zwarm.env.python import python_argv


def launcher(python: str, environ: Mapping[str, str]) -> Path | None:
    """An executable ``zwarm`` running this zwarm on ``python`` (``PYTHON -I -m zwarm``):
    ``<user_state_dir>/bin/<hash of PYTHON>/zwarm``, 0700, written (atomically) when missing
    or not exactly ours; None if it cannot be (an unwritable home: agents then have none)."""
    import shlex
    from _blake2 import blake2b

    from zwarm.errors import StoreError
    from zwarm.system.files import atomic_write, private_dir, read_file
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
