"""Sandboxed turns: what an agent's turn may see, write and reach, decided by zwarm.

Owns the sandbox modes (``MODES``: ``off``, ``bwrap``), the policy of one turn (``Policy``:
the paths it may write, read, must not see, the loopback ports it may reach) and how a mode
is chosen for a new session (``mode_for``: ``spawn --sandbox``, else ``[sandbox.<agent>]
mode``, else ``[sandbox] mode``) and a turn's limits (``limits_for``: each of
``[sandbox.<agent>]``, else of ``[sandbox]``). ``bwrap`` builds the bubblewrap command line
around an agent's argv; ``limits`` applies a turn's memory, cpus and pids limits; ``check``
is the preflight (``zwarm sandbox check``) that proves on this machine that the sandbox
holds; ``run`` runs a command zwarm does not trust (a check of an agent's work, in the
sandbox; the orchestrator's bash tool). Must stay true:
- a policy is built only from the session's launch pin, the trusted config and the agent's
  environment zwarm made (``engine.finishing.agent_launch``), or for a check from its
  caller's arguments and the trusted config (``run``), never from what an agent can write;
- inside, only the working directory (or worktree) and the agent's own login files are
  writable; the repository's git metadata is read-only; the state dir, zwarm's per-user
  state (pins, trust store, serve token) and the user's home are not visible;
- the network is cut (``--unshare-all``) except the loopback ports the policy names, each
  reached through a Unix socket bridged into the sandbox (``bwrap``), and the ``host:port``
  endpoints it names, reached by name through zwarm's filtering proxy (``proxy``) bridged the
  same way: the agent's own API hosts (``Agent.api_hosts``), its configured endpoints, the
  trusted ``[sandbox] hosts``;
- imports nothing above ``system`` (the engine and the CLI call it).
"""

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, get_args
from urllib.parse import urlsplit

import msgspec

from zwarm.model.records import SandboxMode

if TYPE_CHECKING:
    from zwarm.sandbox.limits import Limits

MODES: tuple[str, ...] = get_args(SandboxMode)
OFF = "off"
# the variables an agent's endpoint is configured by: a loopback URL in one is bridged in
_URL_SUFFIXES = ("_BASE_URL", "_API_BASE", "_ENDPOINT")


class Policy(msgspec.Struct, frozen=True):
    """What one turn may do: run in ``cwd``, write ``tree`` (the worktree or shared directory
    it is in) and ``login`` (its CLI's own files), read ``read_only`` (its program, the
    repository's git metadata), see nothing of ``hidden`` (a private tmpfs over each), reach
    ``ports`` on 127.0.0.1, and ``hosts`` (``host:port``) by name through the filtering
    proxy (``proxy``; ``pins``: ``host=address``, the trusted ``[sandbox] resolve`` map);
    ``home`` is private (an empty tmpfs)."""

    cwd: str
    tree: str
    login: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    home: str = ""
    hosts: tuple[str, ...] = ()
    pins: tuple[str, ...] = ()


def private_dirs(environ: Mapping[str, str]) -> list[str]:
    """zwarm's per-user files, which no sandbox may see: launch pins (state), the trust store
    (config), the preflight's remembered pass and the listing's row cache (cache), the serve
    tokens (runtime); each hidden wherever it lies, not only as part of the home."""
    from zwarm.xdg import xdg_dir, xdg_runtime_dir

    names = ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")
    out = [str(xdg_dir(environ, var)) for var in names]
    run = xdg_runtime_dir(environ)
    return out if run is None else [*out, str(run)]


def git_dir(repo: str) -> str | None:
    """The repository's own git directory (``repo/.git``, a real directory), or None."""
    d = os.path.join(repo, ".git")
    return d if os.path.isdir(d) and not os.path.islink(d) else None


def mode_for(asked: str | None, agent: str, config: Any) -> str:
    """The sandbox mode of a new session of ``agent``: ``asked`` (``spawn --sandbox``), else
    the agent's ``[sandbox.<agent>] mode``, else ``[sandbox] mode``."""
    if asked is not None:
        return asked
    table = config.table("sandbox")
    own = table.get(agent) or {}
    mode = own.get("mode") if isinstance(own, Mapping) else None
    return str(mode or table["mode"])


def limits_for(agent: str, config: Any) -> "Limits":
    """The limits of ``agent``'s turns (``limits``): each of ``[sandbox.<agent>]``, else of
    ``[sandbox]`` (as trust lets them be used: never looser than trusted)."""
    from zwarm.config import size_bytes
    from zwarm.sandbox.limits import Limits

    table = config.table("sandbox")
    own = table.get(agent) or {}
    own = own if isinstance(own, Mapping) else {}
    got = {k: own[k] if k in own else table[k] for k in ("memory", "cpus", "pids")}
    memory = size_bytes(got["memory"]) if got["memory"] else 0
    return Limits(memory, float(got["cpus"]), int(got["pids"]))


def endpoint_ports(env: Mapping[str, str]) -> list[int]:
    """The loopback ports an agent's environment names as its model endpoint (a variable
    ending ``_BASE_URL``, ...: ``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL``)."""
    out: list[int] = []
    for key, value in env.items():
        if not key.endswith(_URL_SUFFIXES):
            continue
        try:
            url = urlsplit(value)
            port = url.port
        except ValueError:
            continue
        if url.hostname in ("127.0.0.1", "localhost") and port and port not in out:
            out.append(port)
    return out


def endpoint_hosts(env: Mapping[str, str]) -> list[str]:
    """The ``host:port`` of each endpoint an agent's environment names (a variable ending
    ``_BASE_URL``, ...), on any host: its filtering proxy allows them."""
    from zwarm.agents.base import url_endpoint

    found = (url_endpoint(v) for k, v in env.items() if k.endswith(_URL_SUFFIXES))
    return list(dict.fromkeys(h for h in found if h is not None))


def program_dirs(argv0: str, path: str) -> list[str]:
    """The directories the agent's program needs read: where ``argv0`` is found on ``path``
    and what it links to; inside a ``node_modules`` tree, that whole tree (a CLI's shim
    starts its package's native binary)."""
    import shutil

    found = shutil.which(argv0, path=path)
    if found is None:
        return []
    out: list[str] = []
    for p in (os.path.abspath(found), os.path.realpath(found)):
        parts = p.split(os.sep)
        if "node_modules" in parts:
            i = len(parts) - 1 - parts[::-1].index("node_modules")
            d = os.sep.join(parts[: i + 1])
        else:
            d = os.path.dirname(p)
        if d not in out and not _under(d, ("/usr", "/etc")):
            out.append(d)
    return out


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)
