"""Capture what the everyday views look like in a real terminal, into ``docs/screens/``.

Owns ``docs/screens/*.txt``: ``ls`` at 80 and 160 columns, ``top``, and ``trajectory -f``,
each a text capture of a tmux pane (``tests/support/tmux.py``) running the installed ``zwarm`` on a
world of sessions made with the fake agents (``tests/fakes/bin``): real zwarm output, fake
agents. Run (needs tmux)::

    .venv/bin/python tests/make_screens.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import ZW, kill_leftovers, make_env  # noqa: E402
from tests.support.tmux import Tmux  # noqa: E402

OUT = ROOT / "docs" / "screens"


def world(tmp: Path) -> ZW:
    (tmp / "work").mkdir()
    zw = ZW(
        tmp, tmp / "state", tmp / "work", make_env(tmp, tmp / "state", tmp / "rec"), tmp / "rec"
    )
    zw.env.pop("NO_COLOR", None)
    return zw


def sessions(zw: ZW) -> dict[str, str]:
    codex, claude = zw.replay("codex_toolcall"), zw.replay("claude_toolcall")
    ids = {
        "done": zw.spawn("add a --verbose flag to cli.py and document it in the README",
                         "--name", "verbose", env_extra=codex),
        "tests": zw.spawn("write tests for parser.py, covering the empty input and unicode",
                          "--adapter", "claude", "--name", "parser-tests", env_extra=claude),
        "slow": zw.spawn("profile the import time of the CLI and cut what is not needed",
                         "--timeout", "1", env_extra={**codex, "FAKE_HANG": "3"}),
        "broken": zw.spawn("migrate the config loader to tomllib",
                           env_extra={**codex, "FAKE_FAIL_ON": "tomllib"}),
    }  # fmt: skip
    zw.wait(*ids.values())
    ids["live"] = zw.spawn(
        "find why test_store is flaky under load and fix it",
        "--adapter", "claude", "--name", "flaky-store",
        env_extra=zw.replay("claude_toolcall", FAKE_HANG="5"),
    )  # fmt: skip
    ids["busy"] = zw.spawn(
        "rename the Session.turns field to history across the codebase",
        "--name", "rename",
        env_extra=zw.replay("codex_toolcall", FAKE_HANG="5"),
    )  # fmt: skip
    zw.run("inject", ids["busy"], "then run the whole test suite", check=True)
    return ids


def capture_ls(zw: ZW, width: int) -> str:
    t = Tmux(zw.tmp, zw.env, width, 14)
    try:
        t.type("zwarm ls")
        shown = t.wait_until(lambda s: s.rstrip().endswith("$") and "ID" in s, "ls")
    finally:
        t.close()
    return shown


def capture_top(zw: ZW) -> str:
    t = Tmux(zw.tmp, zw.env, 120, 16)
    try:
        t.type("zwarm top")
        shown = t.wait_for("cat out.txt (running)")
        t.keys("q")
    finally:
        t.close()
    return shown


def capture_follow(zw: ZW) -> str:
    hold = zw.tmp / "hold"
    hold.touch()
    env = zw.gated(hold, **zw.replay("claude_toolcall", FAKE_LINE_DELAY="0.4"))
    sid = zw.spawn("create out.txt with hello in it", "--adapter", "claude", "--name",
                   "hello", env_extra=env)  # fmt: skip
    zw.run("inject", sid, "now check it is there", env_extra=env, check=True)
    t = Tmux(zw.tmp, zw.env, 100, 24)
    try:
        t.type("zwarm trajectory hello -f")
        t.wait_for("(+1 queued)")
        hold.unlink()
        shown = t.wait_until(
            lambda s: "turn 2 ─" in s and s.count("message") >= 3, "turn 2 under way"
        )
        t.wait_for("is idle")
    finally:
        t.close()
    return shown


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="zwarm-screens-") as d:
        zw = world(Path(d))
        try:
            sessions(zw)
            shots = {
                "ls-80.txt": capture_ls(zw, 80),
                "ls-160.txt": capture_ls(zw, 160),
                "top.txt": capture_top(zw),
                "trajectory-f.txt": capture_follow(zw),
            }
        finally:
            kill_leftovers(zw)
    for name, text in shots.items():
        (OUT / name).write_text(text.replace(d, "/tmp/zwarm"))
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
