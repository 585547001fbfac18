"""Where a turn runs: the launcher interface (``base``), the local launcher (``local``: a
detached supervisor on this machine, see ``zwarm.runtime``, forked by the state dir's fork
server when one serves: ``forking`` asks it), the Slurm launcher (``slurm``: one
batch job per turn, the same supervisor on a compute node), the launcher registry, and
``survey``: many running turns asked about at once, one query per launcher.

Launchers are found through the ``zwarm.launchers`` entry points, the built-in ``local`` one
too: a new launcher is one module plus its entry point, touching nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zwarm.env import Env
    from zwarm.launchers.base import Launcher, Probe
    from zwarm.model import Turn
    from zwarm.store import Store


def get_launcher(name: str, store: Store, env: Env) -> Launcher:
    """The launcher called ``name`` (entry point group ``zwarm.launchers``)."""
    from zwarm import plugins
    from zwarm.errors import InvalidInput
    from zwarm.launchers.base import Launcher

    found = plugins.entry_points("zwarm.launchers")
    if name not in found:
        known = ", ".join(sorted(found)) or "none installed"
        raise InvalidInput(f"unknown launcher {name!r} (known: {known})")
    cls = plugins.load(found[name])
    if not (isinstance(cls, type) and issubclass(cls, Launcher)):
        raise InvalidInput(f"launcher {name!r} ({found[name]}) is not a zwarm Launcher")
    return cls(store, env)


def survey(
    items: Sequence[tuple[str, Turn]], launcher: Callable[[str], Launcher], batched: bool = False
) -> dict[str, Probe]:
    """``{session id: Probe}`` for running turns (``(session id, turn)``): one
    ``Launcher.survey`` per launcher named, so a cluster's queue is asked once for all. With
    ``batched``, only launchers that answer many at once (``Launcher.batched``) are asked
    (warming their answers for the reconciles that follow). A launcher that cannot be
    loaded answers nothing: its turns are asked about one by one, as before."""
    from zwarm.errors import ZwarmError

    groups: dict[str, list[tuple[str, Turn]]] = {}
    for sid, t in items:
        groups.setdefault(t.launcher, []).append((sid, t))
    out: dict[str, Probe] = {}
    for name, group in groups.items():
        try:
            found = launcher(name)
        except ZwarmError:
            continue
        if found.batched or not batched:
            out.update(found.survey(group))
    return out
