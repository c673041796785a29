#!/usr/bin/env bash
# The Lambda package in numbers: builds the zips (infra/build-lambda.sh,
# profile `lambda`), then starts each `bootstrap` under a stand-in Lambda
# Runtime API on 127.0.0.1 (`ds-load lambda-init`) against the local AWS
# emulator: init time = process start → first poll for an event, over
# DS_BENCH_LAMBDA_RUNS starts (default 10), each start answering one event
# correctly. Markdown on stdout, progress on stderr. Goals (issue 11): each
# zip ≤ 8 MB, init ≤ 50 ms.
#
#   bash bench/lambda.sh [LOAD_BIN [RUN_DIR]]     (bench.sh passes both)
#
# Environment: DS_BENCH_LAMBDA_ZIPS (a directory holding
# <function>/bootstrap.zip: skip the build), DS_BENCH_LAMBDA_RUNS.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { echo "bench/lambda: $*" >&2; }
LOAD="${1:-}"
RUN="${2:-$(mktemp -d)}"
if [ -z "$LOAD" ]; then
  LOAD_TARGET="${DS_LOAD_TARGET_DIR:-$ROOT/target-bench}"
  CARGO_TARGET_DIR="$LOAD_TARGET" cargo build --release -q -p ds-load >&2
  LOAD="$LOAD_TARGET/release/ds-load"
fi
EMU_DIR="$RUN/lambda-emulator"
cleanup() { "$ROOT/infra/aws-emulator/stop.sh" --dir "$EMU_DIR" >/dev/null 2>&1 || true; }
trap cleanup EXIT

ZIPS="${DS_BENCH_LAMBDA_ZIPS:-}"
if [ -z "$ZIPS" ]; then
  # This machine's architecture: the zips' bootstraps run here.
  say "building the Lambda zips (bash infra/build-lambda.sh --arch x86_64)"
  bash "$ROOT/infra/build-lambda.sh" --arch x86_64 >&2
  ZIPS="${CARGO_TARGET_DIR:-$ROOT/target}/lambda/x86_64"
fi

say "starting the AWS emulator"
# shellcheck source=emulator-common.sh
. "$ROOT/bench/emulator-common.sh"
start_emulator "$EMU_DIR"
# The processor function's queues and revival schedule group (DS_PROCESSOR_*).
VPY="$("$ROOT/infra/aws-emulator/start.sh" --install-only | tail -n 1)"
while IFS= read -r line; do
  case "$line" in *=*) export "${line?}" ;; esac
done < <("$VPY" "$ROOT/infra/deploy/emulator_tool.py" processor-resources)

printf '\n## Lambda package: zip size and init time\n\n'
printf 'Zips from `infra/build-lambda.sh` (Cargo profile `lambda`: opt-level s, fat LTO, 1 codegen unit, stripped; AWS SDK without default features). Init = spawn of `bootstrap` → its first `GET /runtime/invocation/next` on a stand-in Runtime API on 127.0.0.1 (ds-load lambda-init), with the AWS clients pointed at the local emulator; every start then answers one event and must answer it correctly. Lambda adds its own sandbox start on top. Goals: zip ≤ 8 MB, init ≤ 50 ms. Machine load average at the start: %s.\n\n' \
  "$(cut -d' ' -f1-3 /proc/loadavg | sed 's/ /, /g')"
echo "| function | zip (MB) | bootstrap (MB) | init median (ms) | min–max (ms) | starts | first event |"
echo "|---|---:|---:|---:|---:|---:|---|"
for f in lambda-http:http lambda-alarm:alarm lambda-processor:processor; do
  name="${f%%:*}"; probe="${f##*:}"
  zip="$ZIPS/$name/bootstrap.zip"
  [ -s "$zip" ] || { say "missing $zip"; exit 1; }
  dir="$RUN/$name"; rm -rf "$dir"; mkdir -p "$dir"
  python3 -m zipfile -e "$zip" "$dir"
  chmod +x "$dir/bootstrap"
  RUST_LOG=warn "$LOAD" lambda-init --name "$name" --zip "$zip" --bootstrap "$dir/bootstrap" \
    --probe "$probe" --log "$RUN/$name.log"
done
