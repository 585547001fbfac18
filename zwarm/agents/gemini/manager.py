"""``GeminiSessionManager``: the session life cycle (``BaseSessionManager``) bound to gemini,
plus the two things gemini needs around a turn.

Owns: before a turn, the session's home (``sessions/<id>/gemini-home``, ``home.prepare``) and
the agent's environment pointing at it (``GEMINI_CLI_HOME``); after a turn, the tool facts
gemini's stream leaves out (exit codes, files created or overwritten), read from its own
session record into ``turns/turn_N.tools.json`` (``tools``); when a turn is read, those facts
joined to its steps. Must stay true: ``agent`` is a ``GeminiAgent`` and ``name`` its name; a
problem setting up the home fails the turn to start with one line (``StartRefused``), and a
problem reading the facts never fails the turn (its commands then show no exit code).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from zwarm.agents.base import Agent
from zwarm.agents.gemini import GeminiAgent, home, tools
from zwarm.engine.manager import AgentLaunch, BaseSessionManager, StartRefused
from zwarm.errors import StoreError
from zwarm.model import Session, Turn
from zwarm.model.steps import Step

FACTS_EXT = "tools.json"


class GeminiSessionManager(BaseSessionManager):
    agent: ClassVar[Agent] = GeminiAgent()
    name: ClassVar[str] = GeminiAgent.name

    def home(self, sid: str) -> Path:
        return self.store.session_dir(sid) / home.HOME_DIR

    # ------------------------------------------------------------------ before a turn
    def agent_launch(self, s: Session, t: Turn) -> AgentLaunch:
        launch = super().agent_launch(s, t)
        table = self.config.table(self.name)
        try:
            user: dict[str, Any] = {}
            if table["user_settings"]:
                user = home.read_user_settings(home.user_settings_path(self.env.environ))
            wanted = home.settings(table, launch.env, user)
            where = self.home(s.id)
            home.prepare(where, launch.cwd, wanted)
        except home.GeminiSetupError as e:
            raise StartRefused(str(e)) from None
        except (OSError, StoreError) as e:
            why = getattr(e, "strerror", None) or str(e)
            raise StartRefused(f"cannot write the gemini session's home: {why}") from None
        return msgspec.structs.replace(launch, env=home.environment(launch.env, where))

    # ------------------------------------------------------------------ after a turn
    def finish_turn(self, sid: str, n: int, *args: Any, **kwargs: Any) -> Turn | None:
        self.save_facts(sid, n)
        return super().finish_turn(sid, n, *args, **kwargs)

    def save_facts(self, sid: str, n: int) -> None:
        """Keep what gemini's record says of turn ``n``'s tool calls (best effort)."""
        from zwarm.system.files import open_read

        try:
            with os.fdopen(open_read(self.store.turn_path(sid, n)), "rb") as f:
                session_id, wanted = tools.scan_log(f)
            if not wanted or session_id is None:
                return
            facts = tools.collect(self.home(sid), session_id, wanted)
            from zwarm.system.files import write_private

            write_private(self.store.turn_path(sid, n, FACTS_EXT), tools.dump(facts))
        except (OSError, StoreError):
            pass  # no facts: the turn's commands show no exit code

    def facts(self, sid: str, n: int) -> dict[str, Any]:
        from zwarm.system.files import read_file

        try:
            data, _ = read_file(self.store.turn_path(sid, n, FACTS_EXT), tools.MAX_SIDECAR_BYTES)
        except OSError:
            return {}
        return tools.load(data)

    # ------------------------------------------------------------------ reading a turn
    def turn_steps(self, sid: str, n: int) -> Iterator[Step]:
        facts = self.facts(sid, n)
        if not facts:
            return super().turn_steps(sid, n)
        from zwarm.system.files import open_read

        try:
            f = os.fdopen(open_read(self.store.turn_path(sid, n)), "rb")
        except OSError:
            return super().turn_steps(sid, n)  # says why, the same way for every agent
        reader = self.agent.with_facts(facts)  # type: ignore[attr-defined]
        return _closing(f, reader.steps(f))


def _closing(f: Any, it: Iterator[Step]) -> Iterator[Step]:
    with contextlib.closing(f):
        yield from it
