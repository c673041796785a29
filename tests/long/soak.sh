#!/usr/bin/env bash
# 10 minutes (DS_SOAK_DURATION) of mixed load on the release server with the
# local store; writes the curve to bench/results/<UTC date>-soak.md and fails
# on any error, a lost append, or resident memory growing >= 10% after warm-up.
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION="${DS_SOAK_DURATION:-10m}"
OUT="${DS_SOAK_REPORT:-bench/results/$(date -u +%F)-soak.md}"
cargo build --release -p durable-streams -p ds-reliability
RUN="$(mktemp -d)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
ARGS=(--store local --data-dir "$RUN/data" --bind "127.0.0.1:$PORT" --long-poll-timeout 2s --sse-max-duration 10s)
target/release/durable-streams serve "${ARGS[@]}" >"$RUN/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$RUN"' EXIT
for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
PREAMBLE="**Calibration:** none (memory, descriptor and error figures of the server process, not a throughput \
report: the request counts only say how much load there was).

Produced by \`make test-long\` (tests/long/soak.sh) at git $(git rev-parse --short HEAD): \
\`durable-streams serve ${ARGS[*]/$RUN/\$TMP}\` (release build), driven by \`ds-reliability soak\` \
for $DURATION with 8 appenders (half with idempotent producers) on 8 streams (each checked whole and \
replaced by a fresh generation every 2,000 appends, the old one deleted 15 s later, so the data stays \
bounded), 2 catch-up readers, \
4 long-poll and 2 SSE tailers, and a churn task (create, append, fork, read, delete; TTL streams \
checked expired), all on 127.0.0.1. Machine: $(nproc) cores, shared."
target/release/ds-reliability soak --base "http://127.0.0.1:$PORT" --pid "$PID" --duration "$DURATION" \
  --report "$OUT" --preamble "$PREAMBLE"
if grep -q panicked "$RUN/server.log"; then echo "server panicked:"; grep -m5 panicked "$RUN/server.log"; exit 1; fi
echo "report: $OUT"
