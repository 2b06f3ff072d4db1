#!/usr/bin/env bash
# Report store benchmark (issue 3): kdoctor-store vs plain files, same reports, same run.
# Default: 10,000 tasks x 10 rounds x 10 nodes (1,000,000 reports, ~8 GiB of JSON; needs ~25 GiB
# of free disk under $TMPDIR). Pass options through, e.g. `run.sh --tasks 1000`.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release -q
exec "${CARGO_TARGET_DIR:-target}/release/kdoctor-bench-store" "$@"
