#!/usr/bin/env bash
# Server instructions per request, measured with callgrind: immune to the
# load of the machine (other builds, other benchmarks), so before/after
# comparisons of the HTTP path hold on a busy 2-core box.
#
#   bash bench/callgrind/run.sh append|catchup N1 N2 [out-dir]
#
# Runs the `profiling` build of the server (memory store) under callgrind
# twice, driven by bench/callgrind/drive.py with N1 and then N2 requests of
# the workload, and prints the instructions per request (the slope: start-up,
# set-up and shutdown cancel out). Assumes `cargo build --profile profiling
# -p durable-streams` was run. Output files: callgrind.out.<workload>.<n>.
#
# DS_CALLGRIND_SERVER runs another server instead (a peer, for the same count
# on the same requests): a command with {port} and {dir} (a fresh empty
# directory per run), e.g.
#   DS_CALLGRIND_SERVER="$HOME/.cache/ds-bench/cargo-ds/bin/durable-streams-server
#     --host 127.0.0.1 --port {port} --data-dir {dir} --durability memory"
# Its worker threads are its own (TOKIO_WORKER_THREADS is still set).
set -euo pipefail
WORKLOAD="${1:?usage: run.sh append|catchup|append-json|append-json-invalid N1 N2 [out-dir]}"
N1="${2:?N1}"; N2="${3:?N2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${4:-$ROOT/target/callgrind}"
BIN="${DS_PROFILING_BIN:-$ROOT/target/profiling/durable-streams}"
mkdir -p "$OUT"
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 2; }

# Total instructions of one server run with n requests.
measure() {
  local n="$1" port pid file
  file="$OUT/callgrind.out.$WORKLOAD.$n"
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  local cmd=("$BIN" serve --bind "127.0.0.1:$port" --store memory)
  if [ -n "${DS_CALLGRIND_SERVER:-}" ]; then
    local dir="$OUT/data.$WORKLOAD.$n"
    rm -rf "$dir" && mkdir -p "$dir"
    local line="${DS_CALLGRIND_SERVER//\{port\}/$port}"
    read -r -a cmd <<<"${line//\{dir\}/$dir}"
  fi
  # One worker thread: fewer cross-thread wake-ups, whose number depends on
  # timing (the machine's load), in the count.
  TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$file" \
    "${cmd[@]}" >"$OUT/server.$WORKLOAD.$n.log" 2>&1 &
  pid=$!
  # Ready when it answers HTTP at all (a peer need not have /health).
  for _ in $(seq 1 600); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break
    sleep 0.1
  done
  python3 "$ROOT/bench/callgrind/drive.py" "$port" "$WORKLOAD" "$n"
  kill -TERM "$pid"
  wait "$pid" || true
  awk '/^(summary|totals):/ { print $2; exit }' "$file"
}

IR1="$(measure "$N1")"
IR2="$(measure "$N2")"
echo "$WORKLOAD: Ir($N1)=$IR1 Ir($N2)=$IR2 per request: $(( (IR2 - IR1) / (N2 - N1) ))"
