#!/usr/bin/env python3
"""A fake agent CLI for tests: records what it was given, then replays a JSONL file.

Installed on PATH as ``codex`` and ``claude`` (symlinks to this file). Controlled by env:
- FAKE_REPLAY: JSONL file to print to stdout (default: none). Lines may contain the token
  {PROMPT_LEN}; {THREAD} is replaced by the resume id when argv resumes one.
- FAKE_RECORD: directory; writes argvN.json (argv, cwd, pid, ppid, pgid, time), promptN.bin and
  envN.json there, N numbered per call (race-free: concurrent agents each get their own N;
  argvN.json appears last, atomically, so its presence means the call's record is complete).
- FAKE_SLEEP: seconds to sleep before printing; FAKE_LINE_DELAY: seconds between lines.
- FAKE_EXIT: exit code (default 0). FAKE_STDERR: text written to stderr.
- FAKE_CHILDREN: if "1", start a shell that starts sleeps (a process tree) and wait; if "2",
  a deeper tree: sh -> sh -> sleep, plus a sleep that left the group (setsid), and wait.
- FAKE_HANG: if "N" (N >= 1), print the first N lines then sleep forever.
- FAKE_IGNORE_TERM: if "1", the agent and its FAKE_CHILDREN shells ignore SIGTERM.
- FAKE_WAIT_FILE: a path; after FAKE_SLEEP, wait until it exists before going on.
- FAKE_FAIL_ON: a string; a prompt containing it makes the agent exit 3 with no output.
- FAKE_SHELL: a shell command the agent runs (/bin/sh -c, in its working directory, its
  output on stderr) after FAKE_SLEEP/FAKE_WAIT_FILE, before printing: how a test makes the
  "agent" change files. FAKE_SHELL_N (N = 1, 2 ...) instead, for the agent's Nth run in a
  FAKE_RECORD directory, if set.
- {MODEL} in FAKE_SHELL(_N) and FAKE_REPLAY is replaced by the model its argv names
  (``--model M``; empty if none): how one setting makes attempts of a best-of set differ.
- FAKE_ALLOC_MB: after FAKE_SHELL, the agent itself allocates (and touches) this many MiB;
  it writes "allocated" to alloc.txt in its working directory if it could, else exits 4.
"""

import json
import os
import signal
import subprocess
import sys
import time


def _record(argv, prompt):
    rec = os.environ.get("FAKE_RECORD")
    if not rec:
        return
    os.makedirs(rec, exist_ok=True)
    n = len([f for f in os.listdir(rec) if f.startswith(".claim")]) + 1
    while True:  # claim call number n atomically: concurrent agents share the directory
        try:
            os.close(os.open(os.path.join(rec, f".claim{n}"), os.O_CREAT | os.O_EXCL, 0o600))
            break
        except FileExistsError:
            n += 1
    with open(os.path.join(rec, f"prompt{n}.bin"), "wb") as f:
        f.write(prompt)
    with open(os.path.join(rec, f"env{n}.json"), "w") as f:
        json.dump(dict(os.environ), f)
    info = {
        "argv": argv,
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "pgid": os.getpgid(0),
        "time": time.time(),
    }
    tmp = os.path.join(rec, f".argv{n}.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.rename(tmp, os.path.join(rec, f"argv{n}.json"))


def _model(argv):
    return argv[argv.index("--model") + 1] if "--model" in argv[:-1] else ""


def _shell(argv):
    rec = os.environ.get("FAKE_RECORD")
    calls = len([f for f in os.listdir(rec) if f.startswith(".claim")]) if rec else 0
    cmd = os.environ.get(f"FAKE_SHELL_{calls}") or os.environ.get("FAKE_SHELL")
    if cmd:
        cmd = cmd.replace("{MODEL}", _model(argv))
        subprocess.run(["/bin/sh", "-c", cmd], stdout=sys.stderr, check=False)


def _alloc():
    mib = int(os.environ.get("FAKE_ALLOC_MB") or 0)
    if not mib:
        return
    try:
        block = bytearray(mib << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
    except MemoryError:
        sys.stderr.write("fake agent: MemoryError\n")
        sys.exit(4)
    with open("alloc.txt", "w") as f:
        f.write("allocated\n")


def main():
    argv = sys.argv
    prompt = sys.stdin.buffer.read()
    _record(argv, prompt)
    fail_on = os.environ.get("FAKE_FAIL_ON", "").encode()
    if fail_on and fail_on in prompt:
        sys.stderr.write("fake agent: told to fail on this prompt\n")
        sys.exit(3)
    if os.environ.get("FAKE_STDERR"):
        sys.stderr.write(os.environ["FAKE_STDERR"] + "\n")
        sys.stderr.flush()
    trap = ""
    if os.environ.get("FAKE_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        trap = "trap '' TERM; "
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
    while os.environ.get("FAKE_WAIT_FILE") and not os.path.exists(os.environ["FAKE_WAIT_FILE"]):
        time.sleep(0.02)
    _shell(argv)
    _alloc()
    children = os.environ.get("FAKE_CHILDREN")
    if children == "1":
        subprocess.Popen(["/bin/sh", "-c", trap + "sleep 300 & sleep 301 & wait"])
    elif children == "2":
        inner = trap + "sleep 303 & wait"
        subprocess.Popen(
            ["/bin/sh", "-c", f'{trap}/bin/sh -c "{inner}" & sleep 301 & setsid sleep 302 & wait']
        )
    replay = os.environ.get("FAKE_REPLAY", "").replace("{MODEL}", _model(argv))
    thread = (
        argv[argv.index("resume") + 1]
        if "resume" in argv
        else (argv[argv.index("--resume") + 1] if "--resume" in argv else "")
    )
    delay = float(os.environ.get("FAKE_LINE_DELAY", "0"))
    hang = int(os.environ.get("FAKE_HANG") or 0)
    if replay:
        with open(replay, encoding="utf-8") as f:
            for i, line in enumerate(f):
                line = line.replace("{THREAD}", thread).replace("{PROMPT_LEN}", str(len(prompt)))
                sys.stdout.write(line)
                sys.stdout.flush()
                if hang and i == hang - 1:
                    time.sleep(10_000)
                if delay:
                    time.sleep(delay)
    if children in ("1", "2") or hang:
        time.sleep(10_000)
    sys.exit(int(os.environ.get("FAKE_EXIT", "0")))


if __name__ == "__main__":
    main()
