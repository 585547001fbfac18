"""Fake codex agent for the concurrency figure: streams $BENCH_EVENTS events as fast as it can.

Speaks ``codex exec --json``: line 0 is ``thread.started``, the last line ``turn.completed``,
and every line i in between is an item event whose id is ``item_<i>`` (the sequence number the
bench checks to prove no line was lost or reordered). The mix is like a busy codex turn:
command executions started and completed (with a few hundred bytes of output), reasoning and
agent messages. Each line is written and flushed on its own, as a real agent streams.
"""

import os
import sys


def main() -> int:
    n = int(os.environ.get("BENCH_EVENTS", "20000"))
    sys.stdin.buffer.read()
    out = sys.stdout.buffer
    write, flush = out.write, out.flush
    output = (
        "============================= test session starts ==============================\\n"
        "collected 212 items\\n\\ntests/unit/test_store.py ........................ [ 11%]\\n"
        "tests/unit/test_api.py ........................................... [ 32%]\\n"
    )
    cmd = "/bin/bash -lc 'pytest -q tests/unit'"
    started = (
        '{"type":"item.started","item":{"id":"item_%d","type":"command_execution",'
        '"command":"' + cmd + '","aggregated_output":"","exit_code":null,"status":"in_progress"}}\n'
    ).encode()
    completed = (
        '{"type":"item.completed","item":{"id":"item_%d","type":"command_execution",'
        '"command":"'
        + cmd
        + '","aggregated_output":"'
        + output.replace("%", "%%")
        + '","exit_code":0,"status":"completed"}}\n'
    ).encode()
    reasoning = (
        b'{"type":"item.completed","item":{"id":"item_%d","type":"reasoning",'
        b'"text":"**Checking the failing test**\\n\\nThe fixture is shared; run it alone."}}\n'
    )
    message = (
        b'{"type":"item.completed","item":{"id":"item_%d","type":"agent_message",'
        b'"text":"Tests pass locally now. Let me run the linters too."}}\n'
    )
    cycle = [started, completed] * 4 + [reasoning, message]
    k = len(cycle)
    write(b'{"type":"thread.started","thread_id":"01a1ffe6-40d4-7d42-8089-790d2ae1459f"}\n')
    flush()
    for i in range(1, n - 1):
        write(cycle[i % k] % i)
        flush()
    write(
        b'{"type":"turn.completed","usage":{"input_tokens":460,"cached_input_tokens":200,'
        b'"cache_write_input_tokens":0,"output_tokens":30,"reasoning_output_tokens":0}}\n'
    )
    flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
