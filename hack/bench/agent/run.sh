#!/usr/bin/env bash
# Agent benchmark (issue 5): `kdoctor probe http` vs oha, `kdoctor probe dns` vs dnsperf and
# `kdoctor probe tcp` vs nping (nmap), in the same run, against the same nginx and unbound on
# loopback; agent RSS idle and while probing 100 targets. Installs what it lacks: nginx,
# unbound, dnsperf, nmap (Debian) and oha (crates.io, into ~/.cache/kdoctor/tools;
# OHA=/path/to/oha uses another). Prints a markdown section for docs/benchmarks.md. Options
# pass through, e.g. `run.sh --secs 5`, `run.sh --only tcp`.
set -euo pipefail
cd "$(dirname "$0")"
missing=()
for tool in nginx unbound dnsperf nmap:nping; do
  # package:command where they differ (nping comes with nmap)
  command -v "${tool#*:}" >/dev/null 2>&1 || [ -x "/usr/sbin/${tool#*:}" ] || missing+=("${tool%%:*}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (apt-get)" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { echo "cannot install ${missing[*]}: apt-get install -y ${missing[*]}" >&2; exit 2; }
fi
OHA=$(../oha.sh)
root=$(cd ../../.. && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && CARGO_TARGET_DIR="$target" cargo build --release -q -p kdoctor)
exec cargo run --release -q -- --kdoctor "$target/release/kdoctor" --oha "$OHA" "$@"
