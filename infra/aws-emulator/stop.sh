#!/usr/bin/env bash
# Stop an emulator started by start.sh, by the PID in its run directory.
#
# Usage: stop.sh [--dir D] [--port N]
#   The run directory is D, else $AWS_EMULATOR_HOME/run-N, else $AWS_EMULATOR_DIR
#   (set by `eval "$(start.sh)"`), else $AWS_EMULATOR_HOME/run-5055.
# Exit status: 0 stopped, or was not running; 1 could not stop it; 2 usage error.
set -euo pipefail

HOME_DIR="${AWS_EMULATOR_HOME:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ds-aws-emulator}"
say() { echo "aws-emulator: $*" >&2; }
die() { say "$*"; exit 2; }

DIR=""
PORT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) [ $# -ge 2 ] || die "--dir needs a value"; DIR="$2"; shift ;;
    --dir=*) DIR="${1#*=}" ;;
    --port) [ $# -ge 2 ] || die "--port needs a value"; PORT="$2"; shift ;;
    --port=*) PORT="${1#*=}" ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
if [ -z "$DIR" ]; then
  if [ -n "$PORT" ]; then DIR="$HOME_DIR/run-$PORT"
  elif [ -n "${AWS_EMULATOR_DIR:-}" ]; then DIR="$AWS_EMULATOR_DIR"
  else DIR="$HOME_DIR/run-${AWS_EMULATOR_PORT:-5055}"
  fi
fi
PIDFILE="$DIR/emulator.pid"

if [ ! -f "$PIDFILE" ]; then
  say "not running (no $PIDFILE)"
  exit 0
fi
PID="$(cat "$PIDFILE")"
[[ "$PID" =~ ^[0-9]+$ ]] || die "bad pid file $PIDFILE"
if ! kill -0 "$PID" 2>/dev/null; then
  say "not running (pid $PID is gone); removing stale pid file"
  rm -f "$PIDFILE" "$DIR/port" "$DIR/env"
  exit 0
fi
if ! ps -p "$PID" -o args= 2>/dev/null | grep -q "serve.py"; then
  say "pid $PID is not the emulator (pid reused?); leaving it alone and removing $PIDFILE"
  rm -f "$PIDFILE" "$DIR/port" "$DIR/env"
  exit 1
fi

kill -TERM "$PID"
for _ in $(seq 1 100); do   # up to 10 s
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$PID" 2>/dev/null; then
  say "pid $PID did not exit after SIGTERM; sending SIGKILL"
  kill -KILL "$PID" 2>/dev/null || true
  sleep 0.2
fi
if kill -0 "$PID" 2>/dev/null; then
  say "could not stop pid $PID"
  exit 1
fi
rm -f "$PIDFILE" "$DIR/port" "$DIR/env"
say "stopped pid $PID"
