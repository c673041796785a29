#!/usr/bin/env bash
# 20 kill -9 trials of the local-store server under 64 concurrent idempotent
# producers, with readers checking every read during the run (tests/e2e/tests/crash.rs).
set -euo pipefail
cd "$(dirname "$0")/../.."
DS_CRASH_TRIALS="${DS_CRASH_TRIALS:-20}" DS_CRASH_PRODUCERS="${DS_CRASH_PRODUCERS:-64}" \
  cargo test -p ds-e2e --test crash -- --nocapture
