"""Helpers shared by the ``zwarm`` command modules (``zwarm.cli`` and its lazily loaded ones).

Owns handing a click command the one ``Zwarm`` its invocation uses (made by
``zwarm.cli.fast.open_api``, as the fast path makes it; a TASK/MESSAGE argument is read by
``zwarm.cli.fast.read_task``). Must stay true: it imports no other ``zwarm.cli`` module but the
click-free ``fast`` (inside ``get_api``), so every command module can import it without an
import cycle; it imports only click and the standard library at import time (``zwarm --help``
stays fast).
"""

from __future__ import annotations

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
