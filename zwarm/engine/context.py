"""Follow-up context: turn digests and the summary-mode prompt for the next turn.

Owns what a new turn is told about earlier ones. Must stay true:
- a digest is built from normalized steps only (no agent event format here) and cached beside
  the turn (``turn_N.digest.json``); the turn log is immutable once the turn ended, so the
  cache is valid while the log's size is unchanged, and a bad cache is rebuilt, never trusted;
- the prompt always carries the original task, the new message in full, and the latest turns
  fullest; older turns shrink, then collapse to one line, to stay within ``budget_chars``;
- building a prompt for 100 turns reads only small files (meta and digests): well under 50 ms.
"""

import json
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from zwarm.model.steps import Step

DIGEST_VERSION = 1
_MAX_CMDS = 40
_MAX_ERRORS = 10
_CUT_NOTE = 40  # ' [... N chars cut ...]'
_NOTE_ROOM = 80  # '(N earlier turns omitted to fit the context budget)'


class Digest(msgspec.Struct):
    """The part of a turn a follow-up needs."""

    n: int
    status: str
    message: str
    final_message: str | None = None
    commands: list[tuple[str, int | None]] = msgspec.field(default_factory=list)
    files: list[tuple[str, str]] = msgspec.field(default_factory=list)
    errors: list[str] = msgspec.field(default_factory=list)
    more_commands: int = 0
    log_size: int = -1  # size of the turn log this digest was built from

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": DIGEST_VERSION,
            "n": self.n,
            "status": self.status,
            "message": self.message,
            "final_message": self.final_message,
            "commands": [list(c) for c in self.commands],
            "files": [list(f) for f in self.files],
            "errors": self.errors,
            "more_commands": self.more_commands,
            "log_size": self.log_size,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Digest":
        if d.get("version") != DIGEST_VERSION:
            raise ValueError("digest version mismatch")
        return cls(
            n=int(d["n"]),
            status=str(d["status"]),
            message=str(d["message"]),
            final_message=d.get("final_message"),
            commands=[(str(c), e if isinstance(e, int) else None) for c, e in d["commands"]],
            files=[(str(p), str(k)) for p, k in d["files"]],
            errors=[str(e) for e in d["errors"]],
            more_commands=int(d.get("more_commands", 0)),
            log_size=int(d.get("log_size", -1)),
        )


def digest_steps(
    n: int, status: str, message: str, final: str | None, error: str | None, steps: Iterable[Step]
) -> Digest:
    d = Digest(n=n, status=status, message=message, final_message=final)
    seen_files: dict[str, str] = {}
    for s in steps:
        kind = s.get("kind")
        if kind == "command":
            if len(d.commands) < _MAX_CMDS:
                d.commands.append((str(s.get("command", "")), s.get("exit_code")))
            else:
                d.more_commands += 1
        elif kind == "file_change":
            for c in s.get("changes") or []:
                seen_files[str(c.get("path", ""))] = str(c.get("kind", "update"))
        elif kind == "error" and s.get("fatal") and len(d.errors) < _MAX_ERRORS:
            d.errors.append(str(s.get("message", "")))
    d.files = list(seen_files.items())
    if error and error not in d.errors:
        d.errors.append(error)
    return d


def dump_digest(d: Digest) -> bytes:
    return json.dumps(d.to_dict(), ensure_ascii=False).encode("utf-8")


def load_digest(data: bytes) -> Digest:
    return Digest.from_dict(json.loads(data))


def _cut(text: str, limit: int) -> str:
    """``zwarm.text.elide`` keeping the head only, the note counted in ``limit`` (a prompt
    stays within its budget): a digest of an earlier turn, where the start of a message says
    what it asked. Imported when a text is that long: a turn's start does not pay for it."""
    if len(text) <= limit:
        return text
    from zwarm.text import elide

    keep = max(0, limit - _CUT_NOTE)
    return elide(text, keep, head=keep)


def _render_full(d: Digest, limit: int) -> str:
    lines = [f"### Turn {d.n} ({d.status})", f"User message:\n{_cut(d.message, limit)}"]
    if d.commands:
        lines.append("Commands run:")
        shown = _command_lines(d.commands, limit)
        lines += shown
        more = d.more_commands + len(d.commands) - len(shown)
        if more:
            lines.append(f"- ... and {more} more commands")
    if d.files:
        files = ", ".join(f"{p} ({k})" for p, k in d.files[:50])
        lines.append("Files changed: " + _cut(files, limit))
    if d.errors:
        lines.append("Errors: " + "; ".join(_cut(e, 300) for e in d.errors))
    if d.final_message:
        lines.append(f"Agent's final message:\n{_cut(d.final_message, limit)}")
    return "\n".join(lines)


def _command_lines(commands: list[tuple[str, int | None]], limit: int) -> list[str]:
    """As many command lines as fit in ``limit`` characters (at least one)."""
    out: list[str] = []
    used = 0
    for c, e in commands:
        line = f"- `{_cut(c, 300)}` -> exit {_code(e)}"
        if out and used + len(line) > limit:
            break
        out.append(line)
        used += len(line) + 1
    return out


def _render_brief(d: Digest) -> str:
    parts = [f"### Turn {d.n} ({d.status}): {_cut(_oneline(d.message), 200)}"]
    if d.commands:
        failed = sum(1 for _, e in d.commands if e not in (0, None))
        parts.append(f"{len(d.commands) + d.more_commands} commands ({failed} failed)")
    if d.files:
        parts.append("files: " + ", ".join(p for p, _ in d.files[:10]))
    if d.errors:
        parts.append("error: " + _cut(_oneline(d.errors[-1]), 200))
    if d.final_message:
        parts.append("result: " + _cut(_oneline(d.final_message), 300))
    return "\n".join(parts)


def _render_line(d: Digest) -> str:
    return f"- Turn {d.n} ({d.status}): {_cut(_oneline(d.message), 80)}"


def _code(e: int | None) -> str:
    return "?" if e is None else str(e)


def _oneline(s: str) -> str:
    """Whitespace runs as one space: unlike ``text.oneline`` nothing is removed, as this
    goes into a prompt (the agent should see what was there), not onto a terminal."""
    return " ".join(s.split())


def build_followup(
    task: str, digests: list[Digest], message: str, budget_chars: int, full_turns: int = 2
) -> str:
    """The prompt for the next turn in summary mode (see module docstring)."""
    head = (
        "You are continuing a task you worked on in earlier turns, in the same working "
        "directory. The original task and a summary of every earlier turn follow, then the "
        "new message. Act on the new message.\n\n## Original task\n"
    )
    tail = f"\n\n## New message\n{message}"
    section = f"\n\n## Earlier turns ({len(digests)})\n"
    room = max(budget_chars - len(head) - len(tail) - len(section), 2000)
    task_text = _cut(task, room // 3)
    room -= len(task_text)
    history = _fit_history(digests, room, full_turns)
    return f"{head}{task_text}{section}{history}{tail}"


def _fit_history(digests: list[Digest], room: int, full_turns: int) -> str:
    """Newest first, each turn in the fullest rendering that still fits; then omit the rest."""
    n = len(digests)
    room -= _NOTE_ROOM  # keep space for the omission note
    blocks: list[str] = []
    used = 0
    omitted = 0
    for i, d in enumerate(reversed(digests)):
        text = next(
            (t for t in _renderings(d, i, used, room, full_turns) if used + len(t) + 1 <= room),
            None,
        )
        if text is None:
            omitted = n - i
            break
        blocks.append(text)
        used += len(text) + 1
    if omitted:
        blocks.append(f"({omitted} earlier turns omitted to fit the context budget)")
    return "\n".join(reversed(blocks))


def _renderings(d: Digest, i: int, used: int, room: int, full_turns: int) -> Iterator[str]:
    """The renderings allowed for the ``i``-th newest turn, fullest first (built lazily)."""
    if i < full_turns:
        yield _render_full(d, max(room // (2 * max(full_turns, 1)), 500))
    if i < full_turns or used < room * 0.8:
        yield _render_brief(d)
    yield _render_line(d)
