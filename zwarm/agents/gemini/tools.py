"""What gemini's stream leaves out about its tool calls, from its own session record.

``tool_result`` events carry neither a shell command's exit code nor whether ``write_file``
created or overwrote a file (nor its absolute path). Gemini's session record
(``<home>/.gemini/tmp/<project>/chats/session-*-<id8>.jsonl``, ``toolCalls[].result``) does:
the model's ``functionResponse`` text ends with ``Exit Code: N`` for a non-zero exit, and a
file tool says ``Successfully created and wrote to new file: <abs path>.``. When a turn ends
(``GeminiAgent.after_turn``: ``save_facts``), those facts are read for the turn's own tool ids
(``collect``) and kept beside the turn log (its sidecar ``turns/turn_N.tools.json``,
``dump``/``load``; read back by ``GeminiAgent.reader``: ``read_facts``), because gemini
deletes its records after 30 days and a later turn may resume (and rewrite) the same record.
A problem reading the facts never fails the turn (its commands then show no exit code).

Must stay true (the record and the sidecar are written by the agent's side: untrusted):
- reading is bounded: record lines through ``jsonl.read_lines`` (line cap), at most
  ``MAX_RECORD_BYTES`` read, only lines holding ``"toolCalls"`` decoded, at most
  ``MAX_FACTS`` facts; nothing follows a link out of the home (``O_NOFOLLOW`` on the file,
  directories listed with ``os.scandir`` without following links);
- an exit code is taken only from the trailer gemini appends after the command's output (the
  last ``Exit Code:`` line before ``Process Group PGID``/the end), so a command that prints
  ``Exit Code: 0`` after failing is still reported with its real code;
- ``load`` accepts only the shape ``dump`` writes (ids and paths bounded, exit codes ints,
  kinds add|update); anything else is no facts, never an error.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from zwarm.agents import jsonl
from zwarm.agents.base import RESUME_ID
from zwarm.agents.gemini.events import FILE_TOOLS, SHELL

MAX_RECORD_BYTES = 256 << 20
MAX_FACTS = 10_000
MAX_SIDECAR_BYTES = 8 << 20
_MAX_ID = 300
_MAX_PATH = 4096
_TRAILER = re.compile(r"^(Process Group PGID: \d+|Background PIDs: [\d, ]*|Signal: \S+)$")
_EXIT = re.compile(r"^Exit Code: (-?\d{1,9})$")
_FILE_DONE = (
    (re.compile(r"Successfully created and wrote to new file: (/.+?)\.(?:\s|$)"), "add"),
    (re.compile(r"Successfully overwrote file: (/.+?)\.(?:\s|$)"), "update"),
    (re.compile(r"Created new file: (/.+?) with provided content\."), "add"),
    (re.compile(r"Successfully modified file: (/.+?) \(\d+ replacements?\)\."), "update"),
)

Fact = dict[str, Any]


def exit_code(llm_output: str) -> int | None:
    """The exit code in a shell ``functionResponse``'s trailer: N after ``Exit Code: N``, 0
    when the trailer has none, None when there is no trailer (cancelled, backgrounded)."""
    text = llm_output.rstrip()
    if text.endswith("</untrusted_context>"):
        text = text[: -len("</untrusted_context>")].rstrip()
    seen_trailer = False
    for line in reversed(text.splitlines()):
        found = _EXIT.match(line)
        if found:
            return int(found.group(1))
        if not _TRAILER.match(line):
            break
        seen_trailer = True
    return 0 if seen_trailer else None


def file_fact(llm_output: str) -> Fact:
    for pattern, kind in _FILE_DONE:
        found = pattern.search(llm_output)
        if found and len(found.group(1)) <= _MAX_PATH:
            return {"path": found.group(1), "kind": kind}
    return {}


def _response_text(call: Mapping[str, Any]) -> str:
    for item in jsonl.list_(call.get("result")):
        response = jsonl.dict_(
            jsonl.dict_(jsonl.dict_(item).get("functionResponse")).get("response")
        )
        text = response.get("output", response.get("error"))
        if isinstance(text, str):
            return text
    return ""


def fact_of(call: Mapping[str, Any]) -> Fact:
    """What the record says of one tool call (``toolCalls[]`` entry)."""
    name, text = jsonl.str_(call.get("name")), _response_text(call)
    if name == SHELL:
        code = exit_code(text)
        return {"exit_code": code} if code is not None or text else {}
    if name in FILE_TOOLS and call.get("status") == "success":
        return file_fact(text)
    return {}


def scan_log(lines: Iterable[bytes]) -> tuple[str | None, set[str]]:
    """A turn log's gemini session id (``init``) and the ids of the shell and file tool calls
    it started (``tool_use``); only lines that can be either are decoded."""
    session_id: str | None = None
    ids: set[str] = set()
    for line in jsonl.read_lines(lines):
        if isinstance(line, jsonl.Skipped) or (b"tool_use" not in line and b"init" not in line):
            continue
        event = jsonl.decode(line) or {}
        if event.get("type") == "init" and session_id is None:
            found = jsonl.str_(event.get("session_id"))
            session_id = found if RESUME_ID.match(found) else None
        elif event.get("type") == "tool_use" and len(ids) < MAX_FACTS:
            name, tool_id = jsonl.str_(event.get("tool_name")), jsonl.str_(event.get("tool_id"))
            if (name == SHELL or name in FILE_TOOLS) and 0 < len(tool_id) <= _MAX_ID:
                ids.add(tool_id)
    return session_id, ids


def records(home: Path, session_id: str) -> list[Path]:
    """Gemini's session record files for ``session_id`` under ``home`` (no link followed)."""
    found = []
    suffix = f"-{session_id[:8]}.jsonl"
    for project in _dirs(home / ".gemini" / "tmp"):
        for entry in _entries(project / "chats"):
            named = entry.name.startswith("session-") and entry.name.endswith(suffix)
            if named and entry.is_file(follow_symlinks=False):
                found.append(Path(entry.path))
    return found


def _entries(d: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(d) as it:
            return [e for _, e in zip(range(10_000), it, strict=False)]
    except OSError:
        return []


def _dirs(d: Path) -> list[Path]:
    return [Path(e.path) for e in _entries(d) if e.is_dir(follow_symlinks=False)]


def collect(home: Path, session_id: str, wanted: set[str]) -> dict[str, Fact]:
    """Facts about the tool calls ``wanted``, from ``session_id``'s records under ``home``."""
    facts: dict[str, Fact] = {}
    for path in records(home, session_id):
        if len(facts) >= len(wanted):
            break
        _read_record(path, session_id, wanted, facts)
    return facts


def _read_record(path: Path, session_id: str, wanted: set[str], facts: dict[str, Fact]) -> None:
    from zwarm.system.files import open_read

    try:
        fd = open_read(path)  # no link followed, a regular file only, never blocking
    except OSError:
        return
    with os.fdopen(fd, "rb") as f:
        read = 0
        for n, line in enumerate(jsonl.read_lines(f)):
            read += line.size if isinstance(line, jsonl.Skipped) else len(line)
            if read > MAX_RECORD_BYTES or (n == 0 and not _names(line, session_id)):
                return  # too much, or not the record of this session (its first line says)
            if not isinstance(line, jsonl.Skipped) and b'"toolCalls"' in line:
                _take_calls(jsonl.decode(line), wanted, facts)


def _names(first: bytes | jsonl.Skipped, session_id: str) -> bool:
    head = None if isinstance(first, jsonl.Skipped) else jsonl.decode(first)
    return head is not None and head.get("sessionId") == session_id


def _take_calls(event: Any, wanted: set[str], facts: dict[str, Fact]) -> None:
    for call in jsonl.list_(jsonl.dict_(event).get("toolCalls")):
        call = jsonl.dict_(call)
        tool_id = jsonl.str_(call.get("id"))
        if tool_id in wanted:
            fact = fact_of(call)
            if fact:
                facts[tool_id] = fact


# --------------------------------------------------------------------------- the sidecar


def dump(facts: Mapping[str, Fact]) -> bytes:
    return json.dumps(dict(facts), ensure_ascii=False, sort_keys=True).encode("utf-8")


def load(data: bytes) -> dict[str, Fact]:
    """The facts ``dump`` wrote; anything else (planted, damaged) is no facts."""
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_FACTS:
        return {}
    facts: dict[str, Fact] = {}
    for tool_id, fact in raw.items():
        clean = _clean(fact)
        if clean is None or not 0 < len(tool_id) <= _MAX_ID:
            return {}
        facts[tool_id] = clean
    return facts


def _clean(fact: Any) -> Fact | None:
    if not isinstance(fact, dict) or not set(fact) <= {"exit_code", "path", "kind"}:
        return None
    code, path, kind = fact.get("exit_code"), fact.get("path"), fact.get("kind")
    if "exit_code" in fact and not (
        code is None or (type(code) is int and -(2**31) <= code < 2**31)
    ):
        return None
    if path is not None and not (isinstance(path, str) and 0 < len(path) <= _MAX_PATH):
        return None
    if kind is not None and kind not in ("add", "update"):
        return None
    return dict(fact)


def save_facts(log: Path, home: Path, sidecar: Path) -> None:
    """Keep what gemini's record (under the session's ``home``) says of the tool calls of the
    turn whose log is ``log``, in ``sidecar`` (best effort: no facts, then the turn's
    commands show no exit code)."""
    from zwarm.errors import StoreError
    from zwarm.system.files import open_read, write_private

    try:
        with os.fdopen(open_read(log), "rb") as f:
            session_id, wanted = scan_log(f)
        if not wanted or session_id is None:
            return
        write_private(sidecar, dump(collect(home, session_id, wanted)))
    except (OSError, StoreError):
        pass


def read_facts(sidecar: Path) -> dict[str, Fact]:
    """The facts ``save_facts`` kept in ``sidecar``; none if it is missing or not theirs."""
    from zwarm.system.files import read_file

    try:
        data, _ = read_file(sidecar, MAX_SIDECAR_BYTES)
    except OSError:
        return {}
    return load(data)
