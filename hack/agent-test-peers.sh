#!/usr/bin/env bash
# Installs the real servers the agent's integration tests probe on loopback: nginx (HTTP,
# HTTPS, HTTP/2) and unbound (DNS over UDP, TCP and TLS). Debian packages; idempotent.
set -euo pipefail
missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v unbound >/dev/null 2>&1 || [ -x /usr/sbin/unbound ] || missing+=(unbound)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "agent tests need ${missing[*]}: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The packages start system services on the default ports; the tests run their own instances.
for service in "${missing[@]}"; do
  (systemctl stop "$service" || service "$service" stop || true) >/dev/null 2>&1
done
