# Durable Streams — the two commands a fresh clone needs:
#   make run    local server on 127.0.0.1:4437 with the embedded durable store (./data)
#   make test   every test: unit, contract, end-to-end, conformance (memory, local, aws, Lambda runtime emulator), infra lint, deploy check
.PHONY: run test test-long test-rust lint-infra deploy-check build-lambda aws-calls bench bench-quick bench-aws-scale fmt clippy

run:
	cargo run --release -p durable-streams -- serve

test:
	bash tests/run-all.sh

# Campaigns too long for `make test` (sam build, reliability: fuzz, crash, AWS
# faults, soak, idle readers, checked histories): the list is in tests/run-long.sh.
test-long:
	bash tests/run-long.sh

# Only the Rust tests (the AWS ones need the emulator: `make test` starts it).
test-rust:
	cargo test --workspace

lint-infra:
	bash infra/lint-infra.sh

# sam validate --lint and the checks on the transformed template (no AWS account needed).
deploy-check:
	bash infra/deploy-check.sh

build-lambda:
	bash infra/build-lambda.sh

# AWS calls per operation, counted at the emulator, with the budgets asserted;
# then capacity units, S3 requests and dollars per operation (bench/aws-cost.sh).
aws-calls:
	bash infra/aws-calls.sh
	bash bench/aws-cost.sh

bench:
	bash bench/bench.sh

bench-quick:
	bash bench/quick.sh

# The AWS substrate at scale over the emulator's model of AWS, quick version
# (a few minutes); the full matrix runs in `make bench` (bench/aws-scale.sh).
bench-aws-scale:
	bash bench/aws-scale.sh --quick

fmt:
	cargo fmt --all

clippy:
	cargo clippy --workspace --all-targets -- -D warnings
