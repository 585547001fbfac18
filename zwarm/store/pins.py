"""Launch pins: the security-relevant facts of each session, kept where its agent cannot write.

Owns ``$XDG_STATE_HOME/zwarm/pins/<id>.json`` (default ``~/.local/state/zwarm/pins``): for each
session zwarm starts, which state dir it belongs to, which agent runs it, in which directory,
whether the user asked for the agent's sandbox to be bypassed, and its git workspace (the
repository, the worktree zwarm made for it, its branch and base commit: what ``merge`` and
``rm`` act on), and its launcher (what runs every turn of it: this machine, a Slurm job).
By default the state dir lies inside the agent's working directory, so a sandboxed agent can
rewrite ``meta.json``; the pin lies outside every sandbox's writable roots (unless the user
makes their home the agent's working directory, which README warns about). Must stay true:
- a turn starts only if the session has a pin for this state dir and ``meta.json`` agrees
  with it on agent and directory; whether the sandbox is bypassed comes from the pin (or the
  trusted config), never from ``meta.json``; so does which launcher runs each new turn;
- pins are written only by commands a user runs (spawn), atomically, 0600; they are read as
  untrusted input too (one strict schema; a bad pin is no pin).
"""

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Meta

from zwarm.errors import StoreError
from zwarm.model.records import AGENT_NAME, SESSION_ID, AbsPath, Workspace
from zwarm.store.files import atomic_write, private_dir, read_file


class Pin(msgspec.Struct):
    id: Annotated[str, Meta(pattern=SESSION_ID)]
    state_dir: AbsPath
    adapter: Annotated[str, Meta(pattern=AGENT_NAME)]
    cwd: AbsPath
    bypass: bool = False
    # its git workspace (repository, tree, worktree branch and base: ``engine.workspace``)
    workspace: Workspace | None = None
    # what runs its turns (``zwarm.runtime``: local, slurm): every turn's, never meta.json's
    launcher: Annotated[str, Meta(pattern=AGENT_NAME)] = "local"


_decoder = msgspec.json.Decoder(Pin)


def pins_dir(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):
        home = environ.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".local", "state")
    return Path(base) / "zwarm" / "pins"


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
    with contextlib.suppress(OSError):
        os.unlink(pins_dir(environ) / f"{sid}.json")
