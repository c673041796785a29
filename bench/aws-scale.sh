#!/usr/bin/env bash
# The AWS substrate at scale (issue 41): our release server on `--store aws`,
# up to 4 processes of it, over the local AWS emulator with its model of
# AWS's latencies and limits on (infra/aws-emulator/README.md, "Latency and
# limit model"). `ds-load aws-scale` measures, counting at the emulator:
#   - the emulator's own ceiling (model off) and ds-load's: the calibration;
#   - listing (GET /v1/processors, paged) and a subscription's backfill over a
#     prefix matching 10 streams in a table of 10,000, on the Lambda HTTP
#     function's router (tests/lambda-router): DynamoDB calls and read units;
#   - appends: one hot stream with 1, 16, 64 writers over 1, 2, 4 processes,
#     and 64 streams x 1 writer: appends/s, p50/p99, conditional-check
#     failures and retries per append, calls / WCU / RCU / dollars per append;
#   - 1, 100, 1,000 idle long-poll and SSE readers over 1 and 4 processes:
#     DynamoDB reads and RCU per reader-minute, wake latency p50/p99.
# Every run checks that every acknowledged append is readable exactly once.
# Part of `make bench` (about 20 minutes); alone:
#
#   bash bench/aws-scale.sh              # the full matrix; report in bench/results/<UTC date>-aws-scale.md
#   bash bench/aws-scale.sh --quick      # a few minutes: fewer rows, shorter windows, 2,000 streams
#                                        # (report kept in ${DS_BENCH_HOME:-~/.cache/ds-bench})
#   bash bench/aws-scale.sh --sections appends [--rows 1x1x1,1x64x1] [--out FILE]
#
# Rows whose calls would outrun the emulator's own ceiling at AWS's latencies
# (64 independent streams: ~32 transactions/s each) can be measured with every
# modeled latency scaled up alike, against the same run's 1x1x1 row:
#
#   DS_BENCH_AWS_SCALE_ARGS="--model-scale 12 --append-secs 20" \
#     bash bench/aws-scale.sh --sections appends --rows 1x1x1,1x64x64 --out FILE
#
# (not with --quick, which sets its own --append-secs).
#
# Environment: DS_BENCH_AWS_SCALE_OUT (report path), DS_LOAD_TARGET_DIR (cargo
# target dir for ds-load, default target-bench), DS_BENCH_NO_BUILD=1 (bench.sh
# has built everything), DS_BENCH_AWS_SCALE_ARGS (more `ds-load aws-scale` args).
# Prebuilt binaries (a before/after pair from one checkout), with
# DS_BENCH_NO_BUILD=1: DS_BENCH_BIN (durable-streams), DS_BENCH_ROUTER
# (ds-lambda-router), DS_BENCH_LOAD (ds-load); the report names the server's
# revision from a REV file beside DS_BENCH_BIN (else its path), e.g.
#   DS_BENCH_NO_BUILD=1 DS_BENCH_BIN=<before>/durable-streams \
#   DS_BENCH_ROUTER=<before>/ds-lambda-router DS_BENCH_LOAD=<before>/ds-load \
#   bash bench/aws-scale.sh --quick
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { echo "bench/aws-scale: $*" >&2; }

QUICK=0
SECTIONS="listing,appends,readers"
ROWS=""
OUT="${DS_BENCH_AWS_SCALE_OUT:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --sections) SECTIONS="$2"; shift ;;
    --rows) ROWS="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) say "unknown argument $1 (see --help)"; exit 2 ;;
  esac
  shift
done

NAME=aws-scale
# The work dir, builds (ds-load and the release server), load average; the
# calibrations are ds-load aws-scale's own.
# shellcheck source=latency-common.sh
DS_BENCH_CALIBRATION_SECS=0 . "$ROOT/bench/latency-common.sh"
# shellcheck source=emulator-common.sh
. "$ROOT/bench/emulator-common.sh"
EMU_DIR="$WORK/emulator"
cleanup() {
  "$ROOT/infra/aws-emulator/stop.sh" --dir "$EMU_DIR" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
if [ "${DS_BENCH_NO_BUILD:-0}" != 1 ]; then
  cargo build --release -q -p ds-lambda-router >&2
fi
ROUTER="${DS_BENCH_ROUTER:-$ROOT/target/release/ds-lambda-router}"

if [ "$QUICK" = 1 ]; then
  ARGS=(--append-rows "${ROWS:-1x1x1,1x64x1,4x64x1,1x64x64}" --append-secs 3 --reader-modes long-poll,sse
        --reader-counts 1,1000 --reader-processes 1 --reader-window-secs 10 --wake-appends 3
        --list-streams 2000 --calibration-secs 1)
  KIND="quick run"
  OUT="${OUT:-${DS_BENCH_HOME:-$HOME/.cache/ds-bench}/aws-scale-quick-$(date -u +%Y-%m-%dT%H%M%S).md}"
else
  ARGS=()
  [ -n "$ROWS" ] && ARGS=(--append-rows "$ROWS")
  KIND="full run"
  OUT="${OUT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-aws-scale.md}"
fi

say "starting the AWS emulator with the model of AWS on"
start_emulator "$EMU_DIR" --model aws

if [ -n "${DS_BENCH_BIN:-}" ]; then
  REV="$(cat "$(dirname "$DS_BENCH_BIN")/REV" 2>/dev/null || echo "prebuilt $DS_BENCH_BIN")"
else
  REV="$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')"
fi
PRE="$WORK/preamble.md"
{
  echo "Produced by \`bash bench/aws-scale.sh$([ "$QUICK" = 1 ] && echo ' --quick')\` ($KIND; sections: $SECTIONS) with \`ds-load aws-scale\`. Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), Linux $(uname -r); $(rustc --version). Ours: \`durable-streams\` at git $REV, release build, \`serve --store aws --long-poll-timeout 20s\` per process; the emulator (infra/aws-emulator, moto 5.2.5), ds-load and every server process share the machine, all traffic on 127.0.0.1. Load average (1, 5, 15 min) at the start: $LOAD_START."
} >"$PRE"

mkdir -p "$(dirname "$OUT")"
say "running ($KIND: $SECTIONS)"
# shellcheck disable=SC2086  # DS_BENCH_AWS_SCALE_ARGS is a list of words
"$LOAD" aws-scale \
  --server "env RUST_LOG=warn $BIN serve --bind 127.0.0.1:{port} --store aws --long-poll-timeout 20s" \
  --router "env RUST_LOG=warn DS_WEBHOOK_ALLOW_LOOPBACK=true DS_LONG_POLL_TIMEOUT=20s DS_METRICS_NAMESPACE=off $ROUTER --bind 127.0.0.1:{port} --processors {processors}" \
  --emulator "$AWS_ENDPOINT_URL" --sections "$SECTIONS" --work-dir "$WORK" --preamble "$PRE" \
  --title "The AWS substrate at scale — $(date -u '+%Y-%m-%d %H:%M UTC')" \
  "${ARGS[@]}" ${DS_BENCH_AWS_SCALE_ARGS:-} --out "$OUT"
echo "Load average (1, 5, 15 min) at the end: $(cut -d' ' -f1-3 /proc/loadavg | sed 's/ /, /g')." >>"$OUT"
say "report: $OUT"
