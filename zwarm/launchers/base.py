"""The ``Launcher`` interface: how the engine has a turn run, watched and stopped.

Owns the contract between ``zwarm.engine`` (which decides what a turn is) and whatever runs it
(``runtime.local``: a detached supervisor process on this machine; ``runtime.slurm``: one
Slurm batch job per turn; other launchers, e.g. Kubernetes, are one module each, registered
under the ``zwarm.launchers`` entry point). Must stay true:
- the engine never starts, inspects or signals a process itself: it asks its launcher;
- what a launcher needs to find its turn again is recorded on the turn (``Turn.launcher`` plus
  its handle fields) inside the engine's transaction, so it is on disk before anything runs;
- ``alive``, ``survey`` and ``stop`` act only on what they can verify belongs to the session:
  a handle read back from ``meta.json`` is untrusted input;
- a launcher that cannot tell whether a turn still runs (its scheduler unreachable) says it
  is alive (``Probe.shown = "unknown"``): only a verified end is ever reconciled.
"""

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import msgspec

if TYPE_CHECKING:
    from zwarm.env import Env
    from zwarm.errors import ZwarmError
    from zwarm.model import Reason, Turn
    from zwarm.store import Store


STOP_THREADS = 64  # stop_many's default: stops waiting on their launcher at once


class Probe(msgspec.Struct, frozen=True):
    """Where what runs a turn stands, as its launcher knows it.

    ``alive`` False means it verifiably ended (the engine reconciles the turn if its end was
    not recorded); ``shown`` replaces the word zwarm shows for a running turn (``queued``
    while a cluster job waits, ``unknown`` when the scheduler cannot be asked), ``detail``
    says why (``slurm: Resources``), ``state`` is the launcher's own word (``PENDING``)."""

    alive: bool
    shown: str | None = None
    detail: str | None = None
    state: str | None = None

    def label(self) -> str | None:
        """What zwarm shows as the status of a turn that runs (``queued (slurm:
        Resources)``, ``unknown (slurm unreachable)``), None when ``running`` says it."""
        if not self.shown:
            return None
        return f"{self.shown} ({self.detail})" if self.detail else self.shown


class Launcher(abc.ABC):
    name: ClassVar[str]
    # ``survey`` answers many turns in one query (a cluster's queue): asked for all of a
    # listing's or a scheduler pass's running turns first, before any is reconciled
    batched: ClassVar[bool] = False

    def __init__(self, store: "Store", env: "Env") -> None:
        self.store = store
        self.env = env

    @abc.abstractmethod
    def start(
        self, sid: str, turn: "Turn", after: "Sequence[Turn]" = (), after_any: bool = False
    ) -> None:
        """Start what runs ``turn`` (the session lock is held, ``turn`` is running) and record
        its handle on ``turn``. ``after``: turns of other sessions to wait for (to complete;
        with ``after_any``, to end), given only when ``can_wait_for`` said so. Raises
        ``OSError`` if it could not be started."""

    @abc.abstractmethod
    def alive(self, sid: str, turn: "Turn") -> bool:
        """Whether what runs ``turn`` is verifiably still running (or waiting to)."""

    @abc.abstractmethod
    def stop(self, sid: str, turn: "Turn") -> None:
        """Stop the turn's agent (its whole tree) and what runs it; idempotent."""

    def stop_many(self, items: "Sequence[tuple[str, Turn]]") -> "dict[str, ZwarmError]":
        """``stop`` for many turns at once (``kill --all``): the errors by session id. Here
        each in its own thread; a launcher that can stop many together overrides this."""
        from concurrent.futures import ThreadPoolExecutor

        from zwarm.errors import ZwarmError

        def one(item: "tuple[str, Turn]") -> ZwarmError | None:
            try:
                self.stop(*item)
            except ZwarmError as e:
                return e
            return None

        with ThreadPoolExecutor(max_workers=max(1, min(STOP_THREADS, len(items)))) as pool:
            errors = list(pool.map(one, items))
        return {sid: e for (sid, _), e in zip(items, errors, strict=True) if e is not None}

    def survey(self, items: "Sequence[tuple[str, Turn]]") -> dict[str, Probe]:
        """``{session id: Probe}`` for many running turns at once (``(session id, turn)``):
        what a listing asks, once per listing. A launcher that can answer for all in one
        query (a cluster's queue) overrides this."""
        return {sid: Probe(self.alive(sid, t)) for sid, t in items}

    def lost(self, sid: str, turn: "Turn") -> "tuple[Reason, str]":
        """Why ``turn``'s runner ended without recording the turn (``alive`` said no): a
        typed reason and a message, for the reconciled turn."""
        from zwarm.model import Reason

        what = "supervisor never started" if turn.supervisor is None else "supervisor lost"
        return Reason.SUPERVISOR_LOST, what

    def can_wait_for(self, turns: "Sequence[Turn]") -> bool:
        """Whether ``start(..., after=turns)`` can make a turn wait for these running turns
        itself (a cluster scheduler's job dependencies); else zwarm's scheduler waits."""
        return False

    def runs_here(self, sid: str, turn: "Turn") -> bool:
        """Whether this process is what this launcher started for ``turn`` (checked by the
        supervisor before it runs a turn it was started for)."""
        return True
