"""Helpers shared by the ``zwarm`` command modules (``zwarm.cli`` and its lazily loaded ones).

Owns handing a click command the one ``Zwarm`` its invocation uses (made by
``zwarm.cli.fast.open_api``, as the fast path makes it) and reading a TASK/MESSAGE argument
(``-`` means stdin). Must stay true: it imports no other ``zwarm.cli`` module but the
click-free ``fast`` (inside ``get_api``), so every command module can import it without an
import cycle; it imports only click and the standard library at import time (``zwarm --help``
stays fast).
"""

from __future__ import annotations

import sys
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


def read_task(task: str) -> str:
    """``task`` itself, or stdin (UTF-8) when it is ``-``; one clear error if it is not text."""
    if task != "-":
        return task
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        from zwarm.errors import InvalidInput

        raise InvalidInput(f"the prompt on stdin is not valid UTF-8 (byte {e.start})") from None
