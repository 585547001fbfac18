"""Running git: the one place zwarm starts a ``git`` process.

Owns how zwarm talks to git for workspaces, snapshots, diffs and merges. Must stay true:
- git runs from an argv list, never through a shell; every path argument comes after ``--``
  and every revision is either a validated object id or follows ``--end-of-options``;
- the environment is the caller's minus every ``GIT_*`` variable (a stray ``GIT_DIR``,
  ``GIT_INDEX_FILE`` or ``GIT_CONFIG_PARAMETERS`` must not redirect zwarm's git), plus what
  zwarm sets itself (no prompts, no optional locks: a ``status`` never rewrites the user's
  index); git's output is never paged or coloured unless asked for;
- ``hardened`` calls (the ones zwarm makes on its own, after every turn, in a tree an agent
  wrote) disable what a repository's config could make git execute: hooks, fsmonitor, clean/
  smudge filters (``neutral_filters``), external diff and textconv drivers, automatic gc;
- a failure is a ``GitError`` with git's own last line; a lock another git process holds
  (``index.lock``, ``packed-refs.lock`` ...) is retried a few times before it is reported;
- this module imports only the standard library and ``zwarm.errors`` (``subprocess`` when git
  first runs: the manager imports this module, and most commands never run git).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from zwarm.errors import GitError

if TYPE_CHECKING:
    import subprocess

__all__ = ["GitError"]

SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?\Z")
TIMEOUT_S = 600.0
LOCK_RETRIES = 20
_LOCKED = re.compile(rb"Unable to create '[^']*\.lock'|cannot lock ref|\.lock': File exists")
HARDENED = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "core.quotePath=false",
    "-c",
    "diff.external=",
)
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
    env["LC_ALL"] = "C"  # git's messages as zwarm parses and shows them
    if extra:
        env.update(extra)
    return env


def run(
    args: Sequence[str],
    cwd: str | Path,
    env: Mapping[str, str],
    *,
    hardened: bool = False,
    config: Sequence[str] = (),
    input: bytes | None = None,
    check: bool = True,
    timeout: float = TIMEOUT_S,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` in ``cwd`` (``env`` sanitized here). ``GitError`` if it fails and ``check``."""
    import subprocess  # here: a command that only reads (trajectory, show) never loads it

    argv = ["git", "--no-pager", *(HARDENED if hardened else ()), *config, *args]
    full_env = environ(env, extra_env)
    for attempt in range(LOCK_RETRIES + 1):
        try:
            proc = subprocess.run(
                argv,
                cwd=str(cwd),
                env=full_env,
                input=input,
                capture_output=True,
                timeout=timeout,
                stdin=None if input is not None else subprocess.DEVNULL,
                close_fds=True,
            )
        except FileNotFoundError:
            raise GitError("git is not installed (not found on PATH)", list(args)) from None
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} timed out after {timeout:g} s", list(args)) from None
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


def last_line(data: bytes) -> str:
    """The last meaningful line of git's stderr (hints and blank lines skipped)."""
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("hint:")]
    return lines[-1][:400] if lines else "no error message"


def out(
    args: Sequence[str],
    cwd: str | Path,
    env: Mapping[str, str],
    *,
    hardened: bool = False,
    config: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """Stdout of ``git ARGS`` as text, stripped of its final newline."""
    proc = run(args, cwd, env, hardened=hardened, config=config, extra_env=extra_env)
    return proc.stdout.decode("utf-8", "surrogateescape").rstrip("\n")


def check_sha(value: str) -> str:
    if not SHA.match(value):
        raise GitError(f"not an object id: {value[:80]!r}")
    return value


def find_repo(start: Path) -> bool:
    """Whether ``start`` or a parent holds ``.git`` (cheap: no git process when there is none)."""
    return any(os.path.lexists(d / ".git") for d in (start, *start.parents))


def toplevel(cwd: str | Path, env: Mapping[str, str]) -> Path | None:
    """The top of the working tree ``cwd`` is in, or None (not in a work tree, or no git)."""
    try:
        proc = run(["rev-parse", "--show-toplevel"], cwd, env, check=False, hardened=True)
    except GitError:
        return None
    if proc.returncode != 0:
        return None
    top = proc.stdout.decode("utf-8", "surrogateescape").rstrip("\n")
    return Path(os.path.realpath(top)) if top else None


def main_worktree(tree: str | Path, env: Mapping[str, str]) -> Path:
    """The main working tree of the repository ``tree`` belongs to (``tree`` itself unless it
    is a linked worktree): the first entry of ``git worktree list``."""
    listed = worktrees(tree, env)
    return Path(listed[0]["worktree"]) if listed else Path(tree)


def worktrees(tree: str | Path, env: Mapping[str, str]) -> list[dict[str, str]]:
    """``git worktree list --porcelain -z``: one dict per worktree (worktree, HEAD, branch ...)."""
    raw = run(["worktree", "list", "--porcelain", "-z"], tree, env, hardened=True).stdout
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


def resolve_commit(ref: str, cwd: str | Path, env: Mapping[str, str]) -> str:
    """The commit id ``ref`` names in the repository at ``cwd``; ``GitError`` if none."""
    proc = run(
        ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
        cwd,
        env,
        check=False,
        hardened=True,
    )
    sha = proc.stdout.decode("ascii", "replace").strip()
    if proc.returncode != 0 or not SHA.match(sha):
        raise GitError(f"{ref!r} does not name a commit in {cwd}", ["rev-parse"])
    return sha


def check_branch(name: str, cwd: str | Path, env: Mapping[str, str]) -> str:
    """``name`` if git accepts it as a new branch name; ``GitError`` otherwise."""
    if not name or name.startswith("-") or len(name) > 200 or "@{" in name or name == "@":
        raise GitError(f"invalid branch name {name!r}")
    proc = run(["check-ref-format", "--branch", name], cwd, env, check=False, hardened=True)
    if proc.returncode != 0 or name.startswith("refs/"):
        raise GitError(f"invalid branch name {name!r}")
    return name


def branch_exists(name: str, cwd: str | Path, env: Mapping[str, str]) -> bool:
    proc = run(
        ["show-ref", "--verify", "--quiet", f"refs/heads/{name}"],
        cwd,
        env,
        check=False,
        hardened=True,
    )
    return proc.returncode == 0


def neutral_filters(cwd: str | Path, env: Mapping[str, str]) -> dict[str, str]:
    """Environment settings that turn off every clean/smudge/process filter driver the
    repository's config defines: a ``.gitattributes`` an agent wrote must not make zwarm's
    ``git add`` run a command (snapshots then store files as they are on disk). Given as
    ``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` pairs, so no driver name (which may hold an
    ``=``) can be misread as ``-c``'s ``name=value``."""
    proc = run(
        ["config", "-z", "--name-only", "--get-regexp", r"^filter\..*\.(clean|smudge|process)$"],
        cwd,
        env,
        check=False,
        hardened=True,
    )
    pairs: list[tuple[str, str]] = []
    for name in proc.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if name.startswith("filter."):
            pairs += [(name, ""), (f"{name.rsplit('.', 1)[0]}.required", "false")]
    out = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for i, (key, value) in enumerate(pairs):
        out[f"GIT_CONFIG_KEY_{i}"], out[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return out


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
