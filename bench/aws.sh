#!/usr/bin/env bash
# Called by bench.sh when our binary supports `--store aws`: starts the local
# AWS emulator (infra/aws-emulator), runs P1 and P3 against ours on
# `--store aws` (information only: no peer has this substrate), then counts
# AWS calls per protocol operation from the emulator's counters. Markdown on
# stdout; progress on stderr.
#
# Usage: bench/aws.sh LOAD_BIN OURS_BIN RUN_DIR
# Environment: DS_BENCH_AWS_ARGS (extra `serve` args), DS_BENCH_AWS_P3_ITERS
# (default 200: each wake goes through the emulator), DS_BENCH_AWS_OPS (50).
set -euo pipefail
LOAD="$1"; OURS_BIN="$2"; RUN="$3"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { echo "bench/aws: $*" >&2; }
EMU_DIR="$RUN/aws-emulator"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  "$ROOT/infra/aws-emulator/stop.sh" --dir "$EMU_DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "starting the AWS emulator"
# shellcheck source=emulator-common.sh
. "$ROOT/bench/emulator-common.sh"
start_emulator "$EMU_DIR"
CALLS_URL="$AWS_ENDPOINT_URL/_emulator/calls"
AWS_ARGS="${DS_BENCH_AWS_ARGS:-}"
ITERS="${DS_BENCH_AWS_P3_ITERS:-200}"

# Preflight and call counts first, on a server started here: if ours cannot
# start on --store aws (e.g. the substrate is not wired in yet), say so in one
# line instead of a page of FAIL cells.
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# shellcheck disable=SC2086  # AWS_ARGS is a list of words
env RUST_LOG=warn "$OURS_BIN" serve --bind "127.0.0.1:$PORT" --store aws $AWS_ARGS >"$RUN/ours-aws-calls.log" 2>&1 &
SERVER_PID=$!
UP=0
for _ in $(seq 1 300); do
  if curl -sf -X PUT -H 'content-type: application/octet-stream' "http://127.0.0.1:$PORT/v1/stream/ds-load-probe" >/dev/null 2>&1; then UP=1; break; fi
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
printf '\n## AWS substrate: ours on `--store aws` against the local emulator (information only)\n\n'
if [ "$UP" != 1 ]; then
  printf 'Skipped: `durable-streams serve --store aws` did not come up: %s\n' "$(grep -m1 -v '^\s*$' "$RUN/ours-aws-calls.log" || echo 'no output')"
  exit 0
fi
# The emulator's own ceiling (no modeled delay): P1/P3 below are relative
# figures, and a rate near this line is the emulator's, not ours.
"$LOAD" aws-ceiling --endpoint "$AWS_ENDPOINT_URL" --secs 2
printf '\n### AWS calls per operation (emulator counts)\n\n'
"$LOAD" aws-calls --base "http://127.0.0.1:$PORT" --prefix /v1/stream --calls-url "$CALLS_URL" --ops "${DS_BENCH_AWS_OPS:-50}"
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""

t=$'\t'
echo "ours-aws${t}durable${t}ours${t}/v1/stream${t}$OURS_BIN${t}env RUST_LOG=warn $OURS_BIN serve --bind 127.0.0.1:{port} --store aws $AWS_ARGS" >"$RUN/servers-aws.tsv"
printf '### P1 and P3 on `--store aws`\n\nThe emulator (moto, infra/aws-emulator) serializes DynamoDB calls, so these numbers show relative cost, not AWS performance. P3 uses %s iterations here.\n' "$ITERS" >"$RUN/pre-aws.md"
say "P1 and P3 on --store aws"
DS_BENCH_P3_ITERS="$ITERS" "$LOAD" bench --servers "$RUN/servers-aws.tsv" --work-dir "$RUN" \
  --preamble "$RUN/pre-aws.md" --rounds 1 --workloads p1,p3
