# Sourced by the latency benchmarks (processors.sh, subscriptions.sh) after
# they set NAME: a work dir removed at exit (with the server PID, if one is
# running), the release server and ds-load built (unless DS_BENCH_NO_BUILD=1:
# bench.sh has built both), the load average at the start, and the
# calibration line (DS_BENCH_CALIBRATION_SECS, default 2; 0 skips).
# Sets ROOT, WORK, PID, LOAD, BIN, LOAD_START, CALIBRATION and say().
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { echo "bench/$NAME: $*" >&2; }

WORK="$(mktemp -d)"
PID=""
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

LOAD_TARGET="${DS_LOAD_TARGET_DIR:-$ROOT/target-bench}"
if [ "${DS_BENCH_NO_BUILD:-0}" != 1 ]; then
  say "building ds-load and the release server"
  CARGO_TARGET_DIR="$LOAD_TARGET" cargo build --release -q -p ds-load >&2
  cargo build --release -q -p durable-streams >&2
fi
# DS_BENCH_LOAD / DS_BENCH_BIN: prebuilt binaries instead (with
# DS_BENCH_NO_BUILD=1: e.g. a before/after pair built from two commits).
LOAD="${DS_BENCH_LOAD:-$LOAD_TARGET/release/ds-load}"
BIN="${DS_BENCH_BIN:-$ROOT/target/release/durable-streams}"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg | sed 's/ /, /g')"

CAL_SECS="${DS_BENCH_CALIBRATION_SECS:-2}"
CALIBRATION="**Calibration:** skipped (DS_BENCH_CALIBRATION_SECS=0)."
if [ "$CAL_SECS" != 0 ]; then
  say "calibrating ds-load against the trivial server"
  CALIBRATION="$("$LOAD" calibrate --secs "$CAL_SECS" --work-dir "$WORK" | grep -m1 '^\*\*Calibration:\*\*')"
fi
