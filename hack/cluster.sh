#!/usr/bin/env bash
# A real Kubernetes control plane for kdoctor's system tests, on this machine, in a network
# namespace of its own: etcd, kube-apiserver (with its aggregation layer), kube-controller-manager,
# kube-scheduler and kube-proxy, built from their Go modules (hack/kube/build.sh), with kube-sim
# as the kubelet of its nodes (pods of kdoctor's image run as real processes, each in a network
# namespace of its own). docs/development.md#test-cluster describes it.
#
#   hack/cluster.sh up [--nodes N] [--process-nodes M] [--ipv4-only] [--no-build] [--real-nodes R] [--release]
#                                   [--etcd-members 1|3] [--apiserver-profiling]
#                                   start it (builds what is missing first); writes an admin
#                                   kubeconfig to .cluster/kubeconfig (server on the host's
#                                   loopback) and returns once /readyz answers and every node is
#                                   Ready. Nodes node-1..M run real processes (default: all);
#                                   --nodes 0: no kube-sim node (the cluster's namespace still
#                                   has its DNS, load balancers, ingress and a kube-proxy).
#                                   --no-build: use what is built (tests, inside cargo test).
#                                   --real-nodes R: R more nodes, real-1..R, each run by a real
#                                   kubelet with containerd and runc in a network namespace of
#                                   its own (hack/kube/real-node.sh); --real-node: one.
#                                   --release: kube-sim's nodes run the optimised kdoctor
#                                   (benchmarks; tests use the debug build). --etcd-members 3:
#                                   etcd as production runs it, three members (a quorum read
#                                   then crosses members, as kdoctor's replicated reads do).
#                                   --apiserver-profiling: kube-apiserver serves /debug/pprof
#   hack/cluster.sh down            stop everything and remove what `up` made
#   hack/cluster.sh install-chart [--set KEY=VALUE]...
#                                   render charts/kdoctor with Helm's engine and apply it
#   hack/cluster.sh status          what runs
#   hack/cluster.sh deps            install the Debian packages the nodes need (iptables, CNI)
#   hack/cluster.sh restart NAME    stop and start one daemon (kube-sim after a rebuild, say)
#
# Addresses live only inside the namespace: IPv4 198.18.0.0/15 (reserved for testing) and the
# ULA prefix fd6b:6474::/48 (nodes, Services, pods and load balancers; the table below). The
# API server is forwarded to the host's loopback by `kube-sim forward`. Needs root (network
# namespaces, mounts).
set -euo pipefail
# A step that fails says where: set -e alone ends the script without a word.
trap 'echo "cluster: failed at hack/cluster.sh (or a file it sources) line $LINENO: $BASH_COMMAND" >&2' ERR
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${CLUSTER_DIR:-$ROOT/.cluster}"
NS="${CLUSTER_NETNS:-kdoctor-cluster}"

# The address plan (docs/development.md#test-cluster has it as a table).
NODE_NET4=198.18.0.0/20        # node addresses: .1 control plane, .2 DNS, .3 ingress, .10+i node-i
NODE_NET6=fd6b:6474::/64
APISERVER4=198.18.0.1
APISERVER6=fd6b:6474::1
SERVICE_NET4=198.18.32.0/20    # kubernetes: .1, kube-dns: .10
SERVICE_NET6=fd6b:6474:0:20::/112
LB_NET4=198.18.16.0/20         # LoadBalancer and Ingress addresses (kube-sim assigns them)
LB_NET6=fd6b:6474:0:10::/112
POD_NET4=198.19.0.0/16         # a /26 per node (kube-controller-manager allocates); narrower above 1,024 nodes
# Above 4,085 nodes (the node network's room) kube-sim's nodes take their addresses from here.
NODE_NET4_LARGE=198.18.64.0/18
POD_NET6=fd6b:6474:0:1000::/52 # a /64 per node

# shellcheck source=hack/kube/real-node.sh
. "$ROOT/hack/kube/real-node.sh"

log() { printf '%s cluster: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 2; }
in_ns() { ip netns exec "$NS" "$@"; }

# Starts a daemon inside the namespace (or $START_NETNS), detached from this shell, logging to $DIR/logs/NAME.log.
# Its command is kept in $DIR/cmd/NAME, so `hack/cluster.sh restart NAME` can start it again.
# kube-sim, containerd and the kubelet enter only the network namespace (nsenter): `ip netns
# exec` would also give them a mount namespace of their own, and the pods' network namespaces
# and volumes they mount would not be seen from the host (nor the kubelet's by containerd).
start() {
  local name="$1" netns="${START_NETNS:-$NS}"
  shift
  mkdir -p "$DIR/logs" "$DIR/pids" "$DIR/cmd"
  printf '%s\0' "$@" >"$DIR/cmd/$name"
  echo "$netns" >"$DIR/cmd/$name.netns"
  if [ "$name" = kube-sim ] || [[ "$name" == containerd-* ]] || [[ "$name" == kubelet-* ]]; then
    setsid nsenter --net="/var/run/netns/$netns" -- "$@" >>"$DIR/logs/$name.log" 2>&1 </dev/null &
  else
    setsid ip netns exec "$netns" "$@" >>"$DIR/logs/$name.log" 2>&1 </dev/null &
  fi
  echo $! >"$DIR/pids/$name.pid"
}

stop() {
  local name="$1" pid
  [ -s "$DIR/pids/$name.pid" ] || return 0
  pid="$(cat "$DIR/pids/$name.pid")"
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

# Stops and starts one daemon with the command `up` gave it (after a rebuild, say).
cmd_restart() {
  local name="${1:-}"
  [ -s "$DIR/cmd/$name" ] || die "restart: no daemon '$name' (one of: $(ls "$DIR/cmd" 2>/dev/null | grep -v "\.netns$" | tr '\n' ' '))"
  stop "$name"
  local argv=()
  while IFS= read -r -d '' a; do argv+=("$a"); done <"$DIR/cmd/$name"
  START_NETNS="$(cat "$DIR/cmd/$name.netns" 2>/dev/null || echo "$NS")" start "$name" "${argv[@]}"
  log "$name restarted (log: $DIR/logs/$name.log)"
}

running() { [ -s "$DIR/pids/$1.pid" ] && kill -0 "$(cat "$DIR/pids/$1.pid")" 2>/dev/null; }

# Waits until COMMAND succeeds; fails with the daemon's last log lines when it died or timed out.
wait_for() {
  local what="$1" name="$2" seconds="$3"
  shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$name" ] && ! running "$name"; then
      tail -n 30 "$DIR/logs/$name.log" >&2 || true
      die "$name exited while waiting for $what (log: $DIR/logs/$name.log)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      [ -n "$name" ] && tail -n 30 "$DIR/logs/$name.log" >&2
      die "timed out after ${seconds}s waiting for $what"
    fi
    sleep 0.3
  done
}

kubeconfig() { # file user cert key server
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kdoctor-test
  cluster:
    server: $5
    certificate-authority-data: $(base64 -w0 <"$DIR/pki/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$3")
    client-key-data: $(base64 -w0 <"$4")
contexts:
- name: kdoctor-test
  context: {cluster: kdoctor-test, user: $2}
current-context: kdoctor-test
EOF
  chmod 0600 "$1"
}

# Debian's packages the nodes need: iptables for kube-proxy, the CNI plugins for pod networks;
# and strace, with which the chaos suite aims a kill inside a snapshot install.
node_packages() {
  local missing=()
  command -v iptables >/dev/null || missing+=(iptables)
  [ -x /usr/lib/cni/ptp ] || missing+=(containernetworking-plugins)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v strace >/dev/null || missing+=(strace)
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "cannot install ${missing[*]} (apt-get)"
}

cmd_up() {
  local nodes=3 process_nodes="" ipv6=1 no_build="" real_nodes=0 profile=debug etcd_members=1 profiling=false
  while [ $# -gt 0 ]; do
    case "$1" in
      --no-build) no_build=1; shift ;;
      --release) profile=release; shift ;;
      --etcd-members) etcd_members="$2"; shift 2 ;;
      --apiserver-profiling) profiling=true; shift ;;
      --nodes) nodes="$2"; shift 2 ;;
      --nodes=*) nodes="${1#*=}"; shift ;;
      --process-nodes) process_nodes="$2"; shift 2 ;;
      --process-nodes=*) process_nodes="${1#*=}"; shift ;;
      --ipv4-only) ipv6=0; shift ;;
      --real-node) real_nodes=1; shift ;;
      --real-nodes) real_nodes="$2"; shift 2 ;;
      --real-nodes=*) real_nodes="${1#*=}"; shift ;;
      *) die "up: unknown argument $1 (see the top of hack/cluster.sh)" ;;
    esac
  done
  [ "$(id -u)" = 0 ] || die "up needs root (network namespaces, mounts)"
  process_nodes="${process_nodes:-$nodes}"
  case "$real_nodes" in [0-9]) ;; *) die "--real-nodes $real_nodes: 0 to 9 (their addresses sit below node-1's)" ;; esac
  case "$etcd_members" in 1 | 3) ;; *) die "--etcd-members $etcd_members: 1 or 3" ;; esac
  # The pod network holds 1,024 nodes' /26: a larger cluster gets narrower node CIDRs (a /29,
  # five pods a node, at 5,000 nodes), and above the node network's room its nodes' addresses
  # move to a network of their own.
  local pod_mask4=26 node_range4="$NODE_NET4"
  while [ $((1 << (pod_mask4 - 16))) -lt "$nodes" ]; do pod_mask4=$((pod_mask4 + 1)); done
  [ "$pod_mask4" -le 29 ] || die "--nodes $nodes: at most 8,192 (the pod network's /29s)"
  [ "$nodes" -le 4085 ] || node_range4="$NODE_NET4_LARGE"
  if running kube-apiserver; then
    log "already up ($DIR/kubeconfig); 'hack/cluster.sh down' first to start anew"
    return 0
  fi
  local t0=$SECONDS
  local target="${CARGO_TARGET_DIR:-$ROOT/target}"
  case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac
  local sim="$target/$profile/kube-sim" kdoctor="$target/$profile/kdoctor"
  if [ -n "$no_build" ]; then
    # Tests start clusters from inside `cargo test`, which holds the build directory: what
    # they need was built before them.
    KUBE_BIN="$("$ROOT/hack/kube/build.sh" --print)" || die "--no-build: the control plane is not built (hack/kube/build.sh)"
    for b in "$sim" "$kdoctor"; do
      [ -x "$b" ] || die "--no-build: $b is not built (cargo build -p kube-sim -p kdoctor)"
    done
    [ "$real_nodes" -eq 0 ] || [ -s "$ROOT/target/image/kdoctor.oci.tar" ] || die "--no-build: the image is not built (hack/image/build.sh)"
  else
    node_packages
    [ "$real_nodes" -eq 0 ] || real_node_deps
    KUBE_BIN="$("$ROOT/hack/kube/build.sh")"
    log "building kube-sim and kdoctor"
    local flags=()
    [ "$profile" = debug ] || flags+=(--release)
    (cd "$ROOT" && cargo build -q --locked "${flags[@]}" -p kube-sim -p kdoctor)
  fi

  # A leftover namespace of a run that was killed: start clean.
  if [ -e "/var/run/netns/$NS" ]; then cmd_down; fi
  reap_orphaned_test_clusters
  unmount_under "$DIR"
  rm -rf "$DIR"
  mkdir -p "$DIR"/{pki,logs,pids,etcd,kubelet}
  echo "$KUBE_BIN" >"$DIR/kube-bin"

  log "network namespace $NS"
  ip netns add "$NS"
  in_ns ip link set lo up
  # The node network: one veth whose first end holds the control plane's, the DNS's, the
  # ingress's and every node's address; traffic between them stays in the namespace.
  in_ns ip link add kdc0 type veth peer name kdc0-peer
  in_ns ip link set kdc0 up
  in_ns ip link set kdc0-peer up
  in_ns sysctl -qw net.ipv4.ip_forward=1
  local ips4=("$APISERVER4/20" 198.18.0.2/20 198.18.0.3/20) ips6=()
  for ip in "${ips4[@]}"; do in_ns ip addr add "$ip" dev kdc0; done
  if [ "$ipv6" = 1 ]; then
    if in_ns sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.all.forwarding=1 2>/dev/null \
      && in_ns ip addr add "$APISERVER6/64" dev kdc0 nodad 2>/dev/null; then
      in_ns ip addr add fd6b:6474::2/64 dev kdc0 nodad
      in_ns ip addr add fd6b:6474::3/64 dev kdc0 nodad
      ips6=(x)
    else
      log "IPv6 unavailable in the namespace: the cluster is IPv4 only"
      ipv6=0
    fi
  fi
  local dual=""
  [ "$ipv6" = 1 ] && dual=1
  # Service and load-balancer addresses exist only in kube-proxy's rules: a route lets the
  # namespace's own connections (the ingress controller's, the API server's) reach the rules.
  in_ns ip route add "$SERVICE_NET4" dev kdc0
  in_ns ip route add "$LB_NET4" dev kdc0
  if [ -n "$dual" ]; then
    in_ns ip -6 route add "$SERVICE_NET6" dev kdc0
    in_ns ip -6 route add "$LB_NET6" dev kdc0
  fi
  echo "$ipv6" >"$DIR/ipv6"

  log "certificates"
  local real_certs=() i
  for i in $(seq "$real_nodes"); do real_certs+=(--node "$(real_node_name "$i")" "$(real_node_ip4 "$i")"); done
  "$ROOT/hack/kube/pki.sh" "$DIR/pki" \
    "IP:$APISERVER4,IP:127.0.0.1,IP:198.18.32.1${dual:+,IP:$APISERVER6,IP:fd6b:6474:0:20::1},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" "${real_certs[@]}"
  local pki="$DIR/pki" server="https://$APISERVER4:6443"
  kubeconfig "$DIR/admin.inner.kubeconfig" kubernetes-admin "$pki/admin.crt" "$pki/admin.key" "$server"
  kubeconfig "$DIR/controller-manager.kubeconfig" system:kube-controller-manager "$pki/controller-manager.crt" "$pki/controller-manager.key" "$server"
  kubeconfig "$DIR/scheduler.kubeconfig" system:kube-scheduler "$pki/scheduler.crt" "$pki/scheduler.key" "$server"
  kubeconfig "$DIR/kube-proxy.kubeconfig" system:kube-proxy "$pki/kube-proxy.crt" "$pki/kube-proxy.key" "$server"
  kubeconfig "$DIR/kube-sim.kubeconfig" kube-sim "$pki/kube-sim.crt" "$pki/kube-sim.key" "$server"

  log "etcd ($etcd_members member(s))"
  # Member i (1-based) listens on 2379+10(i-1) for clients, the next port for peers and the one
  # after for metrics; member 1 is named as a single member always was.
  local i name base initial="" clients=""
  for i in $(seq "$etcd_members"); do
    base=$((2379 + 10 * (i - 1)))
    name=kdc; [ "$i" = 1 ] || name="kdc-$i"
    initial="${initial:+$initial,}$name=http://127.0.0.1:$((base + 1))"
    clients="${clients:+$clients,}http://127.0.0.1:$base"
  done
  for i in $(seq "$etcd_members"); do
    base=$((2379 + 10 * (i - 1)))
    name=kdc; [ "$i" = 1 ] || name="kdc-$i"
    local daemon=etcd data="$DIR/etcd"
    [ "$i" = 1 ] || { daemon="etcd-$i"; data="$DIR/etcd-$i"; }
    # --unsafe-no-fsync: a throw-away test cluster; fsync on these disks would only slow every write.
    start "$daemon" "$KUBE_BIN/etcd" --name="$name" --data-dir="$data" \
      --listen-client-urls="http://127.0.0.1:$base" --advertise-client-urls="http://127.0.0.1:$base" \
      --listen-peer-urls="http://127.0.0.1:$((base + 1))" --initial-advertise-peer-urls="http://127.0.0.1:$((base + 1))" \
      --initial-cluster="$initial" --listen-metrics-urls="http://127.0.0.1:$((base + 2))" \
      --unsafe-no-fsync --log-level=warn
  done
  for i in $(seq "$etcd_members"); do
    local daemon=etcd; [ "$i" = 1 ] || daemon="etcd-$i"
    wait_for "$daemon" "$daemon" 60 in_ns curl -fsS "http://127.0.0.1:$((2379 + 10 * (i - 1) + 2))/health"
  done

  log "kube-apiserver"
  cat >"$DIR/audit-policy.yaml" <<'EOF'
# Who asked what: one line per request (tests count the controller's requests per round).
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
# kube-sim's heartbeats (a Lease and a node status per node, every few seconds): no test counts
# them, and at 1,000 nodes they were most of the log, which tests parse whole.
- level: None
  users: [kube-sim]
  verbs: [get, update, patch]
  resources:
  - group: coordination.k8s.io
    resources: [leases]
  - group: ""
    resources: [nodes, nodes/status]
- level: Metadata
EOF
  start kube-apiserver "$KUBE_BIN/kube-apiserver" \
    --advertise-address="$APISERVER4" --bind-address=0.0.0.0 --secure-port=6443 \
    --etcd-servers="$clients" \
    --allow-privileged=true --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key" \
    --requestheader-client-ca-file="$pki/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-uid-headers=X-Remote-Uid --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --enable-aggregator-routing=true \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range="$SERVICE_NET4${dual:+,$SERVICE_NET6}" \
    --audit-policy-file="$DIR/audit-policy.yaml" --audit-log-path="$DIR/logs/audit.log" \
    --audit-log-maxsize=200 --audit-log-maxbackup=2 \
    --profiling="$profiling" --v=1
  wait_for "kube-apiserver /readyz" kube-apiserver 120 \
    in_ns curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$server/readyz"

  log "kube-controller-manager and kube-scheduler"
  mkdir -p "$DIR/controller-manager" "$DIR/scheduler"
  start kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$DIR/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --cert-dir="$DIR/controller-manager" \
    --client-ca-file="$pki/ca.crt" --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --root-ca-file="$pki/ca.crt" --service-account-private-key-file="$pki/sa.key" \
    --use-service-account-credentials=true --controllers='*,bootstrapsigner,tokencleaner' \
    --allocate-node-cidrs=true --cluster-cidr="$POD_NET4${dual:+,$POD_NET6}" \
    --node-cidr-mask-size-ipv4="$pod_mask4" ${dual:+--node-cidr-mask-size-ipv6=64} \
    --service-cluster-ip-range="$SERVICE_NET4${dual:+,$SERVICE_NET6}" \
    --leader-elect=false --v=1
  start kube-scheduler "$KUBE_BIN/kube-scheduler" \
    --kubeconfig="$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$DIR/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --cert-dir="$DIR/scheduler" --leader-elect=false --v=1

  log "the API server on the host's loopback"
  start_forward "$sim"
  kubeconfig "$DIR/kubeconfig" kubernetes-admin "$pki/admin.crt" "$pki/admin.key" "https://127.0.0.1:$(cat "$DIR/apiserver.port")"
  wait_for "kube-controller-manager /healthz" kube-controller-manager 60 in_ns curl -fsSk https://127.0.0.1:10257/healthz
  wait_for "kube-scheduler /healthz" kube-scheduler 60 in_ns curl -fsSk https://127.0.0.1:10259/healthz

  log "kube-sim: the kubelet of $nodes nodes ($process_nodes running real processes)"
  local dns6="" lb6=""
  if [ "$ipv6" = 1 ]; then dns6="--dns-ip=fd6b:6474::2"; lb6="--lb-range=$LB_NET6"; fi
  start kube-sim "$sim" kubelet --kubeconfig="$DIR/kube-sim.kubeconfig" \
    --nodes="$nodes" --process-nodes="$process_nodes" --node-range="$node_range4" \
    ${dual:+--node-range=$NODE_NET6} \
    --dns-ip=198.18.0.2 $dns6 --dns-service-ip=198.18.32.10 ${dual:+--dns-service-ip=fd6b:6474:0:20::a} \
    --ingress-ip=198.18.0.3 ${dual:+--ingress-ip=fd6b:6474::3} \
    --lb-range="$LB_NET4" $lb6 --node-interface=kdc0 \
    --image="ghcr.io/kdoctor-io/kdoctor=$kdoctor" \
    --work-dir="$DIR/kubelet" --netns-prefix="$NS-"
  # Thousands of nodes take minutes to register and report Ready.
  wait_for "$nodes Ready nodes" kube-sim $((120 + nodes / 8)) nodes_ready "$nodes"

  # Also without kube-sim nodes: the cluster's namespace then stands for a host outside the
  # nodes (the ingress controller's, the API server's) that reaches Services through its own
  # rules, as a load balancer's host does; its name is no Node's.
  local proxy_host=node-1
  [ "$nodes" -gt 0 ] || proxy_host=cluster-gateway
  log "kube-proxy (iptables mode, for the namespace kube-sim's nodes share)"
  cat >"$DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $DIR/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $proxy_host
clusterCIDR: $POD_NET4${dual:+,$POD_NET6}
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0}
EOF
  start kube-proxy "$KUBE_BIN/kube-proxy" --config="$DIR/kube-proxy.yaml" --v=1
  # Under a name that is no Node's, kube-proxy first waits 30 s for that Node, and its /healthz
  # stays unhealthy: then /livez (its rules synced) is waited for once the real nodes are up.
  [ "$nodes" -eq 0 ] || wait_for "kube-proxy /healthz" kube-proxy 60 in_ns curl -fsS http://127.0.0.1:10256/healthz

  if [ "$real_nodes" -gt 0 ]; then
    for i in $(seq "$real_nodes"); do real_node_up "$i"; done
    wait_for "$((nodes + real_nodes)) Ready nodes (with real-1..$real_nodes)" "kubelet-real-$real_nodes" 120 nodes_ready "$((nodes + real_nodes))"
  fi
  [ "$nodes" -gt 0 ] || wait_for "kube-proxy /livez" kube-proxy 60 in_ns curl -fsS http://127.0.0.1:10256/livez

  local kubectl="$KUBE_BIN/kubectl"
  "$kubectl" --kubeconfig "$DIR/kubeconfig" get nodes -o wide >&2
  log "up in $((SECONDS - t0)) s: export KUBECONFIG=$DIR/kubeconfig (kubectl $("$kubectl" version --client -o json | sed -n 's/.*"gitVersion": "\(.*\)".*/\1/p' | head -n1) at $KUBE_BIN/kubectl)"
}

nodes_ready() {
  local want="$1" ready
  ready="$("$KUBE_BIN/kubectl" --kubeconfig "$DIR/admin.inner.kubeconfig" --server "https://127.0.0.1:$(cat "$DIR/apiserver.port")" \
    get nodes -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="Ready")]}{.status}{"\n"}{end}{end}' 2>/dev/null | grep -c True)"
  [ "$ready" -ge "$want" ]
}

start_forward() {
  local sim="$1"
  rm -f "$DIR/apiserver.port"
  mkdir -p "$DIR/logs" "$DIR/pids"
  # In the host's namespace: it listens on loopback and connects from inside the cluster's.
  setsid "$sim" forward --netns "/var/run/netns/$NS" --listen 127.0.0.1:0 \
    --to "$APISERVER4:6443" --port-file "$DIR/apiserver.port" >"$DIR/logs/forward.log" 2>&1 </dev/null &
  echo $! >"$DIR/pids/forward.pid"
  wait_for "the forwarded API server port" forward 30 test -s "$DIR/apiserver.port"
}

# Whatever is still mounted under DIR (a chaos case's tmpfs volume, when the run was killed
# mid-case), deepest first: rm -rf would stop at it.
unmount_under() { # dir
  [ -d "$1" ] || return 0
  local dir
  dir="$(realpath "$1")"
  awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

# The clusters of test processes that died without taking theirs down (a killed `cargo test`
# skips its Drop): kube-sim's TestCluster names them kdt-<test pid>-<n>, in
# $TMPDIR/kdoctor-kdt-<pid>-<n>. A cluster whose test process is gone is taken down; one whose
# process runs is left alone.
reap_orphaned_test_clusters() {
  local ns pid
  for ns in $(ls /var/run/netns 2>/dev/null | grep -E '^kdt-[0-9]+-[0-9]+$' || true); do
    pid="${ns#kdt-}"
    pid="${pid%-*}"
    kill -0 "$pid" 2>/dev/null && continue
    log "taking down $ns, left by test process $pid, which is gone"
    CLUSTER_DIR="${TMPDIR:-/tmp}/kdoctor-$ns" CLUSTER_NETNS="$ns" "$ROOT/hack/cluster.sh" down >/dev/null 2>&1 ||
      log "could not take down $ns: CLUSTER_DIR=${TMPDIR:-/tmp}/kdoctor-$ns CLUSTER_NETNS=$ns hack/cluster.sh down"
  done
}

cmd_down() {
  # The kubelets first: they stop the pods' processes and remove their namespaces.
  real_nodes_down
  local order=(kube-sim kube-proxy kube-scheduler kube-controller-manager forward kube-apiserver etcd etcd-2 etcd-3)
  for name in "${order[@]}"; do stop "$name"; done
  # Whatever still runs in the cluster's namespace or a pod's (a killed kube-sim leaves pods).
  local ns
  for ns in $(ls /var/run/netns 2>/dev/null | grep -E "^$NS(-|$)" || true); do
    ip netns pids "$ns" 2>/dev/null | grep -vx "$$" | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  unmount_under "$DIR"
  rm -rf "$DIR"
  log "down"
}

cmd_install_chart() {
  local sets=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --set) sets+=(--set "$2"); shift 2 ;;
      --set=*) sets+=(--set "${1#*=}"); shift ;;
      *) die "install-chart: unknown argument $1 (use --set KEY=VALUE)" ;;
    esac
  done
  [ -s "$DIR/kubeconfig" ] || die "no cluster: hack/cluster.sh up first"
  local kubectl
  kubectl="$(cat "$DIR/kube-bin")/kubectl"
  mkdir -p "$DIR/install"
  # Helm's engine: PyPI's helm-python-sdk (as hack/helm-check.sh installs it).
  if ! python3 -c 'import helm_python, yaml' 2>/dev/null; then
    log "installing helm-python-sdk and pyyaml (pip)"
    python3 -m pip install --quiet helm-python-sdk pyyaml || die "cannot install helm-python-sdk (pip)"
  fi
  python3 "$ROOT/hack/helm-check.py" --template "${sets[@]}" >"$DIR/install/chart.yaml"
  "$kubectl" --kubeconfig "$DIR/kubeconfig" create namespace kdoctor --dry-run=client -o yaml |
    "$kubectl" --kubeconfig "$DIR/kubeconfig" apply -f -
  # As `helm install` does: the chart's CRDs first (charts/kdoctor/crds/), then its templates.
  "$kubectl" --kubeconfig "$DIR/kubeconfig" apply --server-side -f "$ROOT/charts/kdoctor/crds/"
  "$kubectl" --kubeconfig "$DIR/kubeconfig" apply -f "$DIR/install/chart.yaml"
}

cmd_status() {
  local name
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler forward kube-sim kube-proxy; do
    if running "$name"; then echo "$name: running (pid $(cat "$DIR/pids/$name.pid"))"; else echo "$name: not running"; fi
  done
  [ -s "$DIR/kubeconfig" ] && echo "kubeconfig: $DIR/kubeconfig"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down ;;
  install-chart) shift; cmd_install_chart "$@" ;;
  status) cmd_status ;;
  deps) node_packages ;;
  restart) shift; cmd_restart "$@" ;;
  *) echo "usage: hack/cluster.sh up [--nodes N] [--process-nodes M] [--ipv4-only] | down | install-chart [--set K=V]... | status | restart NAME | deps" >&2; exit 2 ;;
esac
