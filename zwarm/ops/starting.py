"""Starting a session: what ``spawn`` settles before the engine makes it.

Owns choosing the agent and model (``route``: explicit > implied by the model > configured
defaults), checking the agent can run (``check_agent``: trusted, its limits not loosened, its
command found), the launcher and its per-session options (``launcher_for``,
``launcher_options``), its sandbox (``sandbox_for``: refused where the preflight fails), the new
session's place in a delegation tree (``lineage``), its fleet options (``fleet``: ``after``
resolved, budgets checked) and its workspace (``workspace_for``).
Must stay true: everything here refuses before anything is created (a one-line
``ZwarmError``); a parent is believed only as ``engine.tree.lineage`` verifies it; a table the
supervisor will use (the agent's, the launcher's, ``[workspace]``) must be trusted now, not
found untrusted there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from zwarm import agents
from zwarm.agents import agent_for_model
from zwarm.errors import AgentNotFound, InvalidInput, naming
from zwarm.model.records import RUN_ID

if TYPE_CHECKING:
    from zwarm.api import Zwarm
    from zwarm.engine import limits, tree
    from zwarm.engine.manager import BaseSessionManager
    from zwarm.model.requests import SpawnRequest

_RUN_ID = re.compile(RUN_ID)


def launcher_options(api: Zwarm, name: str, pairs: Sequence[str]) -> dict[str, Any]:
    """``spawn --launcher-option KEY=VALUE`` for launcher ``name``, typed and checked as
    its config table's values are (``InvalidInput``)."""
    if not pairs:
        return {}
    from zwarm import config as config_mod
    from zwarm.errors import ConfigError
    from zwarm.launchers import parse_options

    opts = parse_options(name, pairs)
    try:
        config_mod.validate({name: opts}, "--launcher-option")
    except ConfigError as e:
        raise InvalidInput(str(e)) from None
    return opts


class Site(NamedTuple):
    """Where a session on a host runs: its launcher, the option naming the host, its
    working directory there."""

    launcher: str
    option: str
    cwd: str
    host: Any = None  # its ``Host`` (``launchers.ssh.hosts``)


HOST_LAUNCHER = "ssh"  # what --host implies: the launcher that runs turns on hosts


def site_for(api: Zwarm, req: SpawnRequest) -> Site | None:
    """Where a spawn with ``req.host`` (else ``[defaults] host``) runs, or None: here.
    ``InvalidInput`` for an unknown host, another launcher asked for, a working directory
    that is no directory there (or not absolute, nor ``~/``: the host resolves it), a
    worktree with ``[workspace]`` setup, or zwarm's sandbox (neither runs on a host yet);
    ``ZwarmError`` for a host that runs another zwarm version, ``HostUnreachable`` for one
    that does not answer."""
    name = req.host or (api.config.get("defaults", "host") if req.launcher is None else "")
    if not name:
        return None
    if req.launcher not in (None, HOST_LAUNCHER):
        launcher = req.launcher
        raise naming(InvalidInput, lambda n: f"{n('host')} runs its turns through the "
                     f"{HOST_LAUNCHER} launcher, not {n('launcher')} {launcher!r}")  # fmt: skip
    from zwarm.launchers.ssh.hosts import TABLE
    from zwarm.launchers.ssh.hosts import host as host_named

    api._launcher(HOST_LAUNCHER)
    if HOST_LAUNCHER in api.config.data:
        api.config.require(HOST_LAUNCHER)
    members = api.config.table(TABLE) if TABLE in api.config.data else {}
    host = host_named(members, name)  # InvalidInput naming the hosts; trusted, or refused
    cwd = req.cwd or host.cwd
    if not cwd:
        raise naming(InvalidInput, lambda n: (
            f"host {name!r} has no cwd: give {n('cwd')} (a directory on the host)"
        ))  # fmt: skip
    home = cwd == "~" or cwd.startswith("~/")  # the host's home: expanded there
    if not (cwd.startswith("/") or home) or "\x00" in cwd:
        raise InvalidInput(
            f"the working directory on host {name!r} must be absolute (or ~/...): {cwd!r}"
        )
    if req.worktree:
        table = api.config.data.get("workspace") or {}
        if any(table.get(k) for k in ("setup", "copy", "link")):
            raise naming(InvalidInput, lambda n: "[workspace] setup, copy and link do not run "
                         f"on a host yet: {n('worktree')} on a host needs them empty")  # fmt: skip
    elif req.branch is not None or req.base is not None:
        raise naming(InvalidInput, lambda n: f"{n('branch')} and {n('base')} need {n('worktree')}")
    if req.sandbox not in (None, "off"):
        raise naming(InvalidInput, lambda n: (
            f"zwarm's sandbox does not run on a host yet ({n('sandbox')} off)"
        ))  # fmt: skip
    return Site(HOST_LAUNCHER, f"host={name}", _host_dir(host, cwd), host)


def host_worktree(api: Zwarm, site: Site, req: SpawnRequest) -> Any:
    """The worktree a spawn ``--host --worktree`` makes on the host, in the repository its
    directory there is in (``ops.hostws.OnHost``: an ``engine.workspace.Elsewhere``)."""
    from zwarm.ops.hostws import OnHost

    rows = api.sessions() if api.store.exists() else []
    name = site.host.name
    others = [r["cwd"] for r in rows if r.get("host") == name and r.get("cwd")]
    return OnHost(site.host, site.cwd, req.branch, req.base, others)


def _host_dir(host: Any, cwd: str) -> str:
    """``cwd`` as the host resolves it (``_resolved``), once the host's zwarm is checked to
    be this version (``remote_version``: refused in one line otherwise)."""
    from zwarm.launchers.ssh import connection
    from zwarm.launchers.ssh.hosts import remote_version

    remote_version(connection(host))
    return _resolved(host, cwd)


def _resolved(host: Any, cwd: str) -> str:
    """``cwd`` as the host resolves it (``pwd -P`` there, over the shared connection, which
    this warms for the turn): ``InvalidInput`` if it is no directory there, ``HostUnreachable``
    if the host does not answer."""
    from zwarm.launchers.ssh import connection
    from zwarm.launchers.ssh.hosts import HomePath

    done = connection(host).run(["pwd", "-P"], cwd=HomePath(cwd), timeout=30)
    out = done.stdout[:8192].decode("utf-8", "replace").strip()
    if done.returncode != 0 or not out.startswith("/") or "\n" in out:
        from zwarm.text import oneline

        said = oneline(done.stderr[-400:].decode("utf-8", "replace").strip(), 200)
        where = f"no directory {cwd!r} on host {host.name!r}"
        raise InvalidInput(where + (f": {said}" if said else ""))
    return out


def launcher_for(api: Zwarm, name: str | None) -> str:
    """The launcher a new session's turns run on: ``name`` (spawn --launcher), else
    ``[launcher] default``; ``InvalidInput`` naming the installed ones if it is none of
    them, ``UntrustedConfig`` now if its table (``[slurm]``) is not trusted yet."""
    cfg = api.config
    name = name or cfg.get("launcher", "default")
    api._launcher(name)
    if name in cfg.data:
        cfg.require(name)  # used by whoever starts its turns: refuse now, not there
    return name


def sandbox_for(api: Zwarm, asked: str | None, adapter: str) -> Any:
    """The sandbox mode of a new session of ``adapter`` (``zwarm.sandbox.mode_for``); with
    one on, the preflight runs first (``sandbox.check``; a pass remembered for this machine
    as it is: ``sandbox.cache``): ``SandboxUnavailable`` if it does not hold here, rather
    than a session that would run unsandboxed."""
    from zwarm import sandbox

    mode = sandbox.mode_for(asked, adapter, api.config)
    if mode != sandbox.OFF:
        from zwarm.errors import SandboxUnavailable
        from zwarm.sandbox import check

        report = check.holds_here(api.env.environ)  # a remembered pass, else the probes
        if report is not None and not report.holds:
            raise SandboxUnavailable(
                f"sandbox {mode} cannot hold on this machine: {check.refusal(report)}; "
                "nothing started (see zwarm sandbox check)"
            )
    return mode


def lineage(api: Zwarm, run: str | None, detached: bool) -> tree.Lineage:
    """The new session's parent (verified) and depth, or ``InvalidInput`` (too deep, a
    parent that is not a running session here, a parent's subtree past its budget)."""
    from zwarm.engine import tree

    if run is not None and not _RUN_ID.match(run):
        raise InvalidInput(f"invalid orchestrator run id {run!r}")
    most = api.config.get("limits", "max_spawn_depth")
    lineage = tree.lineage(api.store, api.env.environ, most, run, detached)
    if lineage.parent_session_id is not None:
        parent = api.store.load(lineage.parent_session_id)
        over = tree.over_budget(api.store, parent)
        if over is not None:
            raise InvalidInput(f"spawn refused: parent session {parent.id}: {over}")
    return lineage


def fleet(api: Zwarm, req: SpawnRequest) -> limits.Fleet:
    """Spawn's fleet options, checked; ``after`` resolved to session ids."""
    from zwarm.engine import limits

    after: Sequence[str] | str = req.after
    refs = [after] if isinstance(after, str) else list(after or [])
    refs = [r.strip() for ref in refs for r in ref.split(",")]
    if "" in refs:  # --after '' or ',': a mistake, never "no dependency"
        raise naming(InvalidInput, lambda n: (
            f"{n('after')} names an empty session (an empty value or a stray comma): "
            f"name the sessions to wait for, or leave {n('after')} out"
        ))  # fmt: skip
    if len(refs) > 100:
        raise naming(InvalidInput, lambda n: f"{n('after')} names more than 100 sessions")
    ids = tuple(api.store.resolve(r) for r in refs)
    f = limits.Fleet(
        ids, req.after_any, req.group, req.priority, req.max_cost, req.max_tokens, req.stall
    )
    f = limits.check(f)
    declared = api.config.groups()
    if f.group is not None and f.group not in declared:  # a typo would mean no cap at all
        names, group = ", ".join(sorted(declared)) or "none", f.group
        raise naming(InvalidInput, lambda n: (
            f"{n('group')} {group!r} is not declared (declared groups: {names}): "
            f"add [groups.{group}] to the config, or name a declared group"
        ))  # fmt: skip
    return f


def workspace_for(
    api: Zwarm, workdir: Path, worktree: bool | None, branch: str | None, base: str | None
) -> Any:
    """The workspace a spawn in ``workdir`` gets (``engine.workspace.choose``)."""
    from zwarm.engine import workspace

    cfg = api.config
    mode = cfg.get("defaults", "workspace") if worktree is None else "shared"
    mode = "worktree" if worktree else mode
    if mode == "worktree":
        cfg.require("workspace")  # its setup runs in the supervisor: refuse now, not there
    root = workspace.root_of(cfg.get("workspace", "root"), api.env.environ)

    def others() -> list[str]:
        rows = api.sessions() if api.store.exists() else []
        return [r["cwd"] for r in rows if r.get("cwd")]

    return workspace.choose(workdir, api.env.environ, mode=mode, branch=branch, base=base,
                            root=root, state_dir=api.store.root, others=others)  # fmt: skip


def route(api: Zwarm, adapter: str | None, model: str | None) -> tuple[str, str | None]:
    """Pick (adapter, model): explicit > implied by the model > configured defaults."""
    cfg = api.config
    model = model or None
    default_model = cfg.get("defaults", "model") or None
    if adapter is None:
        implied = agent_for_model(model) if model else agent_for_model(default_model)
        adapter = implied or cfg.get("defaults", "adapter")
    agents.get(adapter)  # UnknownAgent (InvalidInput) names the installed ones
    other = agent_for_model(model) if model else None
    if other not in (None, adapter):
        api.warn(
            f"model {model!r} names a {other} model, but the session runs the {adapter} "
            "agent, which may not know it"
        )
    if model is None:
        model = cfg.get(adapter, "model") or None
    if model is None and default_model and agent_for_model(default_model) in (None, adapter):
        model = default_model
    return adapter, model


def check_agent(api: Zwarm, mgr: BaseSessionManager, here: bool = True) -> None:
    """``mgr``'s agent can run: its table trusted, its limits not loosened, and (``here``: it
    runs on this machine, not on a host) its command found."""
    api.config.require(mgr.name)  # its supervisor will use every key: refuse now, not there
    api.config.require_limits()  # a loosened limit is never used: say so, and refuse
    if not here:
        return  # found on the host's PATH when it runs there (said on the turn if not)
    cmd = api.config.command(mgr.name)[0]
    path_var = mgr.agent_env().get("PATH", os.defpath)
    import shutil

    found = shutil.which(cmd, path=path_var)
    if found is None:
        if os.path.exists(cmd) or (os.sep in cmd and Path(cmd).exists()):
            raise AgentNotFound(mgr.name, cmd, "is not executable")
        if os.sep in cmd:  # a path is not looked up on PATH: say what is wrong with it
            raise AgentNotFound(mgr.name, cmd, "does not exist")
        raise AgentNotFound(mgr.name, cmd)
