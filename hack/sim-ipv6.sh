#!/usr/bin/env bash
# Makes the simulated cluster's IPv6 addresses usable here (its dual-stack tests need them):
# installs iproute2 when `ip` is missing and routes the sim's prefix (sim/src/net/ipv6.rs) to
# lo, as the sim itself would at start. Needs root (CAP_NET_ADMIN); fails loudly otherwise.
set -euo pipefail
PREFIX=fd00:10::/96
if ! command -v ip >/dev/null; then
  echo "sim-ipv6: installing iproute2" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
fi
if ! ip -6 route replace local "$PREFIX" dev lo; then
  echo "sim-ipv6: cannot route $PREFIX to lo (needs CAP_NET_ADMIN); the dual-stack tests will fail" >&2
  exit 1
fi
ip -6 route show table local | grep -q "^local $PREFIX dev lo" || {
  echo "sim-ipv6: the route to $PREFIX is not in the local table" >&2
  exit 1
}
echo "sim-ipv6: $PREFIX is routed to lo"
