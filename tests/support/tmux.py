"""A real terminal for tests: a private tmux server, keys sent, the screen read back.

Owns driving ``tmux`` (``-S`` a socket in the test's tmp dir, ``-f /dev/null``: nothing of the
user's tmux is used or touched). The shell is bash with only the prompt ``$ `` set; the
environment is the test's, without ``COLUMNS``/``LINES`` (the terminal's size rules) and with
``TERM=xterm-256color``. Every wait is on what the screen shows, with a deadline.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

PROMPT = "$ "


def available() -> bool:
    return shutil.which("tmux") is not None


class Tmux:
    def __init__(self, tmp: Path, env: Mapping[str, str], width: int = 120, height: int = 30):
        self.sock = str(tmp / f"tmux-{width}x{height}.sock")
        self.env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES", "TMUX")}
        self.env.update(TERM="xterm-256color", HISTFILE="/dev/null")
        rc = tmp / "tmux-bashrc"
        rc.write_text(f"PS1='{PROMPT}'\nunset PROMPT_COMMAND\n")
        self.tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                  f"bash --noprofile --rcfile {rc}")  # fmt: skip
        try:
            self.tmux("set-option", "-g", "status", "off")
            self.wait_until(lambda s: s.strip() == PROMPT.strip(), "the prompt", 20)
        except BaseException:
            self.close()  # a server that never became usable is not left behind
            raise

    def tmux(self, *args: str) -> str:
        res = subprocess.run(
            ["tmux", "-S", self.sock, "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if res.returncode != 0:
            raise RuntimeError(f"tmux {args[0]}: {res.stderr.strip()}")
        return res.stdout

    def type(self, line: str) -> None:
        """Type ``line`` and Enter."""
        self.tmux("send-keys", "-t", "t", "-l", line)
        self.tmux("send-keys", "-t", "t", "Enter")

    def keys(self, *keys: str) -> None:
        """Send keys by tmux name (``q``, ``C-c``...)."""
        self.tmux("send-keys", "-t", "t", *keys)

    def screen(self) -> str:
        """What the terminal shows now, one line per row, trailing blanks dropped."""
        rows = self.tmux("capture-pane", "-p", "-t", "t").splitlines()
        return "\n".join(r.rstrip() for r in rows).rstrip("\n") + "\n"

    def clear(self) -> None:
        self.type("clear")
        self.wait_until(lambda s: s.strip() == PROMPT.strip(), "a clear screen")

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        return self.wait_until(lambda s: text in s, repr(text), timeout)

    def wait_until(self, ok: object, what: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if ok(shown):  # type: ignore[operator]
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{shown}")
            time.sleep(0.1)

    def close(self) -> None:
        """Stop the server and everything in it (the shell, what it runs)."""
        try:
            self.tmux("kill-server")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
