#!/usr/bin/env bash
# make bench-quick: one round of P1 and P3 against every server, for use
# while optimizing. The report is printed and kept in the bench cache dir
# (not in bench/results). Same environment knobs as bench/bench.sh.
set -euo pipefail
export DS_BENCH_QUICK=1
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bench.sh" "$@"
