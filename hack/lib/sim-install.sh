# Shared by hack/e2e.sh and hack/dashboard-picture.sh: a simulated cluster (kube-sim) whose
# kdoctor pods run as real processes, with manifests/ installed as a user would. Source it from
# the repository root; `sim_prepare` picks kubectl and builds (sets KUBECTL_BIN, BIN); then, with
# WORK and NODES set, `sim_start` starts the cluster (sets SIM_PID: the caller's cleanup stops
# it) and `sim_install` installs kdoctor (manifests/, or the chart) and waits until the
# APIService is available.

step() { printf '\n== %s\n' "$*"; }

sim_prepare() {
  KUBECTL_BIN=/usr/lib/google-cloud-sdk/bin/kubectl.1.32
  [ -x "$KUBECTL_BIN" ] || KUBECTL_BIN="$(command -v kubectl || true)"
  [ -n "$KUBECTL_BIN" ] || { echo "kubectl is required" >&2; exit 2; }
  step "building kdoctor and kube-sim"
  cargo build -q --locked -p kdoctor -p kube-sim
  BIN="${CARGO_TARGET_DIR:-target}/debug"
}

k() { "$KUBECTL_BIN" --kubeconfig "$WORK/kubeconfig" --cache-dir "$WORK/kube-cache" "$@"; }

sim_start() {
  step "starting a simulated cluster of $NODES nodes (pods of kdoctor run as real processes)"
  # Any free port: another simulated cluster (a second run, a developer's) may hold 6443.
  # SIM_IPV6=1: dual stack or nothing (the sim says why it cannot); else as the machine allows.
  local ipv6=auto
  [ "${SIM_IPV6:-0}" = 1 ] && ipv6=on
  "$BIN/kube-sim" --listen 127.0.0.1:0 --nodes "$NODES" --agent-nodes "$NODES" --traffic --rbac \
    --ipv6 "$ipv6" \
    --agent-program "$BIN/kdoctor" \
    --agent-selector 'app.kubernetes.io/component in (agent,controller)' \
    --work-dir "$WORK/pods" --kubeconfig-out "$WORK/kubeconfig" >"$WORK/sim.log" 2>&1 &
  SIM_PID=$!
  for _ in $(seq 150); do
    kill -0 "$SIM_PID" 2>/dev/null || { echo "kube-sim exited"  >&2; exit 1; }
    [ -s "$WORK/kubeconfig" ] && k get --raw /readyz >/dev/null 2>&1 && break
    sleep 0.2
  done
  k get nodes
}

# The pods of the simulated cluster share one network namespace, so each kdoctor process must
# bind its own pod address: `--bind=$(POD_IP)` for agents (`$(POD_IPS)`, both families, when
# SIM_IPV6=1), the controller's listeners on `$(POD_IP)`, and carriers told the same through
# --agent-extra-arg (`$$(…)` stays `$(…)` in the controller's own arguments, as Kubernetes
# expands `$(VAR)`, so that each carrier pod expands it to its own address).
sim_adapt() {
  local bind='$(POD_IP)'
  [ "${SIM_IPV6:-0}" = 1 ] && bind='$(POD_IPS)'
  sed -e "s|        - --service-ipv4-name=kdoctor-agent-ipv4|&\n        - --bind=$bind|" \
    -e 's|--listen=0.0.0.0:6443|--listen=$(POD_IP):6443|' \
    -e "s|--metrics-listen=0.0.0.0:5721|--metrics-listen=\$(POD_IP):5721\n        - --agent-extra-arg=--bind=\$$bind\n        - --poll-seconds=1|" \
    "$1" >"$2"
  grep -qF -- "--bind=$bind" "$2" || { echo "cannot adapt the agent's arguments in $1" >&2; exit 2; }
  grep -q -- '--agent-extra-arg' "$2" || { echo "cannot adapt the controller's arguments in $1" >&2; exit 2; }
}

# Installs kdoctor as a user would: SIM_FROM=manifests (default) applies manifests/;
# SIM_FROM=chart renders charts/kdoctor with Helm's engine (hack/helm-check.py --template, with
# HELM_SET="a=b c=d" as --set values) and applies it, as `helm install --create-namespace` does.
sim_install() {
  mkdir -p "$WORK/install"
  case "${SIM_FROM:-manifests}" in
    manifests)
      step "installing manifests/"
      k apply -f manifests/namespace.yaml
      k apply -f manifests/crds/ -f manifests/config.yaml -f manifests/rbac.yaml -f manifests/apiserver-rbac.yaml
      # A document separator between the files: a file's last object must not run into the next's.
      { cat manifests/agent.yaml; echo '---'; cat manifests/controller.yaml; } >"$WORK/install/workloads.yaml"
      sim_adapt "$WORK/install/workloads.yaml" "$WORK/install/workloads.sim.yaml"
      k apply -f "$WORK/install/workloads.sim.yaml"
      # Its caBundle is empty: the controller bootstraps the CA and sets it.
      k apply -f manifests/apiservice.yaml
      ;;
    chart)
      step "installing charts/kdoctor (rendered by Helm's engine${HELM_SET:+, --set $HELM_SET})"
      local sets=()
      for s in ${HELM_SET:-}; do sets+=(--set "$s"); done
      python3 hack/helm-check.py --template "${sets[@]}" >"$WORK/install/chart.yaml"
      k create namespace kdoctor
      # The chart's crds/ equal manifests/crds/ byte for byte (hack/helm-check.sh checks).
      k apply -f manifests/crds/
      sim_adapt "$WORK/install/chart.yaml" "$WORK/install/chart.sim.yaml"
      k apply -f "$WORK/install/chart.sim.yaml"
      ;;
    *) echo "SIM_FROM=${SIM_FROM}: expected manifests or chart" >&2; exit 2 ;;
  esac

  step "waiting for the agents, the controller and the APIService"
  k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=90s
  k -n kdoctor rollout status deployment/kdoctor-controller --timeout=90s
  k wait apiservice/v1beta1.system.kdoctor.io --for=condition=Available --timeout=60s
}
