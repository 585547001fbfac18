#!/usr/bin/env python3
"""A fake agent CLI for tests: records what it was given, then replays a JSONL file.

Installed on PATH as ``codex`` and ``claude`` (symlinks to this file). Controlled by env:
- FAKE_REPLAY: JSONL file to print to stdout (default: none). Lines may contain the token
  {PROMPT_LEN}; {THREAD} is replaced by the resume id when argv resumes one.
- FAKE_RECORD: directory; writes argv.json, prompt.bin, env.json there (numbered per call).
- FAKE_SLEEP: seconds to sleep before printing; FAKE_LINE_DELAY: seconds between lines.
- FAKE_EXIT: exit code (default 0). FAKE_STDERR: text written to stderr.
- FAKE_CHILDREN: if "1", start a shell that starts sleeps (a process tree) and wait.
- FAKE_HANG: if "1", print the first line then sleep forever.
"""

import json
import os
import subprocess
import sys
import time


def _record(argv, prompt):
    rec = os.environ.get("FAKE_RECORD")
    if not rec:
        return
    os.makedirs(rec, exist_ok=True)
    n = len([f for f in os.listdir(rec) if f.startswith("argv")]) + 1
    with open(os.path.join(rec, f"prompt{n}.bin"), "wb") as f:
        f.write(prompt)
    with open(os.path.join(rec, f"argv{n}.json"), "w") as f:
        json.dump({"argv": argv, "cwd": os.getcwd(), "pid": os.getpid()}, f)


def main():
    argv = sys.argv
    prompt = sys.stdin.buffer.read()
    _record(argv, prompt)
    if os.environ.get("FAKE_STDERR"):
        sys.stderr.write(os.environ["FAKE_STDERR"] + "\n")
        sys.stderr.flush()
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
    if os.environ.get("FAKE_CHILDREN") == "1":
        subprocess.Popen(["/bin/sh", "-c", "sleep 300 & sleep 301 & wait"])
    replay = os.environ.get("FAKE_REPLAY")
    thread = argv[argv.index("resume") + 1] if "resume" in argv else (
        argv[argv.index("--resume") + 1] if "--resume" in argv else "")
    delay = float(os.environ.get("FAKE_LINE_DELAY", "0"))
    if replay:
        with open(replay, encoding="utf-8") as f:
            for i, line in enumerate(f):
                line = line.replace("{THREAD}", thread).replace("{PROMPT_LEN}", str(len(prompt)))
                sys.stdout.write(line)
                sys.stdout.flush()
                if os.environ.get("FAKE_HANG") == "1" and i == 0:
                    time.sleep(10_000)
                if delay:
                    time.sleep(delay)
    if os.environ.get("FAKE_CHILDREN") == "1":
        time.sleep(10_000)
    sys.exit(int(os.environ.get("FAKE_EXIT", "0")))


if __name__ == "__main__":
    main()
