#!/usr/bin/env bash
# Cost of per-credential rate limits on append throughput: ds-load P1
# against `serve --store memory` with a static API token on every request,
# rate limits off and on (`--rate-limit` with a budget P1 never reaches, so
# every request takes the bucket's lock, refills and spends a token but none
# is refused; a refused request fails the run), interleaved in fresh
# processes on 127.0.0.1 (bench/p1-ab-common.sh). One credential for every
# request: the worst case for the bucket's lock.
#
#   bash bench/rate-limit.sh            # 6 rounds, 3 s per P1 run
#   ROUNDS=8 P1_SECS=4 bash bench/rate-limit.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-6}"
P1_SECS="${P1_SECS:-3}"
BIN="${BIN:-target/release/durable-streams}"
LOAD="${LOAD:-target/release/ds-load}"
# shellcheck source=p1-ab-common.sh
. bench/p1-ab-common.sh
TOKEN="$("$BIN" token new)"
echo "$TOKEN" | "$BIN" token file --name bench --grant '=read,write,admin' >"$WORK/tokens.json"

server_args() {
  printf '%s\n' --auth-tokens-file "$WORK/tokens.json"
  [ "$1" = on ] && printf '%s\n' --rate-limit 100000000/s
  return 0
}
auth_of() {
  echo "Bearer $TOKEN"
}

p1_ab off on "rate limits"
