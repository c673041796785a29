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
CARGO_TARGET_DIR="$LOAD_TARGET" cargo build --release -q -p ds-load --manifest-path "$ROOT/Cargo.toml" >&2 || exit 1
LOAD="$LOAD_TARGET/release/ds-load"
declare -A BIN=([before]="${BEFORE:?path of the before binary}" [after]="${AFTER:?path of the after binary}")
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
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
      echo "round=$r store=$store side=$side p1=[$vals] others=$others"
    done
  done
done
