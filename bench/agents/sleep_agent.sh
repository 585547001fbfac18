#!/bin/sh
# Fake agent that stays running and writes nothing: drains the prompt, then sleeps
# ($BENCH_SLEEP seconds, default 600) until killed. Used where a running session is needed.
cat > /dev/null
exec sleep "${BENCH_SLEEP:-600}"
