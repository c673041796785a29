#!/usr/bin/env bash
# A/B of two durable-streams binaries on P1, memory and local store:
#   BEFORE=path AFTER=path [ROUNDS=5] [P1_SECS=3] bash bench/binaries-ab.sh
# Interleaved (before, after, per store, per round), a fresh process and data
# dir per run on 127.0.0.1; one line per run: P1 appends/s (1 stream c=1,
# 1 stream c=64, 64 streams) then the server's own CPU µs per append for the
# same three (ds-load's --pid figure, which does not depend on how fast the
# load tool is), and the other processes' CPU during the run.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOAD_TARGET="${DS_LOAD_TARGET_DIR:-$ROOT/target-bench}"
CARGO_TARGET_DIR="$LOAD_TARGET" nice cargo build --release -q -p ds-load --manifest-path "$ROOT/Cargo.toml" >&2 || exit 1
LOAD="$LOAD_TARGET/release/ds-load"
declare -A BIN=([before]="${BEFORE:?path of the before binary}" [after]="${AFTER:?path of the after binary}")
RESULTS="$(mktemp)"
trap 'rm -f "$RESULTS"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "${ROUNDS:-5}"); do
  for store in memory local; do
    for side in before after; do
      dir="$(mktemp -d)"; port="$(free_port)"
      args=(serve --store "$store" --bind "127.0.0.1:$port")
      [ "$store" = local ] && args+=(--data-dir "$dir/data")
      RUST_LOG=warn "${BIN[$side]}" "${args[@]}" >"$dir/log" 2>&1 &
      pid=$!
      for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.05; done
      out="$("$LOAD" run --base "http://127.0.0.1:$port" --pid "$pid" --workloads p1 --p1-secs "${P1_SECS:-3}" 2>&1)"
      kill "$pid"; wait "$pid" 2>/dev/null; rm -rf "$dir"
      vals="$(echo "$out" | grep -E '^\| P1' | awk -F'|' '{gsub(/[ ,]/,"",$3); printf "%s ", $3}')"
      others="$(echo "$out" | grep -E '^\| P1' | head -1 | awk -F'|' '{gsub(/ /,"",$5); print $5}')"
      echo "$out" | grep -q '^RESULT: OK' || { echo "$out" >&2; echo "round $r $store $side: ds-load did not report OK" >&2; exit 1; }
      echo "round=$r store=$store side=$side p1=[$vals] others=$others" | tee -a "$RESULTS"
    done
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$RESULTS" <<'PY'
import re, statistics, sys
rows, others = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"round=\d+ store=(\S+) side=(\S+) p1=\[([^\]]*)\] others=(\S*)", line)
    if m:
        rows.setdefault((m[1], m[2]), []).append([float(v) for v in m[3].split()])
        others.setdefault(m[1], []).append(m[4])
names = ["P1 1 stream c=1, appends/s", "P1 1 stream c=64, appends/s", "P1 64 streams, appends/s",
         "server CPU per append, 1 stream c=1 (µs)", "server CPU per append, 1 stream c=64 (µs)",
         "server CPU per append, 64 streams (µs)"]
for store in dict.fromkeys(s for s, _ in rows):
    b, a = rows[(store, "before")], rows[(store, "after")]
    print(f"\n--store {store}: {len(b)}/{len(a)} rounds; others' CPU during the runs: {', '.join(others[store])}")
    print("| measure | before | after | change of the medians |")
    print("|---|---|---|---|")
    for i, name in enumerate(names):
        vb, va = [r[i] for r in b], [r[i] for r in a]
        mb, ma = statistics.median(vb), statistics.median(va)
        fmt = (lambda x: f"{x:,.0f}") if i < 3 else (lambda x: f"{x:.2f}")
        print(f"| {name} | {fmt(mb)} ({fmt(min(vb))}-{fmt(max(vb))}) | {fmt(ma)} ({fmt(min(va))}-{fmt(max(va))}) "
              f"| {100 * (ma - mb) / mb:+.1f}% |")
PY
