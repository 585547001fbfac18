"""What the command line writes, without click: JSON on stdout, error lines, a quick end.

Owns how a command's JSON reaches stdout (one document: ``emit_json``; an array streamed as
its items come: ``stream_json_array``), the one line a user sees for an error zwarm expects
(``error_line``), what happens when stdout's reader goes away (``reader_gone``), and how a
process that is zwarm's own ends (``one_shot``, ``exit_now``, ``leave``). Both the click
commands (``zwarm.cli.commands``) and the click-free fast path (``zwarm.cli.fast``) print
through it, so the two cannot drift apart. Must stay true:
- it imports no click and nothing heavy at import time: the fast path's start-up is its own;
- ``error_line`` is the only mapping of an exception to what a user reads: a ``ZwarmError``
  cleaned to one line (``text.clean``), an ``OSError`` as its reason and file, "out of
  memory"; anything else is a bug and keeps its traceback;
- ``exit_now``, ``leave`` and ``one_shot`` act only in zwarm's own process (``own_process``,
  set by ``zwarm.cli.run``): a program that calls ``main`` keeps its objects and its collector;
- the quick exit (``os._exit``) skips only what the interpreter's exit would do beyond freeing
  memory when none of it is pending (``_nothing_left``): no thread but daemons still runs, no
  exit handler was registered since the process became zwarm's own, and stdout and stderr are
  the process's own and flushed. Otherwise the process ends the usual way.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any, NoReturn

OUT_CHUNK = 1 << 18  # bytes of encoded items ``stream_json_array`` writes at once
# set by ``own_process``: this process is zwarm's own; the exit handlers registered by then
_OWN = {"process": False, "handlers": 0}


def own_process() -> None:
    """This process is zwarm's own (the console script, ``python -m zwarm``): it may end the
    quick way (``exit_now``, ``leave``) and list without a collector (``one_shot``)."""
    _OWN["process"] = True
    _OWN["handlers"] = atexit._ncallbacks()


def is_own_process() -> bool:
    """Whether this process is zwarm's own (``own_process``), not a program calling ``main``."""
    return bool(_OWN["process"])


def emit_json(data: Any) -> None:
    """One line of compact JSON (msgspec: 10x the stdlib for a 10,000-row listing). A list is
    encoded an item at a time into one buffer written out every ``OUT_CHUNK`` bytes: a
    listing of 10,000 rows never holds its 14 MB of JSON, whose fresh pages would cost it
    more than encoding it. An item msgspec cannot encode takes the stdlib encoder (ASCII)."""
    import msgspec

    items, buf, end = (
        (data, bytearray(b"["), b"]\n") if isinstance(data, list) else ([data], bytearray(), b"\n")
    )
    out = sys.stdout
    out.flush()
    raw = out.buffer
    encode_into = msgspec.json.Encoder().encode_into
    for i, item in enumerate(items):
        if i:
            buf += b","
        _encode_item(encode_into, item, buf)
        if len(buf) >= OUT_CHUNK:
            raw.write(buf)
            buf.clear()
    buf += end
    raw.write(buf)
    raw.flush()


def _encode_item(encode_into: Any, item: Any, buf: bytearray) -> None:
    """``item`` appended to ``buf`` as JSON: msgspec, else (a value it cannot encode, a lone
    surrogate in a str) the stdlib, ASCII-safe; a ``msgspec.Raw`` in it is decoded for it."""
    mark = len(buf)
    try:
        encode_into(item, buf, -1)
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        import json  # only here: start-up (ls never imports it)

        import msgspec

        del buf[mark:]
        buf += json.dumps(item, separators=(",", ":"), default=msgspec.json.decode).encode()


def stream_json_array(items: Any, flush: bool = False) -> None:
    """A JSON array, one item per line, written as ``items`` come (``flush``: each at once):
    encoded by msgspec into one buffer written out every ``OUT_CHUNK`` bytes, so memory holds
    one chunk, never the array; a ``msgspec.Raw`` value (``jsonl.raw_strings``) is copied as
    is. An item msgspec cannot encode takes the stdlib encoder."""
    import msgspec

    out = sys.stdout
    out.flush()
    raw = out.buffer
    encode_into = msgspec.json.Encoder().encode_into
    buf = bytearray(b"[")
    sep = b""
    for item in items:
        buf += sep
        sep = b","
        _encode_item(encode_into, item, buf)
        buf += b"\n"
        if flush or len(buf) >= OUT_CHUNK:
            raw.write(buf)
            buf.clear()
            if flush:
                raw.flush()
    buf += b"]\n"
    raw.write(buf)
    raw.flush()


def ending(e: BaseException) -> tuple[str | None, int] | None:
    """How a command that raised ``e`` ends: the line for stderr (None: none) and the exit
    status; None if ``e`` is a bug (it keeps its traceback). Ctrl-C is "interrupted" (130), a
    reader that went away a quiet 0 (``reader_gone``), an expected error one "Error: " line
    (1, ``error_line``). The click commands and the fast path both end through it."""
    if isinstance(e, KeyboardInterrupt):
        return "interrupted", 130
    if isinstance(e, BrokenPipeError):
        reader_gone()
        return None, 0
    line = error_line(e)
    return None if line is None else (f"Error: {line}", 1)


def error_line(e: BaseException) -> str | None:
    """The one line a user reads for ``e`` (printed after "Error: ", exit status 1), or None
    if ``e`` is not an error zwarm expects (a bug: it keeps its traceback)."""
    from zwarm.errors import ZwarmError

    if isinstance(e, ZwarmError):
        from zwarm.cli.options import flag
        from zwarm.text import clean

        return clean(e.spelled(flag), newlines=False)  # request fields named by their options
    if isinstance(e, OSError):  # out of fds, inodes or memory for a pipe: one line
        from zwarm.text import clean

        where = f" ({e.filename})" if e.filename else ""
        return clean(f"{e.strerror or e}{where}", newlines=False)
    if isinstance(e, MemoryError):
        return "out of memory"
    return None


def warn(message: str) -> None:
    """A warning from the API (not an error: the command goes on), one line on stderr."""
    from zwarm.text import clean

    sys.stderr.write(f"warning: {clean(message, newlines=False)}\n")
    sys.stderr.flush()


def note(message: str) -> None:
    """What a command says beside its output (stdout stays what scripts read), one line on
    stderr."""
    from zwarm.text import clean

    sys.stderr.write(f"{clean(message, newlines=False)}\n")
    sys.stderr.flush()


def problem_lines(problems: list[str]) -> None:
    """After showing what could be read: what could not, one "Error: " line each on stderr."""
    from zwarm.text import clean

    sys.stdout.flush()
    for problem in problems:
        sys.stderr.write(f"Error: {clean(problem, newlines=False)}\n")
    sys.stderr.flush()


def reader_gone() -> None:
    """The reader of stdout went away (``| head``): whatever is still buffered, and the flush
    at exit, go to /dev/null, so the command ends quietly instead of with an error."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    os.close(devnull)


def one_shot() -> None:
    """This process lists and ends: no cyclic garbage collection from now on. A listing makes
    almost no garbage cycles (one per damaged session, which the listing's own pause of the
    collector keeps until it ends anyway), and collections that walk its thousands of rows
    (the first one as the listing ends) and the API's imports cost it ~5%. Only in zwarm's
    own process (``own_process``: a program that calls ``main`` keeps its collector)."""
    if _OWN["process"]:
        import gc

        gc.disable()


def exit_now(code: int = 0) -> None:
    """End zwarm's own process now, with ``code``, if nothing is left for the interpreter's
    exit to do but free memory (``_nothing_left``); else return. Tearing down every module and
    object (thousands of rows and sessions for a listing) and the final collection cost a
    short command 5-15 ms, and a large listing up to a fifth of its time."""
    if _nothing_left():
        os._exit(code)


def leave(code: str | int | None) -> NoReturn:
    """End zwarm's own process with a command's exit status (``SystemExit.code``): the quick
    way if it may (``exit_now``), else the usual way (``sys.exit``)."""
    if code is None:
        code = 0
    if isinstance(code, int) and 0 <= code <= 255:
        exit_now(code)
    sys.exit(code)


def _nothing_left() -> bool:
    """Whether the interpreter's exit would only free memory: the process is zwarm's own
    (``own_process``: not a program that called ``main``), no thread but daemons runs besides
    this one (an exit waits for the others), no exit handler was registered since (a
    library's cleanup, a temporary directory's finalizer), stdout and stderr are the
    process's own (not click's test runner's) and flush (a closed pipe is left to the usual
    exit path)."""
    out, err = sys.__stdout__, sys.__stderr__
    if not _OWN["process"] or out is None or err is None:
        return False
    if sys.stdout is not out or sys.stderr is not err:
        return False
    if atexit._ncallbacks() != _OWN["handlers"] or _threads_running():
        return False
    try:
        out.flush()
        err.flush()
    except (OSError, ValueError):
        return False
    return True


def _threads_running() -> bool:
    """Whether a thread the exit would wait for runs: one that is not a daemon, or this is
    not the main thread."""
    threading = sys.modules.get("threading")
    if threading is None:  # never imported: no thread was started from Python
        return False
    me = threading.current_thread()
    if me is not threading.main_thread():
        return True
    return any(not t.daemon for t in threading.enumerate() if t is not me)
