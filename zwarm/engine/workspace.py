"""Workspaces: the git repository a session works in, and the worktree zwarm makes for it.

Owns detecting a session's repository at spawn (``detect``), planning and creating its
worktree on a new branch (``plan``, ``create``), preparing it before the first turn (copying
or linking git-ignored files, running the ``[workspace] setup`` commands: ``prepare``), taking
the snapshots around each turn (``snapshot``, kept in the repository's snapshot store:
``engine.snapshots``), deciding whether removing it would lose work (``losses``) and
removing it (``remove``); a worktree on another machine is made there (``Elsewhere``, its
record naming the host: no git runs on it here). Worktrees live in ``[workspace] root`` (default
``$XDG_DATA_HOME/zwarm/worktrees``), one folder per repository (``<name>-<hash of its path>``),
one worktree per session. Must stay true:
- a worktree is never inside the state dir, the repository, or another session's working
  directory, and no session's working directory contains the worktrees root (``check_*``): an
  agent's writable tree never holds zwarm's state or another session's worktree;
- two sessions never share a worktree or a branch: the branch is new (``-b``), the folder is
  new, and worktree changes in one repository are serialized by a lock (git's own locks also
  collide, and are retried: ``engine.git``);
- what ``merge``, ``rm`` and turns act on comes from the session's launch pin (``pinned``):
  a ``meta.json`` naming another folder or branch is refused, never followed; and git acts
  on a session's tree only as a ``git.Tree`` (``checked``): a worktree whose ``.git`` no
  longer points at the pinned repository is refused, never followed;
- a failed creation or preparation leaves nothing behind (worktree and branch removed).
"""

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from zwarm.engine import git
from zwarm.errors import GitError, WorkspaceError, WouldLoseWork, naming
from zwarm.model.records import Session, Workspace

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


# ---------------------------------------------------------------------------- where
def default_root(environ: Mapping[str, str]) -> Path:
    from zwarm.xdg import xdg_dir

    return xdg_dir(environ, "XDG_DATA_HOME") / "worktrees"


def root_of(configured: str, environ: Mapping[str, str]) -> Path:
    """The worktrees root: ``[workspace] root`` (``~`` expanded) or the default; resolved."""
    if not configured:
        return _real(default_root(environ))
    if configured == "~" or configured.startswith("~/"):
        from zwarm.xdg import user_home

        configured = user_home(environ) + configured[1:]
    return _real(Path(configured))


def _real(p: Path) -> Path:
    return Path(os.path.realpath(p))


def repo_dir(root: Path, repo: Path) -> Path:
    """The folder holding ``repo``'s worktrees: its name and a hash of its path."""
    import hashlib  # lazily: it loads OpenSSL (~3 MB), which a supervisor never needs

    digest = hashlib.sha1(str(repo).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    name = _SLUG.sub("_", repo.name)[:40] or "repo"
    return root / f"{name}-{digest}"


def _inside(p: Path, parent: Path) -> bool:
    return p == parent or p.is_relative_to(parent)


# ---------------------------------------------------------------------------- detect, plan
class Found(msgspec.Struct, frozen=True):
    """The repository a directory is in: its main worktree, the tree itself, the directory
    relative to the tree's top."""

    repo: Path
    tree: Path
    rel: str


def detect(cwd: Path, environ: Mapping[str, str]) -> Found | None:
    """The repository ``cwd`` is in, or None (not in a git work tree, or no git)."""
    if not git.find_repo(cwd):
        return None
    tree = git.toplevel(cwd, environ)
    if tree is None:
        return None
    try:
        repo = _real(git.main_worktree(tree, environ))
    except GitError:
        repo = tree
    rel = os.path.relpath(os.path.realpath(cwd), tree)
    return Found(repo, tree, "" if rel == "." else rel)


class Plan(msgspec.Struct, frozen=True):
    """A worktree to make at spawn: from ``base`` of ``found.repo``, on ``branch`` (None: the
    default, ``zwarm/<name or id>``), under ``root``."""

    found: Found
    base: str
    branch: str | None
    root: Path


def plan(
    cwd: Path,
    environ: Mapping[str, str],
    *,
    branch: str | None,
    base: str | None,
    root: Path,
    state_dir: Path,
) -> Plan:
    """Check everything a worktree spawn needs, before anything is made."""
    found = detect(cwd, environ)
    if found is None:
        raise WorkspaceError(f"{cwd} is not in a git repository: --worktree needs one")
    if branch is not None:
        git.check_branch(branch, found.repo, environ)
        if git.branch_exists(branch, found.repo, environ):
            raise WorkspaceError(f"branch {branch!r} already exists: choose another --branch")
    try:
        commit = git.resolve_commit(base or "HEAD", found.tree, environ)
    except GitError:
        if base is None:
            raise WorkspaceError(
                f"the repository {found.repo} has no commit yet: --worktree needs a base commit"
            ) from None
        raise
    check_root(root, found, _real(state_dir))
    return Plan(found, commit, branch, root)


def choose(
    cwd: Path,
    environ: Mapping[str, str],
    *,
    mode: str,
    branch: str | None,
    base: str | None,
    root: Path,
    state_dir: Path,
    others: Callable[[], Sequence[str]],
) -> Plan | Found | None:
    """What a spawn in ``cwd`` gets: a worktree ``Plan`` (``mode`` worktree), else the
    repository ``cwd`` is in (shared), or None. ``others``: the other sessions' working
    directories (asked only for a worktree)."""
    if mode != "worktree":
        if branch is not None or base is not None:
            raise naming(WorkspaceError, lambda n: (
                f"{n('branch')} and {n('base')} need {n('worktree')}"
            ))  # fmt: skip
        check_clear(cwd, root)
        return detect(cwd, environ)
    p = plan(cwd, environ, branch=branch, base=base, root=root, state_dir=state_dir)
    check_apart(repo_dir(root, p.found.repo), others())
    return p


def check_root(root: Path, found: Found, state_dir: Path) -> None:
    """The worktrees root must be outside the state dir and outside the repository."""
    if _inside(root, state_dir) or _inside(state_dir, root):
        raise WorkspaceError(
            f"worktrees root {root} and the state dir {state_dir} overlap: a worktree there "
            "would give its agent zwarm's state; set [workspace] root elsewhere"
        )
    for tree in {found.repo, found.tree}:
        if _inside(root, tree):
            raise WorkspaceError(
                f"worktrees root {root} is inside the repository {tree}; set [workspace] root "
                "outside it"
            )


def check_clear(cwd: Path, root: Path) -> None:
    """A shared session's working directory must not contain zwarm's worktrees (once there
    are any), nor lie in one: its agent would write into other sessions' worktrees."""
    real = _real(cwd)
    if _inside(root, real) and os.path.isdir(root):
        raise WorkspaceError(
            f"the working directory {real} contains zwarm's worktrees ({root}): an agent "
            "there could change other sessions' work; use a directory below it"
        )
    if _inside(real, root) and real != root:
        raise WorkspaceError(
            f"the working directory {real} is in zwarm's worktrees ({root}), another "
            "session's: continue that session (zwarm inject), or spawn with --worktree"
        )


def check_apart(tree: Path, others: Sequence[str]) -> None:
    """``tree`` (a new worktree) must not lie in another session's working directory."""
    for cwd in others:
        if _inside(tree, _real(Path(cwd))):
            raise WorkspaceError(
                f"the new worktree {tree} would be inside another session's working "
                f"directory {cwd}; set [workspace] root elsewhere"
            )


# ---------------------------------------------------------------------------- create
def create(p: Plan, sid: str, name: str | None, environ: Mapping[str, str]) -> Workspace:
    """Make the worktree of session ``sid`` (new folder, new branch); nothing is left behind
    if it fails."""
    label = name or sid[:8]
    branch = p.branch or git.check_branch(f"zwarm/{label}", p.found.repo, environ)
    folder = repo_dir(p.root, p.found.repo)
    with _repo_lock(folder):
        if git.branch_exists(branch, p.found.repo, environ):
            raise WorkspaceError(f"branch {branch!r} already exists: choose another --branch")
        tree = folder / label
        if os.path.lexists(tree):
            tree = folder / f"{label}-{sid[:8]}"
        args = ["worktree", "add", "--no-track", "-b", branch, "--", str(tree), p.base]
        try:
            git.run(args, p.found.repo, environ)
        except GitError:
            _undo(p.found.repo, tree, branch, environ)
            raise
    return Workspace("worktree", str(p.found.repo), str(tree), branch, p.base)


class Elsewhere(Protocol):
    """A worktree made on another machine, by that machine's zwarm (an ssh host's:
    ``ops.hostws``, handed to the manager by the spawn); its record names the host
    (``Workspace.host``), and zwarm's git never runs on it here."""

    def create(self, sid: str, name: str | None) -> tuple[Workspace, str]:
        """Make session ``sid``'s worktree there: its record, and where its agent runs."""
        ...

    def discard(self, sid: str, ws: Workspace) -> None:
        """Remove session ``sid``'s ``ws`` and its branch there (a failed spawn); best effort."""
        ...


@contextlib.contextmanager
def _repo_lock(folder: Path) -> Iterator[None]:
    from zwarm.system.files import locked, private_dir

    try:
        private_dir(folder)
    except OSError as e:
        raise WorkspaceError(f"cannot create {folder}: {e.strerror}") from None
    with locked(folder / ".lock"):
        yield


def _undo(repo: Path | str, tree: Path, branch: str, environ: Mapping[str, str]) -> None:
    """Remove a worktree and branch that were (maybe) made; best effort, never raises."""
    with contextlib.suppress(GitError):
        if os.path.isdir(tree):
            git.run(
                ["worktree", "remove", "--force", "--force", "--", str(tree)],
                repo,
                environ,
            )
        git.run(["worktree", "prune"], repo, environ)
    with contextlib.suppress(GitError):
        if git.branch_exists(branch, repo, environ):
            git.run(["branch", "-D", "--", branch], repo, environ)


def remove(ws: Workspace, environ: Mapping[str, str], force: bool = False) -> None:
    """Remove the worktree (tolerating a folder deleted by hand) and its branch. A worktree
    whose ``.git`` was pointed elsewhere is refused (``GitError``), or with ``force`` deleted
    as a plain folder (no git runs in it)."""
    assert ws.mode == "worktree" and ws.branch is not None
    if not os.path.isdir(ws.repo):
        raise WorkspaceError(f"the repository {ws.repo} is gone; cannot remove the worktree")
    repo = repo_tree(ws, environ)
    with _repo_lock(Path(ws.tree).parent):
        if os.path.isdir(ws.tree):
            try:
                checked(ws, environ)
            except GitError:
                if not force:
                    raise
                import shutil

                shutil.rmtree(ws.tree, ignore_errors=True)
            else:
                git.run(["worktree", "remove", "--force", "--force", "--", ws.tree], repo, environ)
        git.run(["worktree", "prune"], repo, environ)
        if git.branch_exists(ws.branch, repo, environ):
            git.run(["branch", "-D", "--", ws.branch], repo, environ)


def remove_tree(ws: Workspace, environ: Mapping[str, str]) -> None:
    """Remove the worktree folder alone (a best-of attempt not picked: ``ops.bestof``), keeping
    its branch (``rm`` removes it, as it would a folder deleted by hand). A worktree whose
    ``.git`` was pointed elsewhere is refused (``GitError``)."""
    assert ws.mode == "worktree"
    repo = repo_tree(ws, environ)
    with _repo_lock(Path(ws.tree).parent):
        if os.path.isdir(ws.tree):
            checked(ws, environ)
            git.run(["worktree", "remove", "--force", "--force", "--", ws.tree], repo, environ)
        git.run(["worktree", "prune"], repo, environ)


def session_cwd(ws: Workspace, rel: str) -> Path:
    """Where the agent runs in worktree ``ws``: the same place relative to the top as the
    directory asked for, if the worktree has it, else the worktree's top."""
    top = Path(ws.tree)
    inner = top / rel if rel else top
    return inner if rel and inner.is_dir() and _inside(_real(inner), top) else top


# ---------------------------------------------------------------------------- trust
SECURITY_FIELDS = ("mode", "repo", "tree", "branch", "base", "host")


def same(a: Workspace | None, b: Workspace | None) -> bool:
    """Whether two records name the same workspace (the fields that decide what git acts on)."""
    if a is None or b is None:
        return a is b
    return all(getattr(a, f) == getattr(b, f) for f in SECURITY_FIELDS)


def pinned(s: Session, environ: Mapping[str, str], state_dir: Path) -> Workspace | None:
    """``s``'s workspace, if its launch pin agrees with meta.json; ``WorkspaceError`` if not."""
    from zwarm.store import pins

    pin = pins.read(environ, s.id, _real(state_dir))
    if pin is None:
        if s.workspace is None:
            return None
        raise WorkspaceError(
            f"session {s.id} has no launch record (not started by you with this zwarm and "
            "state dir): its workspace is not trusted"
        )
    if not same(pin.workspace, s.workspace):
        raise WorkspaceError(
            f"session {s.id}'s meta.json disagrees with its launch record about its workspace: "
            "refused"
        )
    return s.workspace


def for_removal(s: Session, environ: Mapping[str, str], state_dir: Path) -> Workspace | None:
    """The workspace ``rm`` cleans up: the one the launch pin names (what meta.json says is
    not followed), with meta.json's bookkeeping when it names the same one."""
    import msgspec

    from zwarm.store import pins

    pin = pins.read(environ, s.id, _real(state_dir))
    if pin is None or pin.workspace is None:
        return None
    ws = pin.workspace
    if s.workspace is not None and same(s.workspace, ws):
        ws = msgspec.structs.replace(ws, squashed_tip=s.workspace.squashed_tip)
    return ws


def release(ws: Workspace, environ: Mapping[str, str], sid: str, force: bool) -> None:
    """Before session ``sid`` is removed: remove its worktree and branch, unless that would
    lose work (``WouldLoseWork``; ``force`` removes them anyway), and its snapshot refs."""
    if not os.path.isdir(ws.repo):
        if ws.mode == "worktree" and os.path.isdir(ws.tree):
            if not force:
                raise WorkspaceError(
                    f"the repository {ws.repo} of session {sid}'s worktree is gone; --force "
                    f"removes the worktree {ws.tree} too"
                )
            import shutil

            shutil.rmtree(ws.tree, ignore_errors=True)
        return
    if ws.mode == "worktree":
        lost = None if force else losses(ws, environ, sid)
        if lost is not None:
            raise lost
        remove(ws, environ, force)
    from zwarm.engine import snapshots

    with contextlib.suppress(GitError):
        snapshots.drop(repo_tree(ws, environ), environ, sid)


# ---------------------------------------------------------------------------- prepare
def prepare(
    ws: Workspace,
    table: Mapping[str, Any],
    environ: Mapping[str, str],
    log_fd: int,
    timeout: float | None,
) -> str | None:
    """Copy/link the configured git-ignored files into the new worktree, then run the setup
    commands there, their output on ``log_fd``. Returns why it failed, or None."""
    try:
        for path in table["copy"]:
            _bring(ws, path, environ, log_fd, link=False)
        for path in table["link"]:
            _bring(ws, path, environ, log_fd, link=True)
    except (OSError, GitError) as e:
        return f"setup failed: copying into the worktree: {e}"
    for i, cmd in enumerate(table["setup"], 1):
        why = _run_setup(cmd, ws.tree, environ, log_fd, timeout)
        if why:
            return f"setup command {i} ({_shown(cmd)}) {why}"
    return None


def _shown(cmd: str | list[str]) -> str:
    from zwarm.text import clip  # a failed setup only

    return clip(cmd if isinstance(cmd, str) else " ".join(cmd), 80)


def _note(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, f"zwarm: {text}\n".encode("utf-8", "replace"))


def _bring(ws: Workspace, path: str, environ: Mapping[str, str], fd: int, link: bool) -> None:
    repo, tree = Path(ws.repo), Path(ws.tree)
    src, dst = repo / path, tree / path
    if not os.path.lexists(src) or not _inside(_real(src), repo):
        _note(fd, f"{path}: not in {repo}, not {'linked' if link else 'copied'}")
        return
    ignored = (
        git.run(["check-ignore", "-q", "--", path], repo, environ, check=False).returncode == 0
    )
    if not ignored:
        _note(fd, f"{path}: not ignored by git, not {'linked' if link else 'copied'}")
        return
    if os.path.lexists(dst) or not _inside(_real(dst.parent), tree):
        _note(fd, f"{path}: already in the worktree, left as it is")
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    if link:
        os.symlink(_real(src), dst)
        return
    import shutil

    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def _run_setup(
    cmd: str | list[str], cwd: str, environ: Mapping[str, str], fd: int, timeout: float | None
) -> str | None:
    import signal
    import subprocess

    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    _note(fd, f"setup: {_shown(cmd)}")
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(environ),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        return f"could not start: {e.strerror or e}"
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return f"timed out after {timeout:g} s"
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left running in its group
    if code < 0:
        return f"was killed by signal {-code}"
    return f"exited with code {code}" if code else None


# ---------------------------------------------------------------------------- snapshots
def snapshot(
    ws: Workspace, environ: Mapping[str, str], sid: str, n: int, which: str, state_dir: Path
) -> str:
    """Snapshot ``ws``'s tree for turn ``n`` (kept by ``refs/zwarm/<sid>/<n>/<which>`` in the
    repository's snapshot store)."""
    return take(ws, environ, f"session {sid} turn {n} {which}", state_dir, keep=(sid, n, which))


def take(
    ws: Workspace,
    environ: Mapping[str, str],
    label: str,
    state_dir: Path,
    keep: tuple[str, int, str] | None = None,
) -> str:
    """A snapshot of ``ws``'s tree now (see ``snapshot``): never of zwarm's state dir."""
    from zwarm.engine import snapshots

    if not os.path.isdir(ws.tree):
        raise WorkspaceError(f"the working tree {ws.tree} is gone")
    tree = checked(ws, environ)
    into = snapshots.open_store(repo_tree(ws, environ), environ)
    ref = snapshots.ref(*keep) if keep else None
    exclude = state_within(tree, state_dir)
    return snapshots.take(tree, environ, label, keep=ref, exclude=exclude, into=into)


def state_within(tree: git.Tree, state_dir: Path) -> list[str]:
    """The state dir's path relative to ``tree``'s top, if it lies in it ([] if not)."""
    top, state = Path(tree.top), _real(state_dir)
    if state == top or not _inside(state, top):
        return []
    return [state.relative_to(top).as_posix()]


def start_of(s: Session, ws: Workspace) -> str | None:
    """What the whole session's diff starts from: the worktree's base commit, or (shared
    mode) the snapshot taken before its first turn that has one."""
    if ws.mode == "worktree":
        return ws.base
    turns = s.turns
    if turns and turns[0].before:
        return turns[0].before
    if s.archive is not None and s.head_only and s.archive.first_before:
        return s.archive.first_before
    return next((t.before for t in turns[1:] if t.before), None)


def checked(ws: Workspace, environ: Mapping[str, str]) -> git.Tree:
    """``ws``'s working tree, checked to still belong to the pinned repository
    (``git.checked``): what every git call on a tree the agent wrote runs on."""
    return git.checked(ws.tree, ws.repo, environ)


def repo_tree(ws: Workspace, environ: Mapping[str, str]) -> git.Tree:
    """``ws``'s repository (its main working tree), checked the same way."""
    return git.checked(ws.repo, ws.repo, environ)


def git_dir_tree(ws: Workspace, environ: Mapping[str, str]) -> git.Tree:
    """Where to run git to read ``ws``'s commits and snapshots: its repository, reading its
    snapshot store's objects too (``snapshots.reader``)."""
    from zwarm.engine import snapshots

    if not os.path.isdir(ws.repo):
        raise WorkspaceError(f"the repository {ws.repo} is gone")
    return snapshots.reader(repo_tree(ws, environ))


# ---------------------------------------------------------------------------- removal
def losses(ws: Workspace, environ: Mapping[str, str], sid: str) -> WouldLoseWork | None:
    """What removing worktree ``ws`` and its branch would lose (None: nothing): files changed
    but not committed, and commits on the branch that no other branch contains (a squash
    merge zwarm made counts as merged)."""
    assert ws.branch is not None
    files = sorted(dirty(checked(ws, environ), environ)) if os.path.isdir(ws.tree) else []
    commits: list[str] = []
    ref = f"refs/heads/{ws.branch}"
    repo = repo_tree(ws, environ)
    proc = git.run(["rev-parse", "--verify", "--quiet", ref], repo, environ, check=False)
    tip = proc.stdout.decode("ascii", "replace").strip()
    if proc.returncode == 0 and git.SHA.match(tip) and tip not in (ws.base, ws.squashed_tip):
        holders = git.out(
            ["for-each-ref", "--format=%(refname)", "--contains", tip, "refs/heads/"],
            repo,
            environ,
        ).splitlines()
        if not [h for h in holders if h != ref]:
            since = [f"^{ws.base}"] if ws.base else []
            log = git.out(
                ["log", "--no-decorate", "--format=%h %s", "-n", "20", tip, *since, "--"],
                repo,
                environ,
            )
            commits = log.splitlines() or [tip[:12]]
    return WouldLoseWork(sid, commits, files) if commits or files else None


def dirty(tree: git.Where, environ: Mapping[str, str], ignored: bool = False) -> list[str]:
    """Files of ``tree`` that differ from its HEAD: staged, unstaged or untracked (and with
    ``ignored``, ignored ones); both names of a rename. Never writes the index (no optional
    locks), never looks inside a nested repository."""
    more = ["--ignored=traditional"] if ignored else []
    raw = git.run(
        [
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--ignore-submodules=all",
            *more,
            "--",
        ],
        tree,
        environ,
    ).stdout
    out: list[str] = []
    fields = raw.split(b"\0")
    i = 0
    while i < len(fields):
        f = fields[i]
        i += 1
        if len(f) < 4:
            continue
        out.append(f[3:].decode("utf-8", "replace"))
        if f[:1] in (b"R", b"C"):
            out.append(fields[i].decode("utf-8", "replace"))
            i += 1
    return out
