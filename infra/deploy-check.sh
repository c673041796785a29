#!/usr/bin/env bash
# `make deploy-check` (part of `make test`): what a first `sam deploy` would
# otherwise find out, checked locally with no AWS account:
#   1. sam validate --lint (pinned SAM CLI, cfn-lint on the SAM template);
#   2. infra/deploy/check_template.py --self-test on the template after the SAM
#      transform (aws-sam-translator, run locally): Function URL streaming, both
#      AuthType values, IAM against the AWS calls of each function (no missing
#      and no unused grant), S3 lifecycle, the Rules over every parameter
#      combination, failure destinations, dead-letter retention, alarms,
#      stream view type, reserved concurrency, the scheduler role's trust;
#      each check is also shown to fail on the defect it guards against.
# Environment:
#   DS_OBSERVED_CALLS=FILE   calls each function made through the Lambda runtime
#                            emulator (written by infra/conformance-lambda.sh): checked too
#   DS_SAM_BUILD_DIR=DIR     a `sam build` output: every function's bootstrap checked too
#   DS_LAMBDA_DIR=DIR        `make build-lambda`'s output (DIR/<arch>/<function>/bootstrap.zip):
#                            every architecture's packages checked too
# Last line: "deploy-check: N passed, N failed". About 20 s once the venv exists.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# Nothing here talks to AWS: no credentials, no instance metadata.
export AWS_EC2_METADATA_DISABLED=true
unset AWS_PROFILE AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN

bash "$HERE/sam.sh" --version
bash "$HERE/sam.sh" validate --lint --template template.yaml --region us-east-1

# shellcheck source=venv.sh
. "$HERE/venv.sh"
SAM_BIN="$(ds_venv sam-cli "$HERE/sam-cli-constraints.txt" "aws-sam-cli==1.170.0")"
ARGS=(--root "$ROOT" --self-test)
[ -n "${DS_OBSERVED_CALLS:-}" ] && ARGS+=(--observed "$DS_OBSERVED_CALLS")
[ -n "${DS_SAM_BUILD_DIR:-}" ] && ARGS+=(--build-dir "$DS_SAM_BUILD_DIR")
[ -n "${DS_LAMBDA_DIR:-}" ] && ARGS+=(--lambda-dir "$DS_LAMBDA_DIR")
"$SAM_BIN/python" "$HERE/deploy/check_template.py" "${ARGS[@]}"
