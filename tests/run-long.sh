#!/usr/bin/env bash
# `make test-long`: the long campaigns. One script per campaign, listed in
# LONG below (add yours there); each builds and starts what it needs, binds
# only 127.0.0.1 and stops what it started. All run even if one fails; the
# summary says which failed. Needs what `make test` needs (cargo, python3).
set -uo pipefail
cd "$(dirname "$0")/.."

LONG=(
  infra/sam-build.sh        # the full sam build (release builds of both functions), then the deploy checks on it
  tests/long/fuzz.sh        # 120,000 adversarial requests: in-process (memory) and the binary (memory, local)
  tests/long/crash.sh       # 20 kill -9 trials under 64 idempotent producers (local store)
  tests/long/aws-faults.sh  # two servers on one emulator, 20% of DynamoDB and S3 calls faulted
  tests/long/soak.sh        # 10 minutes of mixed load on the local store; curve in bench/results/
  tests/long/idle-rss.sh    # RSS per idle SSE / long-poll reader with 10,000 open; bench/results/
  tests/long/history.sh     # checked histories: 200,000 ops under kill -9 / AWS / network faults, 50,000 processor events; tests/history/reports/
)

declare -A RESULT
failed=0
for script in "${LONG[@]}"; do
  echo; echo "==== $script ($(date +%T))"
  start=$(date +%s)
  if bash "$script"; then RESULT[$script]="passed"; else RESULT[$script]="FAILED"; failed=1; fi
  RESULT[$script]+=" in $(( $(date +%s) - start ))s"
done
echo; echo "==== summary"
for script in "${LONG[@]}"; do echo "$script: ${RESULT[$script]}"; done
[ "$failed" = 0 ] && echo "make test-long: all passed" || { echo "make test-long: FAILED"; exit 1; }
