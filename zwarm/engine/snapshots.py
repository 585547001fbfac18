"""Snapshots of a working tree, taken before and after each turn, kept as git commits.

Owns how zwarm records exactly what a tree held at one moment without touching anything of
the user's: the tree is staged into a *private* index file (a copy of the real one, so git
reuses its stat cache), written with ``write-tree``, wrapped by ``commit-tree`` and kept alive
by a ref ``refs/zwarm/<session id>/<turn>/<before|after>`` in the repository's *snapshot
store* (``store``): a bare repository zwarm makes in the repository's git dir
(``<git dir>/zwarm/snapshots.git``) that borrows the repository's objects (its
``objects/info/alternates``) and holds only what snapshots add. So the user's ``git log
--all``, GUIs and ``git gc`` never see snapshots, and diffs read both (``reader``). Must
stay true:
- the user's index, HEAD, branches, stash, refs and working tree are never written; the
  repository's objects neither (``tests/workspace`` asserts their exact state around turns);
- snapshots taken by an older zwarm (refs under ``refs/zwarm/`` in the repository itself)
  stay readable (the repository's objects are read too) and are dropped with their session;
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


STORE = ("zwarm", "snapshots.git")  # in the repository's (common) git dir


def store(repo: git.Tree) -> Path:
    """The snapshot store of the repository whose main working tree is ``repo``; a link in
    its place (or its folder's) is refused, never followed."""
    path = Path(repo.git_dir).joinpath(*STORE)
    if path.parent.is_symlink() or path.is_symlink():
        raise git.GitError(f"{path} is a link, not zwarm's snapshot store: refused")
    return path


def open_store(repo: git.Tree, env: Mapping[str, str]) -> git.Tree:
    """``repo``'s snapshot store as a bare ``git.Tree``, made first if there is none: no
    template, its alternates naming the repository's objects (relative: it moves with it)."""
    path = store(repo)
    alternates = path / "objects" / "info" / "alternates"
    if not os.path.isfile(alternates):
        from zwarm.system.files import atomic_write

        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
        except OSError as e:
            raise git.GitError(f"cannot create {path.parent}: {e.strerror}") from None
        git.run(["init", "--bare", "-q", "--template=", "--", str(path)], path.parent, env)
        os.makedirs(alternates.parent, mode=0o700, exist_ok=True)
        atomic_write(alternates, b"../../../objects\n")
    return git.bare(path, env)


def reader(repo: git.Tree) -> git.Tree:
    """``repo`` reading the snapshot store's objects too (diffs, file contents)."""
    objects = store(repo) / "objects"
    if not os.path.isdir(objects):
        return repo
    return repo._replace(objects=(("GIT_ALTERNATE_OBJECT_DIRECTORIES", str(objects)),))


def take(
    tree: git.Tree,
    env: Mapping[str, str],
    label: str,
    keep: str | None = None,
    exclude: Sequence[str] = (),
    into: git.Tree | None = None,
    message: str | None = None,
    identity: Mapping[str, str] = git.IDENTITY,
) -> str:
    """Snapshot the working tree ``tree``: its commit id (parent: HEAD, if there is one).
    ``into``: the snapshot store (``open_store``) its objects are written to (None: the
    repository's own); ``keep``: a ref there (``ref(...)``) to point at it, so gc keeps it;
    ``exclude``: paths (relative to the top) left out whatever the ignore files say;
    ``message``/``identity``: the commit's (a snapshot's by default)."""
    if into is not None:
        objects = str(Path(into.git_dir, "objects"))
        tree = tree._replace(objects=(("GIT_OBJECT_DIRECTORY", objects),))
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
        [
            "commit-tree",
            git.check_sha(tree_id),
            *parents,
            "-m",
            message or f"zwarm snapshot: {label}",
        ],
        tree,
        env,
        extra_env=identity,
    )
    git.check_sha(commit)
    if keep is not None:
        git.run(["update-ref", "-m", "zwarm snapshot", keep, commit], into or tree, env)
    return commit


def _head(tree: git.Tree, env: Mapping[str, str]) -> str | None:
    proc = git.run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], tree, env, check=False)
    sha = proc.stdout.decode("ascii", "replace").strip()
    return sha if proc.returncode == 0 and git.SHA.match(sha) else None


def _seed(real: Path, private: Path) -> None:
    """Start the private index as a copy of the real one (read without following a link or
    blocking), with the real one's modification time: git tells a file changed in the same
    second as the index was written ("racily clean") by comparing with the index file's
    time, so a newer copy would trust a stale stat and miss a same-size change. An index
    that cannot be read is simply not copied."""
    from zwarm.system.files import read_file

    try:
        data, st = read_file(real, INDEX_LIMIT)
    except OSError:
        return
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(fd)


def drop(repo: git.Tree, env: Mapping[str, str], sid: str) -> None:
    """Delete every ``refs/zwarm/<sid>/`` ref, in the snapshot store and (an older zwarm's)
    in the repository: the session's snapshots become garbage; the store's own is collected
    when git finds enough of it (``gc --auto``, in the store only)."""
    _drop_refs(repo, env, sid)
    if os.path.isdir(store(repo)):
        kept = git.bare(store(repo), env)
        _drop_refs(kept, env, sid)
        auto = ["-c", "gc.auto=6700", "-c", "gc.autoDetach=false"]
        git.run(["gc", "--auto", "--quiet"], kept, env, config=auto, check=False)


def _drop_refs(where: git.Tree, env: Mapping[str, str], sid: str) -> None:
    listed = git.out(["for-each-ref", "--format=%(refname)", f"refs/zwarm/{sid}/"], where, env)
    names = [n for n in listed.splitlines() if n.startswith(f"refs/zwarm/{sid}/")]
    if names:
        script = "".join(f"delete {n}\n" for n in names).encode()
        git.run(["update-ref", "--stdin"], where, env, input=script)
