#!/usr/bin/env bash
# Cost of per-credential rate limits on append throughput: ds-load P1 against
# `serve --store memory` with a static API token on every request, rate limits
# off (A) and on (B: `--rate-limit` with a budget P1 never reaches, so every
# request takes the bucket's lock, refills and spends a token but none is
# refused), interleaved A B A B … in fresh processes on 127.0.0.1. One
# credential for every request: the worst case for the bucket's lock.
#
#   bash bench/rate-limit.sh            # 6 rounds, 3 s per P1 run
#   ROUNDS=8 P1_SECS=4 bash bench/rate-limit.sh
# Prints one line per run, the medians and the spread (min-max) of each mode,
# and the load average. The steady figures are the server's own CPU time per
# append that ds-load measures for each P1 run (`--pid`), and per request
# over the whole run (utime + stime over the requests its /metrics counted,
# set-up and read-back included): they do not depend on how fast the load
# tool is. Throughput on a shared 2-core machine moves ±15% from run to run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-6}"
P1_SECS="${P1_SECS:-3}"
BIN="${BIN:-target/release/durable-streams}"
LOAD="${LOAD:-target/release/ds-load}"
[ -x "$BIN" ] && [ -x "$LOAD" ] || cargo build --release -p durable-streams -p ds-load
WORK="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
TOKEN="$("$BIN" token new)"
echo "$TOKEN" | "$BIN" token file --name bench --grant '=read,write,admin' >"$WORK/tokens.json"

cpu_ticks() { # utime + stime of a process, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}

run() { # mode → P1 appends/s and server CPU µs per append (ds-load: 1 stream c1, 1 stream c64, 64 streams), then server CPU µs per request over the whole run
  local mode="$1" port args=(--auth-tokens-file "$WORK/tokens.json")
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  [ "$mode" = on ] && args+=(--rate-limit 100000000/s)
  "$BIN" serve --store memory --bind "127.0.0.1:$port" "${args[@]}" >"$WORK/server.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.05; done
  local ticks0 ticks1 requests
  ticks0="$(cpu_ticks "$PID")"
  DS_LOAD_AUTHORIZATION="Bearer $TOKEN" "$LOAD" run --base "http://127.0.0.1:$port" --pid "$PID" --workloads p1 \
    --p1-secs "$P1_SECS" | grep -E '^\| P1' | awk -F'|' '{gsub(/ /,"",$3); print $3}' | tr '\n' ' '
  ticks1="$(cpu_ticks "$PID")"
  requests="$(curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$port/metrics" \
    | awk '/^ds_http_requests_total/ {n += $NF} END {printf "%d", n}')"
  # A refused request would mean the budget was reached: the run would not measure what it says.
  if curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$port/metrics" | grep -q 'status="429"'; then
    echo "a request was refused with 429: the budget is too small for this machine" >&2; exit 1
  fi
  # µs of server CPU per request (the clock tick is 1/100 s).
  python3 -c "import sys; t, r = int(sys.argv[1]), int(sys.argv[2]); print(f'{t * 1e4 / max(r, 1):.2f}')" \
    "$((ticks1 - ticks0))" "$requests"
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round mode appends/s: c1 c64 64-streams | server CPU µs/append: c1 c64 64-streams | server CPU µs/request (whole run)"
for r in $(seq 1 "$ROUNDS"); do
  for mode in off on; do
    line="$(run "$mode")"
    echo "$r     $mode  $line" | tee -a "$WORK/results"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$WORK/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def col(mode, i):
    return [float(r[2 + i].replace(",", "")) for r in rows if r[1] == mode]
names = ["appends/s, 1 stream c1", "appends/s, 1 stream c64", "appends/s, 64 streams",
         "server CPU µs/append, 1 stream c1", "server CPU µs/append, 1 stream c64", "server CPU µs/append, 64 streams",
         "server CPU µs/request, whole run"]
for i, name in enumerate(names):
    a, b = col("off", i), col("on", i)
    ma, mb = statistics.median(a), statistics.median(b)
    cost = (ma - mb) / ma if i < 3 else (mb - ma) / ma
    print(f"{name}: median {ma:,.2f} off ({min(a):,.2f}-{max(a):,.2f}), {mb:,.2f} on ({min(b):,.2f}-{max(b):,.2f}): {100 * cost:+.1f}% cost")
PY
