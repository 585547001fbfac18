"""The preflight's cache: a passing ``zwarm sandbox check``, remembered for this machine as
it is, so that a sandboxed spawn need not run the probes every time (~0.3 s).

Owns ``$XDG_CACHE_HOME/zwarm/sandbox-preflight.json`` (default ``~/.cache/zwarm/``): the
``Key`` a passing run was made under, and ``hit`` / ``remember``. Must stay true:
- only a passing run is remembered, and only a fresh one (``check.run``: ``zwarm sandbox
  check`` always runs the probes and refreshes the file; a failing run removes it);
- a hit needs every part of the key to be what it is now: bubblewrap, socat and setpriv
  (path, inode, size, mtime), the kernel release, the user namespace sysctls, the policy's
  fingerprint (``check.fingerprint``: the probes, a fixed policy's command line, the
  sandbox's code), zwarm's version and the uid; anything else is a miss and the probes run;
- the file lies where no sandbox sees it (``sandbox.private_dirs`` hides zwarm's cache
  directory wherever ``XDG_CACHE_HOME`` puts it);
- the file is untrusted input: read only if it is a regular file (never through a link),
  owned by the effective uid, neither group- nor world-accessible (0600), small, and of the
  strict schema (``Entry``: no unknown field); written 0600, atomically.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec

NAME = "sandbox-preflight.json"
MAX_BYTES = 16 << 10
_SYSCTLS = ("/proc/sys/kernel/unprivileged_userns_clone", "/proc/sys/user/max_user_namespaces")


class Key(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a passing preflight held for: if any of it changes, the probes run again."""

    tools: list[str]  # "name path inode size mtime_ns" of bwrap, socat, setpriv
    kernel: str  # uname release and version
    userns: list[str]  # the user namespace sysctls ("" where there is none)
    policy: str  # the probes, a fixed policy's command line and the sandbox's code
    zwarm: str  # its version
    uid: int


class Entry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: Literal[1]
    holds: Literal[True]
    key: Key


def path(environ: Mapping[str, str]) -> Path:
    from zwarm.xdg import xdg_dir

    return xdg_dir(environ, "XDG_CACHE_HOME") / NAME


def key(policy: str) -> Key:
    """This machine's key, as it is now, for the preflight's ``policy`` fingerprint
    (``check.fingerprint``)."""
    import zwarm
    from zwarm.sandbox import bwrap

    tools = []
    for name, where in sorted(bwrap.tools().items()):
        tools.append(f"{name} {where} {_stat(where) if where else '-'}")
    u = os.uname()
    userns = []
    for p in _SYSCTLS:
        try:
            with open(p) as f:
                userns.append(f.read().strip())
        except OSError:
            userns.append("")
    return Key(tools, f"{u.release} {u.version}", userns, policy, zwarm.__version__, os.geteuid())


def _stat(p: str) -> str:
    try:
        st = os.stat(p)
    except OSError:
        return "-"
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns}"


def hit(policy: str, environ: Mapping[str, str]) -> bool:
    """Whether a passing preflight of ``policy`` is remembered for this machine as it is."""
    from zwarm.system.files import read_file

    try:
        raw, st = read_file(path(environ), MAX_BYTES)
    except (OSError, ValueError):
        return False
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return False
    try:
        entry = msgspec.json.decode(raw, type=Entry)
    except msgspec.DecodeError:  # a ValidationError too: not of the schema
        return False
    return entry.key == key(policy)


def remember(holds: bool, policy: str, environ: Mapping[str, str]) -> None:
    """After a fresh preflight: a pass written for this machine's key, a failure forgotten
    (the file removed). Best effort: a cache that cannot be written costs the next spawn
    its probes, nothing else."""
    import contextlib

    from zwarm.errors import ZwarmError
    from zwarm.system.files import atomic_write, private_dir

    p = path(environ)
    with contextlib.suppress(OSError, ZwarmError):
        if not holds:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
            return
        private_dir(p.parent)
        data = msgspec.json.encode(Entry(1, True, key(policy)))
        atomic_write(p, data, durable=False)
