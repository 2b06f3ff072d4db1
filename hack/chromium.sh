#!/usr/bin/env bash
# Debian's Chromium for the heatmap screenshot test (tests/cli/plugin.rs); fails loudly if it
# cannot be installed.
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  echo "chromium: installing Debian's chromium"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } ||
    { echo "chromium: cannot install chromium (apt-get install chromium)" >&2; exit 1; }
fi
/usr/bin/chromium --version
