#!/usr/bin/env bash
# Installs the peer servers into the bench cache (never into this repo),
# once; later runs reuse them. Prints nothing but progress on stderr.
#
#   $DS_BENCH_HOME/npm        @durable-streams/server (Node reference server) + node-server.mjs
#   $DS_BENCH_HOME/cargo-dss  durable-streams-server (crates.io)
#   $DS_BENCH_HOME/cargo-ds   durable-streams (crates.io); it also names its binary
#                             durable-streams-server, hence separate roots
#
# Environment: DS_BENCH_HOME (default ~/.cache/ds-bench).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOME_DIR="${DS_BENCH_HOME:-$HOME/.cache/ds-bench}"
NODE_PKG="@durable-streams/server"
NODE_VER="0.3.7"
DSS_CRATE="durable-streams-server"
DSS_VER="0.3.0"
DS_CRATE="durable-streams"
DS_VER="0.1.5"

say() { echo "bench/peers: $*" >&2; }
mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/.install.lock"   # one installer at a time
flock 9

# --- Node reference server ----------------------------------------------------
NPM_DIR="$HOME_DIR/npm"
PKG_JSON="$NPM_DIR/node_modules/$NODE_PKG/package.json"
if [ ! -f "$PKG_JSON" ] || ! grep -q "\"version\": \"$NODE_VER\"" "$PKG_JSON"; then
  command -v npm >/dev/null || { say "npm not found (needed for the Node reference server)"; exit 1; }
  say "installing $NODE_PKG@$NODE_VER with npm into $NPM_DIR"
  mkdir -p "$NPM_DIR"
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --save-exact "$NODE_PKG@$NODE_VER" \
    >"$HOME_DIR/install-npm.log" 2>&1 || { tail -20 "$HOME_DIR/install-npm.log" >&2; exit 1; }
fi
# The start script must sit beside node_modules for its bare import to resolve.
cp "$HERE/node-server.mjs" "$NPM_DIR/node-server.mjs"

# --- Rust peers (cargo install --locked, own target dir under the cache) ------
cargo_peer() {  # crate version root
  local crate="$1" ver="$2" root="$3"
  if [ -x "$root/bin/durable-streams-server" ] && [ -f "$root/.crates2.json" ] \
      && grep -q "\"$crate $ver " "$root/.crates2.json"; then
    return 0
  fi
  say "installing $crate@$ver with cargo install into $root (several minutes on 2 cores)"
  CARGO_TARGET_DIR="$HOME_DIR/cargo-target" cargo install --locked --force --root "$root" "$crate@$ver" \
    >"$HOME_DIR/install-$crate.log" 2>&1 || { tail -30 "$HOME_DIR/install-$crate.log" >&2; exit 1; }
}
cargo_peer "$DSS_CRATE" "$DSS_VER" "$HOME_DIR/cargo-dss"
cargo_peer "$DS_CRATE" "$DS_VER" "$HOME_DIR/cargo-ds"
say "peers ready in $HOME_DIR"
