#!/bin/sh
# Idle fake agent for the idle-CPU figure (bench/fig_idle.py): drains the prompt, prints the
# start of a codex turn, then sleeps ($BENCH_IDLE_S seconds, default 120) writing nothing, as
# an agent waiting on a slow model does; then ends the turn.
cat > /dev/null
printf '%s\n' \
  '{"type":"thread.started","thread_id":"01a1ffe6-3595-7f80-954f-f6552aa38b0a"}' \
  '{"type":"turn.started"}'
sleep "${BENCH_IDLE_S:-120}"
printf '%s\n' \
  '{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"ok"}}' \
  '{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,"cache_write_input_tokens":0,"output_tokens":9,"reasoning_output_tokens":0}}'
