"""Where a turn runs: the launcher interface (``base``), the local launcher (``local``: a
detached supervisor on this machine, see ``zwarm.runtime``, forked by the state dir's fork
server when one serves: ``forking`` asks it), the Slurm launcher (``slurm``: one
batch job per turn, the same supervisor on a compute node), the launcher registry, and
``survey``: many running turns asked about at once, one query per launcher.

Launchers are found through the ``zwarm.launchers`` entry points, the built-in ``local`` one
too: a new launcher is one module plus its entry point, touching nothing here. The registry
is what the rest of zwarm asks about launchers: their config tables (``tables``, which
``zwarm.config`` adds to its schema, as it adds the agents'; ``families``: their families of
named tables, ``[hosts.NAME]``), their names (no agent may take
one), their failure reasons (``failure``: ``ls``'s label) and spawn options. Must stay true:
- this package never imports ``zwarm.config`` or ``zwarm.engine`` (the config asks it);
- a launcher is checked before it is used: a valid name that is none of zwarm's tables, nor an
  agent's; reasons ``<name>_<word>``; spawn options free keys of its own table; one that is not
  family a valid table name that is none of zwarm's, an agent's or a launcher's; one that is not
  valid, or fails to load, is left out with one warning line on stderr (once), never a crash;
- declarations are read from the class: listing them starts nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zwarm.env import Env
    from zwarm.launchers.base import Failure, Launcher, Probe
    from zwarm.model import Turn
    from zwarm.rules import Family, Setting
    from zwarm.store import Store

_BUILTIN = "zwarm.launchers."  # the module prefix of the launchers that ship with zwarm

_loaded: dict[str, type[Launcher]] = {}
_failed: dict[str, str] = {}


def names() -> tuple[str, ...]:
    """Every launcher registered (loaded or not): built-in ones first, then plugins, each in
    name order. A name is reserved even if its plugin fails to load (its table may exist)."""
    specs = _specs()
    return tuple(sorted(specs, key=lambda n: (not specs[n].startswith(_BUILTIN), n)))


def get_class(name: str) -> type[Launcher]:
    """The launcher class called ``name``; ``InvalidInput`` naming the installed ones."""
    cls = _load(name)
    if cls is None:
        from zwarm.errors import InvalidInput

        if name in _failed:
            why = _failed[name]
            raise InvalidInput(f"launcher {name!r} is installed but failed to load: {why}")
        known = ", ".join(loaded()) or "none installed"
        raise InvalidInput(f"unknown launcher {name!r} (known: {known})")
    return cls


def get_launcher(name: str, store: Store, env: Env) -> Launcher:
    """The launcher called ``name`` (entry point group ``zwarm.launchers``)."""
    return get_class(name)(store, env)


def loaded() -> dict[str, type[Launcher]]:
    """Every launcher class that loads, in ``names``' order."""
    return {n: cls for n in names() if (cls := _load(n)) is not None}


def tables() -> dict[str, dict[str, Setting]]:
    """``{launcher name: its config table's settings}`` of every launcher that has a table."""
    return {n: dict(cls.settings) for n, cls in loaded().items() if cls.settings}


def families() -> dict[str, Family]:
    """``{table: Family}`` of every launcher's families of named tables (``[hosts.NAME]``); a
    table two launchers declare is the first's (``names``' order)."""
    out: dict[str, Family] = {}
    for cls in loaded().values():
        for table, family in cls.families.items():
            out.setdefault(table, family)
    return out


def failure(reason: str) -> Failure | None:
    """What an installed launcher declares of ``reason`` (one of its own), or None: zwarm's
    own reason, or one no installed launcher declares (its launcher since uninstalled)."""
    for name in names():
        if reason.startswith(name + "_"):
            cls = _load(name)
            if cls is not None and reason in cls.reasons:
                return cls.reasons[reason]
    return None


def parse_options(name: str, pairs: Sequence[str]) -> dict[str, Any]:
    """``spawn --launcher-option KEY=VALUE`` for launcher ``name``: ``{key: value}``, each
    value of its setting's type (its shape is checked by the config, as the table's);
    ``InvalidInput`` for an option the launcher does not take, or a value of a wrong type."""
    from zwarm.errors import InvalidInput

    cls = get_class(name)
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or key not in cls.spawn_options:
            takes = ", ".join(cls.spawn_options) or "none"
            raise InvalidInput(
                f"launcher {name!r} takes no option {key!r} (KEY=VALUE; it takes: {takes})"
            )
        out[key] = _typed(name, key, text, cls.settings[key].types)
    return out


def _typed(name: str, key: str, text: str, types: tuple[type, ...]) -> Any:
    from zwarm.errors import InvalidInput

    for typ in (int, float):
        if typ in types:
            try:
                return typ(text)
            except ValueError:
                continue
    if str in types:
        return text
    # worded as the config's check of the same option words its bounds (``Zwarm.spawn``)
    raise InvalidInput(f"--launcher-option: {name}.{key} must be a number, not {text!r}")


def problems() -> dict[str, str]:
    """Launchers that failed to load, by name: why."""
    for name in names():
        _load(name)
    return dict(_failed)


def _specs() -> dict[str, str]:
    from zwarm import plugins

    return plugins.entry_points(plugins.LAUNCHERS)


def _load(name: str) -> type[Launcher] | None:
    if name in _loaded:
        return _loaded[name]
    spec = _specs().get(name)
    if spec is None or name in _failed:
        return None
    try:
        _check_name(name)
        from zwarm import plugins

        cls = _checked(name, plugins.load(spec))
    except (Exception, SystemExit) as e:
        why = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        _failed[name] = why
        sys.stderr.write(f"zwarm: warning: launcher plugin {name!r} ({spec}) not loaded: {why}\n")
        return None
    _loaded[name] = cls
    return cls


def _check_name(name: str) -> None:
    """A name is a config table and is stored in meta.json: checked before any import."""
    import re

    from zwarm import plugins
    from zwarm.model.records import AGENT_NAME
    from zwarm.rules import OWN_TABLES

    taken = OWN_TABLES | set(plugins.entry_points(plugins.AGENTS))
    if not re.match(AGENT_NAME, name) or name in taken:
        raise ValueError(
            f"{name!r} is not a valid launcher name (a-z, 0-9, '_', '-'; not a table or agent)"
        )


def _checked(name: str, obj: Any) -> type[Launcher]:
    """``obj`` if it is a valid ``Launcher`` class registered as ``name``."""
    import re

    from zwarm import plugins
    from zwarm.launchers.base import Launcher
    from zwarm.model.records import AGENT_NAME
    from zwarm.model.status import REASON_CODE, Reason
    from zwarm.rules import FREE, OWN_TABLES

    if not (isinstance(obj, type) and issubclass(obj, Launcher)):
        raise TypeError(f"{obj!r} is not a zwarm Launcher")
    if obj.name != name:
        raise ValueError(f"registered as {name!r} but the launcher is named {obj.name!r}")
    for key in obj.spawn_options:
        setting = obj.settings.get(key)
        if setting is None or setting.trust != FREE:
            raise ValueError(f"spawn option {key!r} is not a free key of its [{name}] table")
    taken = OWN_TABLES | set(plugins.entry_points(plugins.AGENTS)) | set(names())
    for table in obj.families:
        if not re.match(AGENT_NAME, table) or table in taken:
            raise ValueError(f"family [{table}.NAME] is not a free table name")
    ours = {r.value for r in Reason}
    for reason in obj.reasons:
        if not (reason.startswith(name + "_") and re.match(REASON_CODE, reason)):
            raise ValueError(f"reason {reason!r} is not {name}_<word> (a-z, 0-9, '_')")
        if reason in ours:
            raise ValueError(f"reason {reason!r} is zwarm's own")
    return obj


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


def settings_of(name: str) -> Mapping[str, Setting]:
    """Launcher ``name``'s config settings (none if it is not installed)."""
    cls = _load(name)
    return cls.settings if cls is not None else {}
