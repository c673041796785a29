#!/usr/bin/env bash
# Build the Lambda functions into deployable zips with cargo-lambda (from PyPI,
# pinned: it ships a prebuilt cargo-lambda binary and zig as the linker, so the
# binaries target the glibc of Amazon Linux 2023 whatever this machine runs,
# and cross-compile to arm64; rustup adds the aarch64-unknown-linux-gnu
# standard library when it is missing).
#
# Usage (from anywhere): bash infra/build-lambda.sh [--arch arm64|x86_64|both] [extra cargo-lambda args]
#   --arch: the template's Architecture parameter; default arm64 (its default).
# Output: $CARGO_TARGET_DIR (default: target)/lambda/<arch>/<function>/bootstrap.zip
#   for every function (lambda-http, lambda-alarm, lambda-processor); their
#   paths are printed, then the deploy checks of those packages (every
#   architecture's, when --arch both).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
ARCH=arm64
if [ "${1:-}" = "--arch" ]; then ARCH="${2:?--arch needs arm64, x86_64 or both}"; shift 2; fi
case "$ARCH" in
  arm64) ARCHES=(arm64) ;;
  x86_64) ARCHES=(x86_64) ;;
  both) ARCHES=(arm64 x86_64) ;;
  *) echo "build-lambda: --arch must be arm64, x86_64 or both" >&2; exit 2 ;;
esac
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
for arch in "${ARCHES[@]}"; do
  flag=--x86-64
  if [ "$arch" = arm64 ]; then
    flag=--arm64
    rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
      || rustup target add aarch64-unknown-linux-gnu
  fi
  # --profile lambda: the size-tuned profile in Cargo.toml ([profile.lambda]).
  cargo lambda build "$flag" --profile lambda --output-format zip --lambda-dir "$LAMBDA_DIR/$arch" "${PKGS[@]}" "$@"
  for f in "${FUNCTIONS[@]}"; do
    zip="$LAMBDA_DIR/$arch/$f/bootstrap.zip"
    [ -s "$zip" ] || { echo "build-lambda: missing $zip" >&2; exit 1; }
    echo "build-lambda: $zip ($(du -h "$zip" | cut -f1))"
  done
done
if [ "${#ARCHES[@]}" -gt 1 ]; then
  SAM_BIN="$(ds_venv sam-cli "$HERE/sam-cli-constraints.txt" "aws-sam-cli==1.170.0")"
  "$SAM_BIN/python" "$HERE/deploy/check_template.py" --root "$ROOT" --lambda-dir "$LAMBDA_DIR" | grep -E '^(FAIL|ok: package|deploy-check)'
fi
