"""The real ``codex`` and ``claude`` in zwarm's own sandbox (``zwarm.sandbox``, issue 34),
against the fake LLMs: a normal turn works (a shell command, a file written in its working
directory), reaching the fake only through the port bridge, with the agent's own sandbox
standing down inside zwarm's (claude told so by IS_SANDBOX), under the turn's limits."""

from __future__ import annotations

from tests.fakes.llm import Reply, shell, text, write_file
from tests.support.real import RealWorld, shell_args


def test_a_sandboxed_turn_works_with_the_real_cli(real: RealWorld, adapter: str) -> None:
    target = real.work / "hello.txt"
    path = "hello.txt" if adapter == "codex" else str(target)
    script = [
        Reply([shell("echo from-inside > seen.txt")]),
        Reply([write_file(path, "written in the sandbox\n")]),
        Reply([text("Done.")]),
        Reply([text("Again.")]),
    ]
    srv = real.use(adapter, script, **shell_args(adapter))
    # codex's endpoint is in its -c config, not a *_BASE_URL variable: allowed by port; the
    # turn under limits (zwarm.sandbox.limits) a real CLI works within
    real.tables["sandbox"] = {"ports": [srv.port], "memory": "2G", "cpus": 1, "pids": 512}
    real.write_config()
    sid = real.spawn("Write the files.", adapter, sandbox="bwrap")
    d = real.wait(sid)
    assert (d["status"], d["last_message"], d["sandbox"]) == ("completed", "Done.", "bwrap"), d
    assert target.read_text() == "written in the sandbox\n"
    assert (real.work / "seen.txt").read_text() == "from-inside\n"
    assert d["dangerous"] is False
    limits = d["turns_detail"][0]["limits"]
    assert "memory 2G via" in limits and "cpus 1 via" in limits and "pids 512 via" in limits
    # a follow-up resumes the agent's own session (its login/state dir writable inside)
    real.api().inject(sid, "Once more.", context="native")
    d = real.wait(sid)
    t2 = d["turns_detail"][1]
    assert (d["status"], d["last_message"], t2["context"]) == ("completed", "Again.", "native"), d


def test_a_sandboxed_gemini_turn_works_and_resumes(real: RealWorld) -> None:
    """gemini's home of its own lies in the (hidden) state dir: bound back in as its login."""
    script = [
        Reply([write_file(str(real.work / "g.txt"), "from gemini\n")]),
        Reply([text("First.")]),
        Reply([text("Second.")]),
    ]
    real.use("gemini", script)  # its endpoint: GOOGLE_GEMINI_BASE_URL, bridged by its port
    sid = real.spawn("Write it.", "gemini", sandbox="bwrap")
    d = real.wait(sid)
    assert (d["status"], d["last_message"], d["sandbox"]) == ("completed", "First.", "bwrap"), d
    assert (real.work / "g.txt").read_text() == "from gemini\n"
    real.api().inject(sid, "Again.", context="native")
    d = real.wait(sid)
    assert (d["status"], d["last_message"]) == ("completed", "Second."), d
