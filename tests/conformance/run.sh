#!/usr/bin/env bash
# Run the official Durable Streams conformance suite against a running server.
#
#   tests/conformance/run.sh [--subscriptions] [--long-poll-timeout-ms N] [--header 'Name: value']...
#                            [--ca CA.pem] <base-url> [-- <vitest args>]
#
# --subscriptions runs the suite's "Reserved subscription APIs" tests too
# (webhook and pull-wake under __ds); the server must accept webhooks on
# 127.0.0.1 (durable-streams serve --webhook-allow-loopback).
# --header puts a header on every request the suite sends to <base-url> (e.g.
# 'Authorization: Bearer <token>' for a server with access control); --ca
# trusts a test certificate authority for an https:// base URL.
# Installs the pinned suite from npm into ${DS_CONFORMANCE_HOME:-~/.cache/ds-conformance}
# once, then runs it. Last line: "N passed, N failed, N skipped". Failed tests are
# listed on stderr ("FAILED: ... (ms)" with the reason), skipped ones too with
# DS_CONFORMANCE_LIST_SKIPPED=1, and the N slowest with DS_CONFORMANCE_SLOWEST=N.
# Exit: 0 all passed, 1 failures, 2 usage/install/runner error.
set -uo pipefail

SUITE_VERSION="0.3.6"
VITEST_VERSION="4.1.12"
FASTCHECK_VERSION="4.11.0"
CLIENT_VERSION="0.2.6"

die() { echo "conformance: $*" >&2; echo "0 passed, 0 failed, 0 skipped"; exit 2; }

LONG_POLL_MS=""
SUBSCRIPTIONS=0
BASE_URL=""
EXTRA=()
HEADERS=()
CA_FILE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --subscriptions) SUBSCRIPTIONS=1 ;;
    --long-poll-timeout-ms) LONG_POLL_MS="${2:-}"; shift ;;
    --header)
      case "${2:-}" in *:*) HEADERS+=("$2") ;; *) die "--header needs 'Name: value'" ;; esac
      shift ;;
    --ca) [ -r "${2:-}" ] || die "--ca needs a readable PEM file"; CA_FILE="$2"; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -*) die "unknown option $1" ;;
    *) BASE_URL="${1%/}" ;;
  esac
  shift
done
[ -n "$BASE_URL" ] || die "usage: run.sh [--subscriptions] [--long-poll-timeout-ms N] [--header 'Name: value']... [--ca CA.pem] <base-url>"
command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are required"

CACHE="${DS_CONFORMANCE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/ds-conformance}"
DIR="$CACHE/suite-$SUITE_VERSION-vitest-$VITEST_VERSION"
. "$(dirname "${BASH_SOURCE[0]}")/npm-install.sh"
npm_install_once "$DIR" "{ \"name\": \"ds-conformance-runner\", \"private\": true, \"type\": \"module\",
  \"dependencies\": { \"@durable-streams/server-conformance-tests\": \"$SUITE_VERSION\",
    \"@durable-streams/client\": \"$CLIENT_VERSION\", \"vitest\": \"$VITEST_VERSION\", \"fast-check\": \"$FASTCHECK_VERSION\" } }" \
  conformance || die "npm install failed"

HEADERS_JSON="$(node -e 'const h = {}; for (const l of process.argv.slice(1)) { const i = l.indexOf(":"); h[l.slice(0, i).trim()] = l.slice(i + 1).trim() } console.log(JSON.stringify(h))' ${HEADERS[@]+"${HEADERS[@]}"})"
[ -n "$CA_FILE" ] && export NODE_EXTRA_CA_CERTS="$CA_FILE"

# The package's own CLI finds no test file under vitest 4, so call runConformanceTests() from an entry file.
cat > "$DIR/conformance.test.mjs" <<'JS'
import { runConformanceTests } from "@durable-streams/server-conformance-tests"
// --header: added to every request to the server under test (the suite and
// its client both call the global fetch).
const extra = JSON.parse(process.env.DS_CONFORMANCE_HEADERS || "{}")
if (Object.keys(extra).length > 0) {
  const base = process.env.DS_CONFORMANCE_URL
  const plain = globalThis.fetch
  globalThis.fetch = (input, init = {}) => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url
    if (!url.startsWith(base)) return plain(input, init)
    const headers = new Headers(init.headers ?? (typeof input === "object" && !(input instanceof URL) ? input.headers : undefined))
    for (const [k, v] of Object.entries(extra)) if (!headers.has(k)) headers.set(k, v)
    return plain(input, { ...init, headers })
  }
}
const options = { baseUrl: process.env.DS_CONFORMANCE_URL }
if (process.env.DS_CONFORMANCE_SUBSCRIPTIONS === "1") options.subscriptions = true
if (process.env.DS_CONFORMANCE_LONG_POLL_MS) options.longPollTimeoutMs = Number(process.env.DS_CONFORMANCE_LONG_POLL_MS)
runConformanceTests(options)
JS
cat > "$DIR/vitest.config.mjs" <<'JS'
import { defineConfig } from "vitest/config"
export default defineConfig({ test: { include: ["conformance.test.mjs"], reporters: ["default", "json"],
  outputFile: { json: process.env.DS_CONFORMANCE_JSON } } })
JS

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
(cd "$DIR" && DS_CONFORMANCE_URL="$BASE_URL" DS_CONFORMANCE_LONG_POLL_MS="$LONG_POLL_MS" DS_CONFORMANCE_HEADERS="$HEADERS_JSON" \
  DS_CONFORMANCE_SUBSCRIPTIONS="$SUBSCRIPTIONS" \
  DS_CONFORMANCE_JSON="$OUT/results.json" ./node_modules/.bin/vitest run --config vitest.config.mjs ${EXTRA[@]+"${EXTRA[@]}"} >"$OUT/vitest.log" 2>&1)
RC=$?
[ -s "$OUT/results.json" ] || { tail -n 40 "$OUT/vitest.log" >&2; die "the suite produced no results (vitest exit $RC)"; }
node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  for (const f of r.testResults ?? []) for (const a of f.assertionResults ?? [])
    if (a.status === "failed") {
      // vitest puts "Error: STACK_TRACE_ERROR" first for some failures (a timeout among them): show the lines that say why.
      const why = String((a.failureMessages ?? [])[0] ?? "").split("\n").filter(l => l.trim() && !l.includes("STACK_TRACE_ERROR")).slice(0, 2);
      console.error("FAILED: " + a.fullName + " (" + Math.round(a.duration ?? 0) + " ms)\n    " + why.join("\n    "));
    }
    else if (a.status !== "passed" && process.env.DS_CONFORMANCE_LIST_SKIPPED) console.error("SKIPPED: " + a.fullName);
  if (process.env.DS_CONFORMANCE_SLOWEST) {
    const all = (r.testResults ?? []).flatMap(f => f.assertionResults ?? []).filter(a => a.duration != null);
    all.sort((x, y) => y.duration - x.duration);
    for (const a of all.slice(0, Number(process.env.DS_CONFORMANCE_SLOWEST))) console.error("SLOW: " + Math.round(a.duration) + " ms " + a.fullName);
  }
  console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed, ${(r.numPendingTests ?? 0) + (r.numTodoTests ?? 0)} skipped`);
  process.exit(r.numFailedTests > 0 ? 1 : 0);
' "$OUT/results.json"
