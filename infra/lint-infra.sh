#!/usr/bin/env bash
# Validate template.yaml (AWS SAM) with cfn-lint 1.53.3 from a pinned venv.
#
# Usage (from anywhere): bash infra/lint-infra.sh [TEMPLATE...]   (default: template.yaml at the repo root)
# cfn-lint is pinned at 1.53.3 on purpose: later releases stopped running the SAM
# transform, so they no longer see errors inside AWS::Serverless::* resources.
# Exit status: cfn-lint's (0 clean; non-zero on any error or warning).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# shellcheck source=venv.sh
. "$HERE/venv.sh"
BIN="$(ds_venv cfn-lint "$HERE/cfn-lint-constraints.txt" "cfn-lint==1.53.3")"
[ $# -gt 0 ] || set -- "$ROOT/template.yaml"
"$BIN/cfn-lint" --version >&2
"$BIN/cfn-lint" --format parseable -- "$@"
echo "lint-infra: OK ($*)"
