"""Tolerant reading of agent JSONL: bounded line reading, decoding, typed field access.

Owns how every agent's output becomes lines and JSON objects: ``read_lines`` cuts a stream
into lines without ever holding more than ``LINE_CAP`` bytes of one line, ``decode`` turns a
line into a JSON object, and the accessors read fields without trusting their types. It knows
nothing about any agent's event format.

Must stay true (an agent can write any bytes):
- pure and stdlib-only (msgspec only inside ``struct_decoder``, loaded when called); no
  function here raises on any input (a wrong-typed field reads as empty, a line that is not a
  JSON object decodes to None);
- ``read_lines`` never loads a line longer than ``LINE_CAP`` (Python's own file iteration loads
  a whole line, whatever its size): it yields a ``Skipped`` marker for it instead, so memory is
  bounded by the cap whatever the stream; a last line without ``\\n`` is still a line;
- every string ``decode`` returns is valid Unicode that encodes to UTF-8: invalid UTF-8 bytes
  and lone UTF-16 surrogates (``"\\ud83d"``, what JavaScript writes for a cut emoji) become
  U+FFFD; otherwise ``decode`` gives exactly what ``json.loads`` gives for an object line;
- a ``struct_decoder`` decodes a line into a typed shape only where that agrees with
  ``decode`` field for field, and raises one of ``STRUCT_ERRORS`` everywhere else (the caller
  then uses ``decode``): msgspec rejects every lone surrogate escape, invalid UTF-8 in a field
  it returns, control characters in strings, NaN, trailing data and wrong-typed fields, and
  accepts exactly the JSON ``json.loads`` accepts otherwise (duplicate keys: the last wins);
- a ``msgspec.Raw`` string is only given inside ``raw_strings`` and only cut from a line that
  is ``raw_safe`` (msgspec does not check the UTF-8 of what it copies raw): copied out, it is
  the same string as decoded, valid UTF-8 with no lone surrogate.
"""

import _thread
import contextlib
import functools
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if TYPE_CHECKING:
    from contextvars import ContextVar

Event = dict[str, Any]
S = TypeVar("S")

LINE_CAP = 8 << 20  # bytes: a longer line is skipped, never loaded
_CHUNK = 1 << 20  # what an over-long line is discarded by

_scan_once = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # as json.loads


@functools.cache
def _surrogate_escape() -> re.Pattern[str]:
    """A JSON escape of a UTF-16 surrogate (U+D800..U+DFFF); pairs decode to one character.
    Compiled when first needed: only a line with a ``\\u`` escape is searched."""
    return re.compile(r"\\u[dD][89a-fA-F]")


@functools.cache
def _surrogate() -> re.Pattern[str]:
    """A lone surrogate in a decoded string (compiled when first needed)."""
    return re.compile("[\ud800-\udfff]")


class Skipped(NamedTuple):
    """A line over the cap, not read: its 1-based number, its size and the cap in bytes."""

    number: int
    size: int
    cap: int

    @property
    def note(self) -> str:
        return (
            f"output line {self.number} skipped unread: {self.size:,} bytes "
            f"(over the {self.cap:,}-byte line limit)"
        )


def read_lines(source: Any, cap: int | None = None) -> Iterator[bytes | Skipped]:
    """Lines of ``source`` (a binary file, or an iterable of lines), each at most ``cap``
    bytes; a longer one is a ``Skipped`` marker. Newlines are kept as written."""
    limit = LINE_CAP if cap is None else cap
    if hasattr(source, "readline"):
        return _file_lines(source, limit)
    return _given_lines(source, limit)


def _file_lines(f: Any, cap: int) -> Iterator[bytes | Skipped]:
    """Lines read in pieces of at most ``_CHUNK`` bytes: a usual line is one piece; a long one
    is joined only once known to fit the cap, else dropped as soon as it passes it."""
    step = min(_CHUNK, cap + 1)
    number = 0
    while True:
        piece = f.readline(step)
        if not piece:
            return
        number += 1
        if len(piece) < step or piece.endswith(b"\n"):
            yield piece if len(piece) <= cap else Skipped(number, len(piece), cap)
            continue
        pieces, size = [piece], len(piece)
        while size <= cap and not pieces[-1].endswith(b"\n"):
            more = f.readline(step)
            if not more:
                break
            pieces.append(more)
            size += len(more)
        if size <= cap:
            yield b"".join(pieces)
        else:
            last = pieces[-1]
            pieces.clear()  # freed before the rest is read
            yield Skipped(number, size + _discard_rest(f, last), cap)


def _discard_rest(f: Any, head: bytes) -> int:
    """Read (and drop) what is left of a line whose first bytes were ``head``."""
    size = 0
    last = head
    while not last.endswith(b"\n"):
        last = f.readline(_CHUNK)
        if not last:
            break
        size += len(last)
    return size


def _given_lines(lines: Iterable[Any], cap: int) -> Iterator[bytes | Skipped]:
    for number, line in enumerate(lines, 1):
        if isinstance(line, Skipped):
            yield line
        elif isinstance(line, (bytes, bytearray, str)) and len(line) > cap:
            yield Skipped(number, len(line), cap)
        else:
            yield line


STRUCT_ERRORS = (ValueError, TypeError, RecursionError)  # what a struct decoder raises
# made by the first ``raw_strings`` (contextvars is not imported before): until then no
# ``raw_strings`` is open anywhere
_RAW_STRINGS: "ContextVar[bool] | None" = None
_RAW_STRINGS_LOCK = _thread.allocate_lock()


def _raw_strings_var() -> "ContextVar[bool]":
    global _RAW_STRINGS
    with _RAW_STRINGS_LOCK:
        if _RAW_STRINGS is None:
            import contextvars

            _RAW_STRINGS = contextvars.ContextVar("raw_strings", default=False)
        return _RAW_STRINGS


@contextlib.contextmanager
def raw_strings() -> Iterator[None]:
    """While open (in this thread or task), a parser may give a step's bulk string field (a
    command's output) as a ``msgspec.Raw``: the JSON string exactly as the agent wrote it,
    copied to the output instead of decoded and re-encoded (the same value; escapes such as
    ``\\u00e9`` stay as written, where a re-encoding would write the character). Only for a
    consumer that writes the steps as JSON (a msgspec encoder copies a Raw) and reads nothing
    else of them (``trajectory --json``)."""
    var = _raw_strings_var()
    token = var.set(True)
    try:
        yield
    finally:
        var.reset(token)


def raw_strings_wanted() -> bool:
    """Whether ``raw_strings`` is open (checked once, when a parser starts)."""
    var = _RAW_STRINGS
    return var is not None and var.get()


def raw_safe(line: object) -> bool:
    """Whether a Raw string field cut from ``line`` is safe to copy as is: the line is ASCII
    bytes (so no invalid UTF-8; msgspec rejects lone surrogate escapes and control
    characters everywhere)."""
    return type(line) is bytes and line.isascii()


def struct_decoder(shape: type[S]) -> Callable[[Any], S]:
    """A decoder of one line (bytes or str) into the msgspec Struct ``shape``, unknown fields
    skipped unread; raises one of ``STRUCT_ERRORS`` where it cannot answer as ``decode``
    would (see the module's promises). Typically 3x faster than ``decode``."""
    import msgspec

    decoder: msgspec.json.Decoder[S] = msgspec.json.Decoder(shape)
    return decoder.decode


def decode(line: object) -> Event | None:
    """One line as a JSON object, or None for anything else (never raises).

    A bytes line ``{"...`` is decoded and scanned directly: the same result as ``json.loads``
    when the object ends the line (optionally followed by ``\\n``), ~40% faster per line (the
    trajectory of a 200 MB log is mostly this). Anything else takes ``json.loads`` itself.
    """
    if type(line) is not bytes:
        line = as_bytes(line)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        text = line.decode("utf-8", "replace")
    obj = _loads(text)
    if obj is None or "\\u" not in text or not _surrogate_escape().search(text):
        return obj
    return _without_surrogates(obj)


def _loads(text: str) -> Event | None:
    if text[:2] == '{"':
        try:
            obj, end = _scan_once(text, 0)
            if end == len(text) or text[end:] == "\n":
                return obj  # type: ignore[no-any-return]  # a dict: text starts with "{"
        except (ValueError, StopIteration, RecursionError):
            pass
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _without_surrogates(obj: Event) -> Event:
    """``obj`` with every lone surrogate in its strings (keys too) replaced by U+FFFD.

    Iterative: a decoded object can be nested as deep as the JSON scanner allowed."""
    root: list[Any] = [obj]
    todo: list[tuple[list[Any] | dict[str, Any], Any, Any]] = [(root, 0, obj)]
    while todo:
        parent, key, value = todo.pop()
        if isinstance(value, str):
            parent[key] = clean_text(value)
        elif isinstance(value, list):
            todo.extend((value, i, v) for i, v in enumerate(value))
        elif isinstance(value, dict):
            surrogate = _surrogate().search
            if any(surrogate(k) for k in value):
                fixed = {clean_text(k): v for k, v in value.items()}
                parent[key] = fixed
                value = fixed
            todo.extend((value, k, v) for k, v in value.items())
    result: Event = root[0]
    return result


def clean_text(s: str) -> str:
    """``s`` with lone surrogates replaced by U+FFFD (so it always encodes to UTF-8)."""
    return _surrogate().sub("\ufffd", s)


def as_bytes(line: object) -> bytes:
    """A line given as str/bytearray/memoryview as bytes; anything else as b""."""
    if isinstance(line, bytes):
        return line
    if isinstance(line, (bytearray, memoryview)):
        return bytes(line)
    if isinstance(line, str):
        return line.encode("utf-8", "replace")
    return b""


def str_(v: Any) -> str:
    return v if isinstance(v, str) else ""


def dict_(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def list_(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def int_(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def count(v: Any) -> int:
    """A token count: a non-negative int, else 0."""
    n = int_(v)
    return n if n is not None and n >= 0 else 0


def obj(v: Any) -> dict[str, Any]:
    """Tool arguments as an object, whatever the CLI sent."""
    if isinstance(v, dict):
        return v
    return {} if v is None else {"value": v}


def newest(candidates: deque[bytes], extract: Callable[[Event], str | None]) -> str | None:
    """The newest candidate line that decodes and yields a value."""
    for line in reversed(candidates):
        event = decode(line)
        value = extract(event) if event is not None else None
        if value is not None:
            return value
    return None
