#!/usr/bin/env bash
# The pinned AWS SAM CLI (aws-sam-cli 1.170.0 from PyPI, in a cache venv like
# the other tools), with cargo-lambda and zig on PATH for `sam build`
# (BuildMethod: rust-cargolambda; no Docker).
#
# Usage (from anywhere; runs at the repo root, where template.yaml and
# samconfig.toml are):  bash infra/sam.sh validate --lint | build | deploy --guided | delete ...
#
# Telemetry is off unless SAM_CLI_TELEMETRY is set. SAM's settings live in
# target/sam-cli (not ~/.aws-sam); they record a fresh version check, so SAM
# never asks PyPI whether it is the latest release.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# shellcheck source=venv.sh
. "$HERE/venv.sh"
SAM_BIN="$(ds_venv sam-cli "$HERE/sam-cli-constraints.txt" "aws-sam-cli==1.170.0")"
LAMBDA_BIN="$(ds_venv cargo-lambda "$HERE/cargo-lambda-constraints.txt" "cargo-lambda==1.9.2")"
# cargo-lambda finds zig as `python3 -m ziglang`: its venv comes first on PATH.
export PATH="$LAMBDA_BIN:$SAM_BIN:$PATH"
export SAM_CLI_TELEMETRY="${SAM_CLI_TELEMETRY:-0}"
export __SAM_CLI_APP_DIR="$ROOT/target/sam-cli"
mkdir -p "$__SAM_CLI_APP_DIR"
printf '{"telemetryEnabled": %s, "lastVersionCheck": %s}\n' \
  "$([ "$SAM_CLI_TELEMETRY" = 1 ] && echo true || echo false)" "$(date +%s)" >"$__SAM_CLI_APP_DIR/metadata.json"
cd "$ROOT"
exec sam "$@"
