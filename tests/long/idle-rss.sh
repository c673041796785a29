#!/usr/bin/env bash
# Resident memory per idle live reader: 10,000 (DS_IDLE_COUNT) SSE readers,
# then 10,000 long-polls, each on a fresh release server (local store) with
# limits raised to hold them. Appends the table to
# bench/results/<UTC date>-idle-readers.md. Goal: <= 16 KiB each.
set -euo pipefail
cd "$(dirname "$0")/../.."
COUNT="${DS_IDLE_COUNT:-10000}"
OUT="${DS_IDLE_REPORT:-bench/results/$(date -u +%F)-idle-readers.md}"
cargo build --release -p durable-streams -p ds-reliability
ulimit -n "$(( COUNT * 2 + 1000 ))" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
RUN="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$RUN"' EXIT
{
  echo "# Idle live readers: resident memory per connection"
  echo
  echo "**Calibration:** none (resident memory of the server process per held connection, not a throughput report;"
  echo "the client's own memory is not counted)."
  echo
  echo "Produced by \`make test-long\` (tests/long/idle-rss.sh) at git $(git rev-parse --short HEAD): a fresh"
  echo "release \`durable-streams serve --store local --max-live-readers $((COUNT + 1000)) --long-poll-timeout 10m --sse-max-duration 10m --idle-timeout 10m\`"
  echo "per kind; \`ds-reliability idle-rss\` opens 100 readers to warm up, samples VmRSS, opens $COUNT more"
  echo "on a stream that receives nothing (\`offset=now\`), waits until the server holds them all, samples again."
  echo "Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg). Machine: $(nproc) cores, shared."
  echo
  echo "| reader | connections | RSS before (MiB) | RSS after (MiB) | bytes per connection | goal |"
  echo "|---|---:|---:|---:|---:|---|"
} >"$RUN/report.md"
for kind in sse long-poll; do
  PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  target/release/durable-streams serve --store local --data-dir "$RUN/data-$kind" --bind "127.0.0.1:$PORT" \
    --max-live-readers $((COUNT + 1000)) --long-poll-timeout 10m --sse-max-duration 10m --idle-timeout 10m \
    >"$RUN/server-$kind.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -fsS -X PUT -H 'content-type: text/plain' --data 'x' "http://127.0.0.1:$PORT/v1/stream/idle/s" >/dev/null
  line="$(target/release/ds-reliability idle-rss --addr "127.0.0.1:$PORT" --pid "$PID" --kind "$kind" --count "$COUNT")"
  echo "$line"
  # "idle Sse: N connections, RSS A -> B bytes, P bytes per connection, F fds"
  read -r n a b p <<<"$(echo "$line" | sed -E 's/.*: ([0-9]+) connections, RSS ([0-9]+) -> ([0-9]+) bytes, ([0-9]+) bytes.*/\1 \2 \3 \4/')"
  verdict=$([ "$p" -le 16384 ] && echo "met (<= 16 KiB)" || echo "MISSED (> 16 KiB)")
  awk -v k="$kind" -v n="$n" -v a="$a" -v b="$b" -v p="$p" -v v="$verdict" \
    'BEGIN { printf "| %s | %s | %.1f | %.1f | %s | %s |\n", k, n, a / 1048576, b / 1048576, p, v }' >>"$RUN/report.md"
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
done
cp "$RUN/report.md" "$OUT"
cat "$OUT"
grep -q MISSED "$OUT" && exit 1 || true
