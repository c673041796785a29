#!/usr/bin/env bash
# AWS cost per operation (part of `make aws-calls`): our server on
# `--store aws` against a private emulator, its AWS traffic through ds-load's
# metering proxy, each operation priced at published on-demand rates
# (`ds-load aws-cost`; prices and sources are printed with the table).
# Takes about a minute and a half: the idle long-poll reader is watched for
# DS_AWS_COST_IDLE_SECS (default 60).
#
# Usage (from anywhere): bash bench/aws-cost.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Debug builds: the counts do not depend on speed, and target/ has them.
cargo build -q -p ds-load -p durable-streams
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/debug"
# Long-polls wait 20 s as in template.yaml; the proxy gets AWS_ENDPOINT_URL
# from the emulator and gives the server its own.
CMD="env RUST_LOG=warn $TARGET/durable-streams serve --bind 127.0.0.1:{port} --store aws --long-poll-timeout 20s"
mkdir -p target/aws-cost
echo "AWS cost per operation (ours on --store aws, metered in front of the emulator):"
echo
bash infra/aws-emulator/with-emulator.sh --dir target/aws-cost/emulator -- \
  "$TARGET/ds-load" aws-cost --server "$CMD" --work-dir target/aws-cost
