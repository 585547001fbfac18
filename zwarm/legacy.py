"""zwarm 3.x's sessions: read, continued once confirmed (its configuration, recognised and
ignored when loading, is ``zwarm.legacy_config``'s, at the bottom of the layers; this module
works with the engine's managers and the API, just below the API).

Owns what zwarm does with 3.x's sessions beyond their meta.json, which the one schema
migrates (``zwarm.model.schema``, version 0, into a record marked ``imported``): ``filled``,
what their turn logs say (read by today's agent parsers: 3.x merged the agent's stderr into
them, which the parsers skip; codex's ``thread.started`` and claude's ``system/init`` give
the thread to resume), ``continuable`` and ``confirm`` (whether, and how, one is continued),
and ``adopt``, the first write. Must stay true:
- a read never writes: ``filled`` changes the record in memory only, priced by today's
  table (the agent's prices in the config, or the built-in ones);
- a 3.x record is agent-writable input: it is continued only once the user confirmed its
  folder and agent (``confirm``: a prompt on a terminal, or ``--confirm-dir`` and
  ``--confirm-agent``; never from the file alone, never through the tools, MCP or HTTP), which
  are checked as a spawn checks them and pinned (``zwarm.store.pins``), the sandbox never
  bypassed; ``Store.adopt`` migrates it atomically, keeping the 3.x file beside it; a
  session that has a launch pin (one this zwarm started, its record rewritten in 3.x's
  format) is never adopted, so its pin (workspace, launcher options) is never replaced;
- a 3.x pid is never used for anything but a message (never signalled, never probed).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.model import Session


def filled(mgr: BaseSessionManager, s: Session) -> Session:
    """``s``, a 3.x record (``imported``; any other is returned as it is), with what its turn
    logs say, in memory only: each turn's outcome (a turn whose log has no result keeps what
    meta.json said: a lost one stays lost), usage (3.x kept the latest turn's only), cost
    at today's prices, final message, model and the agent's thread id (which ``inject``
    resumes). A log that is missing, a link, a FIFO or unreadable is left out."""
    if s.imported is None:
        return s
    from zwarm.model import Reason, Status
    from zwarm.system.files import open_read

    for t in s.turns:
        try:
            f = os.fdopen(open_read(mgr.store.turn_path(s.id, t.n)), "rb")
        except OSError:
            if t.usage.total_tokens and t.cost_usd is None and not mgr.reports_cost:
                t.cost_usd = mgr.estimate_cost(t.usage, s.model)
            continue
        with f:
            o = mgr.agent.outcome(f)
            if o.status is None and o.usage is None:
                f.seek(0)
                o.usage = mgr.agent.partial_usage(f)
        if o.status is Status.COMPLETED:
            t.status, t.reason, t.error = Status.COMPLETED, None, None
        elif o.status is Status.FAILED:
            t.status, t.reason = Status.FAILED, o.reason or Reason.AGENT_ERROR
            t.error = o.error or t.error or "the agent reported a failure"
        mgr._apply_outcome(s, t, o)
    s.cost_source = mgr.cost_source(s.model)  # type: ignore[assignment]
    s.refresh()
    return s


def continuable(s: Session) -> None:
    """``SessionStateError`` if ``s`` is a 3.x record not yet continued here: only the CLI's
    ``inject``, confirmed by the user (``confirm``), continues one."""
    if s.imported is not None:
        from zwarm.errors import SessionStateError

        raise SessionStateError(
            f"session {s.id} was made by zwarm 3.x: continue it first with `zwarm inject` "
            "in a terminal, which asks you to confirm its folder and agent (or give "
            "--confirm-dir and --confirm-agent)"
        )


def confirm(
    api: Zwarm,
    ref: str,
    folder: str | None,
    agent: str | None,
    ask: Callable[[str], bool] | None,
) -> None:
    """Before ``inject`` continues ``ref``: if it is a 3.x record, have the user confirm the
    folder and agent it continues in (``folder`` and ``agent`` given, or ``ask`` answered
    yes to the ones its record names; ``ask`` None: no terminal to ask on) and migrate it
    (``adopt``). Options given for a session that is not 3.x's are an error."""
    from zwarm.errors import InvalidInput
    from zwarm.model.schema import ZWARM3_SOURCE

    s = api.get(ref, history=False)
    if s.imported is None:
        if (folder is not None or agent is not None) and s.source.startswith(ZWARM3_SOURCE):
            raise InvalidInput(
                f"session {s.id} was made by zwarm 3.x and is already continued here (its "
                f"folder and agent confirmed: {s.adapter} in {s.cwd!r}): inject it without "
                "--confirm-dir and --confirm-agent"
            )
        if folder is not None or agent is not None:
            raise InvalidInput(
                f"session {s.id} is not a zwarm 3.x session: --confirm-dir and "
                "--confirm-agent are only for continuing one"
            )
        return
    if folder is None or agent is None:
        told = f"{agent or s.adapter} in {folder or s.cwd!r}"
        if ask is None:
            raise InvalidInput(
                f"session {s.id} was made by zwarm 3.x, whose record may have been written "
                f"by an agent: confirm the folder and agent it continues in (it names {told}) "
                "on a terminal, or with --confirm-dir DIR --confirm-agent AGENT"
            )
        question = f"Session {s.id} was made by zwarm 3.x. Continue it with {told}?"
        if not ask(question):
            raise InvalidInput(f"session {s.id}: not continued (not confirmed)")
        folder, agent = folder or s.cwd, agent or s.adapter
    adopt(api, s, folder, agent)


def adopt(api: Zwarm, s: Session, folder: str, agent: str) -> Session:
    """Migrate 3.x record ``s`` as the user confirmed it: ``agent`` must be the one its turn
    logs are from and runnable as for a spawn (installed, its config trusted), ``folder`` a
    directory an agent may run in (``check_cwd``, as a spawn checks it; it may differ from
    the recorded one, e.g. a moved project). Its launch pin is written from these (sandbox
    never bypassed: 3.x's ``full_danger`` is not carried over), then ``Store.adopt`` writes
    the record, filled from its logs, keeping the 3.x file beside it."""
    from zwarm.engine.manager import check_cwd
    from zwarm.errors import InvalidInput
    from zwarm.store import pins

    root = os.path.realpath(api.store.root)
    if pins.read(api.env.environ, s.id, Path(root)) is not None:  # 3.x made no pins
        raise InvalidInput(
            f"session {s.id} was started by this zwarm (it has a launch record), yet its "
            "meta.json is now in zwarm 3.x's format: it was rewritten; not continued"
        )
    if agent != s.adapter:
        raise InvalidInput(
            f"session {s.id} is a {s.adapter} session (its turn logs are {s.adapter}'s): "
            f"it continues only with {s.adapter}, not {agent[:40]!r}"
        )
    try:
        workdir = check_cwd(Path(folder), api.state_dir)
    except InvalidInput as e:
        moved = folder == s.cwd  # the recorded one: the project may have moved
        hint = " (name the folder it continues in with --confirm-dir DIR)" if moved else ""
        raise InvalidInput(f"session {s.id}: {e}{hint}") from None
    mgr = api.manager(s.adapter)
    api._check_agent(mgr)
    launcher = api._launcher_for(None)
    if str(workdir) != s.cwd:
        api.warn(f"session {s.id}: its record names {s.cwd!r}; it continues in {str(workdir)!r}")

    def migrate(old: Session) -> Session:
        if old.adapter != s.adapter:  # changed since it was confirmed
            raise InvalidInput(f"session {s.id}: its record changed meanwhile: not continued")
        new = filled(mgr, old)
        new.imported, new.cwd = None, str(workdir)
        pin = pins.Pin(new.id, root, mgr.name, new.cwd, False, launcher=launcher)
        pins.write(api.env.environ, pin)
        return new

    return api.store.adopt(s.id, migrate)
