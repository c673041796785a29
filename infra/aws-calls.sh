#!/usr/bin/env bash
# Print the table of AWS calls per operation (counted at the emulator) and
# assert the acceptance bars (warm append = 1 DynamoDB call, 1 MiB append =
# 1 S3 put + 1 transaction, a processed batch = 1 journal read + 1 progress
# write, ...). Starts a private emulator unless
# AWS_ENDPOINT_URL is already set.
#
# Usage (from anywhere): bash infra/aws-calls.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
run() {
  cargo test -p ds-store-aws --test calls -- --nocapture --test-threads=1
  # The processor function: calls per processed batch (one journal read, one progress write).
  cargo test -p ds-processor-aws --test calls -- --nocapture --test-threads=1
  # Progress writes per event with the checkpoint cadence of the processors file.
  cargo test -p ds-processor-aws --test cadence -- --nocapture --test-threads=1
}
if [ -n "${AWS_ENDPOINT_URL:-}" ]; then
  run
else
  bash infra/aws-emulator/with-emulator.sh --dir target/aws-emulator-calls -- bash -c "$(declare -f run); run"
fi
