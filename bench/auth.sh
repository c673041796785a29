#!/usr/bin/env bash
# Cost of access control on append throughput: ds-load P1 against
# `serve --store memory` without access control (A) and with an HS256 JWT on
# every request (B), interleaved A B A B … in fresh processes on 127.0.0.1.
#
#   bash bench/auth.sh            # 4 rounds, 3 s per P1 run
#   ROUNDS=6 P1_SECS=5 bash bench/auth.sh
# Prints one line per run and the medians; states the load average. Also the
# server's own CPU time per request (utime + stime over the requests its
# /metrics counted): steadier than throughput on a shared 2-core machine,
# where the load tool competes with the server for the same cores. That
# time includes ds-load's set-up and verification reads, so it understates
# the per-append share of the JWT check somewhat.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-4}"
P1_SECS="${P1_SECS:-3}"
BIN="${BIN:-target/release/durable-streams}"
LOAD="${LOAD:-target/release/ds-load}"  # the busy-machine guard gets the server PID (--pid)
[ -x "$BIN" ] && [ -x "$LOAD" ] || cargo build --release -p durable-streams -p ds-load
WORK="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
head -c 48 /dev/urandom | base64 | tr -d '\n' >"$WORK/secret"
JWT="$("$BIN" token mint-jwt --secret-file "$WORK/secret" --issuer https://bench.test --audience ds \
  --grant '=read,write,admin' --ttl 1h)"

cpu_ticks() { # utime + stime of a process, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}

run() { # mode → appends/s lines (P1: 1 stream c1, 1 stream c64, 64 streams)
  local mode="$1" port args=()
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  [ "$mode" = jwt ] && args=(--jwt-hs256-secret-file "$WORK/secret" --jwt-issuer https://bench.test --jwt-audience ds)
  "$BIN" serve --store memory --bind "127.0.0.1:$port" ${args[@]+"${args[@]}"} >"$WORK/server.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.05; done
  local auth=""
  [ "$mode" = jwt ] && auth="Bearer $JWT"
  local ticks0 ticks1 requests
  ticks0="$(cpu_ticks "$PID")"
  DS_LOAD_AUTHORIZATION="$auth" "$LOAD" run --base "http://127.0.0.1:$port" --pid "$PID" --workloads p1 --p1-secs "$P1_SECS" \
    | grep -E '^\| P1' | awk -F'|' '{gsub(/ /,"",$3); print $3}' | tr '\n' ' '
  ticks1="$(cpu_ticks "$PID")"
  requests="$(curl -fsS ${auth:+-H "Authorization: $auth"} "http://127.0.0.1:$port/metrics" \
    | awk '/^ds_http_requests_total/ {n += $NF} END {printf "%d", n}')"
  # µs of server CPU per request (the clock tick is 1/100 s).
  python3 -c "import sys; t, r = int(sys.argv[1]), int(sys.argv[2]); print(f'{t * 1e4 / max(r, 1):.2f}')" \
    "$((ticks1 - ticks0))" "$requests"
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round mode   P1(1 stream,c1) P1(1 stream,c64) P1(64 streams) server-CPU-µs/request"
for r in $(seq 1 "$ROUNDS"); do
  for mode in none jwt; do
    line="$(run "$mode")"
    echo "$r     $mode $line" | tee -a "$WORK/results"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$WORK/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for i, name in enumerate(["1 stream, c1", "1 stream, c64", "64 streams"]):
    a = [float(r[2 + i].replace(",", "")) for r in rows if r[1] == "none"]
    b = [float(r[2 + i].replace(",", "")) for r in rows if r[1] == "jwt"]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"P1 {name}: median {ma:.0f} appends/s without, {mb:.0f} with a JWT per request: {100 * (ma - mb) / ma:+.1f}% cost")
a = [float(r[5]) for r in rows if r[1] == "none"]
b = [float(r[5]) for r in rows if r[1] == "jwt"]
ma, mb = statistics.median(a), statistics.median(b)
print(f"server CPU per request: median {ma:.2f} µs without, {mb:.2f} µs with a JWT: {100 * (mb - ma) / ma:+.1f}% cost")
PY
