#!/usr/bin/env bash
# Issue 43's per-append cost of inline processors: ds-load's P1 (1 stream
# c=1, 1 stream c=64, 64 streams) with 100 B JSON events on JSON streams
# named orders/…, against one server binary in several modes, interleaved
# (every mode once per store per round), each run in a fresh process and
# data dir on 127.0.0.1:
#   none     no processors file; valid events (the baseline)
#   schema   json-schema bound to orders/*; valid events (the accept path)
#   reject   json-schema bound; the same events with qty 0: every append must
#            be answered 400 and the streams stay empty (the reject path;
#            the figures are per refused request)
#   counter  inline counter bound to orders/* (information: a record is
#            written beside every append)
#   both     the issue's example file: json-schema and the inline counter
#
#   BIN=path [MODES="none schema reject"] [STORES="memory local"] [ROUNDS=5] [P1_SECS=3] bash bench/inline.sh
#
# One line per run (appends/s for the three P1 cases, then the server's CPU
# µs per append for the same three: ds-load's --pid figure, which does not
# depend on how fast the load tool is; then the other processes' CPU during
# the first case), then per store the medians (min-max) of each mode and
# each mode's difference to `none`.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOAD_TARGET="${DS_LOAD_TARGET_DIR:-$ROOT/target-bench}"
# nice: the machine is shared; a no-op when ds-load is built already.
CARGO_TARGET_DIR="$LOAD_TARGET" nice cargo build --release -q -p ds-load --manifest-path "$ROOT/Cargo.toml" >&2 || exit 1
LOAD="$LOAD_TARGET/release/ds-load"
BIN="${BIN:?path of the durable-streams binary}"
MODES="${MODES:-none schema reject counter both}"
STORES="${STORES:-memory local}"
WORK="$(mktemp -d)"
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT

# The schema of the issue's example: qty must be an integer >= 1.
SCHEMA='[[processor]]
kind = "json-schema"
slug = "order-schema"
streams = "orders/*"
schemas."order.placed" = '"'''"'{"type":"object","required":["id","qty"],"properties":{"id":{"type":"string"},"qty":{"type":"integer","minimum":1}}}'"'''"'
'
COUNTER='[[processor]]
kind = "counter"
slug = "order-count"
streams = "orders/*"
inline = true
'
processors_of() { # MODE → the processors TOML ("" for none)
  case "$1" in
    none) ;;
    schema | reject) printf '%s' "$SCHEMA" ;;
    counter) printf '%s' "$COUNTER" ;;
    both) printf '%s\n%s' "$SCHEMA" "$COUNTER" ;;
    *) echo "unknown mode $1" >&2; exit 2 ;;
  esac
}
body_of() { [ "$1" = reject ] && echo json-invalid || echo json-event; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "${ROUNDS:-5}"); do
  for store in $STORES; do
    for mode in $MODES; do
      dir="$WORK/run"; rm -rf "$dir"; mkdir -p "$dir"; port="$(free_port)"
      args=(serve --store "$store" --bind "127.0.0.1:$port")
      [ "$store" = local ] && args+=(--data-dir "$dir/data")
      toml="$(processors_of "$mode")"
      [ -n "$toml" ] && { printf '%s' "$toml" >"$dir/processors.toml"; args+=(--processors "$dir/processors.toml"); }
      RUST_LOG=warn "$BIN" "${args[@]}" >"$dir/log" 2>&1 &
      PID=$!
      for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.05; done
      out="$("$LOAD" run --base "http://127.0.0.1:$port" --pid "$PID" --workloads p1 --p1-secs "${P1_SECS:-3}" \
        --p1-body "$(body_of "$mode")" --p1-stream-prefix orders/ 2>&1)"
      kill "$PID"; wait "$PID" 2>/dev/null; PID=""
      echo "$out" | grep -q '^RESULT: OK' || { echo "$out" >&2; cat "$dir/log" >&2; echo "round $r $store $mode: ds-load did not report OK" >&2; exit 1; }
      vals="$(echo "$out" | grep -E '^\| P1' | awk -F'|' '{gsub(/[ ,]/,"",$3); printf "%s ", $3}')"
      others="$(echo "$out" | grep -E '^\| P1' | head -1 | awk -F'|' '{gsub(/ /,"",$5); print $5}')"
      echo "round=$r store=$store mode=$mode p1=[$vals] others=$others" | tee -a "$WORK/results"
    done
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$WORK/results" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"round=\d+ store=(\S+) mode=(\S+) p1=\[([^\]]*)\] others=(\S*)", line)
    if m:
        rows.setdefault((m[1], m[2]), []).append([float(v) for v in m[3].split()])
names = ["appends/s, 1 stream c=1", "appends/s, 1 stream c=64", "appends/s, 64 streams",
         "server CPU µs/append, 1 stream c=1", "server CPU µs/append, 1 stream c=64",
         "server CPU µs/append, 64 streams"]
for store in dict.fromkeys(s for s, _ in rows):
    modes = [m for s, m in rows if s == store]
    print(f"\n{store}: median (min-max) over {len(rows[(store, modes[0])])} rounds; vs none: change of the medians")
    print("| measure | " + " | ".join(modes) + " |")
    print("|---|" + "---|" * len(modes))
    for i, name in enumerate(names):
        cells = []
        base = statistics.median(r[i] for r in rows.get((store, "none"), [[0] * 6]))
        for mode in modes:
            v = [r[i] for r in rows[(store, mode)]]
            med = statistics.median(v)
            cell = f"{med:,.1f} ({min(v):,.1f}-{max(v):,.1f})"
            if mode != "none" and base:
                diff = med - base
                cell += f" {100 * diff / base:+.1f}%" + (f", {diff:+.1f} µs" if i >= 3 else "")
            cells.append(cell)
        print(f"| {name} | " + " | ".join(cells) + " |")
PY
