"""The sandbox preflight: proof, on this machine, that a sandboxed turn is held as promised.

Owns ``run`` (``zwarm sandbox check``, and what a spawn with the sandbox on asks first,
through ``holds_here``, unless a pass is remembered for this machine: ``cache``): in a
private scratch directory it runs a scripted agent in bubblewrap under the same policy a turn
gets (``bwrap.command``) and has it try to get out: write outside its tree, read a state dir
inside its tree, reach a loopback port that is not its endpoint, reach through its filtering
proxy a host:port not allowed, see a process outside; each must fail, and writing its tree,
reaching its endpoint (through the port bridge) and reaching an allowed host by name through
the proxy (``PROXY_NAME``, pinned to the endpoint's address as ``[sandbox] resolve`` would)
must work.
Must stay true:
- every probe is run, never assumed; a machine where bubblewrap cannot start says why in one
  line (missing tools, user namespaces off: the sysctl to change), and ``Report.holds`` is
  False whenever any probe did not go as it must;
- nothing outside its scratch directory is touched, and everything it starts ends with it,
  but for what killed turns left (bridge directories and cgroups whose maker is gone: swept);
- a limit the machine cannot apply is said (``Report.limits``), never a failed preflight.
"""

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from zwarm.sandbox import Policy, bwrap

TIMEOUT_S = 60.0  # a sandbox that answers takes well under 1 s; a loaded machine, some 20
PROXY_NAME = "zwarm-preflight.test"  # the allowed host the proxy probe asks for by name


def _connect(target: str) -> str:
    """A probe's shell test: a CONNECT to ``target`` through the proxy inside, the tunnel's
    first bytes read (the probed server's banner). It first waits (up to ~10 s) for the
    proxy, which a turn does not wait for, to listen; then gives it 3 s."""
    sock = f"{bwrap.BRIDGE_DIR}/proxy.sock"
    wait = (
        f"i=0; while [ -d {bwrap.BRIDGE_DIR} ] && [ ! -S {sock} ] && [ $i -lt 1000 ]; do "
        "sleep 0.01; i=$((i+1)); done; "
    )
    req = f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n"
    return f'{wait}printf "{req}" | timeout 3 socat -t 2 - "TCP:127.0.0.1:{bwrap.PROXY_PORT}"'


# name -> (what it tries, whether it must work, the probe's shell test)
PROBES: dict[str, tuple[str, bool, str]] = {
    "write_tree": ("write its worktree", True, "echo ok > tree/probe"),
    "endpoint": (
        "reach its model endpoint",
        True,
        'socat -u "TCP:127.0.0.1:$ALLOWED" - | grep -q zwarm-endpoint',
    ),
    "write_outside": ("write outside its worktree", False, "echo x > outside/escaped"),
    "read_state": ("read the state dir", False, "cat tree/.zwarm/secret"),
    "other_port": (
        "reach another loopback port",
        False,
        'socat -u "TCP:127.0.0.1:$OTHER" - | grep -q zwarm-',
    ),
    "proxy": (
        "reach its API host by name through the proxy",
        True,
        _connect(f"{PROXY_NAME}:$ALLOWED") + " | grep -q zwarm-endpoint",
    ),
    "proxy_other": (
        "reach another host:port through the proxy",
        False,
        _connect("127.0.0.1:$OTHER") + " | grep -q zwarm-",
    ),
    "see_parent": (
        "see the processes outside",
        False,
        "grep -q -s -F -f token /proc/[0-9]*/cmdline",  # -q: a match wins over a vanished file
    ),
}


class Row(NamedTuple):
    probe: str
    what: str
    must: str  # "work" or "fail"
    got: str  # "worked", "failed", "not run"
    holds: bool


class Report(NamedTuple):
    rows: list[Row]
    reason: str  # why the sandbox cannot hold here ("" if it holds)
    limits: str = ""  # how a turn's limits would be applied here (``limits.summary``)

    @property
    def holds(self) -> bool:
        return not self.reason and all(r.holds for r in self.rows)


def why_not() -> str:
    """Why bubblewrap cannot run a sandbox here, from what the machine says ("" if nothing)."""
    missing = [name for name, path in bwrap.tools().items() if path is None and name != "setpriv"]
    if missing:
        return f"{' and '.join(missing)} not installed (apt-get install bubblewrap socat)"
    for path, name in (
        ("/proc/sys/kernel/unprivileged_userns_clone", "kernel.unprivileged_userns_clone"),
        ("/proc/sys/user/max_user_namespaces", "user.max_user_namespaces"),
    ):
        with contextlib.suppress(OSError, ValueError):
            with open(path) as f:
                value = f.read().strip()
            if value == "0" and (os.geteuid() != 0 or name.startswith("user.")):
                return f"user namespaces are disabled: sysctl {name}=0"
    return ""


def run(environ: Mapping[str, str] | None = None) -> Report:
    """Run every probe (``PROBES``) in a scratch sandbox, fresh; the table, any reason, and
    how a turn's limits would be applied here. Sweeps first what killed turns left (their
    bridge directories, their cgroups: ``bwrap.sweep_bridges``, ``limits.sweep``), and
    remembers the outcome for ``holds_here`` (``cache``: a pass kept, a failure forgotten)."""
    from zwarm.sandbox import cache, limits

    how = limits.methods()
    bwrap.sweep_bridges()
    limits.sweep(how)
    report = run_probes()._replace(limits=limits.summary(how))
    cache.remember(report.holds, fingerprint(), os.environ if environ is None else environ)
    return report


def holds_here(environ: Mapping[str, str] | None = None) -> Report | None:
    """What a sandboxed spawn asks: None if a passing preflight is remembered for this
    machine as it is now (``cache.hit``), else a fresh run's report (``run``)."""
    from zwarm.sandbox import cache

    env = os.environ if environ is None else environ
    return None if cache.hit(fingerprint(), env) else run(env)


def fingerprint() -> str:
    """What a passing preflight proved, for its cache (``cache.Key.policy``): the probes, the
    command line of a fixed policy (a bridged port, a limits prefix), and the sandbox's code
    (its files' inode, size, mtime)."""
    import hashlib

    from zwarm.store.rowcache import code_tag

    fixed = Policy(
        cwd="/zwarm-preflight/tree",
        tree="/zwarm-preflight/tree",
        read_only=("/zwarm-preflight",),
        hidden=("/zwarm-preflight/tree/.zwarm",),
        ports=(1,),
        home="/zwarm-preflight/home",
    )
    argv = bwrap.command(["probe"], fixed, "/zwarm-preflight/sock", ["prefix"])
    here = os.path.dirname(os.path.abspath(__file__))
    code = code_tag(sorted(os.path.join(here, f) for f in os.listdir(here) if f.endswith(".py")))
    text = repr((PROBES, argv, code))
    return hashlib.sha256(text.encode()).hexdigest()


def run_probes() -> Report:
    """The probes alone (``run``)."""
    reason = why_not()
    if reason:
        return Report([_row(k, None) for k in PROBES], reason)
    with (
        _scratch() as root,
        _server(b"zwarm-endpoint\n") as allowed,
        _server(b"zwarm-leak\n") as other,
    ):
        tree = os.path.join(root, "tree")
        state = os.path.join(tree, ".zwarm")
        for d in (tree, state, os.path.join(root, "outside"), os.path.join(root, "home")):
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(state, "secret"), "w") as f:
            f.write("state\n")
        token = "zwarm-preflight-" + secrets.token_hex(8)
        with open(os.path.join(root, "token"), "w") as f:
            f.write(token + "\n")
        # a process outside the sandbox whose argv only the token file names
        outside = subprocess.Popen(["/bin/sh", "-c", "read x", token], stdin=subprocess.PIPE)
        try:
            return _probe(root, tree, state, allowed, other)
        finally:
            outside.kill()
            outside.wait()


def _probe(root: str, tree: str, state: str, allowed: int, other: int) -> Report:
    lines = [
        f"if {{ {test}; }} >/dev/null 2>&1; then echo {k}=worked; else echo {k}=failed; fi"
        for k, (_, _, test) in PROBES.items()
    ]
    # the scratch root is the sandbox's tree too (so the token file and outside/ are reachable
    # by path), but only tree/ is writable: the root is bound read-only over it
    policy = Policy(
        cwd=root,
        tree=tree,
        read_only=(root,),
        hidden=(state,),
        ports=(allowed,),
        home=os.path.join(root, "home"),
        hosts=(f"{PROXY_NAME}:{allowed}",),
        pins=(f"{PROXY_NAME}=127.0.0.1",),
    )
    sock_dir = bwrap.bridge_dir()
    argv = bwrap.command(["/bin/sh", "-c", "\n".join(lines)], policy, sock_dir)
    env = {
        "PATH": "/usr/bin:/bin",
        "ALLOWED": str(allowed),
        "OTHER": str(other),
        "HOME": policy.home,
    }
    try:
        proc = subprocess.run(argv, capture_output=True, env=env, timeout=TIMEOUT_S, cwd=root)
    except subprocess.TimeoutExpired:
        return Report(
            [_row(k, None) for k in PROBES], f"the sandbox did not answer in {TIMEOUT_S:g} s"
        )
    finally:
        bwrap.remove_bridge(sock_dir)
    got = dict(
        line.split("=", 1) for line in proc.stdout.decode("utf-8", "replace").split() if "=" in line
    )
    if not got:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        why = err[-1] if err else f"exit code {proc.returncode}"
        return Report([_row(k, None) for k in PROBES], f"bubblewrap cannot start a sandbox: {why}")
    return Report([_row(k, got.get(k)) for k in PROBES], "")


def refusal(report: Report) -> str:
    """Why a sandboxed session is refused, in one line (the reason, else the failed probes)."""
    if report.reason:
        return report.reason
    bad = [f"{r.what} {r.got} (must {r.must})" for r in report.rows if not r.holds]
    return "; ".join(bad)


def _row(key: str, got: str | None) -> Row:
    what, must_work, _ = PROBES[key]
    if got not in ("worked", "failed"):
        return Row(key, what, "work" if must_work else "fail", "not run", False)
    return Row(key, what, "work" if must_work else "fail", got, (got == "worked") == must_work)


@contextlib.contextmanager
def _scratch() -> Iterator[str]:
    root = os.path.realpath(tempfile.mkdtemp(prefix="zwarm-preflight-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _server(banner: bytes) -> Iterator[int]:
    """A loopback TCP port that answers ``banner`` to every connection."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.sendall(banner)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        done.set()
        t.join()
        srv.close()
