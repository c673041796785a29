#!/usr/bin/env bash
# `sam build` of every function (BuildMethod: rust-cargolambda: cargo-lambda
# release builds for Amazon Linux 2023, zig as the linker, no Docker), then the
# deploy checks including the built artifacts. Part of `make test-long`: a
# release build of both functions takes well over 10 minutes on 2 cores.
#
# Usage (from anywhere): bash infra/sam-build.sh
# Output: target/sam-build/<Function>/bootstrap; last line "deploy-check: N passed, N failed".
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
export AWS_EC2_METADATA_DISABLED=true
BUILD_DIR="$ROOT/target/sam-build"
# A target directory of its own: the release builds for Amazon Linux do not
# share artifacts with the debug builds, and must not wait on their lock.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/sam-cargo}"
start=$(date +%s)
bash "$HERE/sam.sh" build --template template.yaml --build-dir "$BUILD_DIR"
echo "sam-build: $(( $(date +%s) - start )) s"
DS_SAM_BUILD_DIR="$BUILD_DIR" bash "$HERE/deploy-check.sh"
