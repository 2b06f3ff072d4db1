#!/usr/bin/env bash
# Agent benchmark (issue 5): `kdoctor probe http` vs oha, `kdoctor probe dns` vs dnsperf and
# `kdoctor probe tcp` vs nping (nmap), in the same run, against the same nginx and unbound on
# loopback; agent RSS idle and while probing 100 targets. Installs what it lacks: nginx,
# unbound, dnsperf, nmap (Debian) and oha (crates.io, into ~/.cache/kdoctor/tools;
# OHA=/path/to/oha uses another). Prints a markdown section for docs/benchmarks.md. Options
# pass through, e.g. `run.sh --secs 5`, `run.sh --only tcp`.
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=hack/bench/tools.sh
. ../tools.sh
# nping comes with nmap.
need_tools nginx unbound dnsperf nmap:nping
OHA=$(../oha.sh)
root=$(cd ../../.. && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && CARGO_TARGET_DIR="$target" cargo build --release -q -p kdoctor)
exec cargo run --release -q -- --kdoctor "$target/release/kdoctor" --oha "$OHA" "$@"
