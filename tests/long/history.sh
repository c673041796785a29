#!/usr/bin/env bash
# History campaigns under faults (tests/history): every client operation
# recorded and checked against the stream's consistency model. 130,000
# operations against the local store under kill -9, 35,000 each against the
# AWS store under injected AWS faults and under network faults (>= 200,000
# in all), 20,000 on a full disk, and 50,000 processor events on AWS under
# faults with invocations killed mid-batch; fails on any violation.
# Report: tests/history/reports/<UTC date>.md (a correctness report, not a
# benchmark: bench/results/ holds measurements with a calibrated load tool). Sizes: DS_HISTORY_* below.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${DS_HISTORY_REPORT:-tests/history/reports/$(date -u +%F).md}"
SEED="${DS_HISTORY_SEED:-$(date +%s)}"
cargo build -p durable-streams -p ds-history
export DS_SERVER_BIN="$PWD/target/debug/durable-streams"
ARGS=(--seed "$SEED" --kill9-ops "${DS_HISTORY_KILL9_OPS:-130000}" --disk-ops "${DS_HISTORY_DISK_OPS:-20000}"
  --aws-ops "${DS_HISTORY_AWS_OPS:-35000}" --network-ops "${DS_HISTORY_NETWORK_OPS:-35000}"
  --events "${DS_HISTORY_EVENTS:-50000}" --kill-every 3s
  --min-checked-ops "${DS_HISTORY_MIN_OPS:-200000}" --min-processor-events "${DS_HISTORY_MIN_EVENTS:-50000}")
echo "seed $SEED (rerun with DS_HISTORY_SEED=$SEED)"
PREAMBLE="Produced by \`make test-long\` (tests/long/history.sh) at git $(git rev-parse --short HEAD): \
\`ds-history ${ARGS[*]}\` (debug builds; every server and emulator on 127.0.0.1). Each campaign's clients \
(16, one operation at a time each) record every operation with its invocation and completion time; after the \
run the final state of every stream is read with the faults off and the checker verifies: every acknowledged \
append exactly once and any other at most once, real-time order of appends, every read a prefix of the final \
stream with offsets matching its bytes, monotonic reads, up-to-date answers covering everything acknowledged \
before them, idempotent producers applied once and older epochs fenced, nothing accepted after a close, forks \
holding their source's bytes. Machine: $(nproc) cores, shared; load average at the start $(cut -d' ' -f1-3 /proc/loadavg)."
target/debug/ds-history "${ARGS[@]}" --report "$OUT" --title "History campaigns under faults" --preamble "$PREAMBLE"
echo "report: $OUT"
