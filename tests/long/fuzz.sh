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
# Both campaigns run even if the first fails (--no-fail-fast); the output is
# cut to the summaries and every failure line ("worker N: ..."), and the
# exit status is cargo's, not grep's.
set +e
cargo test -p ds-reliability --no-fail-fast --test fuzz_inprocess --test fuzz_server -- --nocapture --test-threads 1 2>&1 \
  | grep -E "^(in-process|server|  |test |panics|worker )|failures|FAILED|panicked"
status="${PIPESTATUS[0]}"
echo "fuzz: cargo test exited $status"
exit "$status"
