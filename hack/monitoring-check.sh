#!/usr/bin/env bash
# The alerts, checked by Prometheus' own tool: the rules parse (promtool check rules) and each
# alert fires on the series it is about and only after its `for` (promtool test rules on
# hack/monitoring/alerts-test.yaml). Installs Debian's prometheus (for promtool) when missing;
# fails loudly if it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v promtool >/dev/null; then
  echo "monitoring-check: installing promtool (Debian package prometheus)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; } ||
    { echo "monitoring-check: cannot install promtool (apt-get install prometheus)" >&2; exit 1; }
fi
promtool check rules charts/kdoctor/files/prometheus-rules.yaml
promtool test rules hack/monitoring/alerts-test.yaml
