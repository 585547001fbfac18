"""The SSH hosts' test bed: two ``sshd`` on loopback playing two machines, ``host-a`` and
``host-b`` (tier ``hosts``: tests/launchers/ssh/).

``bed_problem`` says why there can be none here (the ``ssh_hosts`` fixture, tests/conftest.py,
then skips, or fails when ``CI=true``); ``start_bed(base)`` starts one under ``base`` (a
directory of the test session's, which the user below can read), ``HostBed.stop`` ends it.

Each host is an ``sshd -D`` of its own on a free port of 127.0.0.1, with its own host key
(``known_hosts`` pre-filled with ``ssh-keyscan``), ``UsePAM no``, ``StrictModes no``, only the
key made for this test session authorised, and ``SetEnv``: ``ZWARM_HOST=host-a`` (or
``host-b``: which machine answered), its own ``HOME`` (so its own trust file and git
identity) and a ``PATH`` whose ``zwarm`` is this checkout's. It logs in a user who is not
root: as root, ``zwarmtest`` (made with ``useradd`` once, if missing), since sshd running as
root ignores a client's signal requests and git refuses a root-owned repository to another
user; else sshd runs as this user and logs this user in. Each host has its own repository
(``Host.repo``, owned by that user, one commit) to be its default ``cwd``.
``ssh_config`` (``HostBed.ssh_config``) names both hosts, so ``[hosts.a] ssh = "host-a"``,
``ssh_config = "<it>"`` reaches host-a. ``HostBed.config(name)`` is that ``[hosts.NAME]`` table.

The remote ``zwarm`` is this checkout's, run by its venv's python: when the hosts' user
cannot read the checkout or the venv (a checkout under /root), a readable copy of the package
and the venv's site-packages is made under ``base`` once per test session, and that is said
on stderr. Must stay true: the only things outside ``base`` this touches are the ``zwarmtest``
user (made under the lock ``/tmp/zwarm-hosts-useradd.lock``) and, under root, ``/run/sshd``
(sshd's privilege-separation directory); every wait is
on a condition with a deadline; every sshd started is stopped (``stop``, by its own pid).
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support import ROOT, wait_until

SSHD = "/usr/sbin/sshd"
USER = "zwarmtest"  # the hosts' user when the tests run as root
NAMES = ("host-a", "host-b")


def bed_problem() -> str | None:
    """Why there can be no test hosts here (None: there can)."""
    if os.geteuid() != 0 and os.environ.get("CI", "").lower() != "true":
        return "the ssh hosts' test bed needs root (or CI=true): sshd, a user of its own"
    for prog in (
        SSHD,
        shutil.which("ssh"),
        shutil.which("ssh-keygen"),
        shutil.which("ssh-keyscan"),
    ):
        if prog is None or not os.access(prog, os.X_OK):
            return f"{prog or 'ssh'} not found: apt-get install -y openssh-server openssh-client"
    return None


class TestHost:
    """One host of the bed: its name (``host-a``), port, home and repository."""

    def __init__(self, name: str, port: int, home: Path, repo: Path, proc: subprocess.Popen[bytes]):
        self.name, self.port, self.home, self.repo, self.proc = name, port, home, repo, proc

    def pause(self) -> None:
        """Stop answering, as a machine that hangs: SIGSTOP to this sshd and every process
        it runs (its connections' too): its port still takes TCP, nothing replies."""
        for p in self._tree():
            p.suspend()

    def resume(self) -> None:
        for p in self._tree():
            p.resume()

    def _tree(self) -> list[Any]:
        import psutil

        try:
            top = psutil.Process(self.proc.pid)
            return [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []


class HostBed:
    """Two running hosts (``hosts["host-a"]``), the ssh config naming them, its user."""

    def __init__(self, base: Path, user: str, hosts: dict[str, TestHost], ssh_config: Path):
        self.base, self.user, self.hosts, self.ssh_config = base, user, hosts, ssh_config
        self.control = base / "cm"  # the shared connections' sockets: short, private

    def logins(self, name: str) -> int:
        """How many logins host ``name`` accepted so far (its sshd log)."""
        log = self.base / name / "sshd.log"
        return log.read_text(errors="replace").count("Accepted publickey")

    def config(self, name: str, **over: Any) -> dict[str, Any]:
        """``[hosts.X]``'s values reaching host ``name`` (``host-a``), ``over`` on top."""
        return {"ssh": name, "ssh_config": str(self.ssh_config), **over}

    def stop(self) -> None:
        """End both sshd and every connection they serve (whose end ends the client side's
        shared connections too)."""
        for h in self.hosts.values():
            h.resume()  # a paused one too
            for p in reversed(h._tree()):
                try:
                    p.terminate()
                except Exception:  # ended meanwhile
                    pass
            try:
                h.proc.wait(10)
            except subprocess.TimeoutExpired:
                h.proc.kill()
                h.proc.wait(10)


def start_bed(base: Path) -> HostBed:
    """Two hosts under ``base`` (see the module's docstring)."""
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    user = _user()
    pw = pwd.getpwnam(user)
    key = base / "client_key"  # the client (this process) logs in with it
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
    authorized = base / "authorized_keys"
    shutil.copy(key.with_suffix(".pub"), authorized)
    authorized.chmod(0o644)
    bindir = base / "bin"
    bindir.mkdir(exist_ok=True)
    known = base / "known_hosts"
    hosts: dict[str, TestHost] = {}
    lines = []
    try:
        for name in NAMES:
            hosts[name] = _start_host(base / name, name, authorized, bindir, pw, known)
            lines += [
                f"Host {name}",
                "  HostName 127.0.0.1",
                f"  Port {hosts[name].port}",
                f"  User {user}",
                f"  IdentityFile {key}",
                "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {known}",
                "  StrictHostKeyChecking yes",
                "  LogLevel ERROR",
            ]
    except BaseException:
        HostBed(base, user, hosts, base).stop()
        raise
    ssh_config = base / "ssh_config"
    ssh_config.write_text("\n".join(lines) + "\n")
    bed = HostBed(base, user, hosts, ssh_config)
    try:
        _remote_zwarm(bed)
    except BaseException:
        bed.stop()
        raise
    return bed


def _user() -> str:
    """The hosts' user: ``zwarmtest`` as root (made once, under a lock: xdist's workers may
    start beds at once), else this user."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.getuid()).pw_name
    with open("/tmp/zwarm-hosts-useradd.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pwd.getpwnam(USER)
        except KeyError:
            _run(["useradd", "--create-home", "--shell", "/bin/sh", USER])
        # no password, but not locked either: sshd (UsePAM no) refuses a locked account ("!")
        with open("/etc/shadow") as f:
            locked = any(ln.startswith(f"{USER}:!") for ln in f)
        if locked:
            _run(["usermod", "-p", "*", USER])
    return USER


def _start_host(
    d: Path, name: str, authorized: Path, bindir: Path, pw: pwd.struct_passwd, known: Path
) -> TestHost:
    home, repo = d / "home", d / "repo"
    for p in (d, home, repo):
        p.mkdir(parents=True, exist_ok=True)
    d.chmod(0o755)
    hostkey = d / "host_key"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)])
    (home / ".gitconfig").write_text(f"[user]\n\tname = {name}\n\temail = {name}@zwarm.test\n")
    env = {**os.environ, "HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / ".gitconfig")}
    _run(["git", "init", "-q", "-b", "main", str(repo)], env=env)
    (repo / "README.md").write_text(f"the repository of {name}\n")
    _run(["git", "-C", str(repo), "add", "-A"], env=env)
    _run(["git", "-C", str(repo), "commit", "-q", "-m", "init"], env=env)
    for p in (home, repo):
        _chown_tree(p, pw)
    port = _free_port()
    config = d / "sshd_config"
    path = f"{bindir}:/usr/local/bin:/usr/bin:/bin"
    config.write_text(
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"Port {port}",
                f"HostKey {hostkey}",
                f"PidFile {d / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}",
                "UsePAM no",
                "StrictModes no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                f"AllowUsers {pw.pw_name}",
                f"SetEnv ZWARM_HOST={name} HOME={home} PATH={path}",
                "MaxSessions 100",
                "MaxStartups 100:30:200",
                "",
            ]
        )
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = d / "sshd.log"
    proc = subprocess.Popen(
        [SSHD, "-D", "-f", str(config), "-E", str(log)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    host = TestHost(name, port, home, repo, proc)
    try:
        wait_until(lambda: proc.poll() is not None or _accepts(port), timeout=30)
        if proc.poll() is not None:
            raise RuntimeError(f"sshd of {name} exited: {log.read_text(errors='replace')[-500:]}")
        keys = _keyscan(port)
        with known.open("a") as f:
            f.write(keys)
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        raise
    return host


def _keyscan(port: int) -> str:
    """``known_hosts`` lines of the sshd on ``port`` (retried: one that just began to listen
    may not answer the first scan)."""
    out = ""

    def scanned() -> bool:
        nonlocal out
        done = subprocess.run(
            ["ssh-keyscan", "-T", "5", "-t", "ed25519", "-p", str(port), "127.0.0.1"],
            capture_output=True,
            check=False,
        )
        out = done.stdout.decode()
        return "ssh-ed25519" in out

    wait_until(scanned, timeout=30)
    return out


def _remote_zwarm(bed: HostBed) -> None:
    """``bed``'s ``bin/zwarm``: this checkout's, run by this venv's python when the hosts' user
    can (asked over ssh, as that user), else a readable copy of the package and its runtime
    dependencies run by a python that user can run (this one's, or the system's of the same
    minor version), said on stderr."""
    script = bed.base / "bin" / "zwarm"
    python = sys.executable
    if _runs_there(bed, [python, "-c", "import zwarm, msgspec"]):
        script.write_text(f'#!/bin/sh\nexec {python} -m zwarm "$@"\n')
        script.chmod(0o755)
        return
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [os.path.realpath(sys.executable), f"/usr/bin/python{version}"]
    usable = [p for p in candidates if _runs_there(bed, [p, "-c", "pass"])]
    if not usable:
        raise RuntimeError(f"the hosts' user {bed.user} can run none of {candidates}")
    site = bed.base / "zwarm-copy"
    sys.stderr.write(
        f"tests: the hosts' user {bed.user} cannot run {python} with {ROOT}: the hosts run a "
        f"copy of zwarm and its dependencies ({site}) with {usable[0]}\n"
    )
    _copy_runtime(site)
    _chmod_readable(site)
    script.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {usable[0]} -s -m zwarm "$@"\n')
    script.chmod(0o755)
    why = _fails_there(bed, ["zwarm", "--version"])
    if why:
        raise RuntimeError(f"the hosts' zwarm ({script}) does not run as {bed.user}: {why}")


def _runs_there(bed: HostBed, argv: list[str]) -> bool:
    return not _fails_there(bed, argv)


def _fails_there(bed: HostBed, argv: list[str]) -> str:
    """Why ``argv`` fails on host-a ("" when it runs)."""
    import shlex

    line = " ".join(shlex.quote(a) for a in argv)
    ssh = ["ssh", "-F", str(bed.ssh_config), "-o", "BatchMode=yes", NAMES[0], line]
    done = subprocess.run(ssh, capture_output=True, timeout=60, check=False)
    why = done.stderr.decode(errors="replace").strip()[-300:] or f"exit {done.returncode}"
    return why if done.returncode != 0 else ""


def _copy_runtime(site: Path) -> None:
    """zwarm (its package and entry points) and every distribution it needs at run time,
    copied into ``site`` (a directory for PYTHONPATH)."""
    import importlib.metadata as md
    import re

    shutil.copytree(ROOT / "zwarm", site / "zwarm", dirs_exist_ok=True)
    ours = md.distribution("zwarm")
    info = site / f"zwarm-{ours.version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: zwarm\nVersion: {ours.version}\n")
    (info / "entry_points.txt").write_text(ours.read_text("entry_points.txt") or "")
    todo, seen = list(ours.requires or ()), {"zwarm"}
    while todo:
        req = todo.pop()
        if ";" in req:
            continue  # an extra's or a platform's: not needed to run
        name = re.split(r"[\s<>=!~\[(]", req, maxsplit=1)[0].lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        dist = md.distribution(name)
        for f in dist.files or ():
            src = Path(str(dist.locate_file(f)))
            if src.is_file() and ".." not in f.parts:
                dst = site / f
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        todo += dist.requires or []


def _chmod_readable(top: Path) -> None:
    for d, _dirs, files in os.walk(top):
        os.chmod(d, 0o755)
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444)


def _chown_tree(top: Path, pw: pwd.struct_passwd) -> None:
    if os.geteuid() != 0:
        return
    for d, _dirs, files in os.walk(top):
        os.chown(d, pw.pw_uid, pw.pw_gid)
        for f in files:
            os.lchown(os.path.join(d, f), pw.pw_uid, pw.pw_gid)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, env=env, check=False)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()[-300:]
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({done.returncode}): {why}")


def silent_port() -> tuple[socket.socket, int]:
    """A listening socket on 127.0.0.1 that accepts TCP and never says a word (what an ssh
    client sees of a wedged host): the socket (close it when done) and its port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s, s.getsockname()[1]


def elapsed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``fn(*args, **kwargs)``'s result (or exception) and the seconds it took."""
    t = time.monotonic()
    try:
        out = fn(*args, **kwargs)
    except Exception as e:
        out = e
    return out, time.monotonic() - t
