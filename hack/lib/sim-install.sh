# Shared by hack/e2e.sh and hack/dashboard-picture.sh: a simulated cluster (kube-sim) whose
# kdoctor pods run as real processes, with manifests/ installed as a user would. Source it from
# the repository root; `sim_prepare` picks kubectl and builds (sets KUBECTL_BIN, BIN); then, with
# WORK and NODES set, `sim_start` starts the cluster (sets SIM_PID: the caller's cleanup stops
# it) and `sim_install` installs manifests/ and waits until the APIService is available.

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
  "$BIN/kube-sim" --listen 127.0.0.1:0 --nodes "$NODES" --agent-nodes "$NODES" --traffic --rbac \
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

sim_install() {
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
  grep -q -- '--bind=$(POD_IP)' "$WORK/manifests/agent.yaml" || { echo "cannot adapt agent.yaml" >&2; exit 2; }
  grep -q -- '--agent-extra-arg' "$WORK/manifests/controller.yaml" || { echo "cannot adapt controller.yaml" >&2; exit 2; }
  k apply -f "$WORK/manifests/agent.yaml" -f "$WORK/manifests/controller.yaml"
  # Its caBundle is empty: the controller bootstraps the CA and sets it.
  k apply -f manifests/apiservice.yaml

  step "waiting for the agents, the controller and the APIService"
  k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=90s
  k -n kdoctor rollout status deployment/kdoctor-controller --timeout=90s
  k wait apiservice/v1beta1.system.kdoctor.io --for=condition=Available --timeout=60s
}
