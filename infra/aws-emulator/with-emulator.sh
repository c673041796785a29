#!/usr/bin/env bash
# Run one command with a private local AWS emulator: start it on a free port,
# create the table/bucket/schedule group, run the command with the emulator's
# environment (AWS_ENDPOINT_URL, dummy keys, DS_AWS_*), then stop the emulator
# (by its PID) whatever the command's outcome.
#
# Usage: infra/aws-emulator/with-emulator.sh [--dir D] -- COMMAND [ARGS...]
#   --dir D   run directory (default: target/aws-emulator under the current directory)
# Exit status: the command's, or 2 if the emulator could not be started.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="target/aws-emulator"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --dir=*) DIR="${1#*=}"; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "with-emulator: no command given" >&2; exit 2; }

mkdir -p "$DIR"
# A run left over from an interrupted earlier call in the same directory is stopped
# by its recorded PID (stop.sh checks that the PID is still serve.py).
"$HERE/stop.sh" --dir "$DIR" >/dev/null 2>&1 || true
ENV_LINES="$("$HERE/start.sh" --port 0 --dir "$DIR")" || { echo "with-emulator: emulator did not start" >&2; exit 2; }
eval "$ENV_LINES"
trap '"$HERE/stop.sh" --dir "$DIR" || true' EXIT
while IFS= read -r line; do export "$line"; done < <("$HERE/create-resources")
set +e
"$@"
STATUS=$?
set -e
exit "$STATUS"
