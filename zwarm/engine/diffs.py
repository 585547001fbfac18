"""Diffs between two snapshots (or commits): the text, the stats, and the parsed files.

Owns turning ``git diff A B`` into what zwarm shows: a unified diff (coloured on request), the
change stats kept on turns and sessions (files, lines added, lines removed), and the JSON form
(per file: path, old path, status, added/removed lines, binary, hunks). Must stay true:
- git runs hardened (``engine.git``) with ``--no-ext-diff --no-textconv``, renames detected
  (``-M``), submodules never entered; both ends are validated object ids, so nothing here
  reads a path or ref an agent chose;
- files are matched to their patch text by the exact header git prints for them (computed
  from ``--raw -z``, which names paths unambiguously), never by guessing at spaces or quotes;
- stats come from ``--numstat -z``: a binary file counts as a file with no lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zwarm.engine import git
from zwarm.model.records import Changes

DIFF = ["diff", "--no-ext-diff", "--no-textconv", "-M", "--submodule=short"]
STATUS = {
    "A": "added",
    "D": "deleted",
    "M": "modified",
    "R": "renamed",
    "C": "copied",
    "T": "typechange",
    "U": "unmerged",
}


def _ends(a: str, b: str) -> list[str]:
    return [git.check_sha(a), git.check_sha(b)]


def stats(tree: git.Where, env: Mapping[str, str], a: str, b: str) -> Changes:
    """Files changed and lines added/removed from ``a`` to ``b``."""
    raw = git.run([*DIFF, "--numstat", "-z", *_ends(a, b), "--"], tree, env)
    files = added = removed = 0
    fields = raw.stdout.split(b"\0")
    i = 0
    while i < len(fields):
        f = fields[i]
        i += 1
        if not f:
            continue
        parts = f.split(b"\t", 2)
        if len(parts) < 3:
            continue
        if parts[2] == b"":  # a rename: the two paths follow as their own fields
            i += 2
        files += 1
        added += int(parts[0]) if parts[0].isdigit() else 0
        removed += int(parts[1]) if parts[1].isdigit() else 0
    return Changes(files, added, removed)


def text(
    tree: git.Where,
    env: Mapping[str, str],
    a: str,
    b: str,
    *,
    color: bool = False,
    stat: bool = False,
    binary: bool = False,
) -> bytes:
    """The unified diff (or ``--stat``) from ``a`` to ``b``, as git prints it."""
    opts = ["--color=always" if color else "--no-color"]
    opts += ["--stat=200"] if stat else []
    opts += ["--binary", "--full-index"] if binary else []
    return git.run([*DIFF, *opts, *_ends(a, b), "--"], tree, env).stdout


@dataclass
class Hunk:
    header: str
    old_start: int
    old_lines: int
    new_start: int
    new_lines: int
    lines: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "header": self.header,
            "old_start": self.old_start,
            "old_lines": self.old_lines,
            "new_start": self.new_start,
            "new_lines": self.new_lines,
            "lines": self.lines,
        }


@dataclass
class FileDiff:
    path: str
    old_path: str | None
    status: str
    old_mode: str
    new_mode: str
    added: int = 0
    removed: int = 0
    binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)
    header: bytes = b""

    def to_dict(self, hunks: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "path": self.path,
            "old_path": self.old_path,
            "status": self.status,
            "added": self.added,
            "removed": self.removed,
            "binary": self.binary,
        }
        if self.old_mode != self.new_mode and "000000" not in (self.old_mode, self.new_mode):
            d["old_mode"], d["new_mode"] = self.old_mode, self.new_mode
        if hunks:
            d["hunks"] = [h.to_dict() for h in self.hunks]
        return d


def files(tree: git.Where, env: Mapping[str, str], a: str, b: str) -> list[FileDiff]:
    """Every changed file from ``a`` to ``b``, with its hunks."""
    raw = git.run([*DIFF, "--raw", "-z", *_ends(a, b), "--"], tree, env).stdout
    out = _parse_raw(raw)
    by_header: dict[bytes, list[FileDiff]] = {}
    for f in out:
        by_header.setdefault(f.header, []).append(f)
    patch = text(tree, env, a, b)
    for header, body in _blocks(patch):
        for f in by_header.get(header, ()):
            _read_block(f, body)
    return out


def _parse_raw(raw: bytes) -> list[FileDiff]:
    fields = raw.split(b"\0")
    out: list[FileDiff] = []
    i = 0
    while i < len(fields):
        meta = fields[i]
        i += 1
        if not meta.startswith(b":"):
            continue
        parts = meta[1:].split(b" ")
        if len(parts) < 5:
            continue
        letter = parts[4][:1].decode("ascii", "replace")
        paths = fields[i : i + (2 if letter in "RC" else 1)]
        i += len(paths)
        old, new = paths[0], paths[-1]
        header = b"diff --git " + git.quote(b"a/" + old) + b" " + git.quote(b"b/" + new)
        out.append(
            FileDiff(
                path=_str(new),
                old_path=_str(old) if letter in "RC" else None,
                status=STATUS.get(letter, "unknown"),
                old_mode=parts[0].decode("ascii", "replace"),
                new_mode=parts[1].decode("ascii", "replace"),
                header=header,
            )
        )
    return out


def _str(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _blocks(patch: bytes) -> list[tuple[bytes, list[bytes]]]:
    """The patch cut at each ``diff --git`` line: (that line, the lines after it)."""
    blocks: list[tuple[bytes, list[bytes]]] = []
    for line in patch.split(b"\n"):
        if line.startswith(b"diff --git "):
            blocks.append((line, []))
        elif blocks:
            blocks[-1][1].append(line)
    return blocks


def _read_block(f: FileDiff, body: list[bytes]) -> None:
    hunk: Hunk | None = None
    for line in body:
        if line.startswith(b"@@ "):
            hunk = _hunk(line)
            if hunk is not None:
                f.hunks.append(hunk)
            continue
        if hunk is None:
            if line.startswith((b"Binary files ", b"GIT binary patch")):
                f.binary = True
            continue
        if line[:1] in (b" ", b"+", b"-", b"\\"):
            hunk.lines.append(_str(line))
            f.added += line[:1] == b"+"
            f.removed += line[:1] == b"-"


def _hunk(line: bytes) -> Hunk | None:
    head, sep, _ = line[3:].partition(b" @@")
    if not sep:
        return None
    try:
        old, new = head.split(b" ")
        o_start, _, o_len = old[1:].partition(b",")
        n_start, _, n_len = new[1:].partition(b",")
        return Hunk(_str(line), int(o_start), int(o_len or 1), int(n_start), int(n_len or 1))
    except ValueError:
        return None


def context(f: FileDiff, line: int, around: int = 3) -> list[str] | None:
    """The diff lines of ``f`` around new-file line ``line`` (old-file line for a deleted
    file), or None if no hunk shows that line."""
    deleted = f.status == "deleted"
    for h in f.hunks:
        start = h.old_start if deleted else h.new_start
        count = h.old_lines if deleted else h.new_lines
        if not start - around <= line < start + count + around:
            continue
        numbered = _numbered(h, deleted)
        hits = [i for i, (n, _) in enumerate(numbered) if n == line]
        if not hits:
            hits = [min(range(len(numbered)), key=lambda i: abs((numbered[i][0] or 0) - line))]
        k = hits[0]
        return [text for _, text in numbered[max(0, k - around) : k + around + 1]]
    return None


def _numbered(h: Hunk, old_side: bool) -> list[tuple[int | None, str]]:
    """Each hunk line with its line number on the side we count (None where it has none)."""
    o, n = h.old_start, h.new_start
    out: list[tuple[int | None, str]] = []
    for ln in h.lines:
        mark = ln[:1]
        if mark == " ":
            out.append((o if old_side else n, ln))
            o, n = o + 1, n + 1
        elif mark == "-":
            out.append((o if old_side else None, ln))
            o += 1
        elif mark == "+":
            out.append((None if old_side else n, ln))
            n += 1
        else:
            out.append((None, ln))
    return out
