#!/usr/bin/env bash
# Where does our server's time go on one workload? Runs ours under `perf
# record` while ds-load drives the workload, then prints perf's report.
#
#   bash bench/profile.sh p1 [memory|local]     (p1, p2, p3, p4 or p7)
#
# Output: $DS_BENCH_HOME/profile-<time>/{perf.data,self.txt,by-crate.txt,load.md}
# and the top of by-crate.txt / self.txt on stdout. Workload knobs are the
# DS_BENCH_* variables of bench/bench.sh.
set -euo pipefail
WORKLOAD="${1:?usage: bench/profile.sh p1|p2|p3|p4|p7 [memory|local]}"
STORE="${2:-memory}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HOME_DIR="${DS_BENCH_HOME:-$HOME/.cache/ds-bench}"
OUT="$HOME_DIR/profile-$(date -u +%Y%m%dT%H%M%S)-$WORKLOAD-$STORE"
mkdir -p "$OUT"
say() { echo "bench/profile: $*" >&2; }
command -v perf >/dev/null || { say "perf not found (apt-get install linux-perf)"; exit 1; }

LOAD_TARGET="${DS_LOAD_TARGET_DIR:-$ROOT/target-bench}"
CARGO_TARGET_DIR="$LOAD_TARGET" cargo build --release -q -p ds-load >&2
# The `profiling` profile: release code generation with symbols and line
# tables (the release profile strips them).
cargo build --profile profiling -q -p durable-streams >&2
LOAD="$LOAD_TARGET/release/ds-load"
OURS_BIN="$ROOT/target/profiling/durable-streams"

SERVER_PID=""; PERF_PID=""
cleanup() {
  if [ -n "$PERF_PID" ]; then kill -INT "$PERF_PID" 2>/dev/null || true; wait "$PERF_PID" 2>/dev/null || true; fi
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
ARGS=(serve --bind "127.0.0.1:$PORT" --store "$STORE")
[ "$STORE" = local ] && ARGS+=(--data-dir "$OUT/data")
RUST_LOG=warn "$OURS_BIN" "${ARGS[@]}" >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do
  curl -sf -X PUT -H 'content-type: application/octet-stream' "http://127.0.0.1:$PORT/v1/stream/probe" >/dev/null 2>&1 && break
  sleep 0.05
done
# DWARF call graphs: the profiling profile keeps line tables but no frame pointers.
perf record -F 999 --call-graph dwarf,16384 -p "$SERVER_PID" -o "$OUT/perf.data" >"$OUT/perf.log" 2>&1 &
PERF_PID=$!
sleep 0.5
say "profiling ours ($STORE) on $WORKLOAD"
"$LOAD" run --base "http://127.0.0.1:$PORT" --workloads "$WORKLOAD" --pid "$SERVER_PID" | tee "$OUT/load.md"
kill -INT "$PERF_PID"; wait "$PERF_PID" 2>/dev/null || true; PERF_PID=""
perf report -i "$OUT/perf.data" --stdio --no-children --sort dso,symbol --percent-limit 0 -g none 2>/dev/null \
  | grep -v '^#' | grep -v '^$' | sed 's/ \+- \+- *$//; s/ *$//' >"$OUT/self.txt"
# Self time summed by where it is spent: kernel, malloc/free, memcpy, or the
# Rust crate that owns the symbol (first path segment).
awk '{
  pct = $1; sub(/%/, "", pct); dso = $2; sym = "";
  for (i = 4; i <= NF; i++) sym = sym (i > 4 ? " " : "") $i;
  if (dso ~ /kernel/) g = "kernel";
  else if (sym ~ /malloc|free|_int_|consolidate|unlink_chunk|realloc/) g = "libc malloc/free";
  else if (sym ~ /memmove|memcpy|memset|memcmp/) g = "libc memcpy/memset";
  else if (dso ~ /libc/) g = "libc other";
  else { s = sym; sub(/^<+/, "", s); sub(/::.*/, "", s); sub(/ as .*/, "", s); g = "crate " s }
  total[g] += pct
} END { for (g in total) printf "%6.2f%%  %s\n", total[g], g }' "$OUT/self.txt" | sort -rn >"$OUT/by-crate.txt"
echo "## self time by component"; head -15 "$OUT/by-crate.txt"
echo "## self time by symbol (top 30)"; head -30 "$OUT/self.txt"
say "full output in $OUT (perf report -i $OUT/perf.data for call graphs)"
