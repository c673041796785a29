#!/usr/bin/env bash
# Start the local AWS API emulator (moto 5.2.5 plus fixes, see README.md) in the background.
#
# Usage: start.sh [--port N] [--dir D] [--log-requests] [--model aws] [--install-only]
#   --port N        port on 127.0.0.1 (default: $AWS_EMULATOR_PORT, else 0 = any free port)
#   --dir D         run directory for emulator.pid, port, env and emulator.log
#                   (default: $AWS_EMULATOR_HOME/run-<port>, or a new run-auto.* for --port 0)
#   --log-requests  also log every request line to D/emulator.log
#   --model aws     start with the latency and limit model of AWS on (README; default off)
#   --install-only  only create the venv if needed, then print its python path
#
# stdout: `export NAME=value` lines, so `eval "$(start.sh)"` sets up a shell; the
# same lines without `export` are written to D/env. Progress and errors go to stderr.
# Exit status: 0 running; 1 did not start; 2 usage or install error; 3 already running in D.
# Environment: AWS_EMULATOR_HOME (cache, default ${XDG_CACHE_HOME:-~/.cache}/ds-aws-emulator),
#   AWS_EMULATOR_PYTHON (python >= 3.11 used to create the venv, default python3),
#   AWS_EMULATOR_START_TIMEOUT (seconds to wait for readiness, default 60);
#   serve.py reads AWS_EMULATOR_MODEL and AWS_EMULATOR_STREAM_RETENTION_S from it too.
set -euo pipefail

MOTO_VERSION="5.2.5"
BOTO_VERSION="1.44.8"   # boto3 and botocore, as installed with moto 5.2.5 when this was pinned

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOME_DIR="${AWS_EMULATOR_HOME:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ds-aws-emulator}"
PY="${AWS_EMULATOR_PYTHON:-python3}"
TIMEOUT="${AWS_EMULATOR_START_TIMEOUT:-60}"

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
say() { echo "aws-emulator: $*" >&2; }
die() { say "$*"; exit 2; }

PORT="${AWS_EMULATOR_PORT:-0}"
DIR=""
INSTALL_ONLY=0
SERVE_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --port) [ $# -ge 2 ] || die "--port needs a value"; PORT="$2"; shift ;;
    --port=*) PORT="${1#*=}" ;;
    --dir) [ $# -ge 2 ] || die "--dir needs a value"; DIR="$2"; shift ;;
    --dir=*) DIR="${1#*=}" ;;
    --log-requests) SERVE_ARGS+=(--log-requests) ;;
    --model) [ $# -ge 2 ] || die "--model needs a value"; SERVE_ARGS+=(--model "$2"); shift ;;
    --model=*) SERVE_ARGS+=(--model "${1#*=}") ;;
    --install-only) INSTALL_ONLY=1 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
if ! [[ "$PORT" =~ ^[0-9]+$ ]] || [ "$PORT" -gt 65535 ]; then
  die "--port must be 0..65535 (got: $PORT)"
fi

# ---- venv with the pinned moto (created once per constraints file) -----------
command -v "$PY" >/dev/null 2>&1 || die "$PY not found (set AWS_EMULATOR_PYTHON)"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || die "Python 3.11 or newer is required ($PY is $("$PY" -V 2>&1)); set AWS_EMULATOR_PYTHON"
PYVER="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
LOCKHASH="$("$PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()[:12])' "$HERE/constraints.txt")"
VENV="$HOME_DIR/venv-moto-$MOTO_VERSION-py$PYVER-$LOCKHASH"
STAMP="$VENV/.installed"

install_venv() {
  mkdir -p "$HOME_DIR" || die "cannot create $HOME_DIR"
  if command -v flock >/dev/null 2>&1; then   # one installer at a time
    exec 9>"$HOME_DIR/.install.lock"
    flock 9
  fi
  [ -f "$STAMP" ] && return 0
  local log="$HOME_DIR/install.log"
  say "installing moto[server]==$MOTO_VERSION into $VENV (first run only; needs PyPI via pip)"
  rm -rf "$VENV"
  if ! "$PY" -m venv "$VENV" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "could not create a venv with $PY (on Debian/Ubuntu: apt-get install python3-venv)"
  fi
  if ! "$VENV/bin/python" -m pip install --disable-pip-version-check \
        -c "$HERE/constraints.txt" \
        "moto[server]==$MOTO_VERSION" "boto3==$BOTO_VERSION" "botocore==$BOTO_VERSION" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    rm -rf "$VENV"
    die "pip install failed (full log: $log)"
  fi
  "$VENV/bin/python" -c "from importlib.metadata import version as v; import moto, boto3; assert v('moto') == '$MOTO_VERSION', v('moto')" \
    || { rm -rf "$VENV"; die "installed venv does not import moto $MOTO_VERSION"; }
  touch "$STAMP"
  say "installed"
}
[ -f "$STAMP" ] || install_venv
VPY="$VENV/bin/python"

if [ "$INSTALL_ONLY" = 1 ]; then
  echo "$VPY"
  exit 0
fi

# ---- run directory -----------------------------------------------------------
if [ -z "$DIR" ]; then
  mkdir -p "$HOME_DIR"
  if [ "$PORT" = 0 ]; then
    DIR="$(mktemp -d "$HOME_DIR/run-auto.XXXXXX")"
  else
    DIR="$HOME_DIR/run-$PORT"
  fi
fi
mkdir -p "$DIR" || die "cannot create $DIR"
DIR="$(cd "$DIR" && pwd)"
PIDFILE="$DIR/emulator.pid"
LOG="$DIR/emulator.log"

if [ -f "$PIDFILE" ]; then
  OLD="$(cat "$PIDFILE" 2>/dev/null || true)"
  if [[ "$OLD" =~ ^[0-9]+$ ]] && kill -0 "$OLD" 2>/dev/null \
      && ps -p "$OLD" -o args= 2>/dev/null | grep -q "serve.py"; then
    say "already running in $DIR (pid $OLD, $(cat "$DIR/port" 2>/dev/null || echo '?')); stop it with: $HERE/stop.sh --dir $DIR"
    exit 3
  fi
  rm -f "$PIDFILE"   # stale
fi
rm -f "$DIR/port" "$DIR/env"

# ---- start and wait until it answers ----------------------------------------
nohup "$VPY" "$HERE/serve.py" --port "$PORT" --port-file "$DIR/port" ${SERVE_ARGS[@]+"${SERVE_ARGS[@]}"} \
  </dev/null >>"$LOG" 2>&1 &
PID=$!
echo "$PID" >"$PIDFILE"

ready() {  # health answers and comes from our process
  "$VPY" - "$1" "$PID" <<'EOF'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/_emulator/health", timeout=2) as r:
        h = json.load(r)
    sys.exit(0 if h.get("status") == "ok" and h.get("pid") == int(sys.argv[2]) else 1)
except Exception:
    sys.exit(1)
EOF
}

DEADLINE=$(( $(date +%s) + TIMEOUT ))
URL=""
while :; do
  if ! kill -0 "$PID" 2>/dev/null; then
    rm -f "$PIDFILE"
    say "server exited during start-up; last lines of $LOG:"
    tail -n 20 "$LOG" >&2
    exit 1
  fi
  if [ -z "$URL" ] && [ -s "$DIR/port" ]; then
    URL="http://127.0.0.1:$(cat "$DIR/port")"
  fi
  if [ -n "$URL" ] && ready "$URL"; then
    break
  fi
  if [ "$(date +%s)" -ge "$DEADLINE" ]; then
    say "no answer from the server within ${TIMEOUT}s; stopping pid $PID. Last lines of $LOG:"
    tail -n 20 "$LOG" >&2
    kill "$PID" 2>/dev/null || true
    rm -f "$PIDFILE"
    exit 1
  fi
  sleep 0.2
done

cat >"$DIR/env" <<EOF
AWS_ENDPOINT_URL=$URL
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
AWS_REGION=us-east-1
AWS_DEFAULT_REGION=us-east-1
AWS_EC2_METADATA_DISABLED=true
AWS_EMULATOR_PID=$PID
AWS_EMULATOR_DIR=$DIR
EOF
sed 's/^/export /' "$DIR/env"
say "running: pid $PID at $URL (log $LOG; stop with: $HERE/stop.sh --dir $DIR)"
