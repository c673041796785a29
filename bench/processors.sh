#!/usr/bin/env bash
# Processor effect latency: an append to a source stream is acknowledged →
# the outbox processor's transformed event is readable on its target stream
# (local store, so both the append and the outbox's own append are synced
# before they are acknowledged). Part of `make bench`; alone:
#
#   bash bench/processors.sh
#
# Builds the release server and ds-load (as bench.sh does), calibrates
# ds-load, starts `serve --store local --processors` with one outbox
# (bench/* → bench-feed) on 127.0.0.1, parks a long-poll on the target before
# every append and measures with `ds-load processor-latency`. The report
# (with the calibration line and the load average at start and end) is
# printed and written to bench/results/<UTC date>-processors.md.
#
# Environment: DS_BENCH_PROC_ITERS (1000), DS_BENCH_PROC_SETTLE_MS (2),
# DS_BENCH_PROC_OUT (report path), DS_BENCH_CALIBRATION_SECS (2; 0 skips),
# DS_LOAD_TARGET_DIR (cargo target dir for ds-load, default target-bench).
set -euo pipefail
NAME=processors
# shellcheck source=latency-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/latency-common.sh"
ITERS="${DS_BENCH_PROC_ITERS:-1000}"
SETTLE="${DS_BENCH_PROC_SETTLE_MS:-2}"
OUT="${DS_BENCH_PROC_OUT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-processors.md}"

cat >"$WORK/processors.toml" <<'EOF'
[host]
lag_log_interval = "off"

[[processor]]
kind = "outbox"
slug = "bench-outbox"
streams = "bench/*"
target = "bench-feed"
create_target = true
template = { type = "bench/forwarded", payload = "$/payload" }
EOF

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
URL="http://127.0.0.1:$PORT"
RUST_LOG=warn "$BIN" serve --store local --data-dir "$WORK/data" --bind "127.0.0.1:$PORT" \
  --processors "$WORK/processors.toml" >"$WORK/server.log" 2>&1 &
PID=$!
for _ in $(seq 1 200); do curl -fsS "$URL/health" >/dev/null 2>&1 && break; sleep 0.05; done
curl -fsS "$URL/health" >/dev/null || { cat "$WORK/server.log" >&2; say "the server did not start"; exit 1; }

say "measuring $ITERS appends"
TABLE="$("$LOAD" processor-latency --base "$URL" --source bench/source --target bench-feed \
  --iterations "$ITERS" --settle-ms "$SETTLE" --pid "$PID")"
LAG="$("$BIN" processors list --url "$URL")"
kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""

{
  echo "# Processor effect latency — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "$CALIBRATION"
  echo
  echo "Produced by \`bash bench/processors.sh\` (part of \`make bench\`). Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), Linux $(uname -r); $(rustc --version). Ours: \`durable-streams\` at git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)'), release build. Load average (1, 5, 15 min) at the start: $LOAD_START."
  echo
  echo "Method: \`serve --store local --processors\` with one outbox (\`bench/*\` → \`bench-feed\`, template \`{type, payload}\`); ds-load creates \`bench/source\`, then $ITERS times: parks a long-poll at the tail of \`bench-feed\`, waits ${SETTLE} ms, appends one 50-byte JSON event to \`bench/source\` and waits for the long-poll's answer, which must hold exactly that event, transformed. Between the acknowledgement and the answer the server: wakes the processor (hub publish after the commit), reads the event from the journal, appends the transformed event to the target under its idempotency key (a synced local-store commit), which wakes the long-poll. The progress commit follows the effect and is not on this path. At the end the target must hold each event exactly once."
  echo
  echo "$TABLE"
  echo
  echo "\`durable-streams processors list\` after the run:"
  echo
  echo '```'
  echo "$LAG"
  echo '```'
  echo
  echo "Load average (1, 5, 15 min) at the end: $(cut -d' ' -f1-3 /proc/loadavg | sed 's/ /, /g')."
} >"$OUT"
cat "$OUT"
say "report: $OUT"
