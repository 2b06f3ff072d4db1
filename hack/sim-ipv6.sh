#!/usr/bin/env bash
# Makes the simulated cluster's IPv6 addresses usable here (its dual-stack tests need them):
# installs iproute2 when `ip` is missing, turns IPv6 on for lo if the machine turned it off,
# routes the sim's prefix (sim/src/net/ipv6.rs) to lo as the sim itself would at start, and
# proves it the way the sim does: bind an address of the prefix (IPV6_FREEBIND) and connect.
# Needs root (CAP_NET_ADMIN); fails loudly, with what it saw, otherwise.
set -euo pipefail
PREFIX=fd00:10::/96
PROBE=fd00:10::7fff:fffe

diagnose() {
  echo "sim-ipv6: $1; the dual-stack tests will fail. What this machine shows:" >&2
  for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/lo/disable_ipv6; do
    echo "  $f = $(cat "$f" 2>/dev/null || echo missing)" >&2
  done
  echo "  ip -6 route get $PROBE: $(ip -6 route get "$PROBE" 2>&1 || true)" >&2
  # Captured first: `| head` would end `ip` with SIGPIPE on a long table.
  local table
  table=$(ip -6 route show table local 2>&1 || true)
  printf '%s\n' "$table" | sed -n '1,20s/^/  local table: /p' >&2
  exit 1
}

if [ ! -d /proc/sys/net/ipv6 ]; then
  diagnose "this kernel has no IPv6"
fi
if ! command -v ip >/dev/null; then
  echo "sim-ipv6: installing iproute2" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
fi
for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/lo/disable_ipv6; do
  if [ "$(cat "$f")" != 0 ]; then
    echo "sim-ipv6: IPv6 is disabled ($f); enabling it" >&2
    echo 0 >"$f" || diagnose "cannot write $f"
  fi
done
ip -6 route replace local "$PREFIX" dev lo || diagnose "cannot route $PREFIX to lo (needs CAP_NET_ADMIN)"
python3 - "$PROBE" <<'PY' || diagnose "cannot bind and reach $PROBE"
import socket, sys
IPV6_FREEBIND = 78  # linux/in6.h; the sim and the agents bind pod addresses this way
server = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
server.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
server.bind((sys.argv[1], 0))
server.listen(1)
client = socket.create_connection(server.getsockname()[:2], timeout=2)
peer, _ = server.accept()
client.sendall(b"ok")
assert peer.recv(2) == b"ok"
PY
echo "sim-ipv6: $PREFIX is routed to lo and reachable"
