"""The merge queue's records: one per repository and target branch, kept where no agent writes.

Owns ``$XDG_STATE_HOME/zwarm/merges/<state dir's hash>/<queue key>.json`` (default
``~/.local/state/zwarm/merges``), beside the launch pins: for each queue of a state dir, its
repository and target branch, its entries in order (session, branch, priority, state, why),
whether it is paused, the target commit last tested green, and the journal of the step under
way (``Flight``: which entry, which step, the temporary worktree, the target's old and new
commit), which a run killed at any step is resumed from (``zwarm.engine.mergeq``). The queue
decides what zwarm merges into which branch, so it is not kept in the state dir, which an
agent can often write (it lies in its working folder): an agent cannot enqueue itself,
change a target or unpause a queue by writing a file. Must stay true:
- a record is written only inside ``transaction`` (its ``.lock`` held: one read-modify-write
  at a time), atomically (``system.files.atomic_write``), 0600 in 0700 folders; a runner
  holds ``<key>.run`` for as long as it processes the queue (``runner``): one runner per
  queue, a second waits, or with ``wait=False`` is told no;
- every record is read as untrusted input too: one strict schema (unknown fields refused),
  bounded size, never through a link, and it must name the state dir, repository and target
  its file name is the key of; a bad record is an error naming the file (``StoreError``),
  never rewritten or deleted here;
- the record holds no command: the checks a run executes come from its caller (the trusted
  ``[merge] check`` or the command line), never from this file.
"""

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from zwarm.errors import StoreError
from zwarm.model.records import AbsPath, Branch, SessionId, Sha, When
from zwarm.system.files import atomic_write, lock_fd, open_lock, private_dir, read_file, take_lock

MAX_BYTES = 16 << 20  # a record's size limit when read
MAX_ENTRIES = 10_000
Why = Annotated[str, Meta(max_length=65536)]
State = Literal["waiting", "testing", "merged", "ejected", "held", "removed"]
Step = Literal["target", "prepare", "rebase", "check", "advance", "checkout"]
# the steps, in order, at which a test may kill a run (``engine.mergeq.KILL_ENV``)
STEPS: tuple[str, ...] = (
    *("target", "target-check", "prepare", "rebase", "check", "advance", "checkout", "done"),
)


class Entry(msgspec.Struct, forbid_unknown_fields=True):
    """One session's branch in a queue: ``tip`` is the commit of its branch taken in (its
    agent's leftovers committed), ``commit`` what the target was advanced to."""

    id: Annotated[int, Meta(ge=1, le=2**31)]
    session_id: SessionId
    branch: Branch
    added_at: When
    priority: Annotated[int, Meta(ge=-1000, le=1000)] = 0
    state: State = "waiting"
    why: Why = ""
    send: bool = False  # an ejection's comment is sent as the session's next turn
    tip: Sha | None = None
    commit: Sha | None = None
    checks: Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(max_length=64)] = (
        msgspec.field(default_factory=list)
    )  # what it passed (shown, never run from here)
    updated_at: When | None = None


class Flight(msgspec.Struct, forbid_unknown_fields=True):
    """The journal: the step under way for entry ``entry`` (0: the target's own check),
    written before the step starts. ``worktree``: the temporary worktree zwarm made for it;
    ``old``/``new``: the target's commit before and after (``advance``, ``checkout``)."""

    entry: Annotated[int, Meta(ge=0, le=2**31)]
    step: Step
    worktree: AbsPath | None = None
    old: Sha | None = None
    new: Sha | None = None
    checkout: AbsPath | None = None  # the user's checkout of the target being updated
    # more temporary worktrees of the same run (``--depth``: entries stacked on this one)
    more: Annotated[list[AbsPath], Meta(max_length=64)] = msgspec.field(default_factory=list)


class Queue(msgspec.Struct, forbid_unknown_fields=True):
    version: Literal[1]
    state_dir: AbsPath
    repo: AbsPath
    target: Branch
    paused: bool = False
    green: Sha | None = None  # the target commit last tested green (or made by the queue)
    # the checks it was green under (compared with a run's, never run from here)
    green_checks: Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(max_length=64)] = (
        msgspec.field(default_factory=list)
    )
    blocked: Why = ""  # why the queue stopped (a red target): cleared by the next green run
    next_id: Annotated[int, Meta(ge=1, le=2**31)] = 1
    entries: Annotated[list[Entry], Meta(max_length=MAX_ENTRIES)] = msgspec.field(
        default_factory=list
    )
    flight: Flight | None = None


_decoder = msgspec.json.Decoder(Queue)


def root(environ: Mapping[str, str], state_dir: Path) -> Path:
    """The folder of ``state_dir``'s queues."""
    from zwarm.xdg import user_state_dir

    real = os.path.realpath(state_dir)
    return user_state_dir(environ) / "merges" / _hash(real)


def key(repo: str, target: str) -> str:
    """A queue's key: its repository's folder name and a hash of (repository, target)."""
    import re

    name = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(repo))[:40] or "repo"
    return f"{name}-{_hash(repo + chr(0) + target)}"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


class Records:
    """The queues of one state dir (``root``)."""

    def __init__(self, environ: Mapping[str, str], state_dir: Path) -> None:
        self.state_dir = os.path.realpath(state_dir)
        self.dir = root(environ, state_dir)

    def path(self, repo: str, target: str) -> Path:
        return self.dir / f"{key(repo, target)}.json"

    def _ensure(self) -> None:
        try:
            private_dir(self.dir)
        except OSError as e:
            raise StoreError(f"cannot create {self.dir}: {e.strerror}") from None

    def keys(self) -> list[tuple[str, str]]:
        """(repository, target) of every queue of this state dir, in file-name order; a
        record that cannot be read is an error naming it."""
        try:
            names = sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StoreError(f"cannot list {self.dir}: {e.strerror}") from None
        out = []
        for name in names:
            if name.endswith(".json") and not name.startswith("."):
                q = self._read_file(self.dir / name)
                if q is not None:
                    out.append((q.repo, q.target))
        return out

    def read(self, repo: str, target: str) -> Queue | None:
        """The queue of (``repo``, ``target``), or None if there is none."""
        q = self._read_file(self.path(repo, target))
        if q is not None and (q.repo, q.target) != (repo, target):
            raise StoreError(f"{self.path(repo, target)} names another queue: refused")
        return q

    def _read_file(self, path: Path) -> Queue | None:
        try:
            data, _ = read_file(path, MAX_BYTES)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"cannot read the merge queue {path}: {e.strerror or e}") from None
        try:
            q = _decoder.decode(data)
        except msgspec.DecodeError as e:
            raise StoreError(f"the merge queue {path} is damaged: {str(e)[:200]}") from None
        if q.state_dir != self.state_dir or path.name != f"{key(q.repo, q.target)}.json":
            raise StoreError(f"the merge queue {path} is not this state dir's: refused")
        return q

    @contextlib.contextmanager
    def transaction(self, repo: str, target: str, create: bool = False) -> Iterator[Queue]:
        """The queue of (``repo``, ``target``) under its lock, saved if the block ends
        normally; a new empty one with ``create`` (else ``StoreError`` if there is none)."""
        self._ensure()
        path = self.path(repo, target)
        fd = lock_fd(path.with_suffix(".lock"))
        try:
            q = self.read(repo, target)
            if q is None:
                if not create:
                    raise StoreError(f"there is no merge queue for {target} in {repo}")
                q = Queue(1, self.state_dir, repo, target)
            yield q
            atomic_write(path, msgspec.json.encode(q))
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def runner(self, repo: str, target: str, wait: bool = True) -> Iterator[bool]:
        """Hold the queue's runner lock for the block (yields True), waiting for another
        runner to finish; with ``wait=False``, yields False at once if one runs."""
        self._ensure()
        path = self.path(repo, target).with_suffix(".run")
        try:
            fd = open_lock(path)
        except OSError as e:
            raise StoreError(f"cannot open {path}: {e.strerror}") from None
        try:
            yield take_lock(fd, None if wait else 0)
        finally:
            os.close(fd)
