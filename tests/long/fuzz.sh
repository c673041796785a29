#!/usr/bin/env bash
# 100,000 generated adversarial requests against the app in-process (memory
# store), and 10,000 each against the server binary over TCP (memory, local).
# Seeds and counts: DS_FUZZ_SEED, DS_FUZZ_REQUESTS, DS_FUZZ_SERVER_REQUESTS.
set -euo pipefail
cd "$(dirname "$0")/../.."
export DS_FUZZ_REQUESTS="${DS_FUZZ_REQUESTS:-100000}"
export DS_FUZZ_SERVER_REQUESTS="${DS_FUZZ_SERVER_REQUESTS:-10000}"
export DS_FUZZ_SEED="${DS_FUZZ_SEED:-$(date +%s)}"
echo "seed $DS_FUZZ_SEED (rerun with DS_FUZZ_SEED=$DS_FUZZ_SEED)"
cargo test -p ds-reliability --test fuzz_inprocess --test fuzz_server -- --nocapture --test-threads 1 2>&1 \
  | grep -E "^(in-process|server|  |test |panics)|failures|FAILED|panicked" || true
exit "${PIPESTATUS[0]}"
