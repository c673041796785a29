#!/usr/bin/env bash
# The Lambda functions through a real Lambda runtime emulator: `cargo lambda
# watch` (cargo-lambda from PyPI, pinned) provides the Lambda Runtime API and
# the Function URL front end; behind them run the debug builds of lambda-http
# (8 instances, so a waiting long-poll or SSE holds one instance as on Lambda)
# and lambda-alarm (one warm instance for every alarm), later lambda-processor,
# with a private local AWS emulator behind those.
#   1. the alarm function with `cargo lambda invoke` and the real event: the
#      Input of the schedule the HTTP function created (what EventBridge
#      Scheduler would send; the emulator never fires schedules): an expired
#      stream with an S3 object is deleted and its object purged, a sliding TTL
#      is re-armed twice by the same warm instance, malformed input fails the
#      invocation;
#   2. the conformance suite with its subscription tests through the HTTP
#      function's Function URL path (http://127.0.0.1:PORT/lambda-url/lambda-http,
#      streamed responses). Subscriptions run on the AWS plane: the HTTP
#      function only serves their API; wakes, deliveries, leases and retries
#      come from the processor function (one instance), which `lambda-pump`
#      (tests/lambda-pump) feeds as Lambda's event source mappings would: the
#      table's stream records filtered like the template's FilterCriteria, and
#      the task queue's delayed messages (subscriptions' times);
#   3. the processor function (one instance, an outbox named by DS_PROCESSORS_TOML)
#      with `cargo lambda invoke` and a real DynamoDB Stream event: the table's
#      stream records of appends made through the Function URL, filtered like
#      the template's FilterCriteria; delivered twice, relayed once; its EMF
#      ProcessorLag line for the outbox equals the lag the operator API (the
#      HTTP function, restarted with the same DS_PROCESSORS_TOML) reports for it;
#   4. the AWS calls each function made (counted at the emulator) against its
#      IAM policy in template.yaml (deploy/check_template.py --observed).
#
# The instances are started here (`cargo lambda watch --only-lambda-apis`)
# from the binaries `cargo build --workspace --all-targets` makes, the build
# `make test` has already done: watch's own `cargo run` would build every
# dependency once more with another feature set (minutes on 2 cores).
#
# Usage (from anywhere): bash infra/conformance-lambda.sh
# Env: DS_LAMBDA_RUN_DIR (default target/conformance-lambda): logs and calls.json.
# Last line: the suite's "N passed, N failed, N skipped"; exit 1 on any failure.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
RUN="${DS_LAMBDA_RUN_DIR:-$ROOT/target/conformance-lambda}"
rm -rf "$RUN" && mkdir -p "$RUN"
cd "$ROOT"
# shellcheck source=venv.sh
. "$HERE/venv.sh"
LAMBDA_BIN="$(ds_venv cargo-lambda "$HERE/cargo-lambda-constraints.txt" "cargo-lambda==1.9.2")"
export PATH="$LAMBDA_BIN:$PATH"
say() { echo "conformance-lambda: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

PIDS=()
cleanup() {
  for pid in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$pid" 2>/dev/null || true; done
  bash "$HERE/aws-emulator/stop.sh" --dir "$RUN/emulator" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "building the functions (debug; a no-op after make test's build)"
cargo build --workspace --all-targets --locked 2>"$RUN/build.log" || cargo build --workspace --all-targets 2>>"$RUN/build.log" \
  || { tail -n 30 "$RUN/build.log" >&2; fail "build"; }

eval "$(bash "$HERE/aws-emulator/start.sh" --port 0 --dir "$RUN/emulator")"
while IFS= read -r line; do export "${line?}"; done < <(bash "$HERE/aws-emulator/create-resources")
VPY="$(bash "$HERE/aws-emulator/start.sh" --install-only | tail -n 1)"
tool() { "$VPY" "$HERE/deploy/emulator_tool.py" "$@"; }
CALLS="$RUN/calls.json"

# The functions' environment, as template.yaml sets it (the ARNs name the
# emulator's account; nothing here reaches AWS).
export DS_AWS_ALARM_TARGET_ARN="arn:aws:lambda:us-east-1:000000000000:function:lambda-alarm"
export DS_AWS_SCHEDULER_ROLE_ARN="arn:aws:iam::000000000000:role/durable-streams-scheduler"
export DS_AWS_SCHEDULE_DEAD_LETTER_ARN="arn:aws:sqs:us-east-1:000000000000:durable-streams-schedule-dlq"
export DS_LONG_POLL_TIMEOUT=500ms RUST_LOG="${RUST_LOG:-warn}"
# The suite's webhook receivers listen on 127.0.0.1 (development setting).
export DS_WEBHOOK_ALLOW_LOOPBACK=1

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
URL="http://127.0.0.1:$PORT/lambda-url/lambda-http"
# The HTTP function's own URLs (Location, subscription callbacks, JWKS) name
# the runtime emulator's Function URL path, as a custom domain would.
export DS_PUBLIC_URL="$URL"
say "cargo lambda watch --only-lambda-apis on 127.0.0.1:$PORT (log $RUN/watch.log)"
cargo lambda watch --only-lambda-apis --invoke-address 127.0.0.1 --invoke-port "$PORT" >"$RUN/watch.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 1 100); do
  grep -q "starting Runtime server" "$RUN/watch.log" 2>/dev/null && break
  sleep 0.2
done
INSTANCES=() # "function pid" of every instance: each must outlive the suite
start_instances() { # FUNCTION COUNT: instances polling the runtime API for FUNCTION
  local i
  for i in $(seq 1 "$2"); do
    # An access key id of its own (moto takes any): the emulator counts each
    # function's calls apart (calls-add NAME=KEY).
    AWS_ACCESS_KEY_ID="ds-$1" AWS_LAMBDA_RUNTIME_API="http://127.0.0.1:$PORT/.rt/$1" AWS_LAMBDA_FUNCTION_NAME="$1" \
    AWS_LAMBDA_FUNCTION_VERSION=1 AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512 \
    AWS_LAMBDA_LOG_GROUP_NAME="/aws/lambda/$1" AWS_LAMBDA_LOG_STREAM_NAME="instance-$i" \
      "$ROOT/target/debug/$1" >>"$RUN/$1.log" 2>&1 &
    PIDS+=("$!")
    INSTANCES+=("$1 $!")
  done
}
start_instances lambda-http 8
start_instances lambda-alarm 1
for _ in $(seq 1 100); do
  curl -fsS "$URL/health" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "$URL/health" >/dev/null || { tail -n 30 "$RUN/watch.log" "$RUN/lambda-http.log" >&2; fail "the HTTP function did not answer"; }

# ---- 1. the alarm function with real schedule inputs --------------------------
# First, while the schedule group holds few schedules (looking one up lists them).
tool calls-drop
invoke_alarm() { # EVENT_FILE -> prints the function's answer; fails if the invocation failed
  cargo lambda invoke lambda-alarm --invoke-address 127.0.0.1 --invoke-port "$PORT" --data-file "$1"
}
at_ms() { "$VPY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["at_ms"])' "$1"; }
sleep_past() { # EPOCH_MS
  "$VPY" -c 'import sys,time; time.sleep(max(0, int(sys.argv[1]) / 1000 + 0.2 - time.time()))' "$1"
}
status() { curl -s -m 30 -o /dev/null -w '%{http_code}' "$@"; }
base="alarm-$(date +%s)-$$"

# A: an expired stream whose body is an S3 object (over the 32 KiB inline threshold).
head -c 40000 /dev/zero | tr '\0' 'x' >"$RUN/big.txt"
[ "$(status -X PUT -H 'content-type: text/plain' -H 'stream-ttl: 1' --data-binary @"$RUN/big.txt" "$URL/v1/stream/$base/expire")" = 201 ] \
  || fail "could not create the expiring stream"
tool calls-add "$CALLS" HttpFunction

tool alarm-event "$base/expire" >"$RUN/expire.json"
tool objects >"$RUN/objects-before.txt"
tool calls-drop
sleep_past "$(at_ms "$RUN/expire.json")"
invoke_alarm "$RUN/expire.json" >"$RUN/alarm-expire.out" 2>&1 || { cat "$RUN/alarm-expire.out" >&2; fail "alarm A"; }
tool calls-add "$CALLS" AlarmFunction
[ "$(status "$URL/v1/stream/$base/expire")" = 404 ] || fail "the alarm did not delete the expired stream"
tool objects >"$RUN/objects-after.txt"
purged="$(comm -23 <(sort "$RUN/objects-before.txt") <(sort "$RUN/objects-after.txt") | wc -l)"
[ "$purged" -ge 1 ] || fail "the expired stream's S3 object was not purged"
say "alarm: expired stream deleted, $purged S3 object(s) purged"
tool calls-drop

# B: a sliding TTL that activity keeps moving (long enough for this script's
# own steps between two alarms).
[ "$(status -X PUT -H 'content-type: text/plain' -H 'stream-ttl: 10' --data 'x' "$URL/v1/stream/$base/slide")" = 201 ] \
  || fail "could not create the sliding stream"
tool calls-add "$CALLS" HttpFunction
tool alarm-event "$base/slide" >"$RUN/slide-1.json"
tool calls-drop
for round in 1 2; do
  at="$(at_ms "$RUN/slide-$round.json")"
  sleep_past "$((at - 2000))"
  code="$(status "$URL/v1/stream/$base/slide?offset=-1")"
  [ "$code" = 200 ] || fail "round $round: read of the sliding stream answered $code"
  tool calls-add "$CALLS" HttpFunction
  sleep_past "$at"
  invoke_alarm "$RUN/slide-$round.json" >"$RUN/alarm-slide-$round.out" 2>&1 \
    || { cat "$RUN/alarm-slide-$round.out" >&2; fail "alarm B round $round"; }
  tool calls-add "$CALLS" AlarmFunction
  code="$(status -I "$URL/v1/stream/$base/slide")"
  [ "$code" = 200 ] || fail "round $round: HEAD of the sliding stream answered $code"
  tool calls-add "$CALLS" HttpFunction
  tool alarm-event "$base/slide" >"$RUN/slide-$((round + 1)).json"
  tool calls-drop
  next="$(at_ms "$RUN/slide-$((round + 1)).json")"
  [ "$next" -gt "$at" ] || fail "round $round: the alarm was not re-armed ($at -> $next)"
  say "alarm: round $round re-armed the sliding TTL ($at -> $next)"
done

echo '{"nope": 1}' >"$RUN/malformed.json"
if invoke_alarm "$RUN/malformed.json" >"$RUN/alarm-malformed.out" 2>&1; then
  cat "$RUN/alarm-malformed.out" >&2; fail "malformed input did not fail the invocation"
fi
grep -q "not an alarm input" "$RUN/alarm-malformed.out" || { cat "$RUN/alarm-malformed.out" >&2; fail "malformed input: no reason given"; }
say "alarm: malformed input fails the invocation (so Scheduler retries, then dead-letters)"
tool calls-drop

# ---- 2. conformance through the Function URL ---------------------------------
# The subscription plane: the processor function (no processors of its own)
# and the pump that plays its event sources.
while IFS= read -r line; do export "${line?}"; done < <(tool processor-resources)
start_instances lambda-processor 1
PLANE_PID="${PIDS[${#PIDS[@]}-1]}"
AWS_ACCESS_KEY_ID=ds-pump "$ROOT/target/debug/lambda-pump" "http://127.0.0.1:$PORT/2015-03-31/functions/lambda-processor/invocations" \
  >"$RUN/pump.log" 2>&1 &
PUMP_PID=$!
PIDS+=("$PUMP_PID")
tool calls-drop
say "conformance suite (with subscriptions) against $URL"
set +e
# Every request here crosses cargo lambda's emulated runtime API and moto
# (Python): hops production does not have. On a busy 2-core machine two or
# three of the suite's request-heavy property tests did not finish within
# vitest's 5 s default per test (5002-5010 ms); with the limit raised they
# passed, the slowest in 14.9 s at load average 6. 30 s still catches a
# hang; the 10 slowest tests are listed with their times.
# A function instance that exits (Lambda would start another; this emulator
# does not) is a failure of its own, and ends the suite at once: with every
# instance gone each remaining test would wait out its 30 s.
dead_instance() {
  local entry
  for entry in "${INSTANCES[@]}"; do
    kill -0 "${entry#* }" 2>/dev/null || { echo "$entry"; return 0; }
  done
  return 1
}
DS_CONFORMANCE_LIST_SKIPPED=1 DS_CONFORMANCE_SLOWEST=10 setsid bash "$ROOT/tests/conformance/run.sh" --subscriptions --long-poll-timeout-ms 500 "$URL" -- --testTimeout=30000 \
  >"$RUN/conformance.out" 2>"$RUN/conformance.err" &
SUITE_PID=$!
DEAD=""
while kill -0 "$SUITE_PID" 2>/dev/null; do
  if DEAD="$(dead_instance)"; then kill -- "-$SUITE_PID" 2>/dev/null || true; break; fi
  sleep 1
done
wait "$SUITE_PID"
SUITE_RC=$?
SUITE="$(cat "$RUN/conformance.out")"
set -e
[ -z "$DEAD" ] && DEAD="$(dead_instance)" || true
[ -z "$DEAD" ] || { tail -n 5 "$RUN/${DEAD% *}.log" >&2; fail "instance ${DEAD#* } of ${DEAD% *} exited during the suite (log: $RUN/${DEAD% *}.log)"; }
grep -v '^SKIPPED: ' "$RUN/conformance.err" >&2 || true
grep '^SKIPPED: ' "$RUN/conformance.err" | sed 's/^/conformance-lambda: /' >&2 || true
kill -0 "$PUMP_PID" 2>/dev/null || { tail -n 20 "$RUN/pump.log" >&2; fail "lambda-pump exited during the suite (log: $RUN/pump.log)"; }
tool calls-add "$CALLS" HttpFunction=ds-lambda-http ProcessorFunction=ds-lambda-processor
# The plane's instance and pump stop: the next step delivers by hand to an
# instance with processors of its own.
kill "$PUMP_PID" 2>/dev/null || true; wait "$PUMP_PID" 2>/dev/null || true
kill "$PLANE_PID" 2>/dev/null || true; wait "$PLANE_PID" 2>/dev/null || true

# ---- 3. the processor function with a real DynamoDB Stream event ----------------
# An outbox (DS_PROCESSORS_TOML, as the template's Processors parameter passes it):
# appends through the Function URL, the table's stream records of the source
# read from the emulator's DynamoDB Stream and filtered like the template's
# FilterCriteria, delivered by `cargo lambda invoke`; then the same batch again
# (a redelivery): the target holds each event once.
while IFS= read -r line; do export "${line?}"; done < <(tool processor-resources)
tool calls-drop
# The HTTP function's instances start again with the processors named too
# (DS_PROCESSORS_TOML turns on its operator API, /v1/processors), as the
# template's Processors parameter configures both functions.
for entry in "${INSTANCES[@]}"; do
  [ "${entry% *}" = lambda-http ] || continue
  kill "${entry#* }" 2>/dev/null || true; wait "${entry#* }" 2>/dev/null || true
done
LP_PROCESSORS='[[processor]]
kind = "outbox"
slug = "lp-relay"
streams = "lp/*"
target = "lp-out"
create_target = true
template = { type = "relayed", payload = "$/payload" }'
DS_PROCESSORS_TOML="$LP_PROCESSORS" start_instances lambda-http 2
DS_PROCESSORS_TOML="$LP_PROCESSORS" start_instances lambda-processor 1
for _ in $(seq 1 100); do
  curl -fsS "$URL/health" >/dev/null 2>&1 && break
  sleep 0.2
done
put_event() { curl -fsS -o /dev/null -w '%{http_code}' -X "$1" -H 'content-type: application/json' "$URL/v1/stream/lp/1" ${2:+--data "$2"}; }
[ "$(put_event PUT)" = 201 ] || fail "processor: creating lp/1"
[ "$(put_event POST '{"type":"order","payload":{"n":1}}')" = 204 ] || fail "processor: append 1"
[ "$(put_event POST '{"type":"order","payload":{"n":2}}')" = 204 ] || fail "processor: append 2"
tool calls-add "$CALLS" HttpFunction
tool stream-event lp/1 >"$RUN/processor-event.json"
tool calls-drop
relayed() { curl -fsS "$URL/v1/stream/lp-out?offset=-1" 2>/dev/null || echo '(no lp-out)'; }
for round in first redelivered; do
  cargo lambda invoke lambda-processor --invoke-address 127.0.0.1 --invoke-port "$PORT" \
    --data-file "$RUN/processor-event.json" >"$RUN/processor-$round.out" 2>&1 \
    || { cat "$RUN/processor-$round.out" >&2; tail -n 20 "$RUN/lambda-processor.log" >&2; fail "processor: the $round invocation failed"; }
  grep -q '"batchItemFailures":\[\]' "$RUN/processor-$round.out" \
    || { cat "$RUN/processor-$round.out" >&2; fail "processor: the $round invocation reported failures"; }
  tool calls-add "$CALLS" ProcessorFunction
  got="$(relayed)"
  [ "$got" = '[{"payload":{"n":1},"type":"relayed"},{"payload":{"n":2},"type":"relayed"}]' ] \
    || { tail -n 20 "$RUN/lambda-processor.log" >&2; fail "processor: after the $round invocation lp-out holds $got"; }
  tool calls-drop
done
say "processor: $("$VPY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["Records"]))' "$RUN/processor-event.json") stream record(s) of lp/1 → both events relayed to lp-out once, also after a redelivery"

# The processor function's EMF lag line (ProcessorLag of lp-relay, written
# after each invocation) against the operator API's lag for the same
# processor and stream: GET /v1/processors/lp-relay/streams/lp/1 of the
# HTTP function, whose instances run with the same DS_PROCESSORS_TOML here.
emf_lag="$(grep -F '"ProcessorLag"' "$RUN/lambda-processor.log" | grep -F '"processor":"lp-relay"' | tail -n 1 \
  | "$VPY" -c 'import json,sys; line=sys.stdin.read().strip(); print(json.loads(line)["ProcessorLag"] if line else "")')"
[ -n "$emf_lag" ] || { tail -n 20 "$RUN/lambda-processor.log" >&2; fail "processor: no EMF ProcessorLag line for lp-relay"; }
api_lag=""
for _ in $(seq 1 50); do
  api_lag="$(curl -fsS "$URL/v1/processors/lp-relay/streams/lp/1" 2>/dev/null \
    | "$VPY" -c 'import json,sys; print(json.load(sys.stdin)["lag"])' 2>/dev/null)" && [ -n "$api_lag" ] && break
  sleep 0.2
done
tool calls-add "$CALLS" HttpFunction
[ -n "$api_lag" ] || { tail -n 20 "$RUN/lambda-http.log" >&2; fail "processor: the operator API did not answer for lp-relay on lp/1"; }
[ "$emf_lag" = "$api_lag" ] || fail "processor: EMF ProcessorLag $emf_lag, operator API lag $api_lag"
say "processor: EMF ProcessorLag of lp-relay = $emf_lag = the operator API's lag for lp-relay on lp/1"

# ---- 4. the calls each function made against its IAM policy -------------------
say "AWS calls seen: $(tr -d ' \n' <"$CALLS")"
SAM_BIN="$(ds_venv sam-cli "$HERE/sam-cli-constraints.txt" "aws-sam-cli==1.170.0")"
"$SAM_BIN/python" "$HERE/deploy/check_template.py" --root "$ROOT" --observed "$CALLS" >"$RUN/iam-check.log" 2>&1 \
  || { grep -v '^ok: ' "$RUN/iam-check.log" >&2; fail "the functions' IAM policies do not cover what they did"; }
grep '(observed)' "$RUN/iam-check.log" | sed 's/^/conformance-lambda: /' >&2 || true

echo "$SUITE" | tail -n 1
[ "$SUITE_RC" = 0 ] || exit 1
