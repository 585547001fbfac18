"""The bubblewrap command line of a sandboxed turn, and the port bridge into it.

Owns ``command`` (the argv that runs an agent's argv inside bubblewrap under a ``Policy``)
and the bridge of each allowed loopback port: outside, ``socat`` listens on a Unix socket in a
private directory and forwards to ``127.0.0.1:PORT``; the directory is bound read-only at
``/run/zwarm`` inside, where a second ``socat`` listens on ``127.0.0.1:PORT`` (the sandbox's
own loopback) before the agent starts. Must stay true:
- the host's ``/usr`` and ``/etc`` are read-only, ``/tmp`` and the home private, ``--unshare-all``
  (no network but the bridged ports, own pid namespace), ``--die-with-parent``,
  ``--new-session``, no capabilities;
- mounts are made in an order where a later one never reopens what an earlier one hid: the
  writable tree, then its git metadata read-only, then the hidden paths, then the login files;
- the bridge's sockets and its forwarders end with the turn (the outer shell kills them and
  removes the directory; a forwarder also dies with its parent: ``setpriv --pdeathsig``); the
  supervisor removes the directory again after the turn, so a killed outer shell leaves none,
  and one a SIGKILLed supervisor left is removed by ``sweep_bridges`` (the next sandboxed
  turn, the preflight): only this uid's directories named after a maker that is gone, made
  in this pid namespace (a pid names another process in another one);
- the outer shell's ``prefix`` (the turn's limits: ``limits.shell``) runs before anything
  else it starts, outside the sandbox;
- with ``hosts``, the filtering proxy (``zwarm.sandbox.proxy``, started here per turn beside
  the forwarders, with ``python -I -S``: nothing of the agent's directory or environment is
  imported) listens on ``proxy.sock`` in the same directory, is bridged to ``PROXY_PORT`` (or
  the next port no bridged one uses) inside (the agent starts without waiting for it: an early
  connection waits in the forwarder), and the agent gets ``HTTPS_PROXY``, ``HTTP_PROXY``,
  ``ALL_PROXY`` naming it and no ``NO_PROXY``: the proxy is its only route out but the
  bridged ports;
- zwarm cannot be run inside (its state dir, pins and trust store are hidden, by design): the
  ``zwarm`` the agent is given there (``STUB``, in the bridge directory, which every turn
  given one binds; first on its ``PATH``) only says so, in one line, and exits 2
  (``NO_DELEGATION``).
"""

import contextlib
import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence

from zwarm.sandbox import Policy

BRIDGE_DIR = "/run/zwarm"  # where the bridge's sockets are inside
BRIDGE_PREFIX = "zwarm-bridge-"  # outside: /tmp/zwarm-bridge-<maker pid>-<its start>-<random>
_BRIDGE_NAME = re.compile(
    r"^zwarm-bridge-([0-9]{1,10})-([0-9]{1,20})-(?:([0-9]{1,20})-)?[0-9a-f]{8}\Z"
)
PROXY_PORT = 3128  # where the filtering proxy answers inside (the sandbox's own loopback)
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
NO_PROXY_VARS = ("NO_PROXY", "no_proxy")
PROXY_WAIT_S = 30  # how long a connection to the proxy waits for it to start listening
STUB = f"{BRIDGE_DIR}/zwarm"  # the only zwarm a sandboxed agent finds
NO_DELEGATION = (
    "Error: zwarm cannot run inside its sandbox: a sandboxed turn cannot spawn, inject or "
    "read sessions (zwarm's state dir is outside it, by design; docs/security.md); ask your "
    'user, or run this agent with [sandbox] mode = "off" to delegate'
)
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def tools() -> dict[str, str | None]:
    """Where bwrap, socat and setpriv are for zwarm (its ``PATH``, then the system's; None:
    not installed)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin:/bin:/usr/sbin:/sbin"])
    return {name: shutil.which(name, path=path) for name in ("bwrap", "socat", "setpriv")}


def bridge_dir() -> str:
    """A new private directory (0700) for a turn's bridge sockets, on a short path: a Unix
    socket's path is limited to 107 bytes, which a deep ``$TMPDIR`` can exceed; with the
    ``zwarm`` stub in it (``STUB``: ``write_stub``). Named after
    the process that makes it (``BRIDGE_NAME``), so that ``sweep_bridges`` can tell one whose
    maker is gone; the outer shell removes it, and the supervisor after it (``remove_bridge``)."""
    import tempfile

    from zwarm.system import procs

    base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
    me = os.getpid()
    maker = f"{me}-{procs.start_ticks(me) or 0}-{procs.pid_namespace()}"
    while True:
        d = os.path.join(base, f"{BRIDGE_PREFIX}{maker}-{os.urandom(4).hex()}")
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        write_stub(d)
        return d


def write_stub(d: str) -> None:
    """The ``zwarm`` a sandboxed agent finds (``STUB``), in bridge directory ``d``: it says,
    in one line, that zwarm cannot run inside, and exits 2."""
    name = os.path.basename(STUB)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(os.path.join(d, name), flags, 0o500)
    with os.fdopen(fd, "w") as f:
        f.write(f"#!/bin/sh\necho {shlex.quote(NO_DELEGATION)} >&2\nexit 2\n")


def remove_bridge(d: str) -> None:
    """Remove bridge directory ``d`` and the sockets in it, never following a link (a
    directory put in its place is not entered: only its entries are unlinked)."""
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for name in os.listdir(fd):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(d)


def sweep_bridges(base: str = "/tmp") -> list[str]:
    """Remove the bridge directories whose maker is gone (a turn whose supervisor and outer
    shell were SIGKILLed): only directories in ``base`` named as ``bridge_dir`` names them,
    owned by this uid, never a link, whose maker (pid and start ticks) no longer runs. The
    directories removed."""
    import stat

    from zwarm.system import procs
    from zwarm.system.boot import ProcRef

    uid, boot, out = os.geteuid(), procs.boot_id(), list[str]()
    ns = str(procs.pid_namespace())
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        m = _BRIDGE_NAME.match(name)
        if m is None:
            continue
        d = os.path.join(base, name)
        try:
            st = os.lstat(d)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        if m.group(3) is not None and m.group(3) != ns:
            continue  # another pid namespace's (a container sharing /tmp): not our pid
        if not procs.is_alive(ProcRef(int(m.group(1)), int(m.group(2)), boot)):
            remove_bridge(d)
            out.append(d)
    return out


def mounts(policy: Policy) -> list[str]:
    """bwrap's file system arguments for ``policy`` (order matters: see the module doc)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for d in _SYSTEM_LINKS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if policy.home and policy.home not in ("/", "/tmp"):
        args += ["--tmpfs", policy.home]
    for p in policy.read_only:
        if not _inside(p, policy.tree) and p != policy.tree:
            args += ["--ro-bind-try", p, p]
    args += ["--bind", policy.tree, policy.tree]
    for p in policy.read_only:  # read-only where it lies inside (or is) the writable tree
        if _inside(p, policy.tree) or p == policy.tree:
            args += ["--ro-bind-try", p, p]
    for p in policy.hidden:
        if os.path.isdir(p) and _visible(p, policy):
            args += ["--tmpfs", p]
    for p in policy.login:
        args += ["--bind-try", p, p]
    return args


def proxy_port(policy: Policy) -> int | None:
    """The port the filtering proxy answers on inside (None: no proxy, no hosts allowed)."""
    if not policy.hosts:
        return None
    port = PROXY_PORT
    while port in policy.ports:
        port += 1
    return port


def proxy_argv(policy: Policy, sock: str, python: str = sys.executable) -> list[str]:
    """The filtering proxy's argv for ``policy``, listening on ``sock``: the standard library
    only (``-I -S``: no site, no path or variable of the caller's), its allow list in argv."""
    from zwarm.sandbox import proxy

    argv = [python, "-I", "-S", os.path.abspath(proxy.__file__), "--unix", sock]
    for h in policy.hosts:
        argv += ["--allow", h]
    for p in policy.pins:
        argv += ["--pin", p]
    return argv


def command(
    argv: list[str],
    policy: Policy,
    sock_dir: str | None,
    prefix: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """The argv that runs ``argv`` inside bubblewrap under ``policy``; with a ``sock_dir``
    (a bridge directory the caller made: ``bridge_dir``), bound in, with the ports and hosts
    bridged through it, the hosts through the filtering proxy run by ``python``; ``prefix``:
    shell lines the outer shell runs first, outside (``limits.shell``: join the turn's
    cgroup, set its rlimits), so that all it starts inherits them."""
    t = tools()
    bwrap = t["bwrap"] or "bwrap"
    sb = [bwrap, *mounts(policy)]
    sb += ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    sb += ["--chdir", policy.cwd, "--setenv", "TMPDIR", "/tmp"]
    pport = proxy_port(policy)
    if sock_dir is None:
        if not prefix:
            return [*sb, "--", *argv]
        return [
            "/bin/sh",
            "-c",
            "\n".join([*prefix, 'exec "$@"']),
            "zwarm-limits",
            *sb,
            "--",
            *argv,
        ]
    socat = t["socat"] or "socat"
    sb += ["--ro-bind", sock_dir, BRIDGE_DIR]
    # (inside port, socket name and options) of each forwarder
    bridges = [(port, f"{port}.sock") for port in policy.ports]
    if pport is not None:
        # not waited for (a Python start, ~50 ms idle, several times that under load, would
        # delay every turn): a connection made before the proxy listens waits for it, in
        # the forwarder, for up to PROXY_WAIT_S (its socket appears only once it listens)
        tries = int(PROXY_WAIT_S / 0.01)
        bridges.append((pport, f"proxy.sock,retry={tries},interval=0.01"))
        for var in PROXY_VARS:
            sb += ["--setenv", var, f"http://127.0.0.1:{pport}"]
        for var in NO_PROXY_VARS:
            sb += ["--unsetenv", var]
    # whether 127.0.0.1:PORT listens, with shell builtins only (no process per check)
    inner = [
        "_listening() { while read -r _ a _ st _; do "
        '[ "$a" = "$1" ] && [ "$st" = 0A ] && return 0; done < /proc/net/tcp; return 1; }'
    ]
    for port, name in bridges:
        inner.append(
            f"{socat} TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr "
            f"UNIX-CONNECT:{BRIDGE_DIR}/{name} &"
        )
        inner.append(_wait(f"! _listening 0100007F:{port:04X}"))
    for port in policy.ports:  # the outside ends, started alongside the sandbox: waited
        # for here, so neither waits for the other (nor for a bridge directory not bound:
        # a sandbox that did not set up its mounts has nothing to wait for)
        inner.append(_wait(f"[ -d {BRIDGE_DIR} ] && [ ! -S {BRIDGE_DIR}/{port}.sock ]"))
    inner.append('exec "$@"')
    sb += ["--", "/bin/sh", "-c", "\n".join(inner), "zwarm-sandbox", *argv]
    outer = [*prefix, f"d={shlex.quote(sock_dir)}", "pids="]
    pdeath = f"{t['setpriv']} --pdeathsig TERM " if t["setpriv"] else ""
    if pport is not None:
        proxy = shlex.join(proxy_argv(policy, os.path.join(sock_dir, "proxy.sock"), python))
        outer.append(f'{pdeath}{proxy} & pids="$pids $!"')
    for port in policy.ports:
        outer.append(
            f"{pdeath}{socat} UNIX-LISTEN:$d/{port}.sock,fork,mode=600 "
            f'TCP:127.0.0.1:{port} & pids="$pids $!"'
        )
    outer.append(f"{shlex.join(sb)}")
    outer.append('rc=$?; kill $pids 2>/dev/null; rm -rf "$d"; exit $rc')
    return ["/bin/sh", "-c", "\n".join(outer)]


def _wait(cond: str) -> str:
    """A shell loop waiting (about 5 s at most) while ``cond`` holds: every 1 ms for the first
    100 ms (the bridge is up in a few), then every 10 ms. Each ``sleep`` is a process, so a
    loaded machine stretches the count: 590 of them, not 5,000 (which took over 20 s there)."""
    return (
        f"i=0; while {cond} && [ $i -lt 590 ]; do "
        "if [ $i -lt 100 ]; then sleep 0.001; else sleep 0.01; fi; i=$((i+1)); done"
    )


def _visible(path: str, policy: Policy) -> bool:
    """Whether ``path`` lies in something the sandbox binds, so it must be hidden (one that
    holds the tree is not bound, only the tree in it)."""
    return any(path == r or _inside(path, r) for r in (policy.tree, *policy.read_only))


def _inside(path: str, root: str) -> bool:
    return path != root and path.startswith(root.rstrip("/") + "/")
