"""A toy zwarm launcher plugin: each turn runs as the local launcher runs it, but its
supervisor, and so its agent, under ``nice`` (a lower CPU priority).

It declares everything a launcher can (``zwarm.launchers.base.Launcher``):
- its config table ``[nice]``: ``niceness`` (a number from 0 to 19, free: it only lowers a
  priority) and ``program`` (the ``nice`` program: it decides what runs, so it is used only
  once trusted, ``zwarm trust``);
- one spawn option: ``zwarm spawn --launcher nice --launcher-option niceness=15``;
- one failure reason, ``nice_lost`` (``ls`` labels it ``nice lost``): its supervisor ended
  without recording the turn;
- what ``show`` prints of a turn (``nice niceness 15``, the turn's handle).

Nothing in zwarm names it: installing this package (its ``zwarm.launchers`` entry point) is
the whole registration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from zwarm.launchers.base import NO_SETTINGS, Failure
from zwarm.launchers.local import LocalLauncher
from zwarm.rules import FREE, Setting

if TYPE_CHECKING:
    from zwarm.model import Turn

LOST = "nice_lost"


class NiceLauncher(LocalLauncher):
    name: ClassVar[str] = "nice"
    settings: ClassVar[Mapping[str, Setting]] = MappingProxyType(
        {
            "niceness": Setting(
                (int,),
                10,
                doc="How much lower its turns' CPU priority is (nice -n), 0 to 19.",
                trust=FREE,
                bounds=(0, 19),
            ),
            "program": Setting(  # executes: used only at its default or once trusted
                (str,),
                "nice",
                doc="The nice program its turns' supervisors run under.",
                pattern=r"^(?!-)[A-Za-z0-9_./+-]{1,255}\Z",
                shape="a program name or path",
            ),
        }
    )
    spawn_options: ClassVar[tuple[str, ...]] = ("niceness",)
    reasons: ClassVar[Mapping[str, Failure]] = MappingProxyType(
        {LOST: Failure("nice lost", "its supervisor, under nice, ended without recording it")}
    )

    def start(
        self,
        sid: str,
        turn: Turn,
        after: Sequence[Turn] = (),
        after_any: bool = False,
        settings: Mapping[str, Any] = NO_SETTINGS,
    ) -> None:
        super().start(sid, turn, after, after_any, settings)
        turn.handle = {"niceness": str(self._table(settings)["niceness"])}

    def wrapper(self, settings: Mapping[str, Any]) -> list[str]:
        table = self._table(settings)
        return [table["program"], "-n", str(table["niceness"])]

    def lost(self, sid: str, turn: Turn) -> tuple[str, str]:
        if turn.supervisor is None:
            return super().lost(sid, turn)
        return LOST, "its supervisor, run under nice, ended without recording the turn"

    def _table(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return {**{k: s.default for k, s in self.settings.items()}, **settings}
