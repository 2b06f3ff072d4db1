#!/usr/bin/env bash
# Aggregated API server benchmark (issue 4): our server vs nginx serving the same bytes over TLS,
# both driven by wrk and by oha in the same run. Needs nginx, wrk, curl and python3 (apt-get
# install -y nginx wrk curl); installs oha (hack/bench/oha.sh). Options: --tasks N (default
# 10000), --seconds S per run (default 10), --repeat N runs of each cell, the median ratio shown
# (default 3), --only small|medium|big, --client wrk|oha|both (default both), --threads N
# connection threads of the API server (default: the server's, one per core up to 4; 0: none),
# --connections N,N,… (default 1,16,100), --fixed-rate F (also run each oha cell with both servers
# at F × nginx's closed-loop rate, open loop, --repeat times: latencies at equal load; default off).
set -euo pipefail
cd "$(dirname "$0")"
for tool in nginx wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y nginx wrk curl python3" >&2; exit 2; }
done
OHA=$(../oha.sh)
cargo build --release -q
exec ./target/release/kdoctor-bench-apiserver --oha "$OHA" "$@"
