"""Snapshots of a working tree, taken before and after each turn, kept as git commits.

Owns how zwarm records exactly what a tree held at one moment without touching anything of
the user's: the tree is staged into a *private* index file (a copy of the real one, so git
reuses its stat cache), written with ``write-tree``, wrapped by ``commit-tree`` and kept alive
by a ref under ``refs/zwarm/<session id>/<turn>/<before|after>``. Must stay true:
- the user's index, HEAD, branches, stash and working tree are never written: only objects
  and refs under ``refs/zwarm/`` (``tests/workspace`` asserts their exact state around turns);
- tracked and untracked files count, ignored files do not (``git add -A`` semantics), nor
  does zwarm's state dir, whatever the ignore files say (``exclude``);
- git runs hardened on a checked ``git.Tree`` (see ``engine.git``): nothing the repository's
  config, a nested repository or an agent's ``.gitattributes`` says makes a snapshot run a
  command, and a worktree whose ``.git`` was pointed elsewhere is not snapshotted;
- a snapshot is a commit id (validated); refs are removed with the session (``drop``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from zwarm.engine import git

INDEX_LIMIT = 1 << 30  # a larger index is not copied (the snapshot just hashes more files)


def ref(sid: str, n: int, which: str) -> str:
    assert which in ("before", "after")
    return f"refs/zwarm/{sid}/{n}/{which}"


def take(
    tree: git.Where,
    env: Mapping[str, str],
    label: str,
    keep: str | None = None,
    exclude: Sequence[str] = (),
) -> str:
    """Snapshot the working tree ``tree``: its commit id (parent: HEAD, if there is one).
    ``keep``: a ref (``ref(...)``) to point at it, so git's gc keeps it; ``exclude``: paths
    (relative to the top) left out whatever the ignore files say (zwarm's state dir)."""
    index = git.out(["rev-parse", "--path-format=absolute", "--git-path", "index"], tree, env)
    head = _head(tree, env)
    with tempfile.TemporaryDirectory(prefix="zwarm-snap-") as tmp:
        private = Path(tmp) / "index"
        _seed(Path(index), private)
        staged = {"GIT_INDEX_FILE": str(private)}
        left_out = [f":(exclude,literal){p}" for p in exclude]
        proc = git.run(
            ["add", "-A", "--ignore-errors", "--", ".", *left_out],
            tree,
            env,
            extra_env=staged,
            check=False,
        )
        if proc.returncode != 0 and b"fatal:" in proc.stderr:
            raise git.GitError(f"snapshot of {tree} failed: {git.last_line(proc.stderr)}")
        tree_id = git.out(["write-tree"], tree, env, extra_env=staged)
    parents = ["-p", head] if head else []
    commit = git.out(
        ["commit-tree", git.check_sha(tree_id), *parents, "-m", f"zwarm snapshot: {label}"],
        tree,
        env,
        extra_env=git.IDENTITY,
    )
    git.check_sha(commit)
    if keep is not None:
        git.run(["update-ref", "-m", "zwarm snapshot", keep, commit], tree, env)
    return commit


def _head(tree: git.Where, env: Mapping[str, str]) -> str | None:
    proc = git.run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], tree, env, check=False)
    sha = proc.stdout.decode("ascii", "replace").strip()
    return sha if proc.returncode == 0 and git.SHA.match(sha) else None


def _seed(real: Path, private: Path) -> None:
    """Start the private index as a copy of the real one (read without following a link or
    blocking); an index that cannot be read is simply not copied."""
    from zwarm.store.files import read_file

    try:
        data, _ = read_file(real, INDEX_LIMIT)
    except OSError:
        return
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def drop(tree: git.Where, env: Mapping[str, str], sid: str) -> None:
    """Delete every ``refs/zwarm/<sid>/`` ref (the session's snapshots become garbage)."""
    listed = git.out(["for-each-ref", "--format=%(refname)", f"refs/zwarm/{sid}/"], tree, env)
    names = [n for n in listed.splitlines() if n.startswith(f"refs/zwarm/{sid}/")]
    if names:
        script = "".join(f"delete {n}\n" for n in names).encode()
        git.run(["update-ref", "--stdin"], tree, env, input=script)
