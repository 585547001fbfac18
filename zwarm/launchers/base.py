"""The ``Launcher`` interface: how the engine has a turn run, watched and stopped, and what a
launcher declares to the rest of zwarm.

Owns the contract between ``zwarm.engine`` (which decides what a turn is) and whatever runs it
(``launchers.local``: a detached supervisor process on this machine; ``launchers.slurm``: one
Slurm batch job per turn; other launchers, e.g. ssh hosts, are one module each, registered
under the ``zwarm.launchers`` entry point, docs/plugins.md). A launcher owns starting a turn
(``start``), telling whether it still runs (``alive``, ``survey``), why it ended unrecorded
(``lost``) and stopping its process tree (``stop``); it declares, as class attributes, its
config table (``settings``: the ``[name]`` table, checked by ``zwarm.config`` as an agent's
is, each key with its trust rule; ``families``: named tables, ``[hosts.NAME]``, each a
``Family``), the keys a spawn may set for one session
(``spawn_options``: free keys only), and its own failure reasons (``reasons``: ``<name>_<word>``
with the label ``ls`` shows). Whatever runs the turn runs ``zwarm.runtime.supervisor``, which
runs the agent: the one place its argv is built (and would be wrapped, e.g. by a sandbox),
whatever the launcher. Must stay true:
- the engine never starts, inspects or signals a process itself: it asks its launcher;
- what a launcher needs to find its turn again is recorded on the turn (``Turn.launcher`` plus
  its handle fields) inside the engine's transaction, so it is on disk before anything runs;
- ``alive``, ``survey`` and ``stop`` act only on what they can verify belongs to the session:
  a handle read back from ``meta.json`` is untrusted input;
- a launcher that cannot tell whether a turn still runs (its scheduler unreachable) says it
  is alive (``Probe.shown = "unknown"``): only a verified end is ever reconciled;
- a launcher records only a reason it may (``recordable``: zwarm's own, or one it declares);
- a launcher gets its config table from the engine (``start``'s ``settings``: the trusted
  table, this session's spawn options over it): this package never reads the config itself.
"""

import abc
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import msgspec

from zwarm.rules import Family, Setting

if TYPE_CHECKING:
    from zwarm.env import Env
    from zwarm.errors import ZwarmError
    from zwarm.model import Turn
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


class Failure(NamedTuple):
    """One of a launcher's own failure reasons: the word ``ls`` shows for it (``preempted``)
    and one line saying what happened (as zwarm's own ``Reason`` members say it)."""

    label: str
    doc: str


NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})


class Launcher(abc.ABC):
    name: ClassVar[str]
    # ``survey`` answers many turns in one query (a cluster's queue): asked for all of a
    # listing's or a scheduler pass's running turns first, before any is reconciled
    batched: ClassVar[bool] = False
    # its ``[name]`` config table (none if empty): each key's type, default, shape, one line of
    # doc (``zwarm init`` writes it) and trust rule (executing unless it says otherwise)
    settings: ClassVar[Mapping[str, Setting]] = MappingProxyType({})
    # its families of named config tables (``{"hosts": Family}``: ``[hosts.NAME]``), checked
    # and trusted by ``zwarm.config`` as its table is; each member executes (used as trusted)
    families: ClassVar[Mapping[str, Family]] = MappingProxyType({})
    # its keys a spawn may set for that session (``spawn --launcher-option KEY=VALUE``):
    # only free keys (an agent can spawn too); kept in the session's launch pin
    spawn_options: ClassVar[tuple[str, ...]] = ()
    # its own failure reasons, ``<name>_<word>`` (what ``lost`` may return besides zwarm's)
    reasons: ClassVar[Mapping[str, Failure]] = MappingProxyType({})

    def __init__(self, store: "Store", env: "Env") -> None:
        self.store = store
        self.env = env

    @abc.abstractmethod
    def start(
        self,
        sid: str,
        turn: "Turn",
        after: "Sequence[Turn]" = (),
        after_any: bool = False,
        settings: Mapping[str, Any] = NO_SETTINGS,
    ) -> None:
        """Start what runs ``turn`` (the session lock is held, ``turn`` is running) and record
        its handle on ``turn``. ``after``: turns of other sessions to wait for (to complete;
        with ``after_any``, to end), given only when ``can_wait_for`` said so. ``settings``:
        its ``[name]`` table as trust allows it, with the session's spawn options over it.
        Raises ``OSError`` if it could not be started."""

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

    def lost(self, sid: str, turn: "Turn") -> tuple[str, str]:
        """Why ``turn``'s runner ended without recording the turn (``alive`` said no): a
        reason (zwarm's ``Reason`` or one of ``reasons``) and a message, for the reconciled
        turn (the engine records it through ``recordable``)."""
        from zwarm.model import Reason

        what = "supervisor never started" if turn.supervisor is None else "supervisor lost"
        return Reason.SUPERVISOR_LOST, what

    def recordable(self, reason: str) -> str:
        """``reason`` if this launcher may record it (zwarm's own, or one it declares), else
        ``supervisor_lost``: a record never holds a reason nobody declared."""
        from zwarm.model import Reason

        if reason in type(self).reasons or reason in {r.value for r in Reason}:
            return reason
        return Reason.SUPERVISOR_LOST

    def can_wait_for(self, turns: "Sequence[Turn]") -> bool:
        """Whether ``start(..., after=turns)`` can make a turn wait for these running turns
        itself (a cluster scheduler's job dependencies); else zwarm's scheduler waits."""
        return False

    def runs_here(self, sid: str, turn: "Turn") -> bool:
        """Whether this process is what this launcher started for ``turn`` (checked by the
        supervisor before it runs a turn it was started for)."""
        return True
