#!/usr/bin/env bash
# The CLI (`durable-streams create|write|read|head|fork|close|delete|ls`)
# interoperating with the official TypeScript packages, both ways:
#   - against OUR server (first argument, e.g. http://127.0.0.1:PORT): the
#     official client (@durable-streams/client) reads what the CLI wrote and
#     the CLI reads what the client wrote (JSON, text, bytes; live follow);
#   - our server's __registry__ (a server of our own started here on the
#     local store, kill -9ed during a burst of creates and deletes, then
#     restarted): the official client tails it live, and what
#     @durable-streams/state materializes from it is exactly the streams
#     HEAD finds, forks and soft deletes included;
#   - against the Node reference server (@durable-streams/server, with its
#     __registry__ hooks on), started here on 127.0.0.1: every CLI command,
#     `ls` checked against @durable-streams/state's materialization.
#
#   tests/cli-interop/run.sh <our-base-url>
#
# Installs the pinned packages from npm into
# ${DS_CLI_INTEROP_HOME:-~/.cache/ds-cli-interop} once. Needs DS_CLI (the
# durable-streams binary; default target/debug/durable-streams).
# Last line: "cli-interop: N checks passed"; exit 1 on the first failure.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
[ $# -eq 1 ] || { echo "usage: run.sh <our-base-url>" >&2; exit 2; }
CLIENT_VERSION="0.2.6"
SERVER_VERSION="0.3.7"
STATE_VERSION="0.3.1"
CACHE="${DS_CLI_INTEROP_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-cli-interop}"
DIR="$CACHE/client-$CLIENT_VERSION-server-$SERVER_VERSION-state-$STATE_VERSION"
. "$ROOT/tests/conformance/npm-install.sh"
npm_install_once "$DIR" "{ \"name\": \"ds-cli-interop\", \"private\": true, \"type\": \"module\",
  \"dependencies\": { \"@durable-streams/client\": \"$CLIENT_VERSION\", \"@durable-streams/server\": \"$SERVER_VERSION\",
    \"@durable-streams/state\": \"$STATE_VERSION\" } }" cli-interop || exit 2
# The script must sit beside node_modules for its bare imports to resolve.
cp "$HERE/interop.mjs" "$DIR/interop.mjs"
DS_CLI="${DS_CLI:-$ROOT/target/debug/durable-streams}" OUR_URL="${1%/}" node "$DIR/interop.mjs"
