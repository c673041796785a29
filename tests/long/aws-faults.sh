#!/usr/bin/env bash
# Two --store aws servers on a private emulator with 20% of DynamoDB and S3
# calls faulted; 8 idempotent producers x DS_AWS_FAULT_APPENDS appends (100).
# The emulator's own fault/idempotency self-test runs first.
set -euo pipefail
cd "$(dirname "$0")/../.."
VPY="$(bash infra/aws-emulator/start.sh --install-only | tail -n 1)"
"$VPY" infra/aws-emulator/selftest.py --only health,faults
DS_TEST_REQUIRE_AWS=1 DS_AWS_FAULT_APPENDS="${DS_AWS_FAULT_APPENDS:-100}" \
  cargo test -p ds-reliability --test aws_faults -- --nocapture
