#!/usr/bin/env bash
# End to end through the real aggregation layer (issue 35): `GET` of a KdoctorReport through
# kube-apiserver (its aggregator proxies it to the controllers behind the APIService, with its
# front-proxy client certificate) against `GET` of a built-in ConfigMap of the same size and
# content through the same kube-apiserver. Same client (oha, inside the cluster's network
# namespace, the admin's client certificate as a kubeconfig has), same encoding asked, 1 and 16
# connections, each pair back to back, the median ratio of --repeat pairs; CPU time of
# kube-apiserver and of the controllers per request says where the aggregated path's time goes.
#
#   hack/bench/apiserver/through-kube.sh [--seconds S] [--repeat N] [--connections 1,16]
#                                        [--nodes N] [--replicas R] [--etcd-members 1|3]
#                                        [--keep] [--perf]
#
# --replicas: the controller's (default 3, as installed; 1: one replica, reads answered with no
# call to a leader). --etcd-members: the cluster's etcd (default 3, as production runs it: a
# ConfigMap's quorum read then crosses members as a follower's read of a report does).
#
# A cluster of its own (hack/cluster.sh up --release: the optimised kdoctor on kube-sim's nodes;
# .cluster-bench/, network namespace kdoctor-bench), kdoctor installed from manifests/, one
# NetReach round whose report is the object read. --perf also records a CPU profile of
# kube-apiserver and of the controller that serves, during one more 16-connection run of each
# path (perf, Go's and Rust's symbols), and prints the top of each. Needs root.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$ROOT"
SECONDS_PER_RUN=10 REPEAT=3 CONNECTIONS=1,16 NODES=3 KEEP="" PERF="" REPLICAS=3 ETCD_MEMBERS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_RUN="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --connections) CONNECTIONS="$2"; shift 2 ;;
    --nodes) NODES="$2"; shift 2 ;;
    --replicas) REPLICAS="$2"; shift 2 ;;
    --etcd-members) ETCD_MEMBERS="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --perf) PERF=1; shift ;;
    *) echo "through-kube: unknown argument $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
export CLUSTER_DIR="${BENCH_DIR:-$ROOT/.cluster-bench}"
export CLUSTER_NETNS="${BENCH_NETNS:-kdoctor-bench}"
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y curl python3" >&2; exit 2; }
done
[ -z "$PERF" ] || command -v perf >/dev/null || { echo "missing perf: apt-get install -y linux-perf" >&2; exit 2; }
OHA=$(hack/bench/oha.sh)
(cd hack/bench/apiserver && cargo build --release -q)
BENCH="$ROOT/hack/bench/apiserver/target/release/kdoctor-bench-apiserver"

cleanup() {
  local code=$?
  if [ -n "$KEEP" ]; then
    echo "through-kube: cluster kept: KUBECONFIG=$CLUSTER_DIR/kubeconfig; CLUSTER_DIR=$CLUSTER_DIR CLUSTER_NETNS=$CLUSTER_NETNS hack/cluster.sh down" >&2
  else
    hack/cluster.sh down >/dev/null 2>&1 || true
  fi
  exit "$code"
}
trap cleanup EXIT

up_args=(--nodes "$NODES" --ipv4-only --release --etcd-members "$ETCD_MEMBERS")
[ -z "$PERF" ] || up_args+=(--apiserver-profiling)
hack/cluster.sh up "${up_args[@]}"
export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
KUBECTL="$(cat "$CLUSTER_DIR/kube-bin")/kubectl"
k() { "$KUBECTL" "$@"; }
# manifests/ with the controller's replica count changed (the StatefulSet is its only
# `replicas:`); the replicas form their cluster from however many start.
"$KUBECTL" kustomize manifests/ | sed "s/^  replicas: 3\$/  replicas: $REPLICAS/" >"$CLUSTER_DIR/install.yaml"
grep -q "^  replicas: $REPLICAS\$" "$CLUSTER_DIR/install.yaml" || { echo "through-kube: no replica count to change in manifests/" >&2; exit 1; }
k apply -f "$CLUSTER_DIR/install.yaml" >/dev/null
k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=180s
k -n kdoctor rollout status statefulset/kdoctor-controller --timeout=180s
k wait apiservice/v1beta1.system.kdoctor.io --for=condition=Available --timeout=120s

# One round of every target kind from every node: the report read is a real one.
k apply -f hack/e2e/netreach-carrier.yaml
deadline=$((SECONDS + 300))
until [ "$(k get netreach e2e-carrier -o jsonpath='{.status.finish}')" = true ]; do
  [ "$SECONDS" -lt "$deadline" ] || { k get netreach e2e-carrier -o yaml >&2; echo "through-kube: the round did not finish in 300 s" >&2; exit 1; }
  sleep 2
done
REPORT=/apis/system.kdoctor.io/v1beta1/kdoctorreports/netreach-e2e-carrier
CONFIGMAP=/api/v1/namespaces/default/configmaps/kdoctor-bench-report
k get --raw "$REPORT" >"$CLUSTER_DIR/report.json"

# The ConfigMap's data is the report's text, cut or padded with spaces so that its answer is as
# long as the report's: its empty answer's length first, then the text that fills the rest.
k create configmap kdoctor-bench-report --from-literal=report= >/dev/null
k get --raw "$CONFIGMAP" >"$CLUSTER_DIR/configmap-empty.json"
python3 - "$CLUSTER_DIR" <<'EOF'
import json, sys
d = sys.argv[1]
report = open(f"{d}/report.json", encoding="utf-8").read()
empty = len(open(f"{d}/configmap-empty.json", "rb").read())
# The data grows the answer by its JSON-escaped length; a few bytes of slack for the
# resourceVersion's digits.
room = len(report.encode()) - empty
text = []
used = 0
for ch in report:
    cost = len(json.dumps(ch, ensure_ascii=False).encode()) - 2
    if used + cost > room:
        break
    text.append(ch)
    used += cost
text.append(" " * (room - used))
cm = {"apiVersion": "v1", "kind": "ConfigMap",
      "metadata": {"name": "kdoctor-bench-report", "namespace": "default"},
      "data": {"report": "".join(text)}}
json.dump(cm, open(f"{d}/configmap.json", "w", encoding="utf-8"), ensure_ascii=False)
EOF
k replace -f "$CLUSTER_DIR/configmap.json" >/dev/null
report_bytes=$(k get --raw "$REPORT" | wc -c)
configmap_bytes=$(k get --raw "$CONFIGMAP" | wc -c)
echo "KdoctorReport answer: $report_bytes bytes; ConfigMap answer: $configmap_bytes bytes"
python3 -c "import sys; a,b=int(sys.argv[1]),int(sys.argv[2]); sys.exit(0 if abs(a-b) <= a*0.01 else 1)" \
  "$report_bytes" "$configmap_bytes" || { echo "through-kube: the two answers differ by more than 1%" >&2; exit 1; }

apiserver_pid="$(cat "$CLUSTER_DIR/pids/kube-apiserver.pid")"
controller_pids=""
for pid in $(pgrep -x kdoctor); do
  if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q ' controller '; then
    controller_pids="${controller_pids:+$controller_pids,}$pid"
  fi
done
[ -n "$controller_pids" ] || { echo "through-kube: no controller process found" >&2; exit 1; }
etcd_pids="$(cat "$CLUSTER_DIR"/pids/etcd*.pid | paste -sd,)"
PKI="$CLUSTER_DIR/pki"
args=(--oha "$OHA" --server https://198.18.0.1:6443 --ca "$PKI/ca.crt" --cert "$PKI/admin.crt"
  --key "$PKI/admin.key" --report "$REPORT" --configmap "$CONFIGMAP" --apiserver-pid "$apiserver_pid"
  --controller-pids "$controller_pids" --etcd-pids "$etcd_pids" --seconds "$SECONDS_PER_RUN" --repeat "$REPEAT"
  --connections "$CONNECTIONS")
echo "$REPLICAS controller replica(s), $ETCD_MEMBERS etcd member(s), kube-apiserver $(k version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])'), controllers (pids $controller_pids), oha $("$OHA" --version | cut -d' ' -f2)"
ip netns exec "$CLUSTER_NETNS" "$BENCH" through-kube "${args[@]}"

if [ -n "$PERF" ]; then
  # kube-apiserver is built stripped: Go's own profiler names its functions. The controllers'
  # by perf (the release build keeps its symbols).
  GO="$(command -v go || echo /usr/local/go/bin/go)"
  for path in "$REPORT" "$CONFIGMAP"; do
    name="$(basename "$path")"
    curl -s --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
      -o "$CLUSTER_DIR/pprof-$name.pb.gz" "https://127.0.0.1:$(cat "$CLUSTER_DIR/apiserver.port")/debug/pprof/profile?seconds=$SECONDS_PER_RUN" &
    pprof_pid=$!
    perf_pid=""
    if [ "$path" = "$REPORT" ]; then
      perf record -q -F 999 -g -o "$CLUSTER_DIR/perf-controllers.data" -p "$controller_pids" -- sleep "$SECONDS_PER_RUN" 2>/dev/null &
      perf_pid=$!
    fi
    ip netns exec "$CLUSTER_NETNS" "$OHA" -z "${SECONDS_PER_RUN}s" -c 16 --no-tui --disable-compression \
      --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" -H 'Accept: application/json' \
      "https://198.18.0.1:6443$path" >/dev/null
    wait "$pprof_pid" ${perf_pid:+"$perf_pid"}
    echo "== kube-apiserver serving GET $path (16 connections, ${SECONDS_PER_RUN} s; Go's profiler)"
    "$GO" tool pprof -top -nodecount=25 "$CLUSTER_DIR/pprof-$name.pb.gz" 2>/dev/null >"$CLUSTER_DIR/pprof-$name.txt" || true
    sed -n 1,32p "$CLUSTER_DIR/pprof-$name.txt"
  done
  echo "== the controllers serving GET $REPORT through the aggregator (perf)"
  # Whole report first: head cutting a pipe would fail the script under pipefail.
  perf report -q -i "$CLUSTER_DIR/perf-controllers.data" --no-children --sort sym --stdio -g none >"$CLUSTER_DIR/perf-controllers.txt" 2>/dev/null
  grep -v '^$' "$CLUSTER_DIR/perf-controllers.txt" | sed -n 1,30p
fi
