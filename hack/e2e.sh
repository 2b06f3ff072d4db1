#!/usr/bin/env bash
# The whole system in a simulated cluster (kube-sim, docs/development.md): installs manifests/
# as a user would, with the real `kdoctor controller` and `kdoctor agent` running as the pods'
# processes, applies examples/netreach.yaml and the tasks in hack/e2e/, waits for their rounds,
# prints `kubectl get netreach,apphttphealthy,netdns` and `kubectl get kdoctorreport` (through
# the simulated aggregation layer), reads them with `kubectl kdoctor`, runs one passing and one
# failing task with `kubectl kdoctor run --wait`, and exits non-zero when any round did not end
# as it should.
#
#   hack/e2e.sh              # 3 nodes
#   E2E_NODES=5 hack/e2e.sh
#   E2E_KEEP=1 hack/e2e.sh   # keep the work directory (logs of every pod process)
#   E2E_FROM=chart hack/e2e.sh             # install charts/kdoctor (Helm's engine) instead
#   E2E_FROM=chart E2E_IPV6=1 hack/e2e.sh  # dual stack: feature.enableIPv6=true, and a task
#                                          # probing every target over IPv4 and IPv6
#
# Needs: cargo, and kubectl (the pinned 1.32 client when installed).
set -euo pipefail
cd "$(dirname "$0")/.."

NODES="${E2E_NODES:-3}"
TIMEOUT="${E2E_TIMEOUT_SECONDS:-240}"
SIM_FROM="${E2E_FROM:-manifests}"
SIM_IPV6="${E2E_IPV6:-0}"
HELM_SET=""
if [ "$SIM_IPV6" = 1 ]; then
  # manifests/ are IPv4 (their comments say what to add); the chart has the switch.
  [ "$SIM_FROM" = chart ] || { echo "E2E_IPV6=1 needs E2E_FROM=chart" >&2; exit 2; }
  HELM_SET="feature.enableIPv6=true"
fi
# shellcheck source=hack/lib/sim-install.sh
. hack/lib/sim-install.sh
sim_prepare

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kdoctor-e2e.XXXXXX")"
SIM_PID=""
cleanup() {
  local code=$?
  if [ -n "$SIM_PID" ]; then
    kill "$SIM_PID" 2>/dev/null || true
    wait "$SIM_PID" 2>/dev/null || true
  fi
  if [ "$code" -ne 0 ]; then
    echo "e2e: FAILED (exit $code); pod process logs:" >&2
    for log in "$WORK"/pods/*.log; do
      [ -f "$log" ] || continue
      echo "--- $(basename "$log") (last 30 lines)" >&2
      tail -n 30 "$log" >&2
    done
    echo "--- kube-sim (last 30 lines)" >&2
    tail -n 30 "$WORK/sim.log" >&2 || true
  fi
  if [ -n "${E2E_KEEP:-}" ]; then
    echo "e2e: work directory kept: $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$code"
}
trap cleanup EXIT

sim_start
# Node labels must be set before the agents start (hack/dashboard-picture.sh sets zones here).
sim_install

step "applying tasks"
CLUSTER_IP="$(k -n kdoctor get service kdoctor-agent-ipv4 -o jsonpath='{.spec.clusterIP}')"
k apply -f examples/netreach.yaml
k apply -f hack/e2e/netreach-carrier.yaml -f hack/e2e/netdns.yaml
sed "s|CLUSTER_IP|$CLUSTER_IP|" hack/e2e/apphttphealthy.yaml | k apply -f -
if [ "$SIM_IPV6" = 1 ]; then k apply -f hack/e2e/dual-stack.yaml; fi

step "waiting up to ${TIMEOUT}s for every round"
deadline=$((SECONDS + TIMEOUT))
while :; do
  pending="$(k get netreach,apphttphealthy,netdns -o jsonpath='{range .items[?(@.status.finish!=true)]}{.kind}/{.metadata.name} {end}')"
  [ -z "$pending" ] && break
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "e2e: still running after ${TIMEOUT}s: $pending" >&2
    k get netreach,apphttphealthy,netdns -o yaml >&2
    exit 1
  fi
  sleep 2
done

step "tasks"
k get netreach,apphttphealthy,netdns
step "reports (through the aggregation layer)"
k get kdoctorreport
echo "netreach-task, per node:"
k get kdoctorreport netreach-task -o jsonpath='{range .report.latestRoundReport[*]}{"  "}{.nodeName}{" "}{.roundResult}{"\n"}{end}'

echo "netreach-e2e-carrier, targets probed by each node:"
k get kdoctorreport netreach-e2e-carrier -o jsonpath='{range .report.latestRoundReport[*]}{"  "}{.nodeName}{":"}{range .taskNetReach.roundTaskDetail[*]}{" "}{.name}{"="}{.requestSucceedRate}{end}{"\n"}{end}'
# Every node probes the three carrier pods, the Service three ways and the Ingress.
targets="$(k get kdoctorreport netreach-e2e-carrier -o jsonpath='{range .report.latestRoundReport[*]}{.taskNetReach.targetNumber}{" "}{end}')"
expected="$(for _ in $(seq "$NODES"); do printf '%s ' "$((NODES + 4))"; done)"
if [ "$targets" != "$expected" ]; then
  echo "e2e: expected $((NODES + 4)) targets per node on netreach-e2e-carrier, got: $targets" >&2
  exit 1
fi

if [ "$SIM_IPV6" = 1 ]; then
  echo "netreach-e2e-dual-stack, targets probed by each node:"
  k get kdoctorreport netreach-e2e-dual-stack -o jsonpath='{range .report.latestRoundReport[*]}{"  "}{.nodeName}{":"}{range .taskNetReach.roundTaskDetail[*]}{" "}{.name}{"="}{.requestSucceedRate}{end}{"\n"}{end}'
  # Per family: every carrier pod and the Service three ways; and the Ingress (IPv4).
  targets="$(k get kdoctorreport netreach-e2e-dual-stack -o jsonpath='{range .report.latestRoundReport[*]}{.taskNetReach.targetNumber}{" "}{end}')"
  expected="$(for _ in $(seq "$NODES"); do printf '%s ' "$((2 * (NODES + 3) + 1))"; done)"
  if [ "$targets" != "$expected" ]; then
    echo "e2e: expected $((2 * (NODES + 3) + 1)) targets per node on netreach-e2e-dual-stack, got: $targets" >&2
    exit 1
  fi
  v6="$(k get kdoctorreport netreach-e2e-dual-stack -o jsonpath='{range .report.latestRoundReport[*]}{range .taskNetReach.roundTaskDetail[*]}{.name}{"\n"}{end}{end}' | grep -c 'V6IP' || true)"
  if [ "$v6" -ne "$((NODES * (NODES + 3)))" ]; then
    echo "e2e: expected $((NODES * (NODES + 3))) IPv6 targets on netreach-e2e-dual-stack, got $v6" >&2
    exit 1
  fi
  echo "netdns-e2e-dns-dual-stack, queries of each node:"
  k get kdoctorreport netdns-e2e-dns-dual-stack -o jsonpath='{range .report.latestRoundReport[*]}{"  "}{.nodeName}{":"}{range .taskNetDns.roundTaskDetail[*]}{" "}{.name}{"="}{.requestSucceedRate}{end}{"\n"}{end}'
  # testIPv4: A at the cluster DNS's IPv4 address; testIPv6: AAAA at its IPv6 address.
  queries="$(k get kdoctorreport netdns-e2e-dns-dual-stack -o jsonpath='{range .report.latestRoundReport[*]}{range .taskNetDns.roundTaskDetail[*]}{.name}{"\n"}{end}{end}')"
  aaaa_v6="$(printf '%s\n' "$queries" | grep -c '^typeAAAA_\[fd00:' || true)"
  if [ "$(printf '%s\n' "$queries" | grep -c '^type')" -ne "$((2 * NODES))" ] || [ "$aaaa_v6" -ne "$NODES" ]; then
    echo "e2e: expected an A query and an AAAA query at the IPv6 DNS address from every node, got: $queries" >&2
    exit 1
  fi
fi

failed="$(k get netreach,apphttphealthy,netdns -o jsonpath='{range .items[?(@.status.lastRoundStatus!="succeed")]}{.kind}/{.metadata.name} {end}')"
if [ -n "$failed" ]; then
  echo "e2e: rounds did not succeed: $failed" >&2
  k get netreach,apphttphealthy,netdns -o yaml >&2
  echo "e2e: why, per node:" >&2
  k get kdoctorreport -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{range .report.latestRoundReport[*]}{"  "}{.nodeName}{": "}{.reasonsForFailure}{"\n"}{end}{end}' >&2
  exit 1
fi
step "kubectl kdoctor (the plugin, through the aggregation layer)"
plugin() { "$BIN/kdoctor" kubectl "$@" --kubeconfig "$WORK/kubeconfig"; }
plugin summary
plugin matrix netreach-e2e-carrier --no-color | tee "$WORK/matrix.txt"
# Every source node has a row, and every cell is 100% (every probe succeeded).
rows="$(grep -cE '^node-[0-9]+ ' "$WORK/matrix.txt" || true)"
if [ "$rows" -ne "$NODES" ] || grep -E '^node-[0-9]+ ' "$WORK/matrix.txt" | grep -qvE '^node-[0-9]+( +100%)+ *$'; then
  echo "e2e: expected $NODES rows of 100% cells from kubectl kdoctor matrix" >&2
  exit 1
fi
plugin history netreach-task
# A task's own name is not a report's: the error says which report was meant.
hint="$(plugin history task 2>&1 >/dev/null || true)"
case "$hint" in
  *"did you mean netreach-task?"*) ;;
  *) echo "e2e: kubectl kdoctor history task should point at netreach-task, said: $hint" >&2; exit 1 ;;
esac

reports="$(k get kdoctorreport -o name | wc -l)"
if [ "$reports" -lt 4 ]; then
  echo "e2e: expected a KdoctorReport per task, got $reports" >&2
  exit 1
fi
step "kubectl kdoctor run --wait (as a CI pipeline runs a check)"
plugin run -f hack/e2e/run-wait.yaml --wait --timeout-seconds 120
code=0
plugin run -f hack/e2e/run-wait-failing.yaml --wait --timeout-seconds 120 || code=$?
if [ "$code" -ne 1 ]; then
  echo "e2e: kubectl kdoctor run --wait of a failing task should exit 1, exited $code" >&2
  exit 1
fi

echo
echo "e2e: passed — every task's rounds succeeded, and the failing one failed as it should (installed from $SIM_FROM${HELM_SET:+ with $HELM_SET})"
