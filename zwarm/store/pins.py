"""Launch pins: the security-relevant facts of each session, kept where its agent cannot write.

Owns ``$XDG_STATE_HOME/zwarm/pins/<id>.json`` (default ``~/.local/state/zwarm/pins``): for each
session zwarm starts, which state dir it belongs to, which agent runs it, in which directory,
whether the user asked for the agent's sandbox to be bypassed, which sandbox of zwarm's own its
turns run in (``zwarm.sandbox``), and its git workspace (the
repository, the worktree zwarm made for it, its branch and base commit: what ``merge`` and
``rm`` act on), and its launcher (what runs every turn of it: this machine, a Slurm job).
Beside each pin, ``<id>.handles.json``: what the launcher started for each turn (a Slurm job
id), recorded by the launcher that started it, so that ``kill`` signals only what zwarm
started, never what ``meta.json`` names (``launchers.slurm``).
By default the state dir lies inside the agent's working directory, so a sandboxed agent can
rewrite ``meta.json``; the pin lies outside every sandbox's writable roots (unless the user
makes their home the agent's working directory, which docs/threat-model.md warns about).
Must stay true:
- a turn starts only if the session has a pin for this state dir and ``meta.json`` agrees
  with it on agent and directory; whether the sandbox is bypassed comes from the pin (or the
  trusted config), never from ``meta.json``; so does which launcher runs each new turn;
- pins are written only by zwarm's own processes (spawn; a scheduler pass records the account
  it routes a turn to, ``engine.accounts``), atomically, 0600; they are read as
  untrusted input too (one strict schema; a bad pin is no pin);
- a turn's handle record is written only by the launcher that started the turn (in a command
  the user ran, or in the session's supervisor, which zwarm started), under the session lock,
  before the turn that names it is saved; atomically, 0600, read back by one strict schema.
"""

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Meta

from zwarm.errors import StoreError
from zwarm.model.records import (
    AGENT_NAME,
    NAME,
    SESSION_ID,
    AbsPath,
    Handle,
    SandboxMode,
    Workspace,
)
from zwarm.system.files import atomic_write, private_dir, read_file

OptionKey = Annotated[str, Meta(pattern=r"^[a-z][a-z0-9_]{0,63}\Z")]
OptionValue = Annotated[str, Meta(max_length=1024)] | int | float


class Pin(msgspec.Struct):
    id: Annotated[str, Meta(pattern=SESSION_ID)]
    state_dir: AbsPath
    adapter: Annotated[str, Meta(pattern=AGENT_NAME)]
    cwd: AbsPath
    bypass: bool = False
    # zwarm's own sandbox of its turns (``zwarm.sandbox``): every turn's, never meta.json's
    sandbox: SandboxMode = "off"
    # its git workspace (repository, tree, worktree branch and base: ``engine.workspace``)
    workspace: Workspace | None = None
    # what runs its turns (``zwarm.launchers``: local, slurm): every turn's, never meta.json's
    launcher: Annotated[str, Meta(pattern=AGENT_NAME)] = "local"
    # its spawn options (``spawn --launcher-option``): free keys of the launcher's table, over
    # the table for this session's turns (checked again when read: ``config.validate``)
    launcher_options: Annotated[dict[OptionKey, OptionValue], Meta(max_length=32)] = msgspec.field(
        default_factory=dict
    )
    # the account of its agent its turns run on (``engine.accounts``): whose ``env`` its agent
    # gets, every turn's, never meta.json's; set by the scheduler pass that routes its turn
    account: Annotated[str, Meta(pattern=NAME)] | None = None


class Handles(msgspec.Struct):
    """What a session's launcher started for each of its turns, by turn number."""

    id: Annotated[str, Meta(pattern=SESSION_ID)]
    state_dir: AbsPath
    turns: Annotated[
        dict[Annotated[str, Meta(pattern=r"^[1-9][0-9]{0,8}\Z")], Handle], Meta(max_length=100_000)
    ]


_decoder = msgspec.json.Decoder(Pin)
_handles_decoder = msgspec.json.Decoder(Handles)
HANDLES_MAX = 8 << 20  # bytes read of a handles record


def pins_dir(environ: Mapping[str, str]) -> Path:
    from zwarm.xdg import user_state_dir

    return user_state_dir(environ) / "pins"


def write(environ: Mapping[str, str], pin: Pin) -> None:
    d = pins_dir(environ)
    try:
        private_dir(d)
    except OSError as e:
        raise StoreError(f"cannot create {d}: {e.strerror}") from None
    atomic_write(d / f"{pin.id}.json", msgspec.json.encode(pin))


def read(environ: Mapping[str, str], sid: str, state_dir: Path) -> Pin | None:
    """The pin of ``sid`` in ``state_dir``, or None (none, unreadable, malformed, another's)."""
    try:
        data, _ = read_file(pins_dir(environ) / f"{sid}.json", 64 * 1024)
        pin = _decoder.decode(data)
    except (OSError, msgspec.DecodeError):
        return None
    if pin.id != sid or pin.state_dir != os.path.realpath(state_dir):
        return None
    return pin


def remove(environ: Mapping[str, str], sid: str) -> None:
    for name in (f"{sid}.json", f"{sid}.handles.json"):
        with contextlib.suppress(OSError):
            os.unlink(pins_dir(environ) / name)


def _handles(environ: Mapping[str, str], sid: str, state_dir: Path) -> Handles | None:
    try:
        data, _ = read_file(pins_dir(environ) / f"{sid}.handles.json", HANDLES_MAX)
        got = _handles_decoder.decode(data)
    except (OSError, msgspec.DecodeError):
        return None
    if got.id != sid or got.state_dir != os.path.realpath(state_dir):
        return None
    return got


def record_handle(
    environ: Mapping[str, str], sid: str, state_dir: Path, n: int, handle: Mapping[str, str]
) -> None:
    """Record what the launcher started for turn ``n`` of ``sid`` (the session lock held).
    Raises ``StoreError`` if it cannot be written."""
    old = _handles(environ, sid, state_dir)
    turns = dict(old.turns) if old is not None else {}
    turns[str(n)] = dict(handle)
    d = pins_dir(environ)
    try:
        private_dir(d)
        record = Handles(sid, os.path.realpath(state_dir), turns)
        atomic_write(d / f"{sid}.handles.json", msgspec.json.encode(record))
    except (OSError, StoreError) as e:
        why = e.strerror if isinstance(e, OSError) else str(e)
        raise StoreError(f"cannot record turn {n} of session {sid} in {d}: {why}") from None


def handle(environ: Mapping[str, str], sid: str, state_dir: Path, n: int) -> dict[str, str] | None:
    """What the launcher recorded starting for turn ``n`` of ``sid`` in ``state_dir``, or
    None (nothing recorded, unreadable, malformed, another's)."""
    got = _handles(environ, sid, state_dir)
    return None if got is None else got.turns.get(str(n))
