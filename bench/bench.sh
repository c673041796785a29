#!/usr/bin/env bash
# make bench: our server against every peer, side by side, as ratios.
#
#   bash bench/bench.sh        (from the repo root; `make bench`)
#
# Installs the peers into the bench cache (bench/peers/install.sh), builds
# ds-load (tests/load) and our release binary, starts every server
# configuration on 127.0.0.1 in turn (A B C D … A B C D …, fresh process and
# data dir each time) and runs P1 P2 P3 P4 P6 P7 against each, after
# calibrating ds-load against a trivial server (and wrk). Every run is
# watched by the busy-machine guard. The markdown report is printed and
# written to bench/results/<UTC date>.md; run it on an otherwise idle machine
# (the report says NOT A QUIET-MACHINE REPORT when the guard saw other work).
# bench/quick.sh sets DS_BENCH_QUICK=1: one round of P1 and P3, report kept in
# the cache dir instead of bench/results.
#
# Environment (all optional):
#   DS_BENCH_HOME        cache for peers and run dirs (default ~/.cache/ds-bench)
#   DS_BENCH_OUT         report path (default bench/results/<date>.md)
#   DS_BENCH_ONLY        comma-separated server names to run (see the list below)
#   DS_BENCH_SKIP_OURS=1 peers only
#   DS_BENCH_AWS=0       skip the --store aws section even if ours supports it
#   DS_BENCH_AWS_ARGS    extra args for `serve --store aws`
#   DS_BENCH_ROUNDS, DS_BENCH_WORKLOADS, DS_BENCH_P1_SECS, DS_BENCH_P1_CONCURRENCY,
#   DS_BENCH_P2_RECORDS, DS_BENCH_P2_READS, DS_BENCH_P3_ITERS, DS_BENCH_P3_SETTLE_MS,
#   DS_BENCH_P4_STREAMS  workload knobs read by ds-load (see `ds-load bench --help`)
#   DS_BENCH_CALIBRATION_SECS  seconds per calibration point (2; 0 skips it)
#   DS_BENCH_BUSY_RETRIES      repeats of a run that saw a busy machine (2)
#   DS_LOAD_THREADS      load threads of ds-load's throughput driver (2)
#   DS_BENCH_LAMBDA=0    skip the Lambda package section (zip sizes, init time)
#   DS_LOAD_TARGET_DIR   cargo target dir for ds-load (default target-bench)
#   DS_BENCH_PROCESSORS=0  skip bench/processors.sh (processor effect latency)
#   DS_BENCH_SUBSCRIPTIONS=0  skip bench/subscriptions.sh (webhook latency)
#   DS_BENCH_AWS_SCALE=0  skip bench/aws-scale.sh (the AWS substrate at scale, ~20 min)
#   DS_BENCH_BASELINE    path of an earlier durable-streams binary, run as the
#                        peers base-memory and base-local (A/B of a change;
#                        DS_BENCH_ONLY=ours-memory,base-memory,ours-local,base-local)
#   DS_BENCH_OURS_BIN    path of an already built durable-streams binary to run as
#                        ours, instead of building target/release/durable-streams
#                        here (so that an A/B run inside a quiet window builds
#                        nothing; its preamble names the binary, not a git commit)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HOME_DIR="${DS_BENCH_HOME:-$HOME/.cache/ds-bench}"
QUICK="${DS_BENCH_QUICK:-0}"
STAMP="$(date -u +%Y-%m-%d)"
START_S=$(date +%s)
say() { echo "bench: $*" >&2; }

if [ "$QUICK" = 1 ]; then
  export DS_BENCH_ROUNDS="${DS_BENCH_ROUNDS:-1}" DS_BENCH_WORKLOADS="${DS_BENCH_WORKLOADS:-p1,p3}"
  OUT="${DS_BENCH_OUT:-$HOME_DIR/quick-$(date -u +%Y-%m-%dT%H%M%S).md}"
else
  OUT="${DS_BENCH_OUT:-$ROOT/bench/results/$STAMP.md}"
fi
mkdir -p "$HOME_DIR" "$(dirname "$OUT")"
RUN="$(mktemp -d "$HOME_DIR/run.XXXXXX")"
export DS_LOAD_PIDFILE="$RUN/server.pid"   # ds-load writes the PID of the server it runs
LOAD_PID=""
AWS_DIR=""
OURS_AWS_PID=""

cleanup() {
  local rc=$?
  # Stop only what this script started, by PID.
  if [ -n "$LOAD_PID" ] && kill -0 "$LOAD_PID" 2>/dev/null; then
    kill "$LOAD_PID" 2>/dev/null || true
    wait "$LOAD_PID" 2>/dev/null || true
  fi
  if [ -f "$DS_LOAD_PIDFILE" ]; then kill "$(cat "$DS_LOAD_PIDFILE")" 2>/dev/null || true; fi
  if [ -n "$OURS_AWS_PID" ]; then kill "$OURS_AWS_PID" 2>/dev/null || true; fi
  if [ -n "$AWS_DIR" ]; then "$ROOT/infra/aws-emulator/stop.sh" --dir "$AWS_DIR" >/dev/null 2>&1 || true; fi
  if [ "$rc" != 0 ]; then
    say "failed (exit $rc); server logs kept in $RUN"
  else
    rm -rf "$RUN"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- peers, tool, our binary --------------------------------------------------
bash "$ROOT/bench/peers/install.sh"
# wrk is the calibration's yardstick for ds-load (Debian package wrk).
if ! command -v wrk >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing wrk (apt-get install wrk)"
    { apt-get install -y -qq wrk || { apt-get update -qq && apt-get install -y -qq wrk; }; } >&2 \
      || say "WARNING: wrk did not install; the calibration will say so"
  else
    say "WARNING: wrk not installed (apt-get install wrk); the calibration will say so"
  fi
fi
NODE_SCRIPT="$HOME_DIR/npm/node-server.mjs"
DSS_BIN="$HOME_DIR/cargo-dss/bin/durable-streams-server"
DS_BIN="$HOME_DIR/cargo-ds/bin/durable-streams-server"

say "building ds-load"
LOAD_TARGET="${DS_LOAD_TARGET_DIR:-$ROOT/target-bench}"
CARGO_TARGET_DIR="$LOAD_TARGET" cargo build --release -q -p ds-load >&2 || { say "ds-load did not build"; exit 1; }
LOAD="$LOAD_TARGET/release/ds-load"

OURS=0
OURS_BIN="${DS_BENCH_OURS_BIN:-$ROOT/target/release/durable-streams}"
if [ "${DS_BENCH_SKIP_OURS:-0}" = 1 ]; then
  say "DS_BENCH_SKIP_OURS=1: peers only"
elif [ -n "${DS_BENCH_OURS_BIN:-}" ]; then
  [ -x "$OURS_BIN" ] || { say "DS_BENCH_OURS_BIN=$OURS_BIN is not an executable"; exit 1; }
  say "ours: $OURS_BIN as built (DS_BENCH_OURS_BIN; not rebuilt)"
  OURS=1
elif cargo metadata --no-deps --format-version 1 2>/dev/null | grep -q '"name":"durable-streams","version"'; then
  say "building our server (cargo build --release -p durable-streams)"
  # Removed first: cargo re-links target/release/durable-streams only when
  # it builds the package or the file is missing, so a binary another build
  # left there (a baseline built into this target dir from another checkout)
  # would otherwise be measured as ours.
  rm -f "$OURS_BIN"
  cargo build --release -p durable-streams >&2
  OURS=1
else
  say "WARNING: package durable-streams is not in the workspace yet: running the peers only"
fi

# ---- the servers under test (tab-separated; see tests/load/src/server.rs) ---
# dss: stream limits raised from its 10 MB/stream, 100 MB total defaults so
# that fast runs are not cut off by quota (every server gets unbounded room).
DSS_ENV="env DS_SERVER__BIND_ADDRESS=127.0.0.1:{port} DS_OBSERVABILITY__RUST_LOG=warn DS_LIMITS__MAX_STREAM_BYTES=8589934592 DS_LIMITS__MAX_MEMORY_BYTES=17179869184"
SERVERS="$RUN/servers.tsv"
{
  t=$'\t'
  if [ "$OURS" = 1 ]; then
    echo "ours-memory${t}memory${t}ours${t}/v1/stream${t}$OURS_BIN${t}env RUST_LOG=warn $OURS_BIN serve --bind 127.0.0.1:{port} --store memory"
  fi
  # An earlier build of ours as a peer: "does this change make us slower?"
  if [ -n "${DS_BENCH_BASELINE:-}" ]; then
    echo "base-memory${t}memory${t}peer${t}/v1/stream${t}$DS_BENCH_BASELINE${t}env RUST_LOG=warn $DS_BENCH_BASELINE serve --bind 127.0.0.1:{port} --store memory"
  fi
  echo "node-memory${t}memory${t}peer${t}/v1/stream${t}-${t}node $NODE_SCRIPT {port}"
  echo "dss-memory${t}memory${t}peer${t}/v1/stream${t}$DSS_BIN${t}$DSS_ENV DS_STORAGE__MODE=memory $DSS_BIN serve"
  echo "ds-memory${t}memory${t}peer${t}-${t}$DS_BIN${t}$DS_BIN --host 127.0.0.1 --port {port} --data-dir {dir} --durability memory"
  if [ "$OURS" = 1 ]; then
    echo "ours-local${t}durable${t}ours${t}/v1/stream${t}$OURS_BIN${t}env RUST_LOG=warn $OURS_BIN serve --bind 127.0.0.1:{port} --store local --data-dir {dir}"
  fi
  if [ -n "${DS_BENCH_BASELINE:-}" ]; then
    echo "base-local${t}durable${t}peer${t}/v1/stream${t}$DS_BENCH_BASELINE${t}env RUST_LOG=warn $DS_BENCH_BASELINE serve --bind 127.0.0.1:{port} --store local --data-dir {dir}"
  fi
  echo "node-file${t}durable${t}peer${t}/v1/stream${t}-${t}node $NODE_SCRIPT {port} {dir}"
  echo "dss-acid${t}durable${t}peer${t}/v1/stream${t}$DSS_BIN${t}$DSS_ENV DS_STORAGE__MODE=acid DS_STORAGE__DATA_DIR={dir} $DSS_BIN serve"
  echo "ds-wal${t}durable${t}peer${t}-${t}$DS_BIN${t}$DS_BIN --host 127.0.0.1 --port {port} --data-dir {dir}"
} >"$SERVERS"

# ---- preamble: what ran where ------------------------------------------------
size_mb() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1f", b / 1e6 }'; }
NODE_EXE="$(readlink -f "$(command -v node)")"
NODE_MODULES_MB="$(du -sb "$HOME_DIR/npm/node_modules" | awk '{ printf "%.1f", $1 / 1e6 }')"
PRE="$RUN/preamble.md"
{
  if [ "$QUICK" = 1 ]; then echo "# Durable Streams quick bench — $(date -u '+%Y-%m-%d %H:%M UTC')"
  else echo "# Durable Streams benchmark — $(date -u '+%Y-%m-%d %H:%M UTC')"; fi
  echo
  echo "Produced by \`make bench\` (\`bash bench/bench.sh\`) with ds-load (tests/load). Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -g | awk '/Mem:/ { print $2 }') GiB RAM, Linux $(uname -r); $(rustc --version); node $(node --version). Load tool and servers share the machine, all traffic on 127.0.0.1. Load average (1, 5, 15 min) at the start: $(cut -d' ' -f1-3 /proc/loadavg | sed 's/ /, /g')."
  if [ "$OURS" = 1 ]; then
    if [ -n "${DS_BENCH_OURS_BIN:-}" ]; then
      echo "Ours: \`$OURS_BIN\` (DS_BENCH_OURS_BIN, built beforehand; sha256 $(sha256sum "$OURS_BIN" | cut -c1-12))."
    else
      echo "Ours: \`durable-streams\` at git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')."
    fi
  else
    echo
    echo "**Ours was not built for this run (package durable-streams not present or skipped): peers only, no ratios.**"
  fi
  echo
  echo "| server | class | what |"
  echo "|---|---|---|"
  [ "$OURS" = 1 ] && echo "| ours-memory | memory | \`durable-streams serve --store memory\` |"
  echo "| node-memory | memory | Node reference server @durable-streams/server 0.3.7 (npm), in-memory store |"
  echo "| dss-memory | memory | durable-streams-server 0.3.0 (crates.io), \`DS_STORAGE__MODE=memory\` |"
  echo "| ds-memory | memory | durable-streams 0.1.5 (crates.io), \`--durability memory\` (no WAL/fsync; still writes stream files) |"
  [ "$OURS" = 1 ] && echo "| ours-local | durable | \`durable-streams serve --store local\` (syncs before acknowledging) |"
  echo "| node-file | durable | Node reference server, file store (\`dataDir\`: log files + LMDB, fdatasync per append) |"
  echo "| dss-acid | durable | durable-streams-server, \`DS_STORAGE__MODE=acid\` (redb, \`Durability::Immediate\`) |"
  echo "| ds-wal | durable | durable-streams, default \`--durability wal\` (group-commit fdatasync before ack) |"
  echo
  echo "Method: ratios compare memory modes with memory modes and durable modes with durable ones. Each server runs in a fresh process (and empty data dir) per round; within a round P6 (start-up) → P4 → P1 → P7 → P2 → P3. P1 and P7 (the throughput workloads) are driven by ds-load's lean HTTP/1.1 driver: one keep-alive connection per writer, request bytes built once with only the sequence digits patched, no allocation per request; P2's timed reads use the same driver on one connection, each body read straight into one buffer of its announced length; the other workloads use a full HTTP client (reqwest). Every workload verifies while it measures: any failed request, or a stream that does not hold exactly the acknowledged 100-byte records (each once, in each writer's order), makes that cell **FAIL** and it is never counted as a result; P7 reads every acknowledged stream back and it must hold exactly its 100 B record. P3 streams are text/plain (SSE carries the records verbatim), the others application/octet-stream. P1's server CPU per append is the server process's user + system time (/proc/<pid>/stat) over the timed run divided by the acknowledged appends: unlike the rate it does not depend on the load tool's ceiling, so it still tells the servers apart where both rates are load-bound (and the Node server counts its whole process, libuv threads included). P4 is VmRSS from /proc/<pid>/status before and after creating the streams (each created holding one 100 B record), divided by their number. P6 cold start is spawn → first successful PUT, polled every 1 ms, each spawn after a \`sync\` (so that no server waits on the write-back of the one before it); a command's leading \`env NAME=value\` is set by ds-load itself, so no server's start includes starting env(1). P6 binary size is the installed file as is; the Node server has no binary (n/a): node itself is $(size_mb "$NODE_EXE") MB and the installed package tree $NODE_MODULES_MB MB. P6 also gives each binary's size after \`strip\` (ours ships stripped; \`bench/profile.sh\` uses the \`profiling\` profile, which keeps symbols). dss runs with its per-stream (10 MB) and total (100 MB) payload limits raised so that no run is cut off by quota."
} >"$PRE"

# ---- the run ------------------------------------------------------------------
say "running: $(cut -f1 "$SERVERS" | paste -sd' ') — rounds ${DS_BENCH_ROUNDS:-3}, workloads ${DS_BENCH_WORKLOADS:-p1,p2,p3,p4,p6,p7}"
rc=0
"$LOAD" bench --servers "$SERVERS" --work-dir "$RUN" --preamble "$PRE" --out "$OUT" >"$RUN/report.md" &
LOAD_PID=$!
wait "$LOAD_PID" || rc=$?
LOAD_PID=""
cat "$RUN/report.md"

# ---- AWS substrate (information only) -----------------------------------------
if [ "$QUICK" != 1 ] && [ "$OURS" = 1 ] && [ "${DS_BENCH_AWS:-1}" != 0 ] \
    && [ -x "$ROOT/infra/aws-emulator/start.sh" ] \
    && "$OURS_BIN" serve --help 2>&1 | grep -qi -- 'aws'; then
  bash "$ROOT/bench/aws.sh" "$LOAD" "$OURS_BIN" "$RUN" >>"$OUT" || say "WARNING: the --store aws section failed (see $RUN)"
  sed -n '/^## AWS substrate/,$p' "$OUT"
fi

# ---- the AWS substrate at scale (its own report with its own calibration lines) ----
if [ "$QUICK" != 1 ] && [ "$OURS" = 1 ] && [ "${DS_BENCH_AWS_SCALE:-1}" != 0 ]; then
  DS_LOAD_TARGET_DIR="$LOAD_TARGET" bash "$ROOT/bench/aws-scale.sh" >&2 \
    || say "WARNING: the AWS scale section failed"
fi

# ---- Lambda package: zip sizes and init time -----------------------------------
if [ "$QUICK" != 1 ] && [ "$OURS" = 1 ] && [ "${DS_BENCH_LAMBDA:-1}" != 0 ]; then
  bash "$ROOT/bench/lambda.sh" "$LOAD" "$RUN" >>"$OUT" || say "WARNING: the Lambda section failed (see $RUN)"
  sed -n '/^## Lambda package/,$p' "$OUT"
fi

# ---- processor effect latency (its own report with its own calibration line) ----
if [ "$QUICK" != 1 ] && [ "$OURS" = 1 ] && [ "${DS_BENCH_PROCESSORS:-1}" != 0 ]; then
  DS_LOAD_TARGET_DIR="$LOAD_TARGET" DS_BENCH_NO_BUILD=1 bash "$ROOT/bench/processors.sh" >&2 \
    || say "WARNING: the processor latency section failed"
fi

# ---- subscription webhook latency (its own report with its own calibration line) ----
if [ "$QUICK" != 1 ] && [ "$OURS" = 1 ] && [ "${DS_BENCH_SUBSCRIPTIONS:-1}" != 0 ]; then
  # ds-load and the server were built above.
  DS_LOAD_TARGET_DIR="$LOAD_TARGET" DS_BENCH_NO_BUILD=1 bash "$ROOT/bench/subscriptions.sh" >&2 \
    || say "WARNING: the subscription webhook latency section failed"
fi

say "report: $OUT ($(( $(date +%s) - START_S )) s)"
exit "$rc"
