"""The ``zwarm`` command line: a thin layer over ``zwarm.api.Zwarm``.

Owns the entry points: ``run`` (the console script and ``python -m zwarm``) and ``main`` (the
click CLI, for a program that calls it). ``run`` answers the commands an orchestrator runs
again and again (``ls``, ``trajectory --json``, ``show --json``, ``logs``) itself when their
argv is in ``fast``'s strict grammar, without loading click; anything else goes to the click
commands (``commands``), which parse argv, report usage errors and help, and map errors to
exit codes once. The layout: ``commands`` (click), ``fast`` (the click-free bodies and
grammar), ``options`` (the one table of spawn's and inject's options, which click's options
and ``fast``'s spawn grammar are made from), ``start`` (spawn and inject), ``output`` (what
both print through), ``render``/``tree`` (terminal text, over ``zwarm.text``),
``live``/``follow`` (watching), ``serve`` (the command that starts ``zwarm.serve``'s server),
and one module per command group loaded when run. Must stay true: importing this package
loads only the standard library, so ``fast``'s start-up is its own; nothing below the CLI
(``zwarm.serve`` included) imports it.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def main() -> NoReturn:
    """The click CLI on ``sys.argv`` (every command; a program's call keeps its process)."""
    if not_text(sys.argv[1:]):
        sys.exit(1)
    from zwarm.cli.commands import cli

    cli.main(prog_name="zwarm")
    sys.exit(0)  # pragma: no cover - cli.main always exits


def run() -> NoReturn:
    """``main`` in a process of its own, which ends without tearing its modules and objects
    down when nothing else is left to do (``output.leave``); the fast path's commands
    answered without click first."""
    from zwarm.cli import fast, output

    output.own_process()
    code: str | int | None
    if sys.argv[1:2] == ["_launcher"]:  # a launcher's side on another machine (ssh: a host)
        output.leave(_launcher_side(sys.argv[2:]))
    if sys.argv[1:2] == ["_workspace"]:  # a session's worktree on this host (ssh: ops.hostws)
        from zwarm.ops import hostws

        output.leave(hostws.main(sys.argv[2:]))
    try:
        code = 1 if not_text(sys.argv[1:]) else fast.answer(sys.argv[1:], os.environ)
        if code is None:
            main()
    except SystemExit as e:
        code = e.code
    output.leave(code)


def _launcher_side(argv: list[str]) -> int:
    """``zwarm _launcher NAME ARGS...``: launcher NAME's ``remote`` (hidden: what a launcher
    runs on another machine, e.g. the host's side of an ssh turn)."""
    from zwarm.errors import ZwarmError
    from zwarm.launchers import get_class

    if not argv:
        sys.stderr.write("Error: zwarm _launcher NAME ARGS...\n")
        return 2
    try:
        return get_class(argv[0]).remote(argv[1:])
    except ZwarmError as e:
        sys.stderr.write(f"Error: {e}\n")
        return 2


def not_text(argv: list[str]) -> bool:
    """Whether an argument is not UTF-8 (a byte like 0xff, which Python decodes to a lone
    surrogate that can be neither recorded in JSON nor given to an agent): then one "Error:"
    line says which, before anything is read or written."""
    for a in argv:
        try:
            a.encode("utf-8")
        except UnicodeEncodeError as e:
            at = len(os.fsencode(a[: e.start]))
            shown = os.fsencode(a).decode("utf-8", "backslashreplace")
            sys.stderr.write(f"Error: the argument '{shown}' is not valid UTF-8 (byte {at})\n")
            sys.stderr.flush()
            return True
    return False
