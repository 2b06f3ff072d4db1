#!/usr/bin/env bash
# A picture of the Grafana dashboard from real metrics (Grafana itself cannot run here): a
# real control plane (hack/cluster.sh, kube-sim as the kubelet) with zoned nodes runs the real
# controller and agents installed from manifests/, a NetReach task runs a few rounds, a real
# Prometheus (Debian's package, inside the cluster's network namespace) scrapes every agent and
# the controller, and hack/dashboard-picture.py evaluates each panel's own PromQL through
# Prometheus' HTTP API and draws the panels at their gridPos into docs/images/dashboard.png.
#
#   hack/dashboard-picture.sh                 # 4 nodes in 2 zones, ~5 minutes
#   PICTURE_MINUTES=8 hack/dashboard-picture.sh
#
# Needs root (see hack/cluster.sh), prometheus (apt-get install -y prometheus) and python3 with
# matplotlib and PyYAML (pip install matplotlib pyyaml). Run by hand, not in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=4
MINUTES="${PICTURE_MINUTES:-5}"
export CLUSTER_DIR="${PICTURE_DIR:-$PWD/.cluster-picture}"
export CLUSTER_NETNS=kdoctor-picture
for tool in prometheus python3; do
  command -v "$tool" >/dev/null || { echo "dashboard-picture: missing $tool" >&2; exit 2; }
done
python3 -c 'import matplotlib, yaml' 2>/dev/null || { echo "dashboard-picture: pip install matplotlib pyyaml" >&2; exit 2; }
step() { printf '\n== %s\n' "$*"; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kdoctor-picture.XXXXXX")"
PROM_PID=""
cleanup() {
  local code=$?
  [ -n "$PROM_PID" ] && { kill "$PROM_PID" 2>/dev/null || true; wait "$PROM_PID" 2>/dev/null || true; }
  hack/cluster.sh down >/dev/null 2>&1 || true
  [ "$code" -ne 0 ] && echo "dashboard-picture: FAILED (exit $code); work directory: $WORK" >&2
  [ "$code" -eq 0 ] && rm -rf "$WORK"
  exit "$code"
}
trap cleanup EXIT

step "a real control plane with $NODES nodes"
hack/cluster.sh up --nodes "$NODES" --ipv4-only
KUBECTL="$(cat "$CLUSTER_DIR/kube-bin")/kubectl"
k() { "$KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig" "$@"; }
step "zones: the first half of the nodes in zone-a, the rest in zone-b"
i=0
for node in $(k get nodes -o jsonpath='{.items[*].metadata.name}'); do
  zone=zone-a; [ "$i" -ge $((NODES / 2)) ] && zone=zone-b
  k label node "$node" "topology.kubernetes.io/zone=$zone" >/dev/null
  i=$((i + 1))
done
k get nodes -L topology.kubernetes.io/zone
step "installing manifests/"
k apply -k manifests/
k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=120s
k -n kdoctor rollout status statefulset/kdoctor-controller --timeout=120s

step "a NetReach task: a round every minute"
k apply -f - <<'TASK'
apiVersion: kdoctor.io/v1beta1
kind: NetReach
metadata:
  name: mesh
spec:
  expect: {meanAccessDelayInMs: 1500, successRate: 1}
  request: {durationInSecond: 30, perRequestTimeoutInMS: 1000, qps: 10}
  schedule: {roundNumber: -1, roundTimeoutMinute: 1, schedule: "0 1"}
  target: {clusterIP: true, endpoint: true, ingress: true, ipv4: true, loadBalancer: true, nodePort: true}
TASK

step "Prometheus scraping the agents (:5711) and the controller (:5721) every 5 s"
agents="$(k -n kdoctor get pods -l app.kubernetes.io/component=agent -o jsonpath='{range .items[*]}"{.status.podIP}:5711",{end}')"
controller="$(k -n kdoctor get pods -l app.kubernetes.io/component=controller -o jsonpath='{range .items[*]}"{.status.podIP}:5721"{end}')"
cat >"$WORK/prometheus.yml" <<PROM
global: {scrape_interval: 5s, evaluation_interval: 5s}
scrape_configs:
- job_name: kdoctor-agent
  static_configs: [{targets: [${agents%,}], labels: {namespace: kdoctor}}]
- job_name: kdoctor-controller
  static_configs: [{targets: [$controller], labels: {namespace: kdoctor}}]
PROM
PROM_PORT=9090
# Inside the cluster's namespace, where the pods' addresses are.
ip netns exec "$CLUSTER_NETNS" prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!

step "letting rounds run for $MINUTES minutes"
sleep $((MINUTES * 60))
k get netreach
done_rounds="$(k get netreach mesh -o jsonpath='{.status.doneRound}')"
[ "${done_rounds:-0}" -ge 2 ] || { echo "dashboard-picture: only '${done_rounds}' rounds done" >&2; k get netreach mesh -o yaml >&2; exit 1; }

step "drawing docs/images/dashboard.png"
mkdir -p docs/images
ip netns exec "$CLUSTER_NETNS" python3 hack/dashboard-picture.py --prometheus "http://127.0.0.1:$PROM_PORT" \
  --dashboard charts/kdoctor/dashboards/kdoctor.json --minutes "$MINUTES" --out docs/images/dashboard.png
