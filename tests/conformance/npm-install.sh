# Sourced, not run: npm_install_once DIR PACKAGE_JSON LABEL installs the
# pinned packages PACKAGE_JSON names into DIR, unless an earlier run did.
# The install fills a temp dir beside DIR and is renamed into place, so a
# failed or concurrent install never leaves a half-filled DIR behind.
# Used by tests/conformance/run.sh and tests/cli-interop/run.sh.
npm_install_once() {
  local dir="$1" package_json="$2" label="$3" cache tmp
  [ -f "$dir/.installed" ] && return 0
  cache="$(dirname "$dir")"
  mkdir -p "$cache"
  tmp="$(mktemp -d "$cache/.install.XXXXXX")"
  printf '%s\n' "$package_json" >"$tmp/package.json"
  echo "$label: installing pinned packages from npm into $dir" >&2
  (cd "$tmp" && npm install --save-exact --no-audit --no-fund --loglevel=error >&2) || { rm -rf "$tmp"; return 1; }
  touch "$tmp/.installed"
  if [ -f "$dir/.installed" ]; then rm -rf "$tmp"; else rm -rf "$dir"; mv "$tmp" "$dir"; fi
}
