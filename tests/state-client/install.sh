#!/usr/bin/env bash
# Installs the official State Protocol client: @durable-streams/state's
# createStreamDB (dist/db.js, the `@durable-streams/state/db` export) with
# the optional peer @tanstack/db pinned at the version the package was built
# against, and @durable-streams/client; then puts materialize.mjs beside
# node_modules (its bare imports resolve from there).
#
#   bash tests/state-client/install.sh    # last stdout line: the absolute
#                                          # path of the installed materialize.mjs
#   . tests/state-client/install.sh       # sets DS_STATE_CLIENT_MJS instead
#
# then `node "$DS_STATE_CLIENT_MJS"` reads {"url":..,"types":[..]} lines on
# stdin and answers one {"url":..,"state":{..}} or {"url":..,"error":".."}
# line each (see materialize.mjs).
#
# Installs into ${DS_STATE_CLIENT_HOME:-~/.cache/ds-state-client} once.
# Exit (or, sourced, return) 2 if node or npm is missing or the install fails.
# Everything but the final path goes to stderr.
_ds_state_client_install() {
  local here root cache dir state_version=0.3.1 client_version=0.2.6 tanstack_db_version=0.6.0
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  root="$(cd "$here/../.." && pwd)"
  command -v node >/dev/null 2>&1 || { echo "state-client: node not found" >&2; return 2; }
  command -v npm >/dev/null 2>&1 || { echo "state-client: npm not found" >&2; return 2; }
  cache="${DS_STATE_CLIENT_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-state-client}"
  dir="$cache/state-$state_version-client-$client_version-tanstack-db-$tanstack_db_version"
  . "$root/tests/conformance/npm-install.sh"
  npm_install_once "$dir" "{ \"name\": \"ds-state-client\", \"private\": true, \"type\": \"module\",
  \"dependencies\": { \"@durable-streams/state\": \"$state_version\", \"@durable-streams/client\": \"$client_version\",
    \"@tanstack/db\": \"$tanstack_db_version\" } }" state-client \
    || { echo "state-client: npm install failed" >&2; return 2; }
  # Copied under a temp name and renamed, so a concurrent run never sees half a file.
  cp "$here/materialize.mjs" "$dir/.materialize.mjs.$$" && mv -f "$dir/.materialize.mjs.$$" "$dir/materialize.mjs" \
    || { echo "state-client: cannot copy materialize.mjs into $dir" >&2; return 2; }
  DS_STATE_CLIENT_MJS="$dir/materialize.mjs"
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  _ds_state_client_install || return 2
else
  set -euo pipefail
  _ds_state_client_install || exit 2
  printf '%s\n' "$DS_STATE_CLIENT_MJS"
fi
