#!/usr/bin/env bash
# The image on real nodes, end to end: a real control plane with kube-sim's nodes and two nodes,
# each run by a real kubelet with containerd and runc in a network namespace of its own
# (hack/cluster.sh up --real-nodes 2), kdoctor
# installed from the Helm chart (Helm's engine, the real kubectl) with the image that
# hack/image/build.sh made, and the controller pinned to the real node by a value. Each check
# is an assertion; the script exits non-zero at the first that does not hold:
#   - the default agent's pod on each real node runs in a containerd container, Ready, its readiness and
#     liveness probes answered (the kubelet's own probe metrics), and the kernel enforces the chart's securityContext on its process (user 65532, no
#     capabilities, no privilege escalation, seccomp, read-only root) and its memory and CPU
#     limits (the container's cgroup);
#   - it listens on the ports the chart declares, and its network namespace has the sysctl the
#     chart sets (unprivileged ports from 80);
#   - the controller runs there too, and kube-aggregator marks the APIService Available;
#   - `kubectl logs` reads both containers through the kubelet's API, and the diagnostics of
#     docs/troubleshooting.md work (controller logs, its metrics through kubectl port-forward);
#   - a NetReach round: its report, served through the aggregation layer, names both real nodes
#     among the reporters, each reached every target (pods, ClusterIP, NodePort, LoadBalancer,
#     Ingress), and every node reached each real node's agent: real-1's and real-2's pods reach
#     each other across their nodes' namespaces.
#
#   hack/e2e-real-node.sh        (E2E_KEEP=1 keeps the cluster, as hack/e2e.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export CLUSTER_DIR="${E2E_DIR:-$ROOT/.cluster-e2e}"
export CLUSTER_NETNS="${E2E_NETNS:-kdoctor-e2e}"
NODE=real-1
REAL_NODES=(real-1 real-2)

step() { printf '\n== %s\n' "$*"; }
fail() {
  echo "e2e-real-node: FAILED: $*" >&2
  exit 1
}
# Retries COMMAND every second until it succeeds; fails with WHAT after SECONDS.
wait_until() {
  local seconds="$1" what="$2" deadline
  shift 2
  deadline=$((SECONDS + seconds))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$what in $seconds s"
    sleep 1
  done
}
cleanup() {
  local code=$?
  if [ "$code" -ne 0 ] && [ -d "$CLUSTER_DIR/logs" ]; then
    for log in kubelet-real-1 containerd-real-1 kubelet-real-2 containerd-real-2; do
      echo "--- $log (last 20 lines)" >&2
      tail -n 20 "$CLUSTER_DIR/logs/$log.log" >&2 || true
    done
  fi
  if [ -n "${E2E_KEEP:-}" ]; then
    echo "e2e-real-node: cluster kept: KUBECONFIG=$CLUSTER_DIR/kubeconfig; CLUSTER_DIR=$CLUSTER_DIR CLUSTER_NETNS=$CLUSTER_NETNS hack/cluster.sh down" >&2
  else
    hack/cluster.sh down >/dev/null 2>&1 || true
  fi
  exit "$code"
}
trap cleanup EXIT

step "a real control plane, two kube-sim nodes and ${REAL_NODES[*]} (kubelet, containerd, runc)"
hack/image/build.sh >/dev/null
hack/cluster.sh up --nodes 2 --ipv4-only --real-nodes "${#REAL_NODES[@]}"
export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
KUBECTL="$(cat "$CLUSTER_DIR/kube-bin")/kubectl"
k() { "$KUBECTL" "$@"; }
for node in "${REAL_NODES[@]}"; do
  runtime="$(k get node "$node" -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}')"
  case "$runtime" in containerd://*) echo "$node: $runtime" ;; *) fail "$node runs '$runtime', not containerd" ;; esac
done

step "installing the chart, the controller pinned to $NODE"
hack/cluster.sh install-chart --set "kdoctorController.nodeSelector.kubernetes\.io/hostname=$NODE"
k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=120s
k -n kdoctor rollout status statefulset/kdoctor-controller --timeout=120s

# The first pod of COMPONENT on NODE (the controller's replicas are all pinned to real-1), and
# a container's process on this host, from NODE's containerd.
pod_on_node() { # component node
  k -n kdoctor get pods -l "app.kubernetes.io/component=$1" \
    -o jsonpath="{range .items[?(@.spec.nodeName==\"$2\")]}{.metadata.name}{\" \"}{end}" | awk '{ print $1 }'
}
container_pid() { # node id
  ctr -a "$CLUSTER_DIR/real-nodes/$1/containerd.sock" -n k8s.io tasks ls | awk -v id="$2" '$1 == id { print $2 }'
}

# Bytes of a Kubernetes memory quantity (Ki, Mi, Gi or none).
bytes() {
  python3 -c 'import sys; q = sys.argv[1]; m = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}; print(int(q[:-2]) * m[q[-2:]] if q[-2:] in m else int(q))' "$1"
}
# Millicores of a Kubernetes CPU quantity (500m, 1, 0.5).
millicores() {
  python3 -c 'import sys; q = sys.argv[1]; print(int(q[:-1]) if q.endswith("m") else round(float(q) * 1000))' "$1"
}
# Successful probes of TYPE the kubelet ran for POD, from its own metrics (through the API
# server's node proxy).
probes() { # pod type node
  k get --raw "/api/v1/nodes/$3/proxy/metrics/probes" |
    awk -v pod="$1" -v type="$2" 'index($0, "pod=\"" pod "\"") && index($0, "probe_type=\"" type "\"") && index($0, "result=\"successful\"") { n += $NF } END { print n + 0 }'
}
probed() { [ "$(probes "$1" "$2" "$3")" -gt 0 ]; }

AGENT_PODS=()
for where in agent:real-1 controller:real-1 agent:real-2; do
  component="${where%%:*}" node="${where#*:}"
  step "the $component's pod on $node: a containerd container, Ready, confined as the chart says"
  pod="$(pod_on_node "$component" "$node")"
  [ -n "$pod" ] || fail "no $component pod on $node: $(k -n kdoctor get pods -o wide)"
  k -n kdoctor wait "pod/$pod" --for=condition=Ready --timeout=90s >/dev/null
  state="$(k -n kdoctor get pod "$pod" -o jsonpath='{.status.phase} {.status.containerStatuses[0].containerID}')"
  case "$state" in "Running containerd://"*) ;; *) fail "$pod: expected Running in a containerd container, got '$state'" ;; esac
  id="${state#Running containerd://}"
  pid="$(container_pid "$node" "$id")"
  [ -n "$pid" ] || fail "$pod: containerd has no task $id"
  status="/proc/$pid/status"
  uid="$(awk '/^Uid:/ { print $3 }' "$status")"
  capeff="$(awk '/^CapEff:/ { print $2 }' "$status")"
  nonewprivs="$(awk '/^NoNewPrivs:/ { print $2 }' "$status")"
  [ "$uid" = 65532 ] || fail "$pod runs as uid $uid, not 65532"
  [ "$capeff" = 0000000000000000 ] || fail "$pod has capabilities $capeff (the chart drops ALL)"
  [ "$nonewprivs" = 1 ] || fail "$pod may gain privileges (allowPrivilegeEscalation: false)"
  if [ "$component" = agent ]; then
    seccomp="$(awk '/^Seccomp:/ { print $2 }' "$status")"
    [ "$seccomp" = 2 ] || fail "$pod: seccomp mode $seccomp, not filtering (RuntimeDefault)"
  fi
  root_opts="$(awk '$5 == "/" { print $6 }' "/proc/$pid/mountinfo" | tail -n1)"
  case ",$root_opts," in *,ro,*) ;; *) fail "$pod: its root filesystem is mounted '$root_opts', not read-only" ;; esac
  memcg="$(awk -F: '$2 == "memory" { print $3 }' "/proc/$pid/cgroup")"
  limit="$(cat "/sys/fs/cgroup/memory$memcg/memory.limit_in_bytes")"
  declared="$(k -n kdoctor get pod "$pod" -o jsonpath='{.spec.containers[0].resources.limits.memory}')"
  [ "$limit" = "$(bytes "$declared")" ] || fail "$pod: memory.limit_in_bytes $limit, the pod declares $declared"
  cpucg="$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3 }' "/proc/$pid/cgroup")"
  cpudir=/sys/fs/cgroup/cpu,cpuacct
  [ -d "$cpudir" ] || cpudir=/sys/fs/cgroup/cpu
  quota="$(cat "$cpudir$cpucg/cpu.cfs_quota_us")"
  period="$(cat "$cpudir$cpucg/cpu.cfs_period_us")"
  cpu="$(k -n kdoctor get pod "$pod" -o jsonpath='{.spec.containers[0].resources.limits.cpu}')"
  [ "$((quota * 1000 / period))" = "$(millicores "$cpu")" ] || fail "$pod: CFS quota $quota/$period, the pod declares cpu $cpu"
  echo "$pod: pid $pid, uid $uid, CapEff $capeff, NoNewPrivs $nonewprivs, root ($root_opts), memory.limit_in_bytes $limit, cpu.cfs_quota_us $quota/$period"
  # The first liveness probe comes a period (10 s) after the startup probe passed.
  for type in Readiness Liveness; do
    wait_until 40 "$pod: the kubelet reports no successful $type probe" probed "$pod" "$type" "$node"
  done
  logs="$(k -n kdoctor logs "$pod" --tail=200)"
  [ -n "$logs" ] || fail "kubectl logs $pod printed nothing"
  echo "kubectl logs $pod: $(wc -l <<<"$logs") lines"
  if [ "$component" = agent ]; then
    AGENT_PODS+=("$pod")
    [ "$node" != "$NODE" ] || { AGENT_POD="$pod"; AGENT_PID="$pid"; }
  fi
done

step "the agent on $NODE listens where the chart says, with the chart's sysctl"
listening="$(nsenter -t "$AGENT_PID" -n ss -Hltn | awk '{ print $4 }' | sed 's/.*://' | sort -nu | tr '\n' ' ')"
for port in $(k -n kdoctor get pod "$AGENT_POD" -o jsonpath='{range .spec.containers[0].ports[*]}{.containerPort}{" "}{end}'); do
  case " $listening" in *" $port "*) ;; *) fail "$AGENT_POD does not listen on port $port (listening: $listening)" ;; esac
done
echo "listening: $listening"
sysctl="$(nsenter -t "$AGENT_PID" -n cat /proc/sys/net/ipv4/ip_unprivileged_port_start)"
[ "$sysctl" = 80 ] || fail "net.ipv4.ip_unprivileged_port_start is $sysctl in the agent's namespace, the chart sets 80"

step "the APIService, served by the controller on $NODE, is Available"
k wait apiservice/v1beta1.system.kdoctor.io --for=condition=Available --timeout=90s

step "a NetReach round: both real nodes report, reach every target and are reached from every node"
k apply -f examples/netreach.yaml
finished() { [ "$(k get netreach task -o jsonpath='{.status.finish}')" = true ]; }
wait_until 180 "the NetReach round did not finish" finished
result="$(k get netreach task -o jsonpath='{.status.lastRoundStatus}')"
[ "$result" = succeed ] || fail "the round ended '$result'"
rows="$(k get kdoctorreport netreach-task -o jsonpath='{range .report.latestRoundReport[*]}{.nodeName}{range .taskNetReach.roundTaskDetail[*]}{" "}{.name}{"="}{.requestSucceedRate}{end}{"\n"}{end}')"
echo "$rows" | cut -c1-200
nodes="$(awk '{ print $1 }' <<<"$rows" | sort | tr '\n' ' ')"
[ "$nodes" = "node-1 node-2 real-1 real-2 " ] || fail "the report's nodes are '$nodes', expected node-1 node-2 real-1 real-2"
failed="$(tr ' ' '\n' <<<"$rows" | grep '=' | grep -v '=1$' || true)"
[ -z "$failed" ] || fail "targets not reached every time: $failed"
for pod in "${AGENT_PODS[@]}"; do
  # Every node's row has this pod's IP at a success rate of 1 (checked above): 4 rows.
  reached="$(grep -c "AgentPodV4IP_${pod}_" <<<"$rows")"
  [ "$reached" = 4 ] || fail "expected every node to probe $pod's pod IP, $reached did"
done
# Across real nodes: real-1's row reached real-2's agent and the other way round.
for pair in "real-1 ${AGENT_PODS[1]}" "real-2 ${AGENT_PODS[0]}"; do
  grep -q "^${pair% *} .*AgentPodV4IP_${pair#* }_[^ ]*=1\( \|$\)" <<<"$rows" ||
    fail "${pair% *} did not reach ${pair#* } on the other real node"
done
echo "real-1 and real-2 reached each other's agents; every node reached both"

step "diagnostics as docs/troubleshooting.md gives them, through the real kubelet"
# Captured before grep: `grep -q` stops at the first match, and kubectl, killed by SIGPIPE on
# its next write, would fail the pipeline.
logs="$(k -n kdoctor logs statefulset/kdoctor-controller)"
grep -q '^{"timestamp"' <<<"$logs" || fail "kubectl logs statefulset/kdoctor-controller: no JSON log lines"
logs="$(k -n kdoctor logs "$AGENT_POD")"
grep -q 'round started' <<<"$logs" || fail "kubectl logs $AGENT_POD: no 'round started' line after the round"
k -n kdoctor port-forward statefulset/kdoctor-controller 15721:5721 >/dev/null 2>&1 &
forward=$!
wait_until 10 "kubectl port-forward statefulset/kdoctor-controller 5721 answered nothing" curl -fsS -o /dev/null http://127.0.0.1:15721/metrics
metrics="$(curl -fsS http://127.0.0.1:15721/metrics)"
kill "$forward" 2>/dev/null || true
grep -q '^kdoctor_controller_' <<<"$metrics" || fail "kubectl port-forward statefulset/kdoctor-controller 5721: no kdoctor_controller_ metrics"
echo "controller logs, agent logs and metrics through kubectl port-forward: ok"

echo
echo "e2e-real-node: passed — the image ran on two real kubelets ($runtime), Kubernetes $(k version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
