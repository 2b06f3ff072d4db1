#!/usr/bin/env bash
# Controller benchmark (issue 7): `kdoctor controller` as a process against a simulated cluster of
# --nodes (default 1000) with stand-in agents (report API on every pod address); API requests and
# status writes per round, time from the last report to the finalised round, controller CPU and
# RSS; the same harvest done by a bare loop (the floor) in the same run; and, on --agent-nodes
# (default 20) real agents, the agents' API requests per round. Prints markdown for
# docs/benchmarks.md. Options pass through, e.g. `run.sh --nodes 200 --rounds 1`.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../../.. && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && CARGO_TARGET_DIR="$target" cargo build --release -q -p kdoctor)
exec cargo run --release -q -- --kdoctor "$target/release/kdoctor" "$@"
