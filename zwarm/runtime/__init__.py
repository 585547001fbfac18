"""How turns run: the launcher interface (``launcher``), the local launcher (``local``) with its
supervisor (``supervisor``), process identity (``procs``, ``boot``), and the launcher registry.

Launchers are found through the ``zwarm.launchers`` entry points, the built-in ``local`` one
too: a new launcher is one module plus its entry point, touching nothing here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zwarm.env import Env
    from zwarm.runtime.launcher import Launcher
    from zwarm.store import Store


def get_launcher(name: str, store: Store, env: Env) -> Launcher:
    """The launcher called ``name`` (entry point group ``zwarm.launchers``)."""
    from zwarm import plugins
    from zwarm.errors import InvalidInput
    from zwarm.runtime.launcher import Launcher

    found = plugins.entry_points("zwarm.launchers")
    if name not in found:
        known = ", ".join(sorted(found)) or "none installed"
        raise InvalidInput(f"unknown launcher {name!r} (known: {known})")
    cls = plugins.load(found[name])
    if not (isinstance(cls, type) and issubclass(cls, Launcher)):
        raise InvalidInput(f"launcher {name!r} ({found[name]}) is not a zwarm Launcher")
    return cls(store, env)
