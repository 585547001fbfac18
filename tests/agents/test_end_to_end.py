"""Agents end to end through the real ``zwarm`` executable: the example toy plugin as a user
would run it, and a hostile agent whose bytes must still give an honest, bounded record.

The toy tests need ``examples/toy-agent`` installed: they fail under ``CI=true`` without it and
skip (with the reason) otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support import ZW, ZWARM_BIN
from tests.support.agents import require_agent

BIG = 200 << 20  # a 200 MB single line


def _row(zw: ZW, sid: str) -> dict[str, Any]:
    (row,) = [r for r in zw.json("ls") if r["id"] == sid]
    return row


def test_toy_plugin_session_through_the_cli(zw: ZW) -> None:
    require_agent("toy")
    prompt = "add a flag please\n" + "x" * (200 * 1024)
    sid = zw.spawn("-", "--model", "toy-1", input=prompt)  # the model alone picks the plugin
    assert zw.wait(sid).returncode == 0
    row = _row(zw, sid)
    assert (row["adapter"], row["status"], row["model"]) == ("toy", "completed", "toy-1")
    assert row["last_message"] == "You said: add a flag please"
    assert row["usage"]["input_tokens"] == 5 and row["usage"]["output_tokens"] == 6
    assert row["cost_usd"] == pytest.approx((5 * 1.0 + 6 * 2.0) / 1e6)
    steps = zw.json("trajectory", sid)
    assert [s["kind"] for s in steps] == ["reasoning", "command", "message"]
    assert steps[1]["command"] == "wc -c" and steps[1]["exit_code"] == 0
    hello = json.loads(zw.run_bytes("logs", sid).stdout.splitlines()[0])
    assert hello["event"] == "hello" and hello["mode"] == "safe"
    assert not any("add a flag" in a or "xxxx" in a for a in hello["argv"])  # prompt on stdin


def test_toy_plugin_failure_is_the_agents_own_message(zw: ZW) -> None:
    require_agent("toy")
    sid = zw.spawn("please FAIL", "--adapter", "toy", "--dangerous")
    assert zw.wait(sid).returncode == 1
    row = _row(zw, sid)
    assert row["status"] == "failed" and row["dangerous"] is True
    assert row["error"] == "toy agent refused: the prompt asks it to fail"


HOSTILE_AGENT = """\
#!{python}
import os, sys
sys.stdin.buffer.read()
out = sys.stdout.buffer
head = b'{{"type":"item.completed","item":{{"id":"i","type":"%s","text":"'
out.write(b'{{"type":"thread.started","thread_id":"th-1"}}\\n')
out.write(head % b"agent_message" + b'cut \\\\ud83d emoji"}}}}\\n')
out.write(head % b"reasoning")
out.flush()
os.ftruncate(1, os.fstat(1).st_size + {big})  # the rest of a {big}-byte line: a sparse hole
out.write(b'"}}}}\\n')
out.write(head % b"agent_message" + b'bad \\xff byte"}}}}\\n')
out.write(b'{{"type": "turn.completed", "usage": {{"input_tokens": 3, "output_tokens": 4}}}}')
"""


def _max_rss_kb(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, bytes]:
    """Run ``argv`` alone under a fresh Python: (its peak RSS in KiB, its stdout)."""
    probe = textwrap.dedent(
        """
        import resource, subprocess, sys
        p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)
        sys.stderr.write(f"RSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n")
        sys.stdout.buffer.write(p.stdout)
        sys.exit(p.returncode)
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, env=env, cwd=cwd, timeout=300
    )
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    rss = [ln for ln in res.stderr.decode().splitlines() if ln.startswith("RSS ")]
    return int(rss[-1][4:]), res.stdout


def test_hostile_bytes_give_an_honest_bounded_record(zw: ZW) -> None:
    """Lone surrogates, invalid UTF-8, a 200 MB line, a spaced terminal event without a newline:
    the turn completes with the agent's words, and ``trajectory``/``show``/MCP answer in bounded
    memory (old code: the whole line in memory, and a crash writing a lone surrogate)."""
    bin_dir = zw.tmp / "hostile-bin"
    bin_dir.mkdir()
    agent = bin_dir / "codex"
    agent.write_text(HOSTILE_AGENT.format(python=sys.executable, big=BIG))
    agent.chmod(0o755)
    path = {"PATH": os.pathsep.join([str(bin_dir), zw.env["PATH"]])}
    sid = zw.spawn("go", "--adapter", "codex", env_extra=path)
    assert zw.wait(sid).returncode == 0
    row = _row(zw, sid)
    assert row["status"] == "completed" and row["last_message"] == "bad \ufffd byte"
    assert row["usage"]["input_tokens"] == 3 and row["usage"]["output_tokens"] == 4
    assert zw.turn_file(sid, 1).stat().st_size > BIG

    rss, out = _max_rss_kb([str(ZWARM_BIN), "trajectory", sid, "--json"], zw.env, zw.cwd)
    steps = json.loads(out.decode("utf-8"))
    assert rss < 120 * 1024, f"trajectory peak RSS {rss} KiB"
    assert [s.get("text") for s in steps if s["kind"] == "message"] == [
        "cut \ufffd emoji",
        "bad \ufffd byte",
    ]
    (note,) = [s for s in steps if s["kind"] == "error"]
    assert note["fatal"] is False and "output line 3 skipped unread" in note["message"]
    assert zw.json("show", sid)["turns_detail"][0]["final_message"] == "bad \ufffd byte"

    from tests.support.mcp_client import Call, run_client

    async def body(session: Any, call: Call) -> None:
        is_error, data = await call("get_trajectory", {"session_id": sid})
        assert not is_error and "cut \ufffd emoji" in json.dumps(data, ensure_ascii=False)

    run_client(zw, body)


def test_a_default_model_is_priced_once_the_agent_names_it(zw: ZW) -> None:
    """No --model: the session learns its model from the agent; its cost is then estimated
    at that model's price and says so (issue 30: a default gemini session stayed ``?``)."""
    require_agent("toy")
    sid = zw.spawn("hi", "--adapter", "toy")
    assert zw.wait(sid).returncode == 0
    row = _row(zw, sid)
    assert (row["model"], row["cost_source"]) == ("toy-1", "estimated")
    u = row["usage"]
    want = (u["input_tokens"] * 1.0 + u["output_tokens"] * 2.0) / 1e6
    assert row["cost_usd"] == pytest.approx(want)
    assert "no price" not in zw.run("show", sid, check=True).stdout
