#!/usr/bin/env bash
# Prints the path of the oha the figures in docs/benchmarks.md were taken with, installing it
# (cargo install, a few minutes the first time) into ~/.cache/kdoctor/tools when missing.
# OHA=/path/to/oha uses another. Sourced by hack/bench/agent/run.sh and hack/bench/apiserver/run.sh.
set -euo pipefail
OHA_VERSION=1.16.0
tools="${KDOCTOR_TOOLS:-$HOME/.cache/kdoctor/tools}/oha-$OHA_VERSION"
OHA=${OHA:-$tools/bin/oha}
if [ ! -x "$OHA" ]; then
  echo "installing oha $OHA_VERSION into $tools (cargo install; a few minutes the first time)" >&2
  cargo install -q --locked --version "$OHA_VERSION" --root "$tools" oha >&2 \
    || { echo "cannot install oha $OHA_VERSION (cargo install oha); OHA=/path/to/oha uses another" >&2; exit 2; }
fi
echo "$OHA"
