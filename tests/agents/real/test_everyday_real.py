"""Conformance, everyday figures (issue 12): what the real pinned CLIs report, as zwarm shows it.

- every model the pinned codex offers (``codex debug models``, offline: the list is built in)
  has a shipped price, so a codex session's cost is estimated, never ``?`` by default;
- a claude turn killed mid-run keeps the usage its log had reported so far (before: zero).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.fakes.llm import Reply, Usage, shell, text
from tests.support.real import RealWorld, require, shell_args, wait_until
from zwarm.agents.codex import DEFAULT_PRICES


def test_every_model_the_pinned_codex_offers_has_a_price(tmp_path: Path) -> None:
    exe = require("codex")
    home = tmp_path / "codex_home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path),
           "CODEX_HOME": str(home)}  # fmt: skip
    out = subprocess.run([exe, "debug", "models"], env=env, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    models = json.loads(out.stdout)["models"]
    offered = [m["slug"] for m in models if m.get("visibility") == "list"]
    assert len(offered) >= 5, offered
    assert [m for m in offered if m not in DEFAULT_PRICES] == []
    for slug in offered:
        price = DEFAULT_PRICES[slug]
        assert 0 < price["cached_input"] <= price["input"] <= price["output"], slug


def test_a_claude_turn_killed_mid_command_keeps_its_usage_so_far(real: RealWorld) -> None:
    command = "python3 -c 'import time; time.sleep(600)' # LONG-COMMAND"
    script = [Reply([shell(command)], usage=Usage(input=300, output=20)), Reply([text("never")])]
    srv = real.use("claude", script, **shell_args("claude"))
    sid = real.spawn("Run the long command.", "claude")
    srv.wait_for_requests(1)
    log = real.state / "sessions" / sid / "turns" / "turn_1.jsonl"
    wait_until(lambda: log.exists() and b'"tool_use"' in log.read_bytes(), message="the call")
    real.cli("kill", sid)

    def recorded() -> dict[str, object] | None:
        (t,) = real.show(sid)["turns_detail"]
        return t if t["exit_code"] is not None or t["signal"] is not None else None

    t = wait_until(recorded, message="the supervisor to record the killed turn")
    assert t["status"] == "killed"
    # the model call's input as claude logged it (output so far: the streamed count, 1)
    assert t["usage"] == {"input_tokens": 300, "cached_input_tokens": 0, "output_tokens": 1,
                          "reasoning_tokens": 0, "total_tokens": 301}  # fmt: skip
    assert t["cost_usd"] is None  # claude reports cost only at the end: unknown, never zero
