# Real nodes beside kube-sim's (hack/cluster.sh up --real-nodes N sources this file), real-1 …
# real-N, each the kubelet of the pinned release with containerd 1.6 (its CRI plugin, runc, cgroupfs) and the CNI
# plugins kube-sim's nodes use (ptp + host-local, addresses from the node's pod CIDR; ptp, not a
# bridge, so every packet of a pod passes the node's kube-proxy rules), and its own kube-proxy,
# running the images hack/image/build.sh made (kdoctor and pause, imported into containerd:
# nothing is pulled). Unlike kube-sim's nodes, which share the cluster's network namespace, each
# has a namespace of its own, wired to the cluster's by a veth: traffic between two real nodes'
# pods leaves one node's namespace and enters the other's, routed by the cluster's. Each has its
# own containerd, kubelet (its own cgroup root, so that neither takes the other's pods for
# orphans) and kube-proxy; their daemons share the host's mount namespace, so the volumes a
# kubelet mounts are the ones its containerd gives containers.
#
# Uses hack/cluster.sh's DIR, NS, KUBE_BIN, ROOT and its start/wait_for/kubeconfig/log/die.

# Real node I (1…9): its name, address (below kube-sim's node-1, 198.18.0.11), folder and
# network namespace.
real_node_name() { echo "real-$1"; }
real_node_ip4() { echo "198.18.0.$((10 - $1))"; }
real_node_ip6() { echo "fd6b:6474::$((10 - $1))"; }
# Whether the cluster is dual-stack (hack/cluster.sh wrote it: IPv6 may be unavailable here).
real_node_dual() { [ "$(cat "$DIR/ipv6" 2>/dev/null)" = 1 ]; }
# The node's addresses, as the kubelet's --node-ip takes them.
real_node_ips() { # index
  if real_node_dual; then echo "$(real_node_ip4 "$1"),$(real_node_ip6 "$1")"; else real_node_ip4 "$1"; fi
}
real_node_dir() { echo "$DIR/real-nodes/real-$1"; }
real_node_netns() { echo "$NS-real-$1"; }
# The real nodes a cluster has (from their folders), by index.
real_node_indexes() {
  local d
  for d in "$DIR"/real-nodes/real-*; do
    [ -d "$d" ] && echo "${d##*/real-}"
  done | sort -n
}

# Debian's containerd and runc, and the two images.
real_node_deps() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
      || die "cannot install ${missing[*]} (apt-get)"
  fi
  [ -s "$ROOT/target/image/kdoctor.oci.tar" ] && [ -s "$ROOT/target/image/pause.oci.tar" ] \
    || "$ROOT/hack/image/build.sh" >&2
}

# The node's own network namespace, wired to the cluster's by a veth (rnI there, eth0 in the
# node's): its address lives there (the cluster's namespace routes it, and later the node's pod
# CIDR, over the veth), and its default route leads back into the cluster's namespace.
real_node_network() { # index
  local node_ns ip
  node_ns="$(real_node_netns "$1")"
  ip="$(real_node_ip4 "$1")"
  ip netns add "$node_ns"
  ip netns exec "$node_ns" ip link set lo up
  in_ns ip link add "rn$1" type veth peer name eth0 netns "$node_ns"
  in_ns ip link set "rn$1" up
  in_ns ip route add "$ip/32" dev "rn$1"
  ip netns exec "$node_ns" ip addr add "$ip/32" dev eth0
  ip netns exec "$node_ns" ip link set eth0 up
  # The control plane's address answers for the gateway (the cluster's end replies to ARP for
  # any of its addresses).
  ip netns exec "$node_ns" ip route add default via "$APISERVER4" dev eth0 onlink
  ip netns exec "$node_ns" sysctl -qw net.ipv4.ip_forward=1
  if real_node_dual; then
    # IPv6 answers neighbour solicitations only for an interface's own addresses: each end of
    # the veth gets a fixed link-local address, the gateway of the other end's routes.
    ip netns exec "$node_ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 \
      net.ipv6.conf.eth0.disable_ipv6=0 net.ipv6.conf.all.forwarding=1
    in_ns sysctl -qw "net.ipv6.conf.rn$1.disable_ipv6=0"
    in_ns ip -6 addr add fe80::1/64 dev "rn$1" nodad
    ip netns exec "$node_ns" ip -6 addr add fe80::2/64 dev eth0 nodad
    ip netns exec "$node_ns" ip -6 addr add "$(real_node_ip6 "$1")/128" dev eth0 nodad
    in_ns ip -6 route add "$(real_node_ip6 "$1")/128" via fe80::2 dev "rn$1"
    ip netns exec "$node_ns" ip -6 route add default via fe80::1 dev eth0
  fi
}

# After the Node registered: its pod CIDRs (one per family), allocated by
# kube-controller-manager, are routed to it.
real_node_pod_route() { # index
  local cidrs cidr
  cidrs="$("$KUBE_BIN/kubectl" --kubeconfig "$DIR/admin.inner.kubeconfig" --server "https://127.0.0.1:$(cat "$DIR/apiserver.port")" \
    get node "$(real_node_name "$1")" -o jsonpath='{.spec.podCIDRs[*]}' 2>/dev/null)"
  [ -n "$cidrs" ] || return 1
  for cidr in $cidrs; do
    case "$cidr" in
      *:*) in_ns ip -6 route replace "$cidr" via fe80::2 dev "rn$1" ;;
      *) in_ns ip route replace "$cidr" via "$(real_node_ip4 "$1")" dev "rn$1" ;;
    esac
  done
}

# The kubelet's cgroup root, in every mounted cgroup v1 hierarchy (the kubelet requires it to
# exist); echoes its name.
real_node_cgroup_root() { # index
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -e "$h/cgroup.procs" ] && mkdir -p "$h/kdoctor-real-$1"
  done
  echo "/kdoctor-real-$1"
}

real_node_up() { # index
  local i="$1" rn pki="$DIR/pki" node_ns name ip cgroup_root
  rn="$(real_node_dir "$i")"
  node_ns="$(real_node_netns "$i")"
  name="$(real_node_name "$i")"
  ip="$(real_node_ip4 "$i")"
  mkdir -p "$rn"/{containerd,cni,kubelet,pods-logs}
  real_node_network "$i"

  log "real node $name: containerd"
  # The CRI plugin writes the CNI configuration from this template once the kubelet tells it the
  # node's pod CIDR (kube-controller-manager allocates it when the Node registers).
  cat >"$rn/cni-template.json" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "real-node",
  "plugins": [{
    "type": "ptp",
    "mtu": 1500,
    "ipMasq": false,
    "ipam": {
      "type": "host-local",
      "ranges": [{{range \$i, \$range := .PodCIDRRanges}}{{if \$i}}, {{end}}[{"subnet": "{{\$range}}"}]{{end}}],
      "routes": [{{range \$i, \$route := .Routes}}{{if \$i}}, {{end}}{"dst": "{{\$route}}"}{{end}}],
      "dataDir": "$rn/ipam"
    }
  }]
}
EOF
  cat >"$rn/containerd.toml" <<EOF
version = 2
root = "$rn/containerd/root"
state = "$rn/containerd/state"
[grpc]
  address = "$rn/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$rn/cni"
    conf_template = "$rn/cni-template.json"
EOF
  if ! (echo -1 >/proc/self/oom_score_adj) 2>/dev/null; then
    # This machine keeps CAP_SYS_RESOURCE out of every process's bounding set: nothing may lower
    # an OOM score below 0, so runc fails to create a pod sandbox (the kubelet asks -998) or a
    # Guaranteed container (-997). runc is reached through a wrapper that raises negative scores
    # to 0; everything else is Debian's runc as it is.
    log "real node $name: negative OOM scores are not allowed here; runc raises them to 0"
    cp "$ROOT/hack/kube/runc-oom-floor.sh" "$rn/runc"
    chmod 0755 "$rn/runc"
    sed -i "s|^        SystemdCgroup = false|        SystemdCgroup = false\n        BinaryName = \"$rn/runc\"|" "$rn/containerd.toml"
  fi
  START_NETNS="$node_ns" start "containerd-$name" containerd --config "$rn/containerd.toml"
  wait_for "containerd of $name" "containerd-$name" 30 ctr -a "$rn/containerd.sock" version
  local image
  for image in pause kdoctor; do
    ctr -a "$rn/containerd.sock" -n k8s.io images import "$ROOT/target/image/$image.oci.tar" >/dev/null \
      || die "cannot import target/image/$image.oci.tar into containerd"
  done

  log "real node $name: kubelet"
  # Its identity (system:node:real-1, judged by the Node authorizer and NodeRestriction) and
  # serving certificate: made with the cluster's by hack/kube/pki.sh --node.
  kubeconfig "$rn/kubelet.kubeconfig" "system:node:$name" "$pki/kubelet-$name.crt" "$pki/kubelet-$name.key" "https://$APISERVER4:6443"
  printf 'nameserver 198.18.32.10\n' >"$rn/resolv.conf"
  cgroup_root="$(real_node_cgroup_root "$i")"
  cat >"$rn/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-$name-serving.crt
tlsPrivateKeyFile: $pki/kubelet-$name-serving.key
containerRuntimeEndpoint: unix://$rn/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
# This machine's kernel mounts cgroup v1 (Kubernetes 1.34 still runs there, with a warning).
failCgroupV1: false
failSwapOn: false
clusterDNS: [198.18.32.10]
clusterDomain: cluster.local
resolvConf: $rn/resolv.conf
podLogsDir: $rn/pods-logs
# A test machine's disk is shared with the build and other machines' work: a percentage of a
# large shared disk (2% of 252 GiB is 5 GiB) evicted the agents of a CI run that still had
# 3.3 GiB free. Evict only when the disk is really full, by absolute room.
evictionHard: {memory.available: "100Mi", nodefs.available: "512Mi", imagefs.available: "512Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
  START_NETNS="$node_ns" start "kubelet-$name" "$KUBE_BIN/kubelet" --config="$rn/kubelet.yaml" --kubeconfig="$rn/kubelet.kubeconfig" \
    --root-dir="$rn/kubelet" --hostname-override="$name" --node-ip="$(real_node_ips "$i")" --v=1
  wait_for "$name's kubelet /healthz" "kubelet-$name" 60 ip netns exec "$node_ns" curl -fsS http://127.0.0.1:10248/healthz
  wait_for "$name's pod CIDR" "kubelet-$name" 60 real_node_pod_route "$i"

  log "real node $name: kube-proxy"
  sed -e "s|^hostnameOverride: .*|hostnameOverride: $name|" "$DIR/kube-proxy.yaml" >"$rn/kube-proxy.yaml"
  START_NETNS="$node_ns" start "kube-proxy-$name" "$KUBE_BIN/kube-proxy" --config="$rn/kube-proxy.yaml" --v=1
  wait_for "$name's kube-proxy /healthz" "kube-proxy-$name" 60 ip netns exec "$node_ns" curl -fsS http://127.0.0.1:10256/healthz
}

# The kubelet first (it stops the pods), then containerd, then what they leave: containers'
# shims and mounts under the node's folder, its cgroup root.
real_node_down() { # index
  local i="$1" rn name netns=() id path h
  rn="$(real_node_dir "$i")"
  name="$(real_node_name "$i")"
  stop "kube-proxy-$name"
  stop "kubelet-$name"
  if [ -S "$rn/containerd.sock" ]; then
    local ctr=(ctr -a "$rn/containerd.sock" -n k8s.io)
    # The pods' network namespaces, which containerd made under /var/run/netns (cni-*): the
    # kubelet is gone, so no one will ask containerd to remove the sandboxes.
    for id in $("${ctr[@]}" containers ls -q 2>/dev/null); do
      path="$("${ctr[@]}" containers info "$id" 2>/dev/null | python3 -c 'import json, sys
spec = json.load(sys.stdin).get("Spec") or {}
print(next((n.get("path", "") for n in spec.get("linux", {}).get("namespaces", []) if n.get("type") == "network"), ""))' 2>/dev/null || true)"
      [ -n "$path" ] && netns+=("$path")
    done
    "${ctr[@]}" tasks ls -q 2>/dev/null | while read -r id; do "${ctr[@]}" tasks kill -s SIGKILL "$id" 2>/dev/null || true; done
  fi
  stop "containerd-$name"
  for path in $(printf '%s\n' "${netns[@]}" | sort -u); do
    umount "$path" 2>/dev/null || true
    rm -f "$path"
  done
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $rn/" 2>/dev/null || true
  # (grep finds nothing on a cluster without a real node: not an error under pipefail.)
  { grep -o " $rn/[^ ]*" /proc/mounts 2>/dev/null || true; } | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  # Its cgroups, deepest first (the processes in them are gone).
  for h in /sys/fs/cgroup/*/kdoctor-real-"$i"; do
    [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  return 0
}

# Every real node of the cluster.
real_nodes_down() {
  local i
  for i in $(real_node_indexes); do real_node_down "$i"; done
  return 0
}
