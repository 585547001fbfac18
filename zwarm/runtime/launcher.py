"""The ``Launcher`` interface: how the engine has a turn run, watched and stopped.

Owns the contract between ``zwarm.engine`` (which decides what a turn is) and whatever runs it
(``runtime.local``: a detached supervisor process on this machine; other launchers, e.g. a
cluster scheduler, are one module each, registered under the ``zwarm.launchers`` entry point).
Must stay true:
- the engine never starts, inspects or signals a process itself: it asks its launcher;
- what a launcher needs to find its turn again is recorded on the turn (``Turn.launcher`` plus
  its handle fields) inside the engine's transaction, so it is on disk before anything runs;
- ``alive`` and ``stop`` act only on what they can verify belongs to the session: a handle read
  back from ``meta.json`` is untrusted input.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from zwarm.env import Env
    from zwarm.model import Turn
    from zwarm.store import Store


class Launcher(abc.ABC):
    name: ClassVar[str]

    def __init__(self, store: Store, env: Env) -> None:
        self.store = store
        self.env = env

    @abc.abstractmethod
    def start(self, sid: str, turn: Turn) -> None:
        """Start what runs ``turn`` (the session lock is held, ``turn`` is running) and record
        its handle on ``turn``. Raises ``OSError`` if it could not be started."""

    @abc.abstractmethod
    def alive(self, sid: str, turn: Turn) -> bool:
        """Whether what runs ``turn`` is verifiably still running."""

    @abc.abstractmethod
    def stop(self, sid: str, turn: Turn) -> None:
        """Stop the turn's agent (its whole tree) and what runs it; idempotent."""
