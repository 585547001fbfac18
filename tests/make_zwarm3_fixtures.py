"""Make the zwarm 3.x fixtures with the real zwarm 3.10.6 from PyPI (run by hand, never in CI).

Owns ``tests/fixtures/zwarm3/``: what zwarm 3.10.6 (the last 3.x release, what users upgrade
from) writes, driven through its own code, so the tests of "coming from zwarm 3.x" read real
files, not files written from our idea of the format:

- ``init/``: a scratch project after ``zwarm init --yes --with-project``: ``.zwarm/config.toml``
  (``[weave]``, ``[orchestrator]`` + ``[orchestrator.compaction]``, ``[executor]``,
  ``[watchers]``), ``.zwarm/codex.toml`` (``full_danger = true``), ``.zwarm/claude.toml``, and
  ``zwarm.yaml``. 3.10.6 also makes the empty folders ``.zwarm/sessions/`` and
  ``.zwarm/orchestrator/``, which git does not keep: a test recreates them.
- ``sessions/<uuid>/meta.json`` + ``turns/turn_N.jsonl``: sessions started through 3.10.6's
  ``CodexSessionManager`` / ``ClaudeSessionManager`` with fake ``codex`` and ``claude`` on
  PATH that print a captured real stream from ``tests/fixtures/samples`` (the one named by the
  last ``sample=NAME`` in their argv): codex and claude completed, codex and claude failed,
  codex and claude with 2 turns (3.x's ``inject``), and one codex session left ``running``
  whose process was killed (its ``pid`` is a dead process's). Status is what 3.10.6 itself
  wrote when it looked at each finished session once (``get_session``).
- ``expected-3.10.6.json``: what 3.10.6 reports for each session when listing a copy of
  ``sessions/`` (its own view, for comparison; listing updates the running one, so it is done
  on a copy).

zwarm 3.x writes the session's absolute working directory into meta.json; it is replaced by
``/ZWARM3_PROJECT`` (``PLACEHOLDER``), which a test substitutes. Every other byte is 3.10.6's.

Usage (Python 3.11; 3.10.6 declares >=3.13 but runs on 3.11)::

    python3 -m venv /tmp/zw3venv
    /tmp/zw3venv/bin/pip install --ignore-requires-python zwarm==3.10.6
    .venv/bin/python tests/make_zwarm3_fixtures.py --zw3 /tmp/zw3venv [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "fixtures" / "samples"
PLACEHOLDER = "/ZWARM3_PROJECT"
VERSION = "3.10.6"

# the fake agent: prints the sample named by the last "sample=NAME" of its argv; "hang" prints
# one line and waits to be killed. An "error" sample exits 1, as the real CLI does.
FAKE_AGENT = """#!{python}
import os, re, sys, time
names = re.findall(r"sample=([a-z0-9_]+)", " ".join(sys.argv[1:]))
name = names[-1]
if name == "hang":
    sys.stdout.write('{{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}}\\n')
    sys.stdout.flush()
    time.sleep(3600)
with open(os.path.join(os.environ["ZW3_SAMPLES"], name + ".jsonl"), "rb") as f:
    sys.stdout.buffer.write(f.read())
sys.exit(1 if "error" in name else 0)
"""

# run by zwarm 3.10.6's interpreter: its own session managers, as its CLI and MCP tools use them
DRIVER = r"""
import json, os, signal, sys, time
from pathlib import Path
from zwarm.sessions import CodexSessionManager
from zwarm.sessions.claude import ClaudeSessionManager

project = Path(sys.argv[1])
managers = {"codex": CodexSessionManager(project / ".zwarm"),
            "claude": ClaudeSessionManager(project / ".zwarm")}

def finish(adapter, s):
    os.waitpid(s.pid, 0)  # our child: its exit is known once reaped
    got = managers[adapter].get_session(s.id)  # 3.10.6 notices and records the end
    return got

plan = [
    ("codex", ["Write hello.py printing hello (sample=codex_simple)"]),
    ("codex", ["Fix the failing build (sample=codex_error)"]),
    ("codex", ["Create out.txt saying hello (sample=codex_resume_turn1)",
               "Now append world to it (sample=codex_resume)"]),
    ("claude", ["Write hello.py printing hello (sample=claude_simple)"]),
    ("claude", ["Fix the failing build (sample=claude_error)"]),
    ("claude", ["Create out.txt saying hello (sample=claude_resume_turn1)",
                "Now append world to it (sample=claude_resume)"]),
]
for adapter, prompts in plan:
    m = managers[adapter]
    model = "gpt-5.2-codex" if adapter == "codex" else "sonnet"
    s = m.start_session(prompts[0], working_dir=project, model=model)
    s = finish(adapter, s)
    for p in prompts[1:]:
        s = m.inject_message(s.id, p)
        s = finish(adapter, s)
    time.sleep(0.05)  # distinct created_at (3.x sorts by it)

# the last: a codex session whose process dies while 3.10.6 still records it running
m = managers["codex"]
s = m.start_session("Refactor the parser (sample=hang)", working_dir=project, model="gpt-5.2-codex")
out = project / ".zwarm" / "sessions" / s.id / "turns" / "turn_1.jsonl"
while not out.exists() or not out.read_bytes().endswith(b"\n"):
    time.sleep(0.02)
os.kill(s.pid, signal.SIGKILL)
os.waitpid(s.pid, 0)
"""

# 3.10.6's own listing of a copy of the sessions (both managers)
LISTER = r"""
import json, sys
from pathlib import Path
from zwarm.sessions import CodexSessionManager
from zwarm.sessions.claude import ClaudeSessionManager

state = Path(sys.argv[1])
out = []
for m in (CodexSessionManager(state), ClaudeSessionManager(state)):
    for s in m.list_sessions():
        out.append({"id": s.id, "adapter": s.adapter, "status": s.status.value, "task": s.task,
                    "turn": s.turn, "model": s.model, "token_usage": s.token_usage,
                    "error": s.error, "messages": len(s.messages)})
out.sort(key=lambda d: (d["adapter"], d["task"]))
print(json.dumps(out, indent=2))
"""


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"{argv[:3]} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def scrub(tree: Path, project: Path) -> None:
    """The absolute project path 3.x wrote, as ``PLACEHOLDER`` (resolved and as given)."""
    names = sorted({str(project), str(project.resolve())}, key=len, reverse=True)
    for f in tree.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            new = data
            for n in names:
                new = new.replace(n.encode(), PLACEHOLDER.encode())
            if new != data:
                f.write_bytes(new)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zw3", type=Path, required=True, help="venv with zwarm==3.10.6")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "zwarm3")
    args = ap.parse_args()
    py, zwarm3 = args.zw3 / "bin" / "python", args.zw3 / "bin" / "zwarm"
    got = run(
        [str(py), "-I", "-c", "import importlib.metadata as m; print(m.version('zwarm'))"],
        ROOT,
        dict(os.environ),
    )
    if got.strip() != VERSION:
        sys.exit(f"{args.zw3} has zwarm {got.strip()}, not {VERSION}")

    with tempfile.TemporaryDirectory(prefix="zw3fix-") as tmp:
        base = Path(tmp)
        bindir = base / "bin"
        bindir.mkdir()
        for name in ("codex", "claude"):
            f = bindir / name
            f.write_text(FAKE_AGENT.format(python=sys.executable))
            f.chmod(f.stat().st_mode | stat.S_IXUSR)
        env = {
            "PATH": f"{bindir}:/usr/bin:/bin",
            "HOME": str(base / "home"),
            "ZW3_SAMPLES": str(SAMPLES),
            "TERM": "dumb",
            "COLUMNS": "120",
            "LANG": "C.UTF-8",
        }
        # (a) the project `zwarm init --yes --with-project` makes
        init = base / "init"
        init.mkdir()
        run([str(zwarm3), "init", "--yes", "--with-project"], init, env)
        # (b) sessions, in a project initialised the same way
        proj = base / "project"
        proj.mkdir()
        run([str(zwarm3), "init", "--yes"], proj, env)
        run([str(py), "-I", "-c", DRIVER, str(proj)], proj, env)
        sessions = proj / ".zwarm" / "sessions"
        copy = base / "copy" / ".zwarm"
        shutil.copytree(proj / ".zwarm", copy)
        expected = run([str(py), "-I", "-c", LISTER, str(copy)], proj, env)

        out = args.out
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        empty = shutil.ignore_patterns("sessions", "orchestrator")  # git keeps no empty dir
        shutil.copytree(init, out / "init", ignore=empty)
        shutil.copytree(sessions, out / "sessions")
        (out / "expected-3.10.6.json").write_text(expected)
        scrub(out, proj)
        scrub(out, init)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    n = len(json.loads(expected))
    print(f"wrote {out} ({n} sessions, {size:,} bytes)")


if __name__ == "__main__":
    main()
