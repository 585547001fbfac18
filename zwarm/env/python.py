"""How zwarm starts Python: every Python process zwarm starts runs isolated.

Owns ``python_argv`` (and ``isolated``, its flags) and ``NEUTRAL_CWD``. Must stay true: every
Python process zwarm starts (the ``--wait`` re-exec, supervisors, the fork server, the hook
runner, a Slurm job's supervisor, the agents' ``zwarm`` launcher) runs ``PYTHON -I -m
MODULE``, isolated: no ``PYTHON*`` variable (``PYTHONPATH``, ``PYTHONSTARTUP``,
``PYTHONHOME``), no user site (nor its ``.pth`` files or ``usercustomize``), and neither the
working directory nor a script's directory on ``sys.path``, so nothing an agent wrote in a
folder it can write is imported; and where the process needs no working directory it is
started in ``NEUTRAL_CWD``. The one exception: an interpreter whose user site is on (no
virtualenv) keeps it (``-E -P``, ``isolated``), as zwarm may be installed there; it lies in
the user's home, outside every agent's writable roots. The filtering proxy of a sandboxed
turn (``zwarm.sandbox.proxy``, standard library only, started on every turn's path) runs as
``PYTHON -I -S FILE``: as isolated, and without any site at all. ``PYTHON`` is the interpreter
running zwarm (``sys.executable``: a virtualenv's own ``bin/python``, kept as its path so the
virtualenv stays in effect), or the one the user configured. Imports only the standard
library.
"""

import os
import sys

NEUTRAL_CWD = "/"  # where a process zwarm starts runs when it needs no working directory


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
