#!/usr/bin/env bash
# Installs on real nodes, end to end. A real control plane whose only nodes are three real ones
# (hack/cluster.sh up --nodes 0 --real-nodes 3), dual-stack where the machine allows IPv6 in
# network namespaces: each a real kubelet with containerd and runc in a network namespace of its
# own, with its own kube-proxy; pod traffic between nodes leaves one node's namespace and is
# routed into the other's by the cluster's namespace, which stands for the network (kube-sim
# there serves the cluster DNS, load-balancer addresses and the ingress controller, and is the
# kubelet of no node). kdoctor is installed twice with the image hack/image/build.sh made — from
# the Helm chart (Helm's engine, the real kubectl; feature.enableIPv6 on a dual-stack cluster),
# then, once that is removed, from manifests/ (IPv4, as they ship) — and every kdoctor pod of
# both runs on a real kubelet. Each check is an assertion; the script exits non-zero at the
# first that does not hold. Without IPv6 here, the IPv6 half says MISSING (hack/test.sh counts
# the run as skipped).
#   For each install:
#   - every kdoctor pod (an agent per node, three controller replicas) runs in a containerd
#     container on a real node, Ready, its readiness and liveness probes answered (the kubelet's
#     own probe metrics), and the kernel enforces the securityContext on its process (user
#     65532, no capabilities, no privilege escalation, the agent's seccomp, read-only root) and
#     its memory and CPU limits (the container's cgroup); `kubectl logs` reads it;
#   - kube-aggregator marks the APIService Available;
#   - a NetReach round: its report, served through the aggregation layer, has a row from each
#     real node, each reached every target (pods, ClusterIP, NodePort, LoadBalancer, Ingress;
#     over IPv4 and, on the chart's dual-stack install, IPv6), and each agent's pod IP was
#     reached from every node: six pairs across node boundaries per family; each target is also
#     timed as a TCP connect (spec.target.tcp), every TCP_ entry reached too; each agent pod and
#     the agents' Services (ClusterIP, NodePort, LoadBalancer: their udp-echo port, through
#     kube-proxy) are also sent UDP echoes (spec.target.udp), every UDP_ entry echoed; the pods'
#     with the hops each way
#     its path has: none from an agent to itself, at least two across nodes (both nodes route);
#     and pinged (spec.target.icmp, ICMP_ entries, on unprivileged ICMP sockets), every ICMP_
#     entry answered.
#   On the chart's install besides:
#   - the agent listens on the ports the chart declares, with the chart's sysctl;
#   - a cut between the agents of real-1 and real-2 (their pod addresses of each family dropped
#     in the network's forwarding, both ways) shows in the next round's report as exactly those two
#     pairs failing, by HTTP, TCP connect, UDP and ICMP echo, every other pair reached, and the round
#     failed;
#   - from real-1's agent pod, the agents' ClusterIP (each family) and the Ingress are answered
#     by the agents of more than one node: the Services cross node boundaries;
#   - `externalTrafficPolicy: Local` on the agents' Service: from outside the nodes, each node's
#     NodePort is answered by that node's agent only, which sees the caller's own address (under
#     Cluster, before: agents of other nodes answer too, and see the node's address); a round
#     under Local reaches every target;
#   - a real NetworkPolicy enforcer (kube-network-policies, hack/netpol/build.sh) on every real
#     node: with a policy isolating two "database" pods (kdoctor's echo server on real-2 and
#     real-3): before the enforcer runs, a round whose spec.isolation names them fails with
#     every agent's TCP, UDP and ICMP tries observed reachable (the policy alone does nothing);
#     under the enforcer the next passes with every one observed unreachable; with the policy
#     deleted, the next fails again, every one reachable;
#   - the diagnostics of docs/troubleshooting.md (controller logs, metrics by port-forward).
#
#   hack/e2e-real-node.sh        (E2E_KEEP=1 keeps the cluster, as hack/e2e.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export CLUSTER_DIR="${E2E_DIR:-$ROOT/.cluster-e2e}"
export CLUSTER_NETNS="${E2E_NETNS:-kdoctor-e2e}"
REAL_NODES=(real-1 real-2 real-3)

STEP=""
step() {
  STEP="$*"
  printf '\n== %s\n' "$*"
}
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
  local code=$? node warnings
  declare -F netpol_stop >/dev/null && netpol_stop
  if [ "$code" -ne 0 ] && [ -d "$CLUSTER_DIR/logs" ]; then
    for node in "${REAL_NODES[@]}"; do
      for log in "kubelet-$node" "containerd-$node"; do
        echo "--- $log (last 20 lines)" >&2
        tail -n 20 "$CLUSTER_DIR/logs/$log.log" >&2 || true
      done
    done
    # A command that failed on its own (a rollout that timed out, say) printed no FAILED line:
    # the cluster's last warnings and the disk the kubelets share with the build say why, last,
    # where a log cut to its tail still shows them.
    warnings="$("${KUBECTL:-false}" get events -A --field-selector type=Warning \
      --sort-by=.lastTimestamp -o custom-columns=OBJ:.involvedObject.name,REASON:.reason,MSG:.message \
      --no-headers 2>/dev/null | tail -n 5 || true)"
    echo "--- the cluster's last warning events" >&2
    echo "${warnings:-none}" >&2
    echo "e2e-real-node: FAILED (exit $code) in step '$STEP'; disk: $(df -h --output=pcent,avail "$CLUSTER_DIR" | tail -n 1 | xargs) used/free; last warning: $(tail -n 1 <<<"${warnings:-none}" | tr -s ' ')" >&2
  fi
  if [ -n "${E2E_KEEP:-}" ]; then
    echo "e2e-real-node: cluster kept: KUBECONFIG=$CLUSTER_DIR/kubeconfig; CLUSTER_DIR=$CLUSTER_DIR CLUSTER_NETNS=$CLUSTER_NETNS hack/cluster.sh down" >&2
  else
    hack/cluster.sh down >/dev/null 2>&1 || true
  fi
  exit "$code"
}
trap cleanup EXIT

step "a real control plane and ${REAL_NODES[*]} (kubelet, containerd, runc), no other node"
hack/image/build.sh >/dev/null
# The same binary as the image's (built just now, so this is a cache hit): the kubectl plugin.
KDOCTOR_BIN="$(hack/image/binary.sh)"
hack/cluster.sh up --nodes 0 --real-nodes "${#REAL_NODES[@]}"
export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
# Dual stack where the machine allows IPv6 in network namespaces; otherwise the IPv6 half is
# reported as not run (MISSING, counted as skipped by hack/test.sh).
FAMILIES="4 6" MISSING=""
if [ "$(cat "$CLUSTER_DIR/ipv6")" != 1 ]; then
  FAMILIES=4
  MISSING="MISSING: the IPv6 half of this e2e did not run: IPv6 is unavailable in network namespaces on this machine (hack/cluster.sh's log above says why)"
  echo "$MISSING" >&2
fi
KUBECTL="$(cat "$CLUSTER_DIR/kube-bin")/kubectl"
k() { "$KUBECTL" "$@"; }
nodes="$(k get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}')"
[ "$nodes" = "${REAL_NODES[*]} " ] || fail "the cluster's nodes are '$nodes', expected ${REAL_NODES[*]}"
for node in "${REAL_NODES[@]}"; do
  runtime="$(k get node "$node" -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}')"
  case "$runtime" in containerd://*) ;; *) fail "$node runs '$runtime', not containerd" ;; esac
  cidrs="$(k get node "$node" -o jsonpath='{.spec.podCIDRs[*]}')"
  [ "$(wc -w <<<"$cidrs")" = "$(wc -w <<<"$FAMILIES")" ] || fail "$node has pod CIDRs '$cidrs', expected one for each IP family of $FAMILIES"
  echo "$node: $runtime, pod CIDRs $cidrs"
done
in_net() { ip netns exec "$CLUSTER_NETNS" "$@"; }

# A container's process on this host, from its node's containerd.
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

# Every pod of the install (name, component, node), each checked: a containerd container on a
# real node, Ready, confined as declared, probed by its kubelet, its logs readable. Fills
# AGENT_NODE (agent pod -> node) and AGENT_PID (node -> the agent's process).
declare -A AGENT_NODE AGENT_PID
check_pods() {
  local pod component node state id pid status uid capeff nonewprivs seccomp root_opts memcg limit declared
  local cpucg cpudir quota period cpu type logs agents=0 controllers=0
  AGENT_NODE=() AGENT_PID=()
  while read -r pod component node; do
    case " ${REAL_NODES[*]} " in *" $node "*) ;; *) fail "$pod ($component) is on '$node', not a real node" ;; esac
    k -n kdoctor wait "pod/$pod" --for=condition=Ready --timeout=90s >/dev/null
    state="$(k -n kdoctor get pod "$pod" -o jsonpath='{.status.phase} {.status.containerStatuses[0].containerID}')"
    case "$state" in "Running containerd://"*) ;; *) fail "$pod: expected Running in a containerd container, got '$state'" ;; esac
    id="${state#Running containerd://}"
    pid="$(container_pid "$node" "$id")"
    [ -n "$pid" ] || fail "$pod: containerd of $node has no task $id"
    status="/proc/$pid/status"
    uid="$(awk '/^Uid:/ { print $3 }' "$status")"
    capeff="$(awk '/^CapEff:/ { print $2 }' "$status")"
    nonewprivs="$(awk '/^NoNewPrivs:/ { print $2 }' "$status")"
    [ "$uid" = 65532 ] || fail "$pod runs as uid $uid, not 65532"
    [ "$capeff" = 0000000000000000 ] || fail "$pod has capabilities $capeff (the install drops ALL)"
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
    echo "$pod on $node: pid $pid, uid $uid, CapEff $capeff, NoNewPrivs $nonewprivs, root ($root_opts), memory.limit_in_bytes $limit, cpu.cfs_quota_us $quota/$period"
    # The first liveness probe comes a period (10 s) after the startup probe passed.
    for type in Readiness Liveness; do
      wait_until 40 "$pod: the kubelet reports no successful $type probe" probed "$pod" "$type" "$node"
    done
    logs="$(k -n kdoctor logs "$pod" --tail=200)"
    [ -n "$logs" ] || fail "kubectl logs $pod printed nothing"
    case "$component" in
      agent)
        agents=$((agents + 1))
        AGENT_NODE[$pod]="$node"
        AGENT_PID[$node]="$pid"
        ;;
      controller) controllers=$((controllers + 1)) ;;
    esac
  done < <(k -n kdoctor get pods -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.metadata.labels.app\.kubernetes\.io/component}{" "}{.spec.nodeName}{"\n"}{end}')
  [ "$agents" = "${#REAL_NODES[@]}" ] || fail "$agents agent pods, expected one on each of ${REAL_NODES[*]}"
  [ "${#AGENT_PID[@]}" = "${#REAL_NODES[@]}" ] || fail "the agents are not one per node: ${!AGENT_PID[*]}"
  [ "$controllers" = 3 ] || fail "$controllers controller pods, expected the 3 replicas"
}

# One NetReach round of examples/netreach.yaml as the task NAME, over IPv6 too when ROUND_IPV6
# is 1, each target also timed as a TCP connect (spec.target.tcp, entries TCP_<name>) and each
# agent pod sent UDP echoes (spec.target.udp, entries UDP_<name>), once it finished: sets ROWS
# to its report's rows (the node, then target=successRate for each target), HOPS to the same
# with target=forwardHops/returnHops, and ROUND_RESULT.
# The path MTU of each UDP entry is searched too (spec.target.pathMTU): MTUS has
# target=pathMTU/pathMTULimit; with ROUND_MIN_MTU set, expect.minPathMTU bounds it.
ROUND_RESULT="" ROWS="" HOPS="" MTUS="" ROUND_IPV6=0 ROUND_MIN_MTU=""
finished() { [ "$(k get netreach "$1" -o jsonpath='{.status.finish}')" = true ]; }
round() { # name
  local v6=()
  [ "$ROUND_IPV6" = 0 ] || v6=(-e 's/^    ipv4: true$/    ipv4: true\n    ipv6: true/')
  [ -z "$ROUND_MIN_MTU" ] || v6+=(-e "s/^    successRate: 1\$/    successRate: 1\n    minPathMTU: $ROUND_MIN_MTU/")
  sed -e "s/^  name: task$/  name: $1/" -e 's/^    nodePort: true$/    nodePort: true\n    tcp: true\n    udp: true\n    icmp: true\n    pathMTU: true/' "${v6[@]}" examples/netreach.yaml |
    k apply -f - >/dev/null
  wait_until 180 "the NetReach $1 round did not finish" finished "$1"
  ROUND_RESULT="$(k get netreach "$1" -o jsonpath='{.status.lastRoundStatus}')"
  ROWS="$(k get kdoctorreport "netreach-$1" -o jsonpath='{range .report.latestRoundReport[*]}{.nodeName}{range .taskNetReach.roundTaskDetail[*]}{" "}{.name}{"="}{.requestSucceedRate}{end}{"\n"}{end}')"
  MTUS="$(k get kdoctorreport "netreach-$1" -o jsonpath='{range .report.latestRoundReport[*]}{.nodeName}{range .taskNetReach.roundTaskDetail[*]}{" "}{.name}{"="}{.requestTargetMetrics.datagrams.pathMTU}{"/"}{.requestTargetMetrics.datagrams.pathMTULimit}{end}{"\n"}{end}')"
  HOPS="$(k get kdoctorreport "netreach-$1" -o jsonpath='{range .report.latestRoundReport[*]}{.nodeName}{range .taskNetReach.roundTaskDetail[*]}{" "}{.name}{"="}{.requestTargetMetrics.datagrams.forwardHops}{"/"}{.requestTargetMetrics.datagrams.returnHops}{end}{"\n"}{end}')"
}
# The success rate of the pod target POD over IP FAMILY (4, 6) in NODE's row of ROWS, its HTTP
# entry or, with PREFIX TCP_ or UDP_, its TCP connect or UDP echo entry (or from HOPS, its hops).
pod_rate() { # rows node pod family [prefix]
  awk -v node="$2" -v pod="${5:-}AgentPodV$4IP_$3_" '$1 == node { for (i = 2; i <= NF; i++) if (index($i, pod) == 1) { sub(/.*=/, "", $i); print $i } }' <<<"$1"
}
# Checks ROWS: a row per real node, and each agent's pod reached from every node at rate 1
# over each family the round probed, by HTTP, TCP connect and UDP echo, except the pairs
# between CUT_A and CUT_B (both ways), which must be 0; with no cut, every other target at rate
# 1 too, and the UDP echoes' hops (HOPS) 0/0 from an agent to itself, at least 2 each way
# across nodes.
check_rows() { # rows [cut_a cut_b]
  local rows="$1" cut_a="${2:-}" cut_b="${3:-}" nodes from pod to rate want family families=4 pairs=0 prefix hops HOP_COUNTS="" MTU_SEEN=""
  [ "$ROUND_IPV6" = 0 ] || families="4 6"
  echo "$rows" | cut -c1-200
  nodes="$(awk '{ print $1 }' <<<"$rows" | sort | tr '\n' ' ')"
  [ "$nodes" = "${REAL_NODES[*]} " ] || fail "the report's nodes are '$nodes', expected ${REAL_NODES[*]}"
  for from in "${REAL_NODES[@]}"; do
    for pod in "${!AGENT_NODE[@]}"; do
      to="${AGENT_NODE[$pod]}"
      want=1
      if [ -n "$cut_a" ] && { [ "$from $to" = "$cut_a $cut_b" ] || [ "$from $to" = "$cut_b $cut_a" ]; }; then want=0; fi
      for family in $families; do
        for prefix in "" TCP_ UDP_ ICMP_; do
          rate="$(pod_rate "$rows" "$from" "$pod" "$family" "$prefix")"
          [ -n "$rate" ] || fail "$from's row has no ${prefix}target for $pod's IPv$family pod IP"
          awk -v r="$rate" -v w="$want" 'BEGIN { exit !(r + 0 == w + 0) }' ||
            fail "$from reached $pod (on $to) over IPv$family ${prefix:+by $prefix }at rate $rate, expected $want"
        done
        if [ -z "$cut_a" ]; then
          hops="$(pod_rate "$HOPS" "$from" "$pod" "$family" UDP_)"
          if [ "$from" = "$to" ]; then
            [ "$hops" = 0/0 ] || fail "$from's agent echoing itself over IPv$family crossed $hops routers (there/back), expected 0/0"
          else
            awk -F/ -v h="$hops" 'BEGIN { split(h, a, "/"); exit !(a[1] != "" && a[1] + 0 >= 2 && a[2] + 0 >= 2) }' ||
              fail "$from to $pod (on $to) over IPv$family: hops $hops (there/back), expected at least 2/2 across nodes"
          fi
          HOP_COUNTS+=" $from>$to:$hops"
          check_mtu "$from" "$pod" "$family" "$(expected_mtu "$from" "$to" "$family")"
        fi
        [ "$from" = "$to" ] || pairs=$((pairs + 1))
      done
    done
  done
  if [ -z "$cut_a" ]; then
    local failed kind
    failed="$(tr ' ' '\n' <<<"$rows" | grep '=' | grep -v '=1$' || true)"
    [ -z "$failed" ] || fail "targets not reached every time: $failed"
    # The Services' UDP echo port, through kube-proxy, in every row (reached: checked above).
    for from in "${REAL_NODES[@]}"; do
      for family in $families; do
        for kind in Cluster NodePort Loadbalancer; do
          awk -v node="$from" -v entry="UDP_Agent${kind}V${family}IP_" '$1 == node && index($0, " " entry) { found = 1 } END { exit !found }' <<<"$rows" ||
            fail "$from's row has no UDP echo entry for the agents' $kind Service over IPv$family"
        done
      done
    done
  fi
  echo "every node's row checked: $pairs pairs across node boundaries (IPv${families// / and IPv}), by HTTP, TCP connect, UDP and ICMP echo"
  [ -n "$cut_a" ] || echo "and every row has the Services' UDP echo entries (ClusterIP, NodePort, LoadBalancer), each echoed"
  [ -n "$cut_a" ] || echo "UDP echo hops (there/back):$HOP_COUNTS"
  [ -n "$cut_a" ] || echo "path MTUs:$MTU_SEEN"
}

# The path MTU (and why no larger) expected from FROM to the agent on TO: LOW_NODE's link
# lowered to LOW_MTU makes the pairs through it fragmentation-needed (its node's router and the
# network's both say so), or, with LOW_HOLE=1 (the network's "fragmentation needed" dropped),
# a black hole towards it; an agent to itself goes over its pod's loopback.
LOW_NODE="" LOW_MTU="" LOW_HOLE=0
expected_mtu() { # from to family
  # Loopback's MTU is 65536; an IPv4 packet is at most 65535 bytes.
  if [ "$1" = "$2" ]; then [ "$3" = 4 ] && echo "65535/interface" || echo "65536/interface"
  elif [ -n "$LOW_NODE" ] && [ "$2" = "$LOW_NODE" ] && [ "$LOW_HOLE" = 1 ]; then echo "$LOW_MTU/black-hole"
  elif [ -n "$LOW_NODE" ] && { [ "$1" = "$LOW_NODE" ] || [ "$2" = "$LOW_NODE" ]; }; then echo "$LOW_MTU/fragmentation-needed"
  else echo "1500/interface"
  fi
}
# kubectl kdoctor matrix REPORT --metric mtu shows, between the real nodes, what expected_mtu
# says over IPv4 (the narrower family; a node to itself: loopback's 65535).
check_mtu_matrix() { # report
  local text row node to want got column
  text="$("$KDOCTOR_BIN" kubectl matrix "$1" --metric mtu --no-color)" || fail "kubectl kdoctor matrix $1 --metric mtu failed"
  echo "$text"
  for node in "${REAL_NODES[@]}"; do
    row="$(awk -v n="$node" '$1 == n' <<<"$text")"
    [ -n "$row" ] || fail "the path MTU matrix has no row for $node"
    column=1
    for to in "${REAL_NODES[@]}"; do
      column=$((column + 1))
      got="$(awk -v f="$column" '{ print $f }' <<<"$row")"
      want="$(expected_mtu "$node" "$to" 4)"
      [ "$got" = "${want%%/*}" ] || fail "the path MTU matrix shows $node to $to as '$got', expected ${want%%/*}"
    done
  done
  grep -q "bad below 1500, the widest between two nodes" <<<"$text" || fail "the path MTU matrix does not judge its cells against 1500"
}
check_mtu() { # from pod family expected
  local got
  got="$(pod_rate "$MTUS" "$1" "$2" "$3" UDP_)"
  [ "$got" = "$4" ] || fail "$1 to $2 (on ${AGENT_NODE[$2]}) over IPv$3: path MTU $got, expected $4"
  MTU_SEEN+=" $1>${AGENT_NODE[$2]}:$got"
}

# Checks an install: every pod, the APIService, and a round (task NAME) across the real nodes.
check_install() { # what task
  step "$1: every kdoctor pod on a real kubelet, Ready, confined as declared"
  check_pods
  step "$1: the APIService, served by the controller on the real nodes, is Available"
  k wait apiservice/v1beta1.system.kdoctor.io --for=condition=Available --timeout=90s
  step "$1: a NetReach round: each real node reports, reaches every target and each node's agent"
  round "$2"
  [ "$ROUND_RESULT" = succeed ] || fail "the round ended '$ROUND_RESULT'"
  check_rows "$ROWS"
}

step "installing the chart (IP families: $FAMILIES)"
if [ "$FAMILIES" = "4 6" ]; then
  hack/cluster.sh install-chart --set feature.enableIPv6=true
  ROUND_IPV6=1
else
  hack/cluster.sh install-chart
fi
k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=120s
k -n kdoctor rollout status statefulset/kdoctor-controller --timeout=180s
check_install "the chart" task

step "the agent on real-1 listens where the chart says, with the chart's sysctl"
agent_pid="${AGENT_PID[real-1]}"
for pod in "${!AGENT_NODE[@]}"; do [ "${AGENT_NODE[$pod]}" = real-1 ] && agent_pod="$pod"; done
listening="$(nsenter -t "$agent_pid" -n ss -Hltun | awk '{ print $5 }' | sed 's/.*://' | sort -nu | tr '\n' ' ')"
for port in $(k -n kdoctor get pod "$agent_pod" -o jsonpath='{range .spec.containers[0].ports[*]}{.containerPort}{" "}{end}'); do
  case " $listening" in *" $port "*) ;; *) fail "$agent_pod does not listen on port $port (listening: $listening)" ;; esac
done
echo "listening: $listening"
sysctl="$(nsenter -t "$agent_pid" -n cat /proc/sys/net/ipv4/ip_unprivileged_port_start)"
[ "$sysctl" = 80 ] || fail "net.ipv4.ip_unprivileged_port_start is $sysctl in the agent's namespace, the chart sets 80"
ping_groups="$(nsenter -t "$agent_pid" -n cat /proc/sys/net/ipv4/ping_group_range | tr -s '[:space:]' ' ')"
[ "$ping_groups" = "0 2147483647 " ] || fail "net.ipv4.ping_group_range is '$ping_groups' in the agent's namespace, the chart sets 0 2147483647"

step "a cut between real-1's and real-2's agents shows as exactly those pairs failing"
# The agent's pod addresses on NODE, one per family.
agent_ips() { k -n kdoctor get pods -l app.kubernetes.io/component=agent -o jsonpath="{range .items[?(@.spec.nodeName==\"$1\")]}{range .status.podIPs[*]}{.ip}{\" \"}{end}{end}"; }
read -r -a ips1 <<<"$(agent_ips real-1)"
read -r -a ips2 <<<"$(agent_ips real-2)"
[ "${#ips1[@]}" = "$(wc -w <<<"$FAMILIES")" ] && [ "${#ips2[@]}" = "${#ips1[@]}" ] ||
  fail "the agents on real-1 and real-2 have pod IPs '${ips1[*]}' and '${ips2[*]}', expected one per family of $FAMILIES"
cut_apart() { # -I or -D
  local i tables
  for i in "${!ips1[@]}"; do
    case "${ips1[$i]}" in *:*) tables=ip6tables ;; *) tables=iptables ;; esac
    in_net "$tables" "$1" FORWARD -s "${ips1[$i]}" -d "${ips2[$i]}" -j DROP
    in_net "$tables" "$1" FORWARD -s "${ips2[$i]}" -d "${ips1[$i]}" -j DROP
  done
}
cut_apart -I
round cut
cut_apart -D
[ "$ROUND_RESULT" = fail ] || fail "the round with real-1 and real-2 cut apart ended '$ROUND_RESULT', not fail"
check_rows "$ROWS" real-1 real-2
echo "the report names the cut pairs (real-1 <-> real-2) and only them"

step "real-1's link lowered to 1400 bytes: exactly the pairs through it have a path MTU of 1400"
lower_link() { # mtu
  in_net ip link set rn1 mtu "$1"
  ip netns exec "$CLUSTER_NETNS-real-1" ip link set eth0 mtu "$1"
}
frag_needed() { # -I or -D: the network's own "fragmentation needed" / "packet too big"
  in_net iptables "$1" OUTPUT -p icmp --icmp-type fragmentation-needed -j DROP
  [ "$FAMILIES" = 4 ] || in_net ip6tables "$1" OUTPUT -p icmpv6 --icmpv6-type packet-too-big -j DROP
}
lower_link 1400
LOW_NODE=real-1 LOW_MTU=1400 ROUND_MIN_MTU=1500
round mtu
[ "$ROUND_RESULT" = fail ] || { lower_link 1500; fail "the round with real-1's link at 1400 bytes and minPathMTU 1500 ended '$ROUND_RESULT', not fail"; }
check_rows "$ROWS"
check_mtu_matrix netreach-mtu
step "and with the network's \"fragmentation needed\" dropped, a black hole towards real-1"
frag_needed -I
LOW_HOLE=1
round mtuhole
frag_needed -D
lower_link 1500
check_rows "$ROWS"
LOW_NODE="" LOW_MTU="" LOW_HOLE=0 ROUND_MIN_MTU=""
echo "the lowered link shows as path MTU 1400 on exactly the pairs through it, told apart as fragmentation-needed or black-hole"

step "a real NetworkPolicy enforcer (kube-network-policies) on every real node: the isolation a policy promises holds, and its removal fails the round"
# SIG Network's reference enforcer, one per node like its kube-proxy, in the node's network
# namespace (hack/netpol/build.sh says why it is patched). Fail-open: packets pass while it is
# not running, so a check that passes proves the enforcer blocked them, and the rest of this
# run is unaffected once it stops.
# The peers: kdoctor's own echo server (HTTP 8080, UDP echo 5712) as a "database" on real-2 and
# real-3, which the agents must not reach once a policy isolates it.
SHOP=kdoctor-e2e-shop
IMAGE="$(k -n kdoctor get daemonset kdoctor-agent -o jsonpath='{.spec.template.spec.containers[0].image}')"
k create namespace "$SHOP" >/dev/null
k apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: db, namespace: $SHOP}
spec:
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [real-2, real-3]}]
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {labelSelector: {matchLabels: {app: db}}, topologyKey: kubernetes.io/hostname}
      containers:
      - name: db
        image: $IMAGE
        imagePullPolicy: Never
        args: [agent, --app-http-port=8080, --app-https-port=8443, --health-port=8081, --metrics-port=8082]
        securityContext: {runAsUser: 65532, runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
        readinessProbe: {httpGet: {path: /healthy/readiness, port: 8081}, periodSeconds: 2}
YAML
k -n "$SHOP" rollout status deployment/db --timeout=120s
# Ingress to the database from nowhere: the policy kube-network-policies enforces.
k apply -f - >/dev/null <<YAML
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-isolated, namespace: $SHOP}
spec:
  podSelector: {matchLabels: {app: db}}
  policyTypes: [Ingress]
YAML
# A mesh round beside the isolation checks (ROWS as round's; ISOLATION: node name=observed).
ISOLATION=""
isolation_round() { # name
  sed -e "s/^  name: task$/  name: $1/" examples/netreach.yaml |
    python3 -c '
import sys
text = sys.stdin.read()
text += """  isolation:
  - {name: db, namespace: kdoctor-e2e-shop, podSelector: {matchLabels: {app: db}}, port: 8080}
  - {name: db-udp, namespace: kdoctor-e2e-shop, podSelector: {matchLabels: {app: db}}, protocol: UDP, port: 5712}
  - {name: db-ping, namespace: kdoctor-e2e-shop, podSelector: {matchLabels: {app: db}}, protocol: ICMP}
"""
print(text, end="")' | k apply -f - >/dev/null
  wait_until 180 "the NetReach $1 round did not finish" finished "$1"
  ROUND_RESULT="$(k get netreach "$1" -o jsonpath='{.status.lastRoundStatus}')"
  ISOLATION="$(k get kdoctorreport "netreach-$1" -o jsonpath='{range .report.latestRoundReport[*]}{.nodeName}{range .taskNetReach.roundTaskDetail[*]}{" "}{.name}{"="}{.requestTargetMetrics.isolation.observed}{end}{"\n"}{end}' | tr ' ' '\n' | grep -E '^real-|_Deny_' )"
}
# Every node's row has the three checks of both database pods (at each family the round
# probed: IPv4 here), each observed as WANT; nothing else failed.
check_isolation() { # want
  local rows entries
  rows="$(grep -c '^real-' <<<"$ISOLATION")"
  [ "$rows" = "${#REAL_NODES[@]}" ] || fail "$rows rows in the report, expected one per real node: $ISOLATION"
  entries="$(grep -c '_Deny_' <<<"$ISOLATION")"
  [ "$entries" = $((${#REAL_NODES[@]} * 3 * 2)) ] || fail "$entries isolation entries, expected 3 checks of 2 pods from ${#REAL_NODES[@]} nodes: $ISOLATION"
  ! grep '_Deny_' <<<"$ISOLATION" | grep -v "=$1\$" >/dev/null ||
    fail "isolation entries not observed $1: $(grep '_Deny_' <<<"$ISOLATION" | grep -v "=$1\$" | tr '\n' ' ')"
  echo "every node's isolation checks (TCP, UDP, ICMP to both database pods) observed $1"
}
# The policy alone, before any enforcer runs: nothing enforces it, and the checks say so.
isolation_round unenforced
[ "$ROUND_RESULT" = fail ] || fail "with the policy applied but no enforcer running the round ended '$ROUND_RESULT', not fail: $ISOLATION"
check_isolation reachable
NETPOL_BIN="$(hack/netpol/build.sh)"
NETPOL_PIDS=()
netpol_stop() {
  local pid i
  for pid in "${NETPOL_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for i in "${!REAL_NODES[@]}"; do
    ip netns exec "$CLUSTER_NETNS-real-$((i + 1))" nft delete table inet kube-network-policies 2>/dev/null || true
  done
  NETPOL_PIDS=()
}
for i in "${!REAL_NODES[@]}"; do
  node="${REAL_NODES[$i]}"
  setsid ip netns exec "$CLUSTER_NETNS-real-$((i + 1))" env KUBECONFIG="$CLUSTER_DIR/admin.inner.kubeconfig" "$NETPOL_BIN" \
    --hostname-override="$node" --disable-nri --fail-open --netfilter-bug-1766-fix=false \
    --metrics-bind-address=127.0.0.1:9080 --v=2 >"$CLUSTER_DIR/logs/netpol-$node.log" 2>&1 </dev/null &
  NETPOL_PIDS+=("$!")
done
netpol_ready() { # node index
  ip netns exec "$CLUSTER_NETNS-real-$1" nft list table inet kube-network-policies >/dev/null 2>&1 &&
    ip netns exec "$CLUSTER_NETNS-real-$1" curl -fsS http://127.0.0.1:9080/metrics >/dev/null
}
for i in "${!REAL_NODES[@]}"; do
  wait_until 60 "kube-network-policies on ${REAL_NODES[$i]} did not program its table ($(tail -n 3 "$CLUSTER_DIR/logs/netpol-${REAL_NODES[$i]}.log" | tr '\n' ' '))" netpol_ready "$((i + 1))"
done
isolation_round isolated
[ "$ROUND_RESULT" = succeed ] || fail "with the policy enforced the round ended '$ROUND_RESULT', not succeed: $ISOLATION"
check_isolation unreachable
k -n "$SHOP" delete networkpolicy db-isolated >/dev/null
# The enforcer drops its rules for the pods once no policy selects them.
sleep 2
isolation_round opened
[ "$ROUND_RESULT" = fail ] || fail "with the policy removed the round ended '$ROUND_RESULT', not fail: $ISOLATION"
check_isolation reachable
echo "unenforced, the policy's isolation failed the round; under kube-network-policies it held; its removal failed the round again, naming every pair"
netpol_stop
k delete namespace "$SHOP" --wait=false >/dev/null

# Who answered 30 fresh connections to URL, made by CMD... (curl in a namespace), and the
# caller's address each saw: "count server client" lines.
answers() { # url cmd...
  local url="$1" i
  shift
  for i in $(seq 30); do
    "$@" curl -fsS --max-time 5 "$url" | python3 -c '
import json, sys
body = json.load(sys.stdin)
client = body["clientIp"]  # "[::ffff:198.18.0.1]:41234" or "198.18.0.1:41234"
host = client[1:client.index("]")] if client.startswith("[") else client.rsplit(":", 1)[0]
print(body["serverName"], host.removeprefix("::ffff:"))'
  done | sort | uniq -c
}
# The node of each agent that answered (from answers' lines), sorted, once each.
answering_nodes() { # answers
  local pod
  for pod in $(awk '{ print $2 }' <<<"$1"); do echo "${AGENT_NODE[$pod]:-unknown:$pod}"; done | sort -u | tr '\n' ' '
}

step "the Services and the Ingress, from real-1's agent pod, are answered by the agents of other nodes"
http_port() { k -n kdoctor get service "$1" -o jsonpath='{.spec.ports[?(@.name=="http")].port}'; }
urls=("http://$(k -n kdoctor get service kdoctor-agent-ipv4 -o jsonpath='{.spec.clusterIP}'):$(http_port kdoctor-agent-ipv4)/")
[ "$ROUND_IPV6" = 0 ] || urls+=("http://[$(k -n kdoctor get service kdoctor-agent-ipv6 -o jsonpath='{.spec.clusterIP}')]:$(http_port kdoctor-agent-ipv6)/")
urls+=("http://$(k -n kdoctor get ingress kdoctor-agent -o jsonpath='{.status.loadBalancer.ingress[0].ip}')/kdoctoragent")
for url in "${urls[@]}"; do
  got="$(answers "$url" nsenter -t "$agent_pid" -n)"
  reached="$(answering_nodes "$got")"
  echo "$url from real-1's agent: answered by the agents of $reached"
  [ "$(awk '{ n += $1 } END { print n + 0 }' <<<"$got")" = 30 ] || fail "$url from real-1's agent: not every connection answered: $got"
  [ "$(wc -w <<<"$reached")" -gt 1 ] || fail "$url from real-1's agent: every connection answered on $reached alone: $got"
done

step "externalTrafficPolicy: Local: each node's NodePort answered by its own agent, the caller's address kept"
node_port="$(k -n kdoctor get service kdoctor-agent-ipv4 -o jsonpath='{.spec.ports[?(@.name=="http")].nodePort}')"
[ -n "$node_port" ] || fail "the Service kdoctor-agent-ipv4 has no http nodePort"
node_ip() { # node: its IPv4 InternalIP
  k get node "$1" -o jsonpath='{range .status.addresses[?(@.type=="InternalIP")]}{.address}{"\n"}{end}' | grep -v : | head -n1
}
# Answers to 30 connections to NODE's NodePort from the network (the cluster's namespace,
# outside every node).
node_port_answers() { answers "http://$(node_ip "$1"):$node_port/" in_net; }
# All 30 answered by AGENT, which saw the caller's own address.
local_only() { # node agent
  [ "$(node_port_answers "$1" | awk '{ print $1, $2, $3 }')" = "30 $2 $gateway" ]
}
gateway="$(in_net ip -4 route get "$(node_ip real-1)" | sed -n 's/.* src \([0-9.]*\).*/\1/p')"
before="$(node_port_answers real-1)"
printf "Cluster, real-1's NodePort (count, agent, the address it saw):\n%s\n" "$before"
[ "$(awk '{ print $2 }' <<<"$before" | sort -u | wc -l)" -gt 1 ] || fail "under Cluster one agent answered all 30 connections to real-1's NodePort: $before"
! grep -q " $gateway$" <<<"$before" || fail "under Cluster an agent saw the caller's address $gateway (kube-proxy masquerades it): $before"
k -n kdoctor patch service kdoctor-agent-ipv4 -p '{"spec":{"externalTrafficPolicy":"Local"}}' >/dev/null
for node in "${REAL_NODES[@]}"; do
  for pod in "${!AGENT_NODE[@]}"; do [ "${AGENT_NODE[$pod]}" = "$node" ] && own="$pod"; done
  # kube-proxy of each node takes the change in its next sync.
  wait_until 30 "under Local, $node's NodePort is not answered by $own alone, seeing $gateway" local_only "$node" "$own"
  echo "Local, $node's NodePort: 30 of 30 by $own, which saw $gateway"
done
round local
[ "$ROUND_RESULT" = succeed ] || fail "the round under externalTrafficPolicy Local ended '$ROUND_RESULT'"
check_rows "$ROWS"

step "diagnostics as docs/troubleshooting.md gives them, through the real kubelet"
# Captured before grep: `grep -q` stops at the first match, and kubectl, killed by SIGPIPE on
# its next write, would fail the pipeline.
logs="$(k -n kdoctor logs statefulset/kdoctor-controller)"
grep -q '^{"timestamp"' <<<"$logs" || fail "kubectl logs statefulset/kdoctor-controller: no JSON log lines"
logs="$(k -n kdoctor logs "$agent_pod")"
grep -q 'round started' <<<"$logs" || fail "kubectl logs $agent_pod: no 'round started' line after the round"
k -n kdoctor port-forward statefulset/kdoctor-controller 15721:5721 >/dev/null 2>&1 &
forward=$!
wait_until 10 "kubectl port-forward statefulset/kdoctor-controller 5721 answered nothing" curl -fsS -o /dev/null http://127.0.0.1:15721/metrics
metrics="$(curl -fsS http://127.0.0.1:15721/metrics)"
kill "$forward" 2>/dev/null || true
grep -q '^kdoctor_controller_' <<<"$metrics" || fail "kubectl port-forward statefulset/kdoctor-controller 5721: no kdoctor_controller_ metrics"
echo "controller logs, agent logs and metrics through kubectl port-forward: ok"

step "removing the chart's install (its objects, the namespace and the tasks)"
k delete netreach --all --wait=true >/dev/null
k delete -f "$CLUSTER_DIR/install/chart.yaml" --ignore-not-found --wait=true >/dev/null
k delete namespace kdoctor --ignore-not-found --wait=true --timeout=180s >/dev/null
k delete -f charts/kdoctor/crds/ --ignore-not-found --wait=true >/dev/null

step "installing from manifests/ (kubectl apply -k; IPv4, as they ship)"
k apply -k manifests/ >/dev/null
ROUND_IPV6=0
k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=120s
k -n kdoctor rollout status statefulset/kdoctor-controller --timeout=180s
check_install "manifests/" task

echo
[ -z "$MISSING" ] || echo "$MISSING" >&2
echo "e2e-real-node: passed — the chart (IPv${FAMILIES// / and IPv}) and manifests/ on three real kubelets ($runtime), Kubernetes $(k version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
