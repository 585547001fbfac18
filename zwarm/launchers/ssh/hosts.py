"""SSH hosts: their config (``[hosts.NAME]``), one shared connection per host, the remote zwarm.

Owns the ``[hosts.NAME]`` family (``HOSTS``: each key's shape, doc and trust; the ssh
launcher declares it, ``Launcher.families``, and ``zwarm.config`` checks and trusts it),
reading it (``hosts``, ``host``: trusted values only), the ssh command line zwarm runs on a
host (``Connection.argv``), running one command there (``Connection.run``), the one
connection per host every command shares (an OpenSSH ControlMaster whose socket is in a
private directory of this user's, ``control_dir``), and which remote zwarm may be talked to
(``remote_version``: the same version only), and what ``zwarm hosts`` reports of a host
(``status``, ``statuses``: all at once; ``check``: step by step). Must stay true:
- every key of a host executes (what to connect to, as whom, what runs there): a host is used
  only as the user trusted it (``zwarm trust``), whole;
- ssh gets an argv: the destination is never an option (``ssh`` never starts with ``-``, and
  ``--`` ends ssh's options before it); the remote command line is zwarm's own words, each
  shell-quoted (``remote_line``), a host's ``~/`` paths expanded by the remote shell only;
- the control sockets live in a directory only this user can write (0700, owned, not a
  link), never in a project or a state dir (an agent could plant a socket there), on a path
  short enough for a Unix socket;
- a host that does not answer never hangs a command: ``run`` returns or raises
  ``HostUnreachable`` within its timeout (ssh's own ``ConnectTimeout`` and server-alive
  checks bound it too), and ``up`` answers within its own;
- what the remote side prints is untrusted: read up to a bound, shown as one clean line;
- importing this module is cheap: subprocess is imported where ssh runs.
"""

import math
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from zwarm.errors import ConfigError, ZwarmError
from zwarm.rules import Family, Setting

if TYPE_CHECKING:
    import subprocess

TABLE = "hosts"
# a local path (identity, ssh_config): absolute or in the home directory
_LOCAL_PATH = r"^(/|~/)[^\x00-\x1f\x7f]{0,4095}\Z"
# a remote directory (cwd): absolute, the home directory or in it
_REMOTE_DIR = r"^(~|(/|~/)[^\x00-\x1f\x7f]{0,4095})\Z"
# the remote zwarm: a program name on the remote PATH, or an absolute or ~/ path
_PROGRAM = r"^([A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}|(/|~/)[^\x00-\x1f\x7f]{1,4095})\Z"
# ssh's destination (user@host, host, an alias of the ssh config, ssh://...): one argv
# element that is never an option: no leading '-', no whitespace or control character
_DESTINATION = r"^[A-Za-z0-9_.@:%\[\]/+~=][^\s\x00-\x1f\x7f]{0,254}\Z"
SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {
        "ssh": Setting(
            (str,),
            None,
            doc='Where to connect: "user@host" or a Host alias of the ssh config.',
            pattern=_DESTINATION,
            shape="an ssh destination (user@host or an alias; never an option)",
        ),
        "port": Setting((int,), None, doc="Its ssh port (ssh -p).", bounds=(1, 65535)),
        "identity": Setting(
            (str,),
            None,
            doc="The private key to use (ssh -i), a local path.",
            pattern=_LOCAL_PATH,
            shape="an absolute path (or ~/...)",
        ),
        "ssh_config": Setting(
            (str,),
            None,
            doc="An ssh config file used instead of ~/.ssh/config (ssh -F), a local path.",
            pattern=_LOCAL_PATH,
            shape="an absolute path (or ~/...)",
        ),
        "zwarm": Setting(
            (str,),
            "zwarm",
            doc='The zwarm there: "zwarm" on its PATH, or an absolute (or ~/) path.',
            pattern=_PROGRAM,
            shape="a program name or an absolute (or ~/) path",
        ),
        "cwd": Setting(
            (str,),
            None,
            doc="The directory sessions run in there by default (absolute, or ~/...).",
            pattern=_REMOTE_DIR,
            shape="an absolute path (or ~/...)",
        ),
    }
)
HOSTS = Family(
    SETTINGS,
    required=("ssh",),
    name=r"^[a-z][a-z0-9_-]{0,31}\Z",
    doc="Machines sessions may run on over ssh (spawn --host NAME); each used once trusted.",
    example=MappingProxyType(
        {"ssh": "me@build-box", "port": 22, "zwarm": "~/.local/bin/zwarm", "cwd": "~/src/app"}
    ),
)

CONNECT_TIMEOUT = 10  # seconds ssh waits for a host to connect and say hello
ALIVE_INTERVAL = 5  # seconds between server-alive probes on a connection (3 missed: it ends)
PERSIST = 300  # seconds a shared connection stays open after its last command
_SOCKET_MAX = 107  # a Unix socket path's bytes (108 with its NUL)
_SOCKET_NAME = 40 + 17  # "%C" (40 hex digits) and the ".XXXXXXXXXXXXXXXX" ssh adds meanwhile
MAX_OUTPUT = 1 << 16  # bytes of a remote answer read for a check (a version, a listing line)


class Host(msgspec.Struct, frozen=True):
    """One ``[hosts.NAME]``, as trusted: ``ssh`` the destination, ``zwarm`` the remote zwarm
    (``~/`` paths are the remote home's), ``cwd`` the default directory there."""

    name: str
    ssh: str
    port: int | None = None
    identity: str | None = None
    ssh_config: str | None = None
    zwarm: str = "zwarm"
    cwd: str | None = None


class HostUnreachable(ZwarmError):
    """``host`` did not answer (could not connect, or did not reply within the timeout)."""

    def __init__(self, host: str, why: str) -> None:
        from zwarm.text import oneline

        self.host = host
        self.why = oneline(why, 200)
        super().__init__(f"host {host!r} unreachable: {self.why}")


class _Config(Protocol):
    """What is read of a ``zwarm.config.Config`` (this package never imports the config)."""

    @property
    def data(self) -> Mapping[str, Mapping[str, Any]]: ...

    def table(self, table: str) -> Mapping[str, Any]: ...


def hosts(settings_or_config: _Config | Mapping[str, Any]) -> dict[str, Host]:
    """Every configured host, as trusted: from a ``Config`` (``UntrustedConfig`` when one is
    not trusted; none when no launcher declares ``[hosts]``), or from the ``[hosts]`` table's
    members already read as trusted (``{name: {key: value}}``)."""
    return {name: _host(name, values) for name, values in _members(settings_or_config).items()}


def host(settings_or_config: _Config | Mapping[str, Any], name: str) -> Host:
    """The host called ``name`` (only it is read: another untrusted host does not matter);
    ``InvalidInput`` naming the configured ones."""
    members = _members(settings_or_config)
    if name not in members:
        from zwarm.errors import InvalidInput

        known = ", ".join(sorted(members)) or "none configured: [hosts.NAME] in config.toml"
        raise InvalidInput(f"unknown host {name!r} (hosts: {known})")
    return _host(name, members[name])


def _members(settings_or_config: _Config | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(settings_or_config, Mapping):
        return settings_or_config
    if TABLE not in settings_or_config.data:
        return {}  # no launcher declares [hosts]
    return settings_or_config.table(TABLE)  # each member read as trust allows it


def _host(name: str, values: Mapping[str, Any]) -> Host:
    """A member as a ``Host``, its shape checked again (a mapping may come from anywhere)."""
    why = HOSTS.problem(TABLE, name, dict(values))
    if why is not None:
        raise ConfigError(f"[{TABLE}.{name}]", why)
    return Host(name=name, **values)


def control_dir() -> Path:
    """This user's directory for the shared connections' sockets: ``$XDG_RUNTIME_DIR/zwarm-ssh``
    when that is private and short enough, else ``/tmp/zwarm-ssh-UID``; made and checked
    (``private_dir``)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        path = Path(runtime) / "zwarm-ssh"
        if len(os.fsencode(path)) + 1 + _SOCKET_NAME <= _SOCKET_MAX:
            try:
                return private_dir(path)
            except ZwarmError:
                pass  # an unusable runtime dir: the one in /tmp
    return private_dir(Path(f"/tmp/zwarm-ssh-{os.getuid()}"))


def private_dir(path: Path) -> Path:
    """``path``, made 0700 if missing, once checked to be a directory (not a link) of this
    user's that nobody else may write, on a path short enough for its sockets; else
    ``ZwarmError`` saying why."""
    import stat

    if len(os.fsencode(path)) + 1 + _SOCKET_NAME > _SOCKET_MAX:
        raise ZwarmError(f"{path}: too long a path for ssh's control sockets (108 bytes)")
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise ZwarmError(f"{path}: cannot make the ssh sockets' directory: {e.strerror}") from None
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ZwarmError(
            f"{path}: not a private directory of this user's (0700, owned, not a link): "
            "remove it so zwarm can make it"
        )
    return path


class HomePath(str):
    """A remote path that may start with ``~/`` (a host's ``zwarm``, ``cwd``): the remote
    shell expands the ``~`` (``remote_line``); every other word is quoted whole."""

    __slots__ = ()


def remote_word(word: str) -> str:
    """``word`` shell-quoted for the remote shell; a ``HomePath``'s leading ``~``/``~/``
    left for it to expand."""
    if isinstance(word, HomePath):
        if word == "~":
            return "~"
        if word.startswith("~/"):
            rest = word[2:]
            return "~/" + shlex.quote(rest) if rest else "~/"
    return shlex.quote(word)


def remote_line(remote: Sequence[str], cwd: str | None = None) -> str:
    """The command line the remote shell runs: each word quoted (``remote_word``), in ``cwd``
    (``cd`` there first, failing the command if it cannot)."""
    line = " ".join(remote_word(w) for w in remote)
    if cwd is None:
        return line
    return f"cd -- {remote_word(HomePath(cwd))} && exec {line}"


class Connection:
    """The way to one host: each command an ``ssh`` that shares one connection (an OpenSSH
    ControlMaster, its socket ``control_dir/%C``), made by the first command that needs it
    and kept ``PERSIST`` seconds after the last; every zwarm process shares it."""

    def __init__(self, host: Host, control_dir: Path, connect_timeout: float = CONNECT_TIMEOUT):
        self.host = host
        self.control_dir = private_dir(control_dir)
        self.connect_timeout = max(1, math.ceil(connect_timeout))

    def __repr__(self) -> str:
        return f"Connection({self.host.name!r}, {self.host.ssh!r})"

    def options(self, master: str = "auto") -> list[str]:
        """ssh's options (before the destination) for this host over the shared master."""
        h = self.host
        out = ["ssh"]
        if h.ssh_config is not None:
            out += ["-F", os.path.expanduser(h.ssh_config)]
        out += [
            "-o", "BatchMode=yes",
            "-o", f"ControlMaster={master}",
            "-o", f"ControlPath={self.control_dir}/%C",
            "-o", f"ControlPersist={PERSIST}",
            "-o", f"ConnectTimeout={self.connect_timeout}",
            "-o", f"ServerAliveInterval={ALIVE_INTERVAL}",
            "-o", "ServerAliveCountMax=3",
            "-e", "none",
        ]  # fmt: skip
        if h.port is not None:
            out += ["-p", str(h.port)]
        if h.identity is not None:
            out += ["-i", os.path.expanduser(h.identity), "-o", "IdentitiesOnly=yes"]
        return out

    def argv(
        self, remote: Sequence[str], *, tty: bool = False, cwd: str | None = None
    ) -> list[str]:
        """The local ssh argv running ``remote`` (each word shell-quoted: ``remote_line``) on
        the host over the shared master; ``tty``: with a terminal (``-tt``: the remote side
        gets SIGHUP when this ssh ends), else none; ``cwd``: in that remote directory."""
        if not remote:
            raise ValueError("no remote command")
        return [
            *self.options(),
            "-tt" if tty else "-T",
            "--",
            self.host.ssh,
            remote_line(remote, cwd),
        ]

    def run(
        self,
        remote: Sequence[str],
        *,
        input: bytes | None = None,
        timeout: float,
        cwd: str | None = None,
    ) -> "subprocess.CompletedProcess[bytes]":
        """Run ``remote`` on the host and wait (its output read whole); ``HostUnreachable``
        when ssh cannot connect (its exit 255) or no answer comes within ``timeout``
        seconds. A remote command's own exit code is the result's (but its 255 is ssh's own
        failure code: it reads as unreachable, so zwarm's remote commands never exit 255)."""
        import subprocess

        argv = self.argv(remote, cwd=cwd)
        try:
            done = subprocess.run(
                argv,
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.drop()  # a master stuck on a host that stopped answering: the next one is new
            raise HostUnreachable(self.host.name, f"no answer within {timeout:g} s") from None
        except OSError as e:
            raise HostUnreachable(self.host.name, f"cannot run ssh: {e.strerror}") from None
        if done.returncode == 255:
            raise HostUnreachable(self.host.name, _last_line(done.stderr) or "ssh failed")
        return done

    def alive(self) -> bool:
        """Whether the shared connection is open now (asks the master: no network)."""
        import subprocess

        try:
            done = subprocess.run(
                [*self.options(), "-O", "check", "--", self.host.ssh],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=5,
                check=False,
            )
        except (subprocess.TimeoutExpired, OSError):
            return False
        return done.returncode == 0

    def up(self, timeout: float) -> bool:
        """Whether the shared connection is open, or opened within ``timeout`` seconds."""
        if self.alive():
            return True
        try:
            return self.run(["true"], timeout=timeout).returncode == 0
        except HostUnreachable:
            return False

    def drop(self) -> None:
        """Close the shared connection (``ssh -O exit``), if one is open; never raises."""
        import subprocess

        try:
            subprocess.run(
                [*self.options(), "-O", "exit", "--", self.host.ssh],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=5,
                check=False,
            )
        except (subprocess.TimeoutExpired, OSError):
            pass


def _last_line(data: bytes) -> str:
    from zwarm.text import oneline

    lines = [ln for ln in data[-MAX_OUTPUT:].decode("utf-8", "replace").splitlines() if ln.strip()]
    return oneline(lines[-1], 200) if lines else ""


_VERSION = re.compile(r"^zwarm ([0-9A-Za-z.+-]{1,64})$")


def compatible(ours: str, theirs: str) -> bool:
    """Whether a zwarm of version ``ours`` may drive one of ``theirs`` on a host: the same
    version only (what one writes the other reads: meta.json, the turn files, the CLI's JSON)."""
    return ours == theirs


def remote_version(conn: Connection, timeout: float = 30) -> str:
    """The version of the zwarm the host runs (``zwarm --version`` there); ``ZwarmError`` in
    one line when it is not there, answers something else, or is a version this one may not
    talk to (``compatible``); ``HostUnreachable`` when the host does not answer."""
    from zwarm import __version__
    from zwarm.text import oneline

    name, program = conn.host.name, conn.host.zwarm
    done = conn.run([HomePath(program), "--version"], timeout=timeout)
    out = done.stdout[:MAX_OUTPUT].decode("utf-8", "replace").strip()
    if done.returncode != 0:
        why = _last_line(done.stderr) or f"exit {done.returncode}"
        raise ZwarmError(f"host {name!r}: {program} --version failed: {why}")
    found = _VERSION.match(out)
    if found is None:
        raise ZwarmError(f"host {name!r}: {program} is not zwarm (it says {oneline(out, 80)!r})")
    theirs = found.group(1)
    if not compatible(__version__, theirs):
        raise ZwarmError(
            f"host {name!r} runs zwarm {theirs}, this is zwarm {__version__}: "
            "install the same version there"
        )
    return theirs


# ---------------------------------------------------------------------------- reports
CHECK_TIMEOUT = 10.0  # seconds a host has to answer each step of a report
_PROGRAM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}\Z")
# prints "NAME<TAB>PATH" for each program name given, PATH empty when it is not on the PATH
_WHICH = 'for p in "$@"; do printf "%s\\t%s\\n" "$p" "$(command -v "$p")"; done'


def status(h: Host, control: Path, timeout: float = CHECK_TIMEOUT) -> dict[str, Any]:
    """One row of ``zwarm hosts``: whether ``h`` answers, the zwarm it runs, and what one
    command costs over its shared connection (ms); ``error``: why not, one line. Answers
    within about twice ``timeout``, whatever the host does."""
    row: dict[str, Any] = {"name": h.name, "ssh": h.ssh, "reachable": False}
    row |= {"version": None, "latency_ms": None, "error": None}
    conn = Connection(h, control, connect_timeout=timeout)
    try:
        try:
            row["version"] = remote_version(conn, timeout)
        finally:
            row["reachable"] = conn.alive()
        row["latency_ms"] = round(_timed(conn, timeout) * 1000, 1)
    except HostUnreachable as e:
        row["reachable"] = False
        row["error"] = str(e)
    except ZwarmError as e:  # it answers, but not with a zwarm this one may talk to
        row["error"] = str(e)
    return row


def statuses(
    found: Mapping[str, Host], control: Path, timeout: float = CHECK_TIMEOUT
) -> list[dict[str, Any]]:
    """``status`` of every host, asked at once (a host that does not answer costs its
    timeout, not the others'), in name order."""
    from concurrent.futures import ThreadPoolExecutor

    names = sorted(found)
    if not names:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
        return list(pool.map(lambda n: status(found[n], control, timeout), names))


def check(
    h: Host, control: Path, programs: Sequence[str], timeout: float = CHECK_TIMEOUT
) -> dict[str, Any]:
    """What ``zwarm hosts check`` says of ``h``: each step (connect, its zwarm, git, its
    default directory, each of ``programs``, the agent CLIs, on its PATH) with whether it is
    there and what was found; ``ok`` when the host can run sessions (it answers, runs this
    zwarm, has git and its directory; a missing agent CLI is said, not a failure)."""
    conn = Connection(h, control, connect_timeout=timeout)
    steps: list[dict[str, Any]] = []

    def step(what: str, ok: bool, detail: str, needed: bool = True) -> None:
        steps.append({"what": what, "ok": ok, "detail": detail, "needed": needed})

    try:
        took = _timed(conn, timeout)  # opens the shared connection if it is not open
        step("connect", True, f"{h.ssh} ({took * 1000:.0f} ms)")
        try:
            step("zwarm", True, f"{h.zwarm}: zwarm {remote_version(conn, timeout)}")
        except HostUnreachable:
            raise
        except ZwarmError as e:
            step("zwarm", False, str(e))
        git = conn.run(["git", "--version"], timeout=timeout)
        step("git", git.returncode == 0, _first_line(git.stdout) or "not found on the PATH")
        if h.cwd is not None:
            there = conn.run(["test", "-d", HomePath(h.cwd)], timeout=timeout).returncode == 0
            step("cwd", there, h.cwd if there else f"{h.cwd}: no such directory")
        names = [p for p in dict.fromkeys(programs) if _PROGRAM_NAME.match(p)]
        found = _which(conn, names, timeout) if names else {}
        for p in names:
            step(p, bool(found.get(p)), found.get(p) or "not found on the PATH", needed=False)
    except HostUnreachable as e:
        step("connect", False, str(e))
    ok = all(s["ok"] for s in steps if s["needed"])
    return {"name": h.name, "ssh": h.ssh, "ok": ok, "steps": steps}


def _which(conn: Connection, names: Sequence[str], timeout: float) -> dict[str, str]:
    """``{name: its path there}`` of ``names`` found on the host's PATH (its answer is
    untrusted: only the names asked for, each path one clean line)."""
    from zwarm.text import oneline

    done = conn.run(["sh", "-c", _WHICH, "sh", *names], timeout=timeout)
    out: dict[str, str] = {}
    for line in done.stdout[:MAX_OUTPUT].decode("utf-8", "replace").splitlines():
        name, _, path = line.partition("\t")
        if name in names and path.strip():
            out[name] = oneline(path, 200)
    return out


def _timed(conn: Connection, timeout: float) -> float:
    """Seconds ``true`` takes on the host (its shared connection opened first if need be)."""
    import time

    start = time.monotonic()
    conn.run(["true"], timeout=timeout)
    return time.monotonic() - start


def _first_line(data: bytes) -> str:
    from zwarm.text import oneline

    lines = data[:MAX_OUTPUT].decode("utf-8", "replace").strip().splitlines()
    return oneline(lines[0], 200) if lines else ""
