#!/usr/bin/env bash
# The whole system in a simulated cluster (kube-sim, docs/development.md): installs manifests/
# as a user would, with the real `kdoctor controller` and `kdoctor agent` running as the pods'
# processes, applies examples/netreach.yaml and the tasks in hack/e2e/, waits for their rounds,
# prints `kubectl get netreach,apphttphealthy,netdns` and `kubectl get kdoctorreport` (through
# the simulated aggregation layer), and exits non-zero when any round did not succeed.
#
#   hack/e2e.sh              # 3 nodes
#   E2E_NODES=5 hack/e2e.sh
#   E2E_KEEP=1 hack/e2e.sh   # keep the work directory (logs of every pod process)
#
# Needs: cargo, and kubectl (the pinned 1.32 client when installed).
set -euo pipefail
cd "$(dirname "$0")/.."

NODES="${E2E_NODES:-3}"
TIMEOUT="${E2E_TIMEOUT_SECONDS:-240}"
TARGET="${CARGO_TARGET_DIR:-target}"
KUBECTL_BIN=/usr/lib/google-cloud-sdk/bin/kubectl.1.32
[ -x "$KUBECTL_BIN" ] || KUBECTL_BIN="$(command -v kubectl || true)"
[ -n "$KUBECTL_BIN" ] || { echo "e2e: kubectl is required" >&2; exit 2; }

step() { printf '\n== %s\n' "$*"; }

step "building kdoctor and kube-sim"
cargo build -q --locked -p kdoctor -p kube-sim
BIN="$TARGET/debug"

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

k() { "$KUBECTL_BIN" --kubeconfig "$WORK/kubeconfig" --cache-dir "$WORK/kube-cache" "$@"; }

step "starting a simulated cluster of $NODES nodes (pods of kdoctor run as real processes)"
# Any free port: another simulated cluster (a second run, a developer's) may hold 6443.
"$BIN/kube-sim" --listen 127.0.0.1:0 --nodes "$NODES" --agent-nodes "$NODES" --traffic --rbac \
  --agent-program "$BIN/kdoctor" \
  --agent-selector 'app.kubernetes.io/component in (agent,controller)' \
  --work-dir "$WORK/pods" --kubeconfig-out "$WORK/kubeconfig" >"$WORK/sim.log" 2>&1 &
SIM_PID=$!
for _ in $(seq 150); do
  kill -0 "$SIM_PID" 2>/dev/null || { echo "e2e: kube-sim exited" >&2; exit 1; }
  [ -s "$WORK/kubeconfig" ] && k get --raw /readyz >/dev/null 2>&1 && break
  sleep 0.2
done
k get nodes

step "installing manifests/ (the simulated cluster's processes share one network namespace: each binds its pod address)"
k apply -f manifests/namespace.yaml
k apply -f manifests/crds/ -f manifests/config.yaml -f manifests/rbac.yaml -f manifests/apiserver-rbac.yaml
mkdir -p "$WORK/manifests"
sed -e 's|        - --service-ipv4-name=kdoctor-agent-ipv4|&\n        - --bind=$(POD_IP)|' \
  manifests/agent.yaml >"$WORK/manifests/agent.yaml"
# `$$(POD_IP)` stays `$(POD_IP)` in the controller's own arguments (Kubernetes expands
# `$(VAR)`), so that each carrier pod expands it to its own address.
sed -e 's|--listen=0.0.0.0:6443|--listen=$(POD_IP):6443|' \
  -e 's|--metrics-listen=0.0.0.0:5721|--metrics-listen=$(POD_IP):5721\n        - --agent-extra-arg=--bind=$$(POD_IP)\n        - --poll-seconds=1|' \
  manifests/controller.yaml >"$WORK/manifests/controller.yaml"
grep -q -- '--bind=$(POD_IP)' "$WORK/manifests/agent.yaml" || { echo "e2e: cannot adapt agent.yaml" >&2; exit 2; }
grep -q -- '--agent-extra-arg' "$WORK/manifests/controller.yaml" || { echo "e2e: cannot adapt controller.yaml" >&2; exit 2; }
k apply -f "$WORK/manifests/agent.yaml" -f "$WORK/manifests/controller.yaml"
# Its caBundle is empty: the controller bootstraps the CA and sets it.
k apply -f manifests/apiservice.yaml

step "waiting for the agents, the controller and the APIService"
k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=90s
k -n kdoctor rollout status deployment/kdoctor-controller --timeout=90s
k wait apiservice/v1beta1.system.kdoctor.io --for=condition=Available --timeout=60s

step "applying tasks"
CLUSTER_IP="$(k -n kdoctor get service kdoctor-agent-ipv4 -o jsonpath='{.spec.clusterIP}')"
k apply -f examples/netreach.yaml
k apply -f hack/e2e/netreach-carrier.yaml -f hack/e2e/netdns.yaml
sed "s|CLUSTER_IP|$CLUSTER_IP|" hack/e2e/apphttphealthy.yaml | k apply -f -

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

failed="$(k get netreach,apphttphealthy,netdns -o jsonpath='{range .items[?(@.status.lastRoundStatus!="succeed")]}{.kind}/{.metadata.name} {end}')"
if [ -n "$failed" ]; then
  echo "e2e: rounds did not succeed: $failed" >&2
  k get netreach,apphttphealthy,netdns -o yaml >&2
  echo "e2e: why, per node:" >&2
  k get kdoctorreport -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{range .report.latestRoundReport[*]}{"  "}{.nodeName}{": "}{.reasonsForFailure}{"\n"}{end}{end}' >&2
  exit 1
fi
reports="$(k get kdoctorreport -o name | wc -l)"
if [ "$reports" -lt 4 ]; then
  echo "e2e: expected a KdoctorReport per task, got $reports" >&2
  exit 1
fi
echo
echo "e2e: every round succeeded"
