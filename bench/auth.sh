#!/usr/bin/env bash
# Cost of access control on append throughput: ds-load P1 against
# `serve --store memory` without access control (none) and with an HS256 JWT
# on every request (jwt), interleaved in fresh processes on 127.0.0.1
# (bench/p1-ab-common.sh). The server CPU per request includes ds-load's
# set-up and verification reads, so it understates the per-append share of
# the JWT check somewhat.
#
#   bash bench/auth.sh            # 4 rounds, 3 s per P1 run
#   ROUNDS=6 P1_SECS=5 bash bench/auth.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-4}"
P1_SECS="${P1_SECS:-3}"
BIN="${BIN:-target/release/durable-streams}"
LOAD="${LOAD:-target/release/ds-load}"  # the busy-machine guard gets the server PID (--pid)
# shellcheck source=p1-ab-common.sh
. bench/p1-ab-common.sh
head -c 48 /dev/urandom | base64 | tr -d '\n' >"$WORK/secret"
JWT="$("$BIN" token mint-jwt --secret-file "$WORK/secret" --issuer https://bench.test --audience ds \
  --grant '=read,write,admin' --ttl 1h)"

server_args() {
  [ "$1" = jwt ] && printf '%s\n' --jwt-hs256-secret-file "$WORK/secret" --jwt-issuer https://bench.test --jwt-audience ds
  return 0
}
auth_of() {
  [ "$1" = jwt ] && echo "Bearer $JWT"
  return 0
}

p1_ab none jwt "a JWT on every request"
