"""``SshLauncher``: each turn's agent runs on a host you can ssh to; everything else stays here.

The package: ``hosts`` owns the hosts' config (the ``[hosts.NAME]`` family: ``HOSTS``), the one
shared connection per host (``Connection``: an OpenSSH ControlMaster) and the remote zwarm's
version check; ``relay`` is what runs here for a turn, ``remote`` what runs on the host.

Owns running a turn on a host (``[hosts.NAME]``, ``hosts``: one shared connection per host)
and telling where it stands. The turn's supervisor is local, as ``LocalLauncher``'s (the
timeout, budgets, stall watch, kill, the turn files and the record all work as for a local
turn); what it starts as the turn's agent is the relay (``relay``, put before the agent's argv
by ``agent_prefix``), which sends the turn over the host's connection to ``zwarm _launcher ssh``
there (``remote``): the agent runs on the host, in its working directory there, its output
written to a file on the host (so it outlives the connection and this machine), and streamed
back into the turn files here; a dropped connection is resumed from the bytes already here.
The host is pinned per turn (``start``: the launch pin's handle record), ``survey`` says
``unknown (host NAME unreachable)`` for a running turn whose relay has not heard its host
within ``LIVE_S`` (the stream says it lives every half second) and whose host does not answer
a probe within ``PROBE_S`` (``ls`` never waits longer; all hosts probed at once), ``stop``
has the host stop the agent's whole tree before the local side is stopped (a reconcile of a
turn whose local supervisor died stops it there too: ``lost``), and a turn the host lost
(its keeper gone: a reboot) is recorded ``ssh_lost`` (``ended``). A session's worktree on
a host (``spawn --host --worktree``) is not this launcher's: the host's zwarm makes, diffs,
merges and removes it (``ops.hostws``, over this package's ``connection``, the host read
from the turn's launch pin: ``pinned_host``).
Must stay true:
- the host a turn runs on, and how to reach it, come from the trusted config when the turn
  starts and are then read only from the launch pin's handle record (where the agent cannot
  write), never from ``meta.json``; the connection's options come from ``hosts`` (trusted
  ``[hosts.NAME]`` values; ``--`` before the destination);
- this launcher never sees the prompt, the agent's argv or its environment values: the relay,
  a zwarm program the supervisor runs as it runs an agent, carries them on the connection's
  stdin, never on a command line;
- the remote zwarm must be this version (``remote`` refuses another in one line);
- a probe, a kill and a start each run under a timeout: an unreachable host never hangs a
  command, and never ends a turn by itself (a turn ends when the host says how, or is killed);
- importing this module is cheap (the config asks for its table on every load).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from zwarm.launchers.base import NO_SETTINGS, Failure, Probe
from zwarm.launchers.local import LocalLauncher
from zwarm.launchers.ssh import hosts as hosts_mod
from zwarm.rules import FREE, Family, Setting

if TYPE_CHECKING:
    from zwarm.errors import ZwarmError
    from zwarm.launchers.ssh.hosts import Connection, Host
    from zwarm.model import Turn

LOST = "ssh_lost"
REASONS: Mapping[str, Failure] = MappingProxyType(
    {LOST: Failure("host lost", "the host lost the turn (rebooted, or its keeper was killed)")}
)
HOST_NAME = r"^([a-z][a-z0-9_-]{0,63})?\Z"
SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {
        "host": Setting(
            (str,),
            "",
            doc="The host a session's turns run on ([hosts.NAME]); spawn --host sets it.",
            trust=FREE,
            pattern=HOST_NAME,
            shape="a host name ([hosts.NAME])",
        ),
    }
)
LOST_FILE = "ssh.json"  # turns/turn_N.ssh.json: what the relay says of a turn the host lost
LIVE_FILE = "ssh.live"  # turns/turn_N.ssh.live: touched while the host's stream speaks
LIVE_S = 2.0  # a live file touched this recently: the host answers, no probe needed
PROBE_S = 1.0  # a listing's probe of a host: longer means "unreachable"
LOST_STOP_S = 5.0  # a reconcile's stop of a lost turn's agent on its host
STOP_S = 20.0  # a kill on the host (it waits for the agent's tree to go)
START_PROBE_S = 10.0
_HANDLE_KEYS = ("host", "ssh", "port", "identity", "ssh_config", "zwarm")


class SshLauncher(LocalLauncher):
    name: ClassVar[str] = "ssh"
    settings: ClassVar[Mapping[str, Setting]] = SETTINGS
    spawn_options: ClassVar[tuple[str, ...]] = ("host",)
    families: ClassVar[Mapping[str, Family]] = MappingProxyType({hosts_mod.TABLE: hosts_mod.HOSTS})
    reasons: ClassVar[Mapping[str, Failure]] = REASONS

    # ------------------------------------------------------------------ starting
    def start(
        self,
        sid: str,
        turn: Turn,
        after: Sequence[Turn] = (),
        after_any: bool = False,
        settings: Mapping[str, Any] = NO_SETTINGS,
    ) -> None:
        host = host_of(settings)
        from zwarm.errors import StoreError
        from zwarm.store import pins

        handle = {k: "" if v is None else str(v) for k, v in _facts(host).items()}
        try:  # what the relay connects to and kill reaches: where the agent cannot write
            pins.record_handle(self.env.environ, sid, self._root(), turn.n, handle)
        except StoreError as e:
            raise OSError(str(e)) from None
        super().start(sid, turn, after, after_any, settings)
        turn.handle = {"host": host.name}

    def agent_prefix(self, sid: str, turn: Turn, settings: Mapping[str, Any]) -> list[str]:
        from zwarm.env.python import python_argv

        return python_argv(self.env.python, "zwarm.launchers.ssh.relay", str(self._root()), sid,
                           str(turn.n))  # fmt: skip

    def _root(self) -> Path:
        return Path(os.path.realpath(self.store.root))

    # ------------------------------------------------------------------ watching
    def survey(self, items: Sequence[tuple[str, Turn]]) -> dict[str, Probe]:
        """The local supervisor's life (``LocalLauncher``), and for a running turn whether
        its host answers a probe within ``PROBE_S`` (each host probed once, all at once)."""
        out = super().survey(items)
        where = {
            sid: (h, self._live(sid, t))
            for sid, t in items
            if out[sid].alive and (h := pinned_host(self.env.environ, self._root(), sid, t.n))
        }
        ask = {h.name: h for h, live in where.values() if not live}
        answers = probe_hosts(list(ask.values()))
        for sid, (h, live) in where.items():
            if live or answers.get(h.name):
                out[sid] = Probe(True, detail=f"on host {h.name}", state="reachable")
            else:
                out[sid] = Probe(True, "unknown", f"host {h.name} unreachable", "unreachable")
        return out

    def lost(self, sid: str, turn: Turn) -> tuple[str, str]:
        """The local supervisor is gone (this machine restarted, it was killed): nobody
        streams the turn any more, so its agent on the host is stopped too (``LOST_STOP_S``,
        best effort: a host that does not answer is said)."""
        reason, what = super().lost(sid, turn)
        h = pinned_host(self.env.environ, self._root(), sid, turn.n)
        if h is None:
            return reason, what
        try:
            r = connection(h).run(remote_argv(h, "kill", sid, turn.n), timeout=LOST_STOP_S)
            said = "stopped" if r.returncode == 0 else "not stopped (the host refused)"
        except Exception:
            said = "not stopped (the host did not answer)"
        try:  # its output stays on the host no longer: nobody will fetch it
            connection(h).run(remote_argv(h, "clean", sid, turn.n), timeout=LOST_STOP_S)
        except Exception:
            pass
        return reason, f"{what}; its agent on host {h.name} {said}"

    def _live(self, sid: str, turn: Turn) -> bool:
        """Whether the turn's relay heard its host within ``LIVE_S`` (``relay``: its live
        file's time; a display hint only, worth a probe saved)."""
        import time

        try:
            st = os.stat(self.store.turn_path(sid, turn.n, LIVE_FILE), follow_symlinks=False)
        except OSError:
            return False
        return 0 <= time.time() - st.st_mtime < LIVE_S

    def ended(self, sid: str, turn: Turn) -> tuple[str, str] | None:
        """Why the turn ended without its agent's own end: the host lost it (``relay``)."""
        import json

        from zwarm.system.files import read_file

        try:
            data, _ = read_file(self.store.turn_path(sid, turn.n, LOST_FILE), 4096)
            why = json.loads(data).get("lost")
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(why, str):
            return None
        from zwarm.text import oneline

        return LOST, oneline(f"the host lost the turn: {why}", 400)

    # ------------------------------------------------------------------ stopping
    def stop_many(self, items: Sequence[tuple[str, Turn]]) -> dict[str, ZwarmError]:
        """Have each turn's host stop its agent's whole tree (all hosts at once), then stop
        the local side (``LocalLauncher``: the relay and the supervisor, which records the
        end), then remove the turn's directory on the host. A host that does not answer is
        said: its agent may run on until it returns."""
        from concurrent.futures import ThreadPoolExecutor

        from zwarm.errors import SessionStateError, ZwarmError

        env = self.env.environ

        def one(item: tuple[str, Turn]) -> ZwarmError | None:
            sid, t = item
            h = pinned_host(env, self._root(), sid, t.n)
            if h is None:
                return None
            try:
                r = connection(h).run(remote_argv(h, "kill", sid, t.n), timeout=STOP_S)
            except ZwarmError as e:
                return SessionStateError(
                    f"session {sid} is recorded killed, but {e}: its agent there may run on "
                    "until the host returns"
                )
            if r.returncode != 0:
                return SessionStateError(f"session {sid}: host {h.name} did not stop its turn")
            return None

        with ThreadPoolExecutor(max_workers=max(1, min(16, len(items)))) as pool:
            errors = list(pool.map(one, items))
        out = {sid: e for (sid, _), e in zip(items, errors, strict=True) if e is not None}
        out.update(super().stop_many(items))  # the relays and supervisors: the ends recorded

        def clean(item: tuple[str, Turn]) -> None:  # what the relay did not fetch: no one will
            sid, t = item
            h = pinned_host(env, self._root(), sid, t.n)
            if h is not None and sid not in out:
                try:
                    connection(h).run(remote_argv(h, "clean", sid, t.n), timeout=LOST_STOP_S)
                except ZwarmError:
                    pass

        with ThreadPoolExecutor(max_workers=max(1, min(16, len(items)))) as pool:
            list(pool.map(clean, items))
        return out

    # ------------------------------------------------------------------ the host's side
    @classmethod
    def remote(cls, argv: Sequence[str]) -> int:
        from zwarm.launchers.ssh import remote

        return remote.main(list(argv))


# ---------------------------------------------------------------------- hosts
def host_of(settings: Mapping[str, Any]) -> Host:
    """The host ``settings`` name (``[ssh] host``: spawn --host) as the trusted ``[hosts.NAME]``
    has it (``settings["hosts"]``: the engine hands a launcher its families' tables too);
    ``OSError`` if none is named or it is not configured."""
    from zwarm.errors import ZwarmError
    from zwarm.launchers.ssh.hosts import TABLE, host

    name = settings.get("host") or ""
    if not name:
        raise OSError("no host named (spawn --host NAME, or [defaults] host)")
    try:
        return host(settings.get(TABLE) or {}, name)
    except ZwarmError as e:
        raise OSError(str(e)) from None


def _facts(host: Host) -> dict[str, Any]:
    return {
        "host": host.name,
        "ssh": host.ssh,
        "port": host.port,
        "identity": host.identity,
        "ssh_config": host.ssh_config,
        "zwarm": host.zwarm,
    }


def pinned_host(environ: Mapping[str, str], root: Path, sid: str, n: int) -> Host | None:
    """The host turn ``n`` of ``sid`` was started on, from the launch pin's handle record
    (None: none recorded, or not a host's)."""
    from zwarm.launchers.ssh.hosts import Host
    from zwarm.store import pins

    got = pins.handle(environ, sid, root, n)
    if not got or not all(k in got for k in _HANDLE_KEYS) or not got["ssh"]:
        return None
    port = got["port"]
    return Host(
        got["host"],
        got["ssh"],
        int(port) if port.isdigit() else None,
        got["identity"] or None,
        got["ssh_config"] or None,
        got["zwarm"] or "zwarm",
        None,
    )


def connection(host: Host) -> Connection:
    """The shared connection to ``host`` (``hosts.Connection``, its socket in this user's
    private ``control_dir``)."""
    from zwarm.launchers.ssh.hosts import Connection, control_dir

    return Connection(host, control_dir())


def remote_argv(host: Host, op: str, sid: str, n: int | str) -> list[str]:
    """The host's side of turn ``n`` of ``sid``: ``zwarm _launcher ssh OP ID N`` there."""
    from zwarm.launchers.ssh.hosts import HomePath

    return [HomePath(host.zwarm), "_launcher", "ssh", op, sid, str(n)]


def probe_hosts(found: Sequence[Host]) -> dict[str, bool]:
    """Whether each host answers within ``PROBE_S`` (over its shared connection), all at once."""
    if not found:
        return {}
    from concurrent.futures import ThreadPoolExecutor

    def one(h: Host) -> bool:
        try:
            return connection(h).run(["true"], timeout=PROBE_S).returncode == 0
        except Exception:
            return False

    with ThreadPoolExecutor(max_workers=len(found)) as pool:
        return dict(zip([h.name for h in found], pool.map(one, found), strict=True))
