#!/usr/bin/env bash
# Build the Lambda functions into deployable zips with cargo-lambda (from PyPI,
# pinned: it ships a prebuilt cargo-lambda binary and zig as the linker, so the
# binaries target the glibc of Amazon Linux 2023 whatever this machine runs).
#
# Usage (from anywhere): bash infra/build-lambda.sh [--arm64] [extra cargo-lambda args]
# Output: $CARGO_TARGET_DIR (default: target)/lambda/<function>/bootstrap.zip for
#   every function (lambda-http, lambda-alarm, lambda-processor); their paths are printed at the end.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# shellcheck source=venv.sh
. "$HERE/venv.sh"
BIN="$(ds_venv cargo-lambda "$HERE/cargo-lambda-constraints.txt" "cargo-lambda==1.9.2")"
FUNCTIONS=(lambda-http lambda-alarm lambda-processor)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
LAMBDA_DIR="$CARGO_TARGET_DIR/lambda"

cd "$ROOT"
# cargo-lambda looks for zig on PATH or as `python -m ziglang`; the venv has both.
export PATH="$BIN:$PATH"
PKGS=()
for f in "${FUNCTIONS[@]}"; do PKGS+=(--package "$f"); done
# --profile lambda: the size-tuned profile in Cargo.toml ([profile.lambda]).
cargo lambda build --profile lambda --output-format zip --lambda-dir "$LAMBDA_DIR" "${PKGS[@]}" "$@"

for f in "${FUNCTIONS[@]}"; do
  zip="$LAMBDA_DIR/$f/bootstrap.zip"
  [ -s "$zip" ] || { echo "build-lambda: missing $zip" >&2; exit 1; }
  echo "build-lambda: $zip ($(du -h "$zip" | cut -f1))"
done
