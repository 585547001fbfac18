"""Helpers shared by the ``zwarm`` command modules (``zwarm.cli`` and its lazily loaded ones).

Owns handing a click command the one ``Zwarm`` its invocation uses (made by
``zwarm.cli.fast.open_api``, as the fast path makes it; a TASK/MESSAGE argument is read by
``zwarm.cli.fast.read_task``), the ``--json`` option and ``reader_may_go``. Must stay true: it
imports no other ``zwarm.cli`` module but the click-free ``fast`` and ``output`` (inside its
functions), so every command module can import it without an
import cycle; it imports only click and the standard library at import time (``zwarm --help``
stays fast).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from zwarm.api import Zwarm


def get_api(ctx: click.Context) -> Zwarm:
    """The invocation's ``Zwarm`` (built once, on the state dir from ``--state-dir``)."""
    from zwarm.cli.fast import open_api

    obj = ctx.find_root().obj or {}
    if "api" not in obj:
        obj["api"] = open_api(obj.get("state_dir"))
    api: Zwarm = obj["api"]
    return api


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@contextlib.contextmanager
def reader_may_go() -> Iterator[None]:
    """Around the output of a command whose exit status is its answer (``wait``): a reader
    that went away ends the output, not the command, which still exits by its result."""
    try:
        yield
    except BrokenPipeError:
        from zwarm.cli import output

        output.reader_gone()
