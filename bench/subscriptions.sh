#!/usr/bin/env bash
# Subscription webhook latency (issue 10): an append is acknowledged → the
# subscription's signed webhook notification reaches a receiver on loopback.
# Goal: p50 under 2 ms on the local store. Part of `make bench`; alone:
#
#   bash bench/subscriptions.sh
#
# Builds the release server and ds-load (as bench.sh does), calibrates
# ds-load, then for each store (local first: the goal's figure; memory for
# comparison: the same engine without the store's fsync) starts
# `serve --store <store> --webhook-allow-loopback` on 127.0.0.1 with its own
# data dir and runs `ds-load webhook-latency`, which runs the receiver
# itself (127.0.0.1, port 0), subscribes it to one stream and appends one
# event at a time. The report (with the calibration line and the load
# average at start and end) is printed and written to
# bench/results/<UTC date>-subscriptions.md.
#
# Environment: DS_BENCH_SUB_ITERS (1000), DS_BENCH_SUB_SETTLE_MS (5),
# DS_BENCH_SUB_STORES ("local memory"), DS_BENCH_SUB_OUT (report path),
# DS_BENCH_CALIBRATION_SECS (2; 0 skips), DS_LOAD_TARGET_DIR (cargo target
# dir for ds-load, default target-bench), DS_BENCH_NO_BUILD=1 (use the
# binaries already built).
set -euo pipefail
NAME=subscriptions
# shellcheck source=latency-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/latency-common.sh"
ITERS="${DS_BENCH_SUB_ITERS:-1000}"
SETTLE="${DS_BENCH_SUB_SETTLE_MS:-5}"
STORES="${DS_BENCH_SUB_STORES:-local memory}"
OUT="${DS_BENCH_SUB_OUT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-subscriptions.md}"

# One store: start the server, measure, stop it; prints the table.
measure() {
  local store="$1" port url
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  url="http://127.0.0.1:$port"
  RUST_LOG=warn "$BIN" serve --store "$store" --data-dir "$WORK/data-$store" --bind "127.0.0.1:$port" \
    --webhook-allow-loopback >"$WORK/server-$store.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 200); do curl -fsS "$url/health" >/dev/null 2>&1 && break; sleep 0.05; done
  curl -fsS "$url/health" >/dev/null || { cat "$WORK/server-$store.log" >&2; say "the $store server did not start"; exit 1; }
  say "measuring $ITERS appends on --store $store"
  "$LOAD" webhook-latency --base "$url" --iterations "$ITERS" --settle-ms "$SETTLE" --pid "$PID" \
    || { cat "$WORK/server-$store.log" >&2; say "the $store run failed"; exit 1; }
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

# In this shell (not a $(…) subshell), so that the EXIT trap sees $PID.
for store in $STORES; do measure "$store" >"$WORK/table-$store.md"; done

GOAL=""
if [ -f "$WORK/table-local.md" ]; then
  # p50 of the row append acknowledged → webhook received, in ms.
  P50="$(awk -F'|' '/^\| append acknowledged → webhook received \|/ { gsub(/ /, "", $3); print $3; exit }' "$WORK/table-local.md")"
  if awk -v p="$P50" 'BEGIN { exit !(p < 2) }'; then GOAL="met"; else GOAL="**not met**"; fi
  GOAL="Goal (issue 10): p50 of append acknowledged → webhook received under 2 ms on the local store: $GOAL (p50 $P50 ms)."
fi

{
  echo "# Subscription webhook latency — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "$CALIBRATION"
  echo
  echo "Produced by \`bash bench/subscriptions.sh\` (part of \`make bench\`). Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), Linux $(uname -r); $(rustc --version). Ours: \`durable-streams\` at git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)'), release build. Load average (1, 5, 15 min) at the start: $LOAD_START."
  echo
  echo "Method: \`serve --store <store> --webhook-allow-loopback\` on 127.0.0.1, fresh process and data dir per store. ds-load (\`webhook-latency\`) runs its own webhook receiver (hyper, 127.0.0.1, port 0) that answers every notification \`200 {\"done\": true}\` (the server auto-acks the wake), creates one JSON stream and a webhook subscription to it (\`PUT …/__ds/subscriptions/<id>\`, explicit \`streams\`), then $ITERS times: waits ${SETTLE} ms (the previous wake's auto-ack commits meanwhile, so each wake starts from an idle subscription), appends one small JSON event and waits for the notification. The clock runs from the append's acknowledgement (\`204\`) to the receiver having read the whole \`POST\`. Every notification must name the subscription and exactly that stream, with \`tail_offset\` = the append's \`Stream-Next-Offset\`, \`acked_offset\` = the previous append's (the auto-ack moved the cursor), generation = the previous + 1, a fresh \`wake_id\`, a callback URL and token, and a \`Webhook-Signature\` with a current \`t\`, a \`kid\` from the server's JWKS and a 64-byte \`ed25519\` value (the signature itself is checked by the subscription tests, not here). A missing (10 s), extra or wrong notification fails the run. Between the acknowledgement and the notification the server: publishes the commit on its hub, whose tap spawns a run of the subscription, which issues the wake (a conditional write of the subscription record: on the local store a synced commit), mints the callback token, signs the body (Ed25519) and \`POST\`s it over a pooled keep-alive connection. \"Server CPU per iteration\" is the server's CPU time over the run divided by the iterations (append, wake, delivery and auto-ack included)."
  for store in $STORES; do
    echo
    echo "## --store $store"
    echo
    cat "$WORK/table-$store.md"
  done
  if [ -n "$GOAL" ]; then echo; echo "$GOAL"; fi
  echo
  echo "Load average (1, 5, 15 min) at the end: $(cut -d' ' -f1-3 /proc/loadavg | sed 's/ /, /g')."
} >"$OUT"
cat "$OUT"
say "report: $OUT"
