"""A session's worktree on an ssh host: made, diffed, merged and removed there by the host's
own zwarm (``zwarm _workspace OP``, a ``model.hostws`` request on stdin, its answer on
stdout), over the host's shared connection.

Owns both sides: ``serve`` (on the host: ``engine.workspace`` and ``engine.review`` run there
unchanged, so every rule of ``engine.git`` holds there: neutral config, ``git.Tree`` checked,
``GIT_*`` stripped) and ``OnHost`` (here: the worktree a spawn makes there, as an
``engine.workspace.Elsewhere``; ``diff``, ``merge``, ``remove`` of a session's). Must stay
true:
- what an operation acts on comes from the session's launch pin here (the ``Workspace`` the
  caller took from ``workspace.pinned``), and the host from the turn's launch pin handle
  record (``launchers.ssh.pinned_host``), never from meta.json;
- a host's answer is untrusted input, read only through ``model.hostws.decode_answer``
  (capped, typed); its error is said in one line;
- the host's zwarm must be this version (the request says which; refused in one line);
- every call runs under a timeout: an unreachable host is said in one line
  (``HostUnreachable``), never waited for;
- on the host a worktree is made only in its default worktrees root (``$XDG_DATA_HOME`` of
  the host's user) and no per-turn snapshot is kept: a diff compares the worktree now with
  its base.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from zwarm.errors import WorkspaceError, ZwarmError
from zwarm.model.hostws import REQUEST_BYTES, HostAnswer, HostRequest, MergeAnswer, decode_answer
from zwarm.model.records import Workspace

if TYPE_CHECKING:
    from zwarm.launchers.ssh.hosts import Host
    from zwarm.model import Session

CREATE_S = 120.0  # making a worktree (a checkout of a large tree)
DIFF_S = 60.0
MERGE_S = 120.0
REMOVE_S = 60.0
REACH_S = 5.0  # the host answers at all (over its shared connection: milliseconds)


# ---------------------------------------------------------------------- the host's side
def main(argv: list[str]) -> int:
    """``zwarm _workspace``: one request on stdin, its answer on stdout (exit 0; 2: no
    request)."""
    if argv:
        print("usage: zwarm _workspace < REQUEST", file=sys.stderr)
        return 2
    data = sys.stdin.buffer.read(REQUEST_BYTES + 1)
    try:
        if len(data) > REQUEST_BYTES:
            raise WorkspaceError("the request is too large")
        try:
            req = msgspec.json.decode(data, type=HostRequest)
        except msgspec.DecodeError as e:
            raise WorkspaceError(f"not a valid request ({str(e)[:200]})") from None
        import zwarm

        if req.version != zwarm.__version__:
            raise WorkspaceError(
                f"this host runs zwarm {zwarm.__version__} and the caller zwarm "
                f"{req.version[:40]}: install the same version on both"
            )
        answer = serve(req, os.environ)
    except ZwarmError as e:
        from zwarm.text import oneline

        answer = HostAnswer(error=oneline(str(e), 4000), kind=type(e).__name__)
    sys.stdout.buffer.write(msgspec.json.encode(answer))
    sys.stdout.buffer.flush()
    return 0


def _state_dir(environ: Mapping[str, str]) -> Path:
    from zwarm.xdg import user_state_dir

    return user_state_dir(environ)


def serve(req: HostRequest, environ: Mapping[str, str]) -> HostAnswer:
    """Do ``req`` here (on the host) with zwarm's own workspace and review code."""
    from zwarm.engine import workspace

    if req.op == "create":
        if req.cwd is None:
            raise WorkspaceError("create needs a working directory")
        root = workspace.root_of("", environ)
        p = workspace.plan(Path(req.cwd), environ, branch=req.branch, base=req.base, root=root,
                           state_dir=_state_dir(environ))  # fmt: skip
        workspace.check_apart(workspace.repo_dir(root, p.found.repo), req.others)
        ws = workspace.create(p, req.sid, req.name, environ)
        return HostAnswer(workspace=ws, cwd=str(workspace.session_cwd(ws, p.found.rel)))
    named = req.workspace
    if named is None or named.mode != "worktree" or named.branch is None:
        raise WorkspaceError("no worktree named")
    ws = msgspec.structs.replace(named, host=None)  # here, it is local
    if req.op == "diff":
        return _diff(req, ws, environ)
    if req.op == "merge":
        from zwarm.engine import review

        if req.session is None:
            raise WorkspaceError("merge needs the session")
        got = review.merge(req.session, ws, environ, into=req.into, squash=req.squash,
                           message=req.message)  # fmt: skip
        merged = MergeAnswer(
            branch=got["branch"], into=got["into"], worktree=got["worktree"],
            squash=got["squash"], merged=got["merged"], commit=got["commit"],
            committed=got.get("committed"), note=got.get("note"), squashed_tip=ws.squashed_tip,
        )  # fmt: skip
        return HostAnswer(merge=merged)
    workspace.release(ws, environ, req.sid, req.force)
    return HostAnswer()


def _diff(req: HostRequest, ws: Workspace, environ: Mapping[str, str]) -> HostAnswer:
    """The worktree now against its base (a snapshot taken now, kept by no ref)."""
    from zwarm.engine import diffs, review, workspace

    if ws.base is None:
        raise WorkspaceError("the worktree has no base commit")
    if not os.path.isdir(ws.tree):
        raise WorkspaceError(f"the worktree {ws.tree} is gone")
    now = workspace.take(ws, environ, f"session {req.sid} now", _state_dir(environ))
    sp = review.Span(ws.base, now, True, None)
    tree = workspace.git_dir_tree(ws, environ)
    d = review.diff_json(tree, environ, sp, req.hunks)
    text = diffs.text(tree, environ, sp.a, sp.b, color=req.color, stat=req.stat)
    return HostAnswer(diff=d, text=text)


# ---------------------------------------------------------------------- this side
class OnHost:
    """Session worktrees on ``host``, through its zwarm (``serve`` there)."""

    def __init__(self, host: Host, cwd: str = "", branch: str | None = None,
                 base: str | None = None, others: list[str] | None = None) -> None:  # fmt: skip
        self.host, self.cwd, self.branch, self.base = host, cwd, branch, base
        self.others = others or []

    def _ask(self, req: HostRequest, timeout: float) -> HostAnswer:
        from zwarm.launchers.ssh import connection
        from zwarm.launchers.ssh.hosts import HomePath
        from zwarm.text import oneline

        conn = connection(self.host)
        conn.run(["true"], timeout=REACH_S)  # HostUnreachable: said at once, not after minutes
        done = conn.run(
            [HomePath(self.host.zwarm), "_workspace"],
            input=msgspec.json.encode(req),
            timeout=timeout,
        )
        name = self.host.name
        if done.returncode != 0:
            why = oneline(done.stderr.decode("utf-8", "replace"), 400) or f"exit {done.returncode}"
            raise WorkspaceError(f"host {name}: {why}")
        try:
            got = decode_answer(done.stdout)
        except ValueError as e:
            raise WorkspaceError(f"host {name}: {e}") from None
        if got.error is not None:
            raise WorkspaceError(f"on host {name}: {oneline(got.error, 2000)}")
        return got

    def _req(self, op: Any, sid: str, **kw: Any) -> HostRequest:
        import zwarm

        return HostRequest(version=zwarm.__version__, op=op, sid=sid, **kw)

    # engine.workspace.Elsewhere
    def create(self, sid: str, name: str | None) -> tuple[Workspace, str]:
        req = self._req("create", sid, name=name, cwd=self.cwd, branch=self.branch,
                        base=self.base, others=self.others)  # fmt: skip
        got = self._ask(req, CREATE_S)
        ws = got.workspace
        if ws is None or got.cwd is None or ws.mode != "worktree" or ws.branch is None:
            raise WorkspaceError(f"host {self.host.name} made no worktree")
        if not (got.cwd == ws.tree or got.cwd.startswith(ws.tree.rstrip("/") + "/")):
            raise WorkspaceError(f"host {self.host.name} answered a directory outside the worktree")
        return msgspec.structs.replace(ws, host=self.host.name), got.cwd

    def discard(self, sid: str, ws: Workspace) -> None:
        try:
            self._ask(self._req("remove", sid, workspace=ws, force=True), REMOVE_S)
        except ZwarmError:
            pass

    def diff(self, sid: str, ws: Workspace, *, hunks: bool = True, color: bool = False,
             stat: bool = False) -> tuple[dict[str, Any], bytes]:  # fmt: skip
        got = self._ask(self._req("diff", sid, workspace=ws, hunks=hunks, color=color,
                                  stat=stat), DIFF_S)  # fmt: skip
        if got.diff is None:
            raise WorkspaceError(f"host {self.host.name} answered no diff")
        return got.diff, got.text or b""

    def merge(self, s: Session, ws: Workspace, *, into: str | None, squash: bool,
              message: str | None) -> MergeAnswer:  # fmt: skip
        req = self._req("merge", s.id, workspace=ws, session=s, into=into, squash=squash,
                        message=message)  # fmt: skip
        got = self._ask(req, MERGE_S).merge
        if got is None:
            raise WorkspaceError(f"host {self.host.name} answered no merge")
        return got

    def remove(self, sid: str, ws: Workspace, force: bool) -> None:
        self._ask(self._req("remove", sid, workspace=ws, force=force), REMOVE_S)


def of(environ: Mapping[str, str], root: Path, s: Session, ws: Workspace) -> OnHost | None:
    """Where ``s``'s workspace ``ws`` lives: on its host (``OnHost``), or None: here."""
    if ws.host is None:
        return None
    from zwarm.launchers.ssh import pinned_host

    for t in reversed(s.turns):
        h = pinned_host(environ, Path(os.path.realpath(root)), s.id, t.n)
        if h is not None and h.name == ws.host:
            return OnHost(h)
    raise WorkspaceError(
        f"session {s.id}'s worktree is on host {ws.host}, but no turn's launch record names "
        "how to reach it"
    )
