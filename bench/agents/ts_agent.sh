#!/bin/sh
# Trivial fake agent for the spawn-latency figure: records the moment it starts running
# (epoch seconds with ns, appended to $BENCH_TS_FILE), drains the prompt, prints a tiny but
# complete codex turn and exits.
date +%s.%N >> "$BENCH_TS_FILE"
cat > /dev/null
printf '%s\n' \
  '{"type":"thread.started","thread_id":"01a1ffe6-3595-7f80-954f-f6552aa38b0a"}' \
  '{"type":"turn.started"}' \
  '{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"ok"}}' \
  '{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,"cache_write_input_tokens":0,"output_tokens":9,"reasoning_output_tokens":0}}'
