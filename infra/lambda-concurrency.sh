#!/usr/bin/env bash
# The HTTP function's concurrent mode (DS_LAMBDA_CONCURRENT, the template's
# HttpConcurrentInvocations) through a real Lambda runtime emulator: `cargo
# lambda watch --only-lambda-apis` (the Runtime API and the Function URL
# front end, as infra/conformance-lambda.sh uses it) in front of ONE
# lambda-http process, with AWS_LAMBDA_MAX_CONCURRENCY set as Lambda Managed
# Instances set it, over a private local AWS emulator.
#   1. concurrent (DS_LAMBDA_CONCURRENT=on, AWS_LAMBDA_MAX_CONCURRENCY=8):
#      R long-polls parked at a stream's tail are all in flight in the one
#      process at once, and a request beside them is answered at once; one
#      append wakes all R with exactly its bytes; a client that leaves an SSE response midway
#      does not stop the process from serving;
#   2. sequential (DS_LAMBDA_CONCURRENT unset, the default): the same process
#      takes one invocation at a time, so a request behind a parked long-poll
#      waits for it (what the concurrent mode removes).
#
# Needs the debug build of lambda-http (`cargo build -p lambda-http`) and
# cargo-lambda (installed into a venv on first use, as conformance-lambda.sh
# does). Usage: bash infra/lambda-concurrency.sh [READERS] (default 6, at
# most 7: one slot stays free for the request beside them).
# Env: DS_LAMBDA_RUN_DIR (default target/lambda-concurrency): logs.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
RUN="${DS_LAMBDA_RUN_DIR:-$ROOT/target/lambda-concurrency}"
READERS="${1:-6}"
SLOTS=8
rm -rf "$RUN" && mkdir -p "$RUN"
cd "$ROOT"
# shellcheck source=venv.sh
. "$HERE/venv.sh"
LAMBDA_BIN="$(ds_venv cargo-lambda "$HERE/cargo-lambda-constraints.txt" "cargo-lambda==1.9.2")"
export PATH="$LAMBDA_BIN:$PATH"
say() { echo "lambda-concurrency: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }
[ "$READERS" -ge 1 ] && [ "$READERS" -lt "$SLOTS" ] || fail "READERS must be 1..$((SLOTS - 1))"
[ -x "$ROOT/target/debug/lambda-http" ] || fail "build it first: cargo build -p lambda-http"

PIDS=()
cleanup() {
  for pid in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$pid" 2>/dev/null || true; done
  bash "$HERE/aws-emulator/stop.sh" --dir "$RUN/emulator" >/dev/null 2>&1 || true
}
trap cleanup EXIT

eval "$(bash "$HERE/aws-emulator/start.sh" --port 0 --dir "$RUN/emulator")"
while IFS= read -r line; do export "${line?}"; done < <(bash "$HERE/aws-emulator/create-resources")
export DS_LONG_POLL_TIMEOUT=4s DS_METRICS_NAMESPACE=off RUST_LOG="${RUST_LOG:-warn}"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
URL="http://127.0.0.1:$PORT/lambda-url/lambda-http"
export DS_PUBLIC_URL="$URL"
cargo lambda watch --only-lambda-apis --invoke-address 127.0.0.1 --invoke-port "$PORT" >"$RUN/watch.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 1 100); do
  grep -q "starting Runtime server" "$RUN/watch.log" 2>/dev/null && break
  sleep 0.2
done

INSTANCE=""
start_instance() { # CONCURRENT(on|off): one lambda-http process
  local extra=()
  [ "$1" = on ] && extra=(DS_LAMBDA_CONCURRENT=on AWS_LAMBDA_MAX_CONCURRENCY="$SLOTS")
  env "${extra[@]}" AWS_LAMBDA_RUNTIME_API="http://127.0.0.1:$PORT/.rt/lambda-http" AWS_LAMBDA_FUNCTION_NAME=lambda-http \
    AWS_LAMBDA_FUNCTION_VERSION=1 AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512 \
    AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/lambda-http AWS_LAMBDA_LOG_STREAM_NAME="instance-$1" \
    "$ROOT/target/debug/lambda-http" >>"$RUN/lambda-http-$1.log" 2>&1 &
  INSTANCE=$!
  PIDS+=("$INSTANCE")
  for _ in $(seq 1 100); do
    curl -fsS -m 2 "$URL/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  tail -n 20 "$RUN/watch.log" "$RUN/lambda-http-$1.log" >&2
  fail "the HTTP function ($1) did not answer"
}
stop_instance() { kill "$INSTANCE" 2>/dev/null || true; wait "$INSTANCE" 2>/dev/null || true; }
now_ms() { date +%s%3N; }
calls_take() { # -> DynamoDB calls since the last take, "total GetItem Query"
  curl -fsS -X POST "$AWS_ENDPOINT_URL/_emulator/calls/reset" | python3 -c '
import json, sys
d = json.load(sys.stdin)["calls"].get("dynamodb", {})
print(sum(d.values()), d.get("GetItem", 0), d.get("Query", 0))'
}
tail_of() { curl -fsS -o /dev/null -D - "$URL/v1/stream/$1?offset=-1" | tr -d '\r' | awk -F': ' 'tolower($1)=="stream-next-offset"{print $2}'; }
park() { # STREAM OFFSET COUNT TAG: COUNT long-polls in the background, each writes "code body"
  local i
  for i in $(seq 1 "$3"); do
    curl -sS -m 30 -o "$RUN/$4-$i.body" -w '%{http_code}\n' "$URL/v1/stream/$1?offset=$2&live=long-poll" >"$RUN/$4-$i.code" 2>&1 &
    PIDS+=("$!")
  done
}

# ---- 1. concurrent ---------------------------------------------------------------
say "1. one process, DS_LAMBDA_CONCURRENT=on, AWS_LAMBDA_MAX_CONCURRENCY=$SLOTS"
start_instance on
s="conc-$(date +%s)-$$"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H 'content-type: text/plain' --data 'first' "$URL/v1/stream/$s")" = 201 ] \
  || fail "create"
off="$(tail_of "$s")"
park "$s" "$off" "$READERS" lp
sleep 1.5
t0="$(now_ms)"
curl -fsS -m 10 -o /dev/null "$URL/health" || fail "health beside $READERS parked long-polls"
beside=$(( $(now_ms) - t0 ))
say "a request beside $READERS parked long-polls answered in ${beside} ms"
[ "$beside" -lt 1500 ] || fail "the request waited ${beside} ms: the long-polls are not served concurrently"
t0="$(now_ms)"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'content-type: text/plain' --data 'wake' "$URL/v1/stream/$s")" = 204 ] \
  || fail "append"
for i in $(seq 1 "$READERS"); do
  for _ in $(seq 1 100); do [ -s "$RUN/lp-$i.code" ] && break; sleep 0.05; done
  [ "$(cat "$RUN/lp-$i.code")" = 200 ] || fail "reader $i answered $(cat "$RUN/lp-$i.code")"
  [ "$(cat "$RUN/lp-$i.body")" = wake ] || fail "reader $i got '$(cat "$RUN/lp-$i.body")'"
done
woke=$(( $(now_ms) - t0 ))
say "one append woke all $READERS parked readers in ${woke} ms, each with exactly its bytes"
[ "$woke" -lt 3000 ] || fail "the wake took ${woke} ms"

# A client leaving an SSE response midway (the streamed body's POST to the
# Runtime API fails): the process keeps serving.
for _ in 1 2 3; do curl -sS -m 1 -o /dev/null "$URL/v1/stream/$s?offset=$off&live=sse" 2>/dev/null || true; done
sleep 1
kill -0 "$INSTANCE" 2>/dev/null || fail "the process exited after clients left SSE responses"
curl -fsS -m 10 -o /dev/null "$URL/health" || fail "no answer after clients left SSE responses"
park "$s" "$(tail_of "$s")" 2 after
sleep 1
t0="$(now_ms)"
curl -fsS -m 10 -o /dev/null "$URL/health" || fail "health after the SSE clients left"
say "after 3 SSE clients left midway: still serving, a request beside 2 parked long-polls in $(( $(now_ms) - t0 )) ms"
stop_instance

# ---- 2. sequential (the default) -------------------------------------------------
say "2. one process, DS_LAMBDA_CONCURRENT unset"
start_instance off
off="$(tail_of "$s")"
park "$s" "$off" 1 seq
sleep 1
t0="$(now_ms)"
curl -fsS -m 10 -o /dev/null "$URL/health" || fail "health behind a parked long-poll"
behind=$(( $(now_ms) - t0 ))
say "sequential: a request behind one parked long-poll answered in ${behind} ms (it waited for the long-poll's 4 s timeout)"
[ "$behind" -ge 2000 ] || fail "the sequential runner answered beside a parked long-poll (${behind} ms): is DS_LAMBDA_CONCURRENT leaking?"
stop_instance
say "passed"
