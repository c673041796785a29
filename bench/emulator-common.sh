# Sourced by the AWS benchmarks (aws.sh, aws-scale.sh, lambda.sh) once ROOT is
# set: start_emulator DIR [start.sh args...] starts the local AWS emulator
# in DIR on a free port, creates the table, bucket and schedule group, and
# exports the client environment and the resource names. The caller stops
# it: "$ROOT/infra/aws-emulator/stop.sh" --dir DIR.
start_emulator() {
  local dir="$1"; shift
  eval "$("$ROOT/infra/aws-emulator/start.sh" --port 0 --dir "$dir" "$@")"
  local line
  while IFS= read -r line; do
    case "$line" in *=*) export "${line?}" ;; esac
  done < <("$ROOT/infra/aws-emulator/create-resources")
}
