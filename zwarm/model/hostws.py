"""What zwarm and a host's zwarm say to each other about a session's worktree on the host
(``ops.hostws``: ``zwarm _workspace OP`` there, a JSON request on stdin, a JSON answer on
stdout).

Owns the request and the answer. Must stay true:
- an answer is untrusted input (the host's repository and worktree are agent-written): it is
  read only through ``HostAnswer`` (``decode_answer``), its size capped (``ANSWER_BYTES``),
  every path, branch and commit id checked by the ``Workspace`` and ``MergeAnswer`` types;
- the request carries no secret (the session's task and last message only, for a merge's
  commit message).
"""

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from zwarm.model.records import AbsPath, Session, SessionId, Sha, Workspace

ANSWER_BYTES = 64 << 20  # a host's answer: more is refused (a diff of a huge tree)
REQUEST_BYTES = 16 << 20
Op = Literal["create", "diff", "merge", "remove"]
Short = Annotated[str, Meta(max_length=4096)]


class HostRequest(Struct, frozen=True):
    """One operation on the host: ``create`` (a worktree of the repository ``cwd`` is in,
    from ``base``, on ``branch``), ``diff``, ``merge`` and ``remove`` (of ``workspace``)."""

    version: Short
    op: Op
    sid: SessionId
    name: Short | None = None
    cwd: Short | None = None
    branch: Short | None = None
    base: Short | None = None
    others: list[Short] = []  # the other sessions' working directories on that host
    workspace: Workspace | None = None
    hunks: bool = True
    color: bool = False
    stat: bool = False
    into: Short | None = None
    squash: bool = False
    message: Annotated[str, Meta(max_length=65536)] | None = None
    session: Session | None = None  # a merge's: its commit message, its status
    force: bool = False


class MergeAnswer(Struct, frozen=True):
    """What ``merge`` did on the host (``engine.review.merge``'s answer)."""

    branch: Short
    into: Short
    worktree: AbsPath
    squash: bool
    merged: bool
    commit: Sha
    committed: Sha | None = None
    note: Short | None = None
    squashed_tip: Sha | None = None


class HostAnswer(Struct, frozen=True):
    """The host's answer: ``error`` (one line, ``kind`` the error's class) or the result."""

    error: Short | None = None
    kind: Annotated[str, Meta(max_length=64)] = ""
    workspace: Workspace | None = None  # create's
    cwd: AbsPath | None = None  # create's: where the agent runs
    diff: dict[str, Any] | None = None  # diff's (``engine.review.diff_json``)
    text: bytes | None = None  # diff's unified text
    merge: MergeAnswer | None = None


def decode_answer(data: bytes) -> HostAnswer:
    """``data`` as a ``HostAnswer``; ``ValueError`` in one line if it is not one."""
    if len(data) > ANSWER_BYTES:
        raise ValueError(f"the answer is larger than {ANSWER_BYTES >> 20} MiB")
    try:
        return msgspec.json.decode(data, type=HostAnswer)
    except msgspec.DecodeError as e:
        raise ValueError(f"not a valid answer ({str(e)[:200]})") from None
