#!/usr/bin/env bash
# `make test`: everything, on a fresh clone. Installs what it needs (the
# conformance suite from npm, moto from PyPI), starts what it needs (the AWS
# emulator, our server per store) on 127.0.0.1, and stops what it started by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
RUN="$ROOT/target/test-run"
rm -rf "$RUN" && mkdir -p "$RUN"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$pid" 2>/dev/null || true; done
  [ -f "$RUN/aws-emulator/emulator.pid" ] && bash infra/aws-emulator/stop.sh --dir "$RUN/aws-emulator" >/dev/null 2>&1 || true
}
trap cleanup EXIT
step() { echo; echo "==== $* ($(date +%T))"; }

for tool in cargo node npm python3; do
  command -v "$tool" >/dev/null || { echo "make test needs $tool on PATH" >&2; exit 2; }
done

step "build (debug, all targets)"
cargo build --workspace --all-targets --locked 2>/dev/null || cargo build --workspace --all-targets
# The end-to-end tests run this binary instead of building `-p durable-streams`
# themselves: a build of one package unifies dependency features differently
# from the workspace build and recompiled the AWS SDK (27 minutes on a busy
# 2-core machine).
export DS_SERVER_BIN="$ROOT/target/debug/durable-streams"

step "lints: cargo fmt --check, cargo clippy -D warnings, import cycles between a crate's files"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
python3 tests/lint/import-cycles.py

step "AWS emulator (moto, pinned, from PyPI) on 127.0.0.1"
eval "$(bash infra/aws-emulator/start.sh --port 0 --dir "$RUN/aws-emulator")"
eval "$(bash infra/aws-emulator/create-resources | sed 's/^/export /')"
export DS_TEST_REQUIRE_AWS=1
python3 infra/aws-emulator/selftest.py --endpoint "$AWS_ENDPOINT_URL" --only health,query

step "cargo test --workspace"
cargo test --workspace

# Start our server with the given store on a free port; sets URL.
start_server() {
  local store="$1"; shift
  local port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
  # Webhooks on loopback: the suite's receivers listen on 127.0.0.1.
  target/debug/durable-streams serve --store "$store" --long-poll-timeout 500ms --bind "127.0.0.1:$port" \
    --webhook-allow-loopback "$@" \
    >"$RUN/server-$store.log" 2>&1 &
  PIDS+=("$!")
  URL="${SCHEME:-http}://127.0.0.1:$port"
  for _ in $(seq 1 100); do
    curl -fsS ${CURL_CA:+--cacert "$CURL_CA"} "$URL/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server ($store) did not start; log:" >&2; tail -n 30 "$RUN/server-$store.log" >&2; exit 1
}

declare -A RESULT
for store in memory local aws; do
  step "conformance suite against --store $store"
  case "$store" in
    local) start_server local --data-dir "$RUN/data-local" ;;
    *) start_server "$store" ;;
  esac
  out="$(bash tests/conformance/run.sh --subscriptions --long-poll-timeout-ms 500 "$URL" 2>"$RUN/conformance-$store.err")" || {
    cat "$RUN/conformance-$store.err" >&2; echo "$out"; echo "conformance against --store $store FAILED" >&2; exit 1; }
  echo "$out"
  RESULT[$store]="$(echo "$out" | tail -n 1)"
  kill "${PIDS[-1]}" 2>/dev/null || true
done

step "the CLI with the official TypeScript client and the Node reference server, both ways (tests/cli-interop)"
start_server local --data-dir "$RUN/data-cli-interop"
out="$(DS_CLI="$ROOT/target/debug/durable-streams" bash tests/cli-interop/run.sh "$URL")" || {
  echo "$out"; echo "CLI interoperability FAILED" >&2; exit 1; }
echo "$out"
RESULT[cli]="$(echo "$out" | tail -n 1)"
kill "${PIDS[-1]}" 2>/dev/null || true

step "Lambda functions through the runtime emulator (cargo lambda watch): conformance, alarm, IAM of observed calls"
out="$(DS_LAMBDA_RUN_DIR="$RUN/lambda" bash infra/conformance-lambda.sh)" || {
  echo "$out"; echo "conformance through the Lambda runtime emulator FAILED (logs: $RUN/lambda)" >&2; exit 1; }
echo "$out"
RESULT[lambda]="$(echo "$out" | tail -n 1)"

step "the HTTP function's concurrent mode through the runtime emulator (one process, AWS_LAMBDA_MAX_CONCURRENCY=8)"
DS_LAMBDA_RUN_DIR="$RUN/lambda-concurrency" bash infra/lambda-concurrency.sh || {
  echo "the concurrent mode through the Lambda runtime emulator FAILED (logs: $RUN/lambda-concurrency)" >&2; exit 1; }

# Access control and TLS together: a test CA and certificate made now, a JWT
# granting everything, the suite sending it on every request over https.
step "conformance with access control (JWT) over TLS, --store memory"
SEC="$RUN/secure" && mkdir -p "$SEC"
target/debug/ds-testpki "$SEC"
head -c 48 /dev/urandom | base64 | tr -d '\n' >"$SEC/jwt-secret"
TOKEN="$(target/debug/durable-streams token mint-jwt --secret-file "$SEC/jwt-secret" --issuer https://issuer.test \
  --audience durable-streams --grant '=read,write,admin' --ttl 1h)"
SCHEME=https CURL_CA="$SEC/ca.pem" start_server memory --tls-cert "$SEC/server.pem" --tls-key "$SEC/server.key" \
  --jwt-hs256-secret-file "$SEC/jwt-secret" --jwt-issuer https://issuer.test --jwt-audience durable-streams --cors-origins '*'
unauth="$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$SEC/ca.pem" "$URL/v1/stream/probe")"
[ "$unauth" = 401 ] || { echo "access control is not on: a request without a token got $unauth" >&2; exit 1; }
out="$(bash tests/conformance/run.sh --subscriptions --long-poll-timeout-ms 500 --header "Authorization: Bearer $TOKEN" --ca "$SEC/ca.pem" \
  "$URL" 2>"$RUN/conformance-secure.err")" || {
  cat "$RUN/conformance-secure.err" >&2; echo "$out"; echo "conformance with access control over TLS FAILED" >&2; exit 1; }
echo "$out"
RESULT[secure]="$(echo "$out" | tail -n 1)"
kill "${PIDS[-1]}" 2>/dev/null || true

step "history campaigns, short: local kill -9, full disk, AWS faults, network faults, processor plane (tests/history)"
# Captured, then printed (not `tee /dev/stderr`: that reopens a redirected log
# and truncates it).
out="$(target/debug/ds-history --kill9-ops 3000 --disk-ops 2000 --aws-ops 1000 --network-ops 1000 --events 600 \
  --kill-rate 0.5)" || { echo "$out"; exit 1; }
echo "$out"
RESULT[history]="$(echo "$out" | tail -n 1)"

step "infra lint (cfn-lint on template.yaml)"
bash infra/lint-infra.sh

step "deploy check (sam validate --lint, transformed-template assertions)"
DS_OBSERVED_CALLS="$RUN/lambda/calls.json" bash infra/deploy-check.sh

step "summary"
for store in memory local aws; do echo "conformance --store $store: ${RESULT[$store]}"; done
echo "conformance through the Lambda runtime emulator: ${RESULT[lambda]}"
echo "conformance --store memory, access control + TLS: ${RESULT[secure]}"
echo "${RESULT[cli]}"
echo "${RESULT[history]}"
echo "make test: all passed"
