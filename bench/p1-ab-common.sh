# Sourced by the P1 A/B benchmarks (auth.sh, rate-limit.sh): ds-load P1
# against `serve --store memory` in mode A and mode B, interleaved A B A B …
# in fresh processes on 127.0.0.1; one line per run, then medians, spreads
# and the cost of B against A.
#
# The sourcing script sets ROUNDS, P1_SECS, BIN, LOAD and defines:
#   server_args MODE   the serve flags of that mode, one per line
#   auth_of MODE       the Authorization header value its requests carry ("" for none)
# then calls `p1_ab A B "what B adds"`.
#
# The steady figures are the server's own CPU time per append that ds-load
# measures for each P1 run (`--pid`), and per request over the whole run
# (utime + stime over the requests its /metrics counted, set-up and
# read-back included): they do not depend on how fast the load tool is.
# Throughput on a shared 2-core machine moves ±15% from run to run.

[ -x "$BIN" ] && [ -x "$LOAD" ] || cargo build --release -p durable-streams -p ds-load
WORK="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT

cpu_ticks() { # utime + stime of a process, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# One P1 run in MODE → appends/s (1 stream c1, 1 stream c64, 64 streams),
# server CPU µs per append (the same three), server CPU µs per request over
# the whole run.
p1_run() {
  local mode="$1" port auth args=()
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  mapfile -t args < <(server_args "$mode")
  auth="$(auth_of "$mode")"
  "$BIN" serve --store memory --bind "127.0.0.1:$port" ${args[@]+"${args[@]}"} >"$WORK/server.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.05; done
  local ticks0 ticks1 requests
  ticks0="$(cpu_ticks "$PID")"
  DS_LOAD_AUTHORIZATION="$auth" "$LOAD" run --base "http://127.0.0.1:$port" --pid "$PID" --workloads p1 \
    --p1-secs "$P1_SECS" | grep -E '^\| P1' | awk -F'|' '{gsub(/ /,"",$3); print $3}' | tr '\n' ' '
  ticks1="$(cpu_ticks "$PID")"
  curl -fsS ${auth:+-H "Authorization: $auth"} "http://127.0.0.1:$port/metrics" >"$WORK/metrics"
  requests="$(awk '/^ds_http_requests_total/ {n += $NF} END {printf "%d", n}' "$WORK/metrics")"
  # A refused request means the run did not measure what it says.
  if grep -qE 'status="(401|403|429)"' "$WORK/metrics"; then
    echo "$mode: requests were refused (401/403/429): the run does not measure what it says" >&2
    kill "$PID"; exit 1
  fi
  # µs of server CPU per request (the clock tick is 1/100 s).
  python3 -c "import sys; t, r = int(sys.argv[1]), int(sys.argv[2]); print(f'{t * 1e4 / max(r, 1):.2f}')" \
    "$((ticks1 - ticks0))" "$requests"
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

p1_ab() { # A B "what B adds"
  local a="$1" b="$2" adds="$3" line
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "round mode appends/s: c1 c64 64-streams | server CPU µs/append: c1 c64 64-streams | server CPU µs/request (whole run)"
  for r in $(seq 1 "$ROUNDS"); do
    for mode in "$a" "$b"; do
      line="$(p1_run "$mode")"
      echo "$r     $mode  $line" | tee -a "$WORK/results"
    done
  done
  echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$WORK/results" "$a" "$b" "$adds" <<'PY'
import statistics, sys
path, a_mode, b_mode, adds = sys.argv[1:5]
rows = [l.split() for l in open(path)]
def col(mode, i):
    return [float(r[2 + i].replace(",", "")) for r in rows if r[1] == mode]
names = ["appends/s, 1 stream c1", "appends/s, 1 stream c64", "appends/s, 64 streams",
         "server CPU µs/append, 1 stream c1", "server CPU µs/append, 1 stream c64", "server CPU µs/append, 64 streams",
         "server CPU µs/request, whole run"]
print(f"cost of {adds} ({b_mode} against {a_mode}):")
for i, name in enumerate(names):
    a, b = col(a_mode, i), col(b_mode, i)
    ma, mb = statistics.median(a), statistics.median(b)
    cost = (ma - mb) / ma if i < 3 else (mb - ma) / ma
    print(f"{name}: median {ma:,.2f} {a_mode} ({min(a):,.2f}-{max(a):,.2f}), "
          f"{mb:,.2f} {b_mode} ({min(b):,.2f}-{max(b):,.2f}): {100 * cost:+.1f}% cost")
PY
}
