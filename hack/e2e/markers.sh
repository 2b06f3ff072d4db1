#!/usr/bin/env bash
# hack/e2e.sh's marker check: `markers.sh KUBECTL present` waits until every node carries the
# condition kdoctor.io/E2eHealthy=True and the label kdoctor.io/e2e-checked=ok that
# hack/e2e/marker.yaml's policy sets; `absent` until no node carries either.
set -euo pipefail
kubectl="$1"
want="$2"
deadline=$((SECONDS + 90))
while :; do
  nodes="$("$kubectl" get nodes -o name | wc -l)"
  conditions="$("$kubectl" get nodes -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="kdoctor.io/E2eHealthy")]}{.status}{"\n"}{end}{end}' | grep -c True || true)"
  labels="$("$kubectl" get nodes -l kdoctor.io/e2e-checked=ok -o name | wc -l)"
  any_condition="$("$kubectl" get nodes -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="kdoctor.io/E2eHealthy")]}{.type}{"\n"}{end}{end}' | grep -c . || true)"
  case "$want" in
    present) [ "$conditions" -eq "$nodes" ] && [ "$labels" -eq "$nodes" ] && break ;;
    absent) [ "$any_condition" -eq 0 ] && [ "$labels" -eq 0 ] && break ;;
    *) echo "markers.sh: present or absent, not $want" >&2; exit 2 ;;
  esac
  if [ "$SECONDS" -ge "$deadline" ]; then
    "$kubectl" get nodes --show-labels >&2
    "$kubectl" get nodes -o jsonpath='{range .items[*]}{.metadata.name}{": "}{.status.conditions[*].type}{"\n"}{end}' >&2
    echo "e2e: FAILED: markers not $want after 90s ($conditions of $nodes conditions True, $labels labelled)" >&2
    exit 1
  fi
  sleep 1
done
"$kubectl" get nodes -L kdoctor.io/e2e-checked
echo "markers $want on all $nodes nodes"
