#!/usr/bin/env bash
# Run the protocol conformance suite against `durable-streams serve --store aws`
# on a private local AWS emulator. Last line: "N passed, N failed, N skipped".
#
# Usage (from anywhere): bash infra/conformance-aws.sh [extra tests/conformance/run.sh args]
# Environment: DS_CONFORMANCE_RUNNER (default: the repository's own runner,
#   tests/conformance/run.sh, which installs the pinned suite from npm),
#   CARGO_TARGET_DIR (default: target).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUNNER="${DS_CONFORMANCE_RUNNER:-$ROOT/tests/conformance/run.sh}"
[ -f "$RUNNER" ] || { echo "conformance-aws: runner not found: $RUNNER (set DS_CONFORMANCE_RUNNER)" >&2; exit 2; }
cargo build -p durable-streams
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/durable-streams"

inner() {
  local port pid
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
  "$BIN" serve --store aws --long-poll-timeout 500ms --bind "127.0.0.1:$port" >"$ROOT/target/conformance-aws-server.log" 2>&1 &
  pid=$!
  # Expanded now: the trap runs after this function's locals are gone.
  trap "kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true" EXIT
  for _ in $(seq 1 100); do
    curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "conformance-aws: server exited; see target/conformance-aws-server.log" >&2; exit 2; }
    sleep 0.1
  done
  bash "$RUNNER" --long-poll-timeout-ms 500 "$@" "http://127.0.0.1:$port"
}
mkdir -p "$ROOT/target"
export -f inner
export BIN ROOT RUNNER
bash infra/aws-emulator/with-emulator.sh --dir target/aws-emulator-conformance -- bash -c 'inner "$@"' inner "$@"
