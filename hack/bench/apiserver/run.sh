#!/usr/bin/env bash
# Aggregated API server benchmark (issue 4): our server vs nginx serving the same bytes over TLS,
# both driven by wrk and by oha in the same run. Installs what it lacks: nginx, wrk, curl and
# python3 from Debian, oha with hack/bench/oha.sh. Options: --tasks N (default
# 10000), --seconds S per run (default 10), --repeat N runs of each cell, the median ratio shown
# (default 3), --only small|medium|big, --client wrk|oha|both (default both), --threads N
# connection threads of the API server (default: the server's, one per core up to 4; 0: none),
# --connections N,N,… (default 1,16,100), --fixed-rate F (also run each oha cell with both servers
# at F × nginx's closed-loop rate, open loop, --repeat times: latencies at equal load; default off).
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=hack/bench/tools.sh
. ../tools.sh
need_tools nginx wrk curl python3
OHA=$(../oha.sh)
cargo build --release -q
exec ./target/release/kdoctor-bench-apiserver --oha "$OHA" "$@"
