#!/usr/bin/env bash
# Controller benchmark (issues 7 and 34): `kdoctor controller` as --replicas (default 3)
# processes, a StatefulSet's pods, against a simulated cluster of --nodes (default 1000; a comma
# list runs one cluster each, 1000,2500,5000, and adds a table by node count) with stand-in
# agents (report API on every pod address); API requests and status writes per round, time from
# the last report to the finalised round, the replicas' CPU and RSS, kube-apiserver's RSS, the
# store's disk per round; the same harvest done by a bare loop (the floor) in the same run;
# kubectl reading the round through the aggregation layer against nginx serving the same bytes
# behind the same layer; --agent-nodes (default 20) of the agent pods run real agents, whose API
# requests per round are counted too. Prints markdown for docs/benchmarks.md.
# Options pass through, e.g. `run.sh --nodes 200 --rounds 1 --replicas 1`. KDOCTOR_BENCH_HEAPTRACK=DIR
# runs each replica under heaptrack (a profile per replica in DIR; its RSS figures are then
# heaptrack's script's, not the replica's). KDOCTOR_BENCH_LOGS=DIR keeps each replica's log in
# DIR; RUST_LOG (e.g. info,kdoctor_reconciler=debug: each harvest pass) is passed through.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../../.. && pwd)
# Thousands of stand-in agents: a listener each, and their connections.
ulimit -n 65536 2>/dev/null || true
# shellcheck source=hack/bench/tools.sh
. ../tools.sh
# kube-sim in release as the cluster's kubelets (the bench's cluster starts it from target/release).
# nginx: the peer of the report read through the aggregation layer.
need_tools time:/usr/bin/time nginx
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && CARGO_TARGET_DIR="$target" cargo build --release -q -p kdoctor -p kube-sim)
exec cargo run --release -q -- --kdoctor "$target/release/kdoctor" "$@"
