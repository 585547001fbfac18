"""Running git: the one place zwarm starts a ``git`` process.

Owns how zwarm talks to git for workspaces, snapshots, diffs and merges. Must stay true:
- git runs from an argv list, never through a shell; every path argument comes after ``--``
  and every revision is either a validated object id or follows ``--end-of-options``;
- the environment is the caller's minus every ``GIT_*`` variable (a stray ``GIT_DIR``,
  ``GIT_INDEX_FILE`` or ``GIT_CONFIG_PARAMETERS`` must not redirect zwarm's git), plus what
  zwarm sets itself (no prompts, no editor, no lazy fetch, no optional locks: a ``status``
  never rewrites the user's index); git's output is never paged or coloured unless asked for;
- every call is hardened (the user's checkout included: an agent working in a worktree of
  it, or in it, can write its ``.git/config`` and hooks): nothing a repository's config, an
  include, a nested repository or an agent's ``.gitattributes`` says makes zwarm's git run a
  program. ``HARDENED`` turns off hooks, fsmonitor, signing and signature checks, editors,
  pagers, credential helpers, every transport (so no ``sshCommand``/``uploadpack``/lazy
  fetch), submodule recursion and automatic gc; ``neutral`` turns off each named driver the
  config defines (``filter.*``, ``diff.*``; a ``merge.*`` driver becomes a conflict), read
  once per call or per ``Tree``, in every file an include names whatever its condition (a
  ``gitdir:``/``onbranch:`` include applies in the child git ``worktree add`` starts).
  Files are therefore staged, committed and checked out as their bytes are (a clean or
  smudge filter, Git LFS's included, never runs);
- a working tree zwarm acts on for a session is a ``Tree`` (``checked``): its ``.git`` was
  checked to point at the pinned repository (a linked worktree's ``gitdir`` file naming
  ``<repo>/.git/worktrees/<n>``, whose records name the tree back and the repository's git
  dir as its common dir), and git then gets
  ``--git-dir``/``--work-tree`` explicitly, so a ``.git`` changed afterwards is not read;
- no file an agent can make a named pipe holds zwarm's git: the config files zwarm can name
  and every include target are checked (``_regular_or_absent``: a FIFO or device is refused
  in one line) before git reads them, and a git that waits to open a FIFO anyway (a
  ``.gitignore``, a nested repository's ``HEAD``) is stopped with its process group
  (``_watched``, about every ``FIFO_POLL_S``) and reported in one line;
- a failure is a ``GitError`` with git's own last line; a lock another git process holds
  (``index.lock``, ``packed-refs.lock`` ...) is retried a few times before it is reported;
- this module imports only the standard library and ``zwarm.errors`` (``subprocess`` when git
  first runs: the manager imports this module, and most commands never run git).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from zwarm.errors import GitError

if TYPE_CHECKING:
    import subprocess

__all__ = ["GitError"]

SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?\Z")
TIMEOUT_S = 600.0
LOCK_RETRIES = 20
_LOCKED = re.compile(rb"Unable to create '[^']*\.lock'|cannot lock ref|\.lock': File exists")
# ``-c`` settings on every call (command-line scope: they win over every config file)
SETTINGS = (
    "core.hooksPath=/dev/null",  # no hook of the repository's, nor of $GIT_DIR/hooks
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.quotePath=false",
    "core.editor=:",
    "sequence.editor=:",
    "core.pager=cat",
    "core.askPass=",
    "credential.helper=",  # (empty: resets the list)
    "protocol.allow=never",  # no transport: no sshCommand, uploadpack, proxy, lazy fetch
    "diff.external=",
    "diff.submodule=short",
    "status.submoduleSummary=false",
    "submodule.recurse=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "tag.forceSignAnnotated=false",
    "merge.verifySignatures=false",
    "log.showSignature=false",
    "gpg.program=",
    "gpg.openpgp.program=",
    "gpg.x509.program=",
    "gpg.ssh.program=",
    "gpg.ssh.defaultKeyCommand=",
    "merge.renormalize=false",
    "gc.auto=0",
    "maintenance.auto=false",
)
HARDENED = tuple(a for kv in SETTINGS for a in ("-c", kv))
# the named drivers a config can define, each of which runs a command
DRIVERS = r"^(filter\..*\.(clean|smudge|process)|diff\..*\.(textconv|command)|merge\..*\.driver)$"
IDENTITY = {
    "GIT_AUTHOR_NAME": "zwarm",
    "GIT_AUTHOR_EMAIL": "zwarm@localhost",
    "GIT_COMMITTER_NAME": "zwarm",
    "GIT_COMMITTER_EMAIL": "zwarm@localhost",
}


def environ(base: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` without any ``GIT_*`` variable, with zwarm's own settings and ``extra``."""
    env = {k: v for k, v in base.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", GIT_PAGER="cat", PAGER="cat")
    env.update(GIT_EDITOR=":", GIT_SEQUENCE_EDITOR=":", GIT_NO_LAZY_FETCH="1")
    env["GIT_PROTOCOL_FROM_USER"] = "0"
    env["LC_ALL"] = "C"  # git's messages as zwarm parses and shows them
    if extra:
        env.update(extra)
    return env


class Tree(NamedTuple):
    """A working tree whose ``.git`` was checked (``checked``): git runs in ``top`` with
    ``--git-dir``/``--work-tree`` given (``--git-dir`` alone when ``top`` is the git dir: a
    bare repository, ``bare``), with the drivers its config defined (``off``, as
    ``GIT_CONFIG_*`` pairs) turned off, and ``objects``: environment settings naming where
    objects are written or also read (``GIT_OBJECT_DIRECTORY``, ``..._ALTERNATE_...``)."""

    top: str
    git_dir: str
    off: tuple[tuple[str, str], ...] = ()
    objects: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return self.top


Where = str | Path | Tree


def run(
    args: Sequence[str],
    cwd: Where,
    env: Mapping[str, str],
    *,
    config: Sequence[str] = (),
    input: bytes | None = None,
    check: bool = True,
    timeout: float = TIMEOUT_S,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` in ``cwd`` (a path, or a checked ``Tree``), hardened (``HARDENED`` and
    every driver turned off), ``env`` sanitized here. ``GitError`` if it fails and ``check``."""
    import subprocess  # here: a command that only reads (trajectory, show) never loads it

    objects: dict[str, str] = {}
    if isinstance(cwd, Tree):
        where = ["--git-dir", cwd.git_dir]
        where += ["--work-tree", cwd.top] if cwd.top != cwd.git_dir else []
        off, objects, folder = cwd.off, dict(cwd.objects), cwd.top
    else:
        where = []
        off = () if args[:1] == ["config"] else neutral(cwd, env)
        folder = str(cwd)
    argv = ["git", "--no-pager", *where, *HARDENED, *config, *args]
    full_env = environ(env, {**_pairs(off), **objects, **(extra_env or {})})
    for attempt in range(LOCK_RETRIES + 1):
        try:
            proc = _watched(argv, folder, full_env, input, timeout)
        except FileNotFoundError:
            raise GitError("git is not installed (not found on PATH)", list(args)) from None
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} timed out after {timeout:g} s", list(args)) from None
        except _BlockedOnFifo:
            raise GitError(
                f"git {args[0]} in {folder} was stopped: it was blocked opening a named pipe "
                "(FIFO) in place of a file git reads (a config, include, .gitignore, "
                ".gitattributes or a nested repository's file): refused",
                list(args),
            ) from None
        except OSError as e:
            raise GitError(f"cannot run git: {e.strerror or e}", list(args)) from None
        if proc.returncode == 0 or not check:
            return proc
        if attempt < LOCK_RETRIES and _LOCKED.search(proc.stderr):
            time.sleep(0.05 * (attempt + 1))
            continue
        break
    err = proc.stderr.decode("utf-8", "replace")
    raise GitError(
        f"git {args[0]} failed: {last_line(proc.stderr)}", list(args), proc.returncode, err
    )


class _BlockedOnFifo(Exception):
    """git (or a git it started) waits to open a FIFO no one writes: it would wait forever."""


FIFO_POLL_S = 0.5  # how often a running git is checked for a wait on a FIFO


def _watched(
    argv: list[str], folder: str, env: dict[str, str], input: bytes | None, timeout: float
) -> subprocess.CompletedProcess[bytes]:
    """``argv`` run as ``subprocess.run`` would (output captured, ``input`` on stdin, killed
    after ``timeout``: ``TimeoutExpired``), in a process group of its own that is killed
    whole if git or a git it started sits opening a FIFO (``_BlockedOnFifo``): a file git
    reads replaced by a named pipe (``mkfifo .gitignore``, a nested repository's ``HEAD``,
    an include) would otherwise hold zwarm for ``timeout``."""
    import signal
    import subprocess

    stdin = subprocess.PIPE if input is not None else subprocess.DEVNULL
    with subprocess.Popen(
        argv,
        cwd=folder,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
        process_group=0,
    ) as p:
        deadline = time.monotonic() + timeout
        pending = input
        try:
            while True:
                left = deadline - time.monotonic()
                try:
                    out, err = p.communicate(pending, timeout=max(0.0, min(FIFO_POLL_S, left)))
                    break
                except subprocess.TimeoutExpired:
                    pending = None  # (sent already: communicate keeps what it has)
                    if left <= FIFO_POLL_S:
                        raise subprocess.TimeoutExpired(argv, timeout) from None
                    if _fifo_wait(p.pid):
                        raise _BlockedOnFifo() from None
        except BaseException:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)  # (the group is git's until it is reaped)
            p.kill()
            p.communicate()
            raise
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def _fifo_wait(pid: int, depth: int = 0) -> bool:
    """Whether a thread of process ``pid``, or of a process it started (4 levels, 16
    each), waits to open a FIFO (the kernel's wait channel ``wait_for_partner``)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    kids: list[bytes] = []
    for tid in tasks[:64]:
        try:
            with open(f"/proc/{pid}/task/{tid}/wchan", "rb") as f:
                if f.read(64) == b"wait_for_partner":
                    return True
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids += f.read(4096).split()
        except OSError:
            continue
    return depth < 4 and any(_fifo_wait(int(k), depth + 1) for k in kids[:16])


def _pairs(off: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` pairs: no key (a driver name may hold an
    ``=``) can be misread as ``-c``'s ``name=value``."""
    out = {"GIT_CONFIG_COUNT": str(len(off))}
    for i, (key, value) in enumerate(off):
        out[f"GIT_CONFIG_KEY_{i}"], out[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return out


def neutral(cwd: Where, env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Settings that turn off every filter, diff and merge driver the config seen from
    ``cwd`` defines (includes followed, every file an include names read whatever its
    condition: ``_entries``): a ``.gitattributes`` an agent wrote must not make zwarm's git
    run a command (files are then read as they are on disk; a merge driver is replaced by one
    that reports a conflict, so nothing is merged silently)."""
    names = {name for name, _ in _entries(cwd, env) if re.match(DRIVERS, name)}
    pairs: list[tuple[str, str]] = []
    for name in sorted(names):
        if name.startswith("filter."):
            pairs += [(name, ""), (f"{name.rsplit('.', 1)[0]}.required", "false")]
        elif name.startswith("diff."):
            pairs.append((name, ""))
        elif name.startswith("merge."):
            pairs.append((name, "false"))  # the shell's builtin: "conflict", no program
    return tuple(pairs)


INCLUDE = r"^include(if\..*)?\.path$"
MAX_INCLUDES = 64  # files an include chain may name (git itself stops at a depth of 10)


def _entries(cwd: Where, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The driver and include settings (name, value) of the config seen from ``cwd``, and
    those of every file an ``include.path`` or ``includeIf.<condition>.path`` names, followed
    from file to file, each whatever its condition: git applies a conditional include in
    another context than the one read here (a ``gitdir:`` or ``onbranch:`` one in the child
    ``git`` that ``worktree add`` starts in the new worktree, or in a temporary worktree), so
    a driver defined only there must be turned off here too."""
    wanted = f"({DRIVERS})|({INCLUDE})"
    out: list[tuple[str, str]] = []
    seen: list[str] = []
    folder = str(cwd.top if isinstance(cwd, Tree) else cwd)
    home = env.get("HOME", "")
    for path in _config_files(cwd, env):
        _regular_or_absent(path, "a git config file")

    def read(args: list[str], origin: str | None) -> None:
        proc = run(["config", *args, "-z", "--get-regexp", wanted], cwd, env, check=False)
        items = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
        if origin is None:  # --show-origin: "file:<path>", "<name>\n<value>", ...
            pairs = list(zip(items[0::2], items[1::2], strict=False))
        else:
            pairs = [(f"file:{origin}", item) for item in items if item]
        for where, item in pairs:
            name, _, value = item.partition("\n")
            out.append((name, value))
            if re.match(INCLUDE, name) and where.startswith("file:") and value:
                base = os.path.dirname(os.path.join(folder, where.removeprefix("file:")))
                if value.startswith("~/") and home:
                    value = os.path.join(home, value[2:])
                path = os.path.normpath(os.path.join(base, value))
                if path in seen or len(seen) >= MAX_INCLUDES:
                    continue
                if _regular_or_absent(path, f"the include {name}"):
                    seen.append(path)
                    read(["-f", path, "--no-includes"], path)

    read(["--show-origin", "--no-includes"], None)  # (each include read here, checked first)
    return out


def _config_files(cwd: Where, env: Mapping[str, str]) -> list[str]:
    """The config files git reads from ``cwd`` that zwarm can name before git runs: the
    user's and the system's, and a ``Tree``'s own (its git dir's and common dir's ``config``,
    its ``config.worktree``)."""
    xdg = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", "/nonexistent"), ".config")
    files = ["/etc/gitconfig", os.path.join(xdg, "git", "config")]
    files += [os.path.join(env["HOME"], ".gitconfig")] if env.get("HOME") else []
    if isinstance(cwd, Tree):
        common = _gitdir_file(Path(cwd.git_dir) / "commondir", prefix="") or cwd.git_dir
        files += [os.path.join(d, "config") for d in dict.fromkeys((cwd.git_dir, common))]
        files.append(os.path.join(cwd.git_dir, "config.worktree"))
    return files


def _regular_or_absent(path: str, what: str) -> bool:
    """Whether ``path`` (links followed, as git follows them) is a regular file: False if
    there is none; ``GitError`` (one line) if it is anything else: git would block opening a
    FIFO, or read a device without end."""
    import stat

    try:
        st = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        raise GitError(f"{what} {path} is not a regular file: refused")
    return True


def checked(top: str | Path, repo: str | Path, env: Mapping[str, str]) -> Tree:
    """``top``, a working tree of the repository whose main working tree is ``repo``, as a
    ``Tree``; ``GitError`` (one line) if its ``.git`` does not point into ``repo``'s git
    dir: ``repo``'s own ``.git`` directory for ``repo`` itself, else a ``gitdir:`` file
    naming ``<repo's git dir>/worktrees/<n>``, whose ``gitdir`` record names ``top`` back
    and whose ``commondir`` names ``repo``'s git dir.
    An agent that made its worktree's ``.git`` point at a repository of its own (whose
    config would choose what git runs) is refused here."""
    top, repo = os.path.realpath(top), os.path.realpath(repo)
    common = _main_git_dir(repo)
    if common is None:
        raise GitError(f"{repo}/.git is not a git repository's own folder: refused")
    git_dir = common
    if top != repo:
        named = _gitdir_file(Path(top) / ".git")
        back = _gitdir_file(Path(named) / "gitdir", prefix="") if named else None
        shared = _gitdir_file(Path(named) / "commondir", prefix="") if named else None
        ok = named is not None and os.path.dirname(named) == os.path.join(common, "worktrees")
        ok = ok and shared == os.path.realpath(common)
        if not ok or back is None or back != os.path.join(top, ".git"):
            raise GitError(f"{top}/.git no longer points at the repository {repo}: refused")
        git_dir = named or ""
    draft = Tree(top, git_dir)
    return Tree(top, git_dir, neutral(draft, env))


def bare(path: str | Path, env: Mapping[str, str]) -> Tree:
    """The bare repository ``path`` (one zwarm made: its snapshot store) as a ``Tree``."""
    draft = Tree(str(path), str(path))
    return draft._replace(off=neutral(draft, env))


def _main_git_dir(repo: str) -> str | None:
    """The git dir of the main working tree ``repo``: its ``.git`` directory (or the one a
    ``gitdir:`` file there names, as ``git init --separate-git-dir`` makes); None if
    there is none."""
    import stat

    dot = Path(repo) / ".git"
    try:
        st = os.lstat(dot)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return str(dot)
    named = _gitdir_file(dot) if stat.S_ISREG(st.st_mode) else None
    if named and os.path.isdir(named) and not os.path.lexists(os.path.join(named, "commondir")):
        return named
    return None


def _gitdir_file(path: Path, prefix: str = "gitdir: ") -> str | None:
    """The directory a small one-line ``gitdir: DIR`` file names (resolved, relative to the
    file's folder), or None (no such file, a link, too large, another content)."""
    import stat

    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 8192:
            return None
        text = path.read_bytes().decode("utf-8", "surrogateescape").rstrip("\r\n")
    except OSError:
        return None
    if not text.startswith(prefix) or len(text) == len(prefix) or "\n" in text:
        return None
    return os.path.realpath(os.path.join(path.parent, text[len(prefix) :]))


def last_line(data: bytes) -> str:
    """The last meaningful line of git's stderr (hints and blank lines skipped)."""
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("hint:")]
    return lines[-1][:400] if lines else "no error message"


def out(
    args: Sequence[str],
    cwd: Where,
    env: Mapping[str, str],
    *,
    config: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """Stdout of ``git ARGS`` as text, stripped of its final newline."""
    proc = run(args, cwd, env, config=config, extra_env=extra_env)
    return proc.stdout.decode("utf-8", "surrogateescape").rstrip("\n")


def check_sha(value: str) -> str:
    if not SHA.match(value):
        raise GitError(f"not an object id: {value[:80]!r}")
    return value


def find_repo(start: Path) -> bool:
    """Whether ``start`` or a parent holds ``.git`` (cheap: no git process when there is none)."""
    return any(os.path.lexists(d / ".git") for d in (start, *start.parents))


def toplevel(cwd: Where, env: Mapping[str, str]) -> Path | None:
    """The top of the working tree ``cwd`` is in, or None (not in a work tree, or no git)."""
    try:
        proc = run(["rev-parse", "--show-toplevel"], cwd, env, check=False)
    except GitError:
        return None
    if proc.returncode != 0:
        return None
    top = proc.stdout.decode("utf-8", "surrogateescape").rstrip("\n")
    return Path(os.path.realpath(top)) if top else None


def main_worktree(tree: Where, env: Mapping[str, str]) -> Path:
    """The main working tree of the repository ``tree`` belongs to (``tree`` itself unless it
    is a linked worktree): the first entry of ``git worktree list``."""
    listed = worktrees(tree, env)
    return Path(listed[0]["worktree"]) if listed else Path(str(tree))


def worktrees(tree: Where, env: Mapping[str, str]) -> list[dict[str, str]]:
    """``git worktree list --porcelain -z``: one dict per worktree (worktree, HEAD, branch ...)."""
    raw = run(["worktree", "list", "--porcelain", "-z"], tree, env).stdout
    items: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    for field in raw.decode("utf-8", "surrogateescape").split("\0"):
        if not field:
            if cur:
                items.append(cur)
            cur = {}
            continue
        key, _, value = field.partition(" ")
        cur[key] = value
    if cur:
        items.append(cur)
    return items


def resolve_commit(ref: str, cwd: Where, env: Mapping[str, str]) -> str:
    """The commit id ``ref`` names in the repository at ``cwd``; ``GitError`` if none."""
    proc = run(
        ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
        cwd,
        env,
        check=False,
    )
    sha = proc.stdout.decode("ascii", "replace").strip()
    if proc.returncode != 0 or not SHA.match(sha):
        raise GitError(f"{ref!r} does not name a commit in {cwd}", ["rev-parse"])
    return sha


def check_branch(name: str, cwd: Where, env: Mapping[str, str]) -> str:
    """``name`` if git accepts it as a new branch name; ``GitError`` otherwise."""
    if not name or name.startswith("-") or len(name) > 200 or "@{" in name or name == "@":
        raise GitError(f"invalid branch name {name!r}")
    proc = run(["check-ref-format", "--branch", name], cwd, env, check=False)
    if proc.returncode != 0 or name.startswith("refs/"):
        raise GitError(f"invalid branch name {name!r}")
    return name


def branch_exists(name: str, cwd: Where, env: Mapping[str, str]) -> bool:
    proc = run(
        ["show-ref", "--verify", "--quiet", f"refs/heads/{name}"],
        cwd,
        env,
        check=False,
    )
    return proc.returncode == 0


_ESCAPES = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}


def quote(path: bytes) -> bytes:
    """A path as git prints it in diff headers (``core.quotePath=false``): C-quoted in double
    quotes when it holds a quote, a backslash or a control character."""
    if not any(b < 0x20 or b in (0x22, 0x5C, 0x7F) for b in path):
        return path
    out = bytearray(b'"')
    for b in path:
        if b in _ESCAPES:
            out += b"\\" + _ESCAPES[b].encode()
        elif b < 0x20 or b == 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    return bytes(out + b'"')
