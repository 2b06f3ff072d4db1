#!/usr/bin/env bash
# The whole system on a real control plane (hack/cluster.sh: etcd, kube-apiserver with its
# aggregation layer, kube-controller-manager, kube-scheduler, kube-proxy, with kube-sim as the
# kubelet of its nodes): installs kdoctor exactly as docs/install.md says — `kubectl apply -k
# manifests/`, or the Helm chart rendered by Helm's engine — runs tasks of every kind and checks,
# each as an assertion, what a user of a real cluster relies on (the list is in
# docs/development.md#end-to-end). Exits non-zero at the first that does not hold.
#
#   hack/e2e.sh                              # manifests/, 3 nodes
#   E2E_FROM=chart hack/e2e.sh               # charts/kdoctor (Helm's engine)
#   E2E_FROM=chart E2E_IPV6=1 hack/e2e.sh    # dual stack: feature.enableIPv6=true, and tasks
#                                            # probing every target over IPv4 and IPv6
#   E2E_NODES=5 hack/e2e.sh
#   E2E_KEEP=1 hack/e2e.sh                   # keep the cluster (hack/cluster.sh down later)
#   E2E_CHAOS=0 hack/e2e.sh                  # only the leader kill (hack/e2e/leader.sh) instead
#                                            # of hack/chaos.sh (which runs by default with
#                                            # manifests/)
#
# The cluster is its own (its own namespace and directory, $E2E_DIR, default .cluster-e2e/):
# a developer's `hack/cluster.sh up` cluster is left alone. Needs root (see hack/cluster.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

NODES="${E2E_NODES:-3}"
TIMEOUT="${E2E_TIMEOUT_SECONDS:-300}"
FROM="${E2E_FROM:-manifests}"
IPV6="${E2E_IPV6:-0}"
export CLUSTER_DIR="${E2E_DIR:-$ROOT/.cluster-e2e}"
export CLUSTER_NETNS="${E2E_NETNS:-kdoctor-e2e}"
case "$FROM" in manifests | chart) ;; *) echo "E2E_FROM=$FROM: expected manifests or chart" >&2; exit 2 ;; esac
if [ "$IPV6" = 1 ] && [ "$FROM" != chart ]; then
  # manifests/ are IPv4 (their comments say what to add); the chart has the switch.
  echo "E2E_IPV6=1 needs E2E_FROM=chart" >&2
  exit 2
fi

STEP=""
step() {
  STEP="$*"
  printf '\n== %s\n' "$*"
}
fail() {
  echo "e2e: FAILED: $*" >&2
  exit 1
}

cleanup() {
  local code=$?
  # A background watch of a step that failed would outlive the run and hold its output open.
  jobs -p | xargs -r kill -TERM 2>/dev/null || true
  if [ "$code" -ne 0 ] && [ -d "$CLUSTER_DIR" ]; then
    echo "e2e: FAILED (exit $code) in step '$STEP'; disk: $(df -h --output=pcent,avail "$CLUSTER_DIR" | tail -n 1 | xargs) used/free; the last lines of each pod's containers and of kube-sim:" >&2
    for log in "$CLUSTER_DIR"/kubelet/pods/*/*.log; do
      [ -f "$log" ] || continue
      echo "--- $log (last 20 lines)" >&2
      tail -n 20 "$log" >&2
    done
    echo "--- kube-sim (last 20 lines)" >&2
    tail -n 20 "$CLUSTER_DIR/logs/kube-sim.log" >&2 || true
  fi
  if [ -n "${E2E_KEEP:-}" ]; then
    echo "e2e: cluster kept: KUBECONFIG=$CLUSTER_DIR/kubeconfig; CLUSTER_DIR=$CLUSTER_DIR CLUSTER_NETNS=$CLUSTER_NETNS hack/cluster.sh down" >&2
  else
    hack/cluster.sh down >/dev/null 2>&1 || true
  fi
  exit "$code"
}
trap cleanup EXIT

step "a real control plane with $NODES nodes"
up_args=(--nodes "$NODES")
[ "$IPV6" = 1 ] || up_args+=(--ipv4-only)
hack/cluster.sh up "${up_args[@]}"
MISSING=""
if [ "$IPV6" = 1 ] && [ "$(cat "$CLUSTER_DIR/ipv6")" != 1 ]; then
  # The machine, not the product: IPv6 cannot be turned on inside a network namespace here.
  MISSING="MISSING: the dual-stack half of this e2e did not run: IPv6 is unavailable in network namespaces on this machine (hack/cluster.sh's log above says why)"
  echo "$MISSING" >&2
  IPV6=0
fi
KUBECONFIG="$CLUSTER_DIR/kubeconfig"
export KUBECONFIG
KUBE_BIN="$(cat "$CLUSTER_DIR/kube-bin")"
# The kubectl of the control plane's release, and the newest real one installed here (Debian's
# google-cloud-sdk packages: kubectl.1.NN, within the supported skew of one minor version).
KUBECTL="$KUBE_BIN/kubectl"
KUBECTL_OTHER="$(ls /usr/lib/google-cloud-sdk/bin/kubectl.1.* 2>/dev/null | sort -V | tail -n1 || true)"
k() { "$KUBECTL" "$@"; }
BIN="${CARGO_TARGET_DIR:-target}/debug"
plugin() { "$BIN/kdoctor" kubectl "$@"; }

step "installing kdoctor from $FROM"
if [ "$FROM" = manifests ]; then
  # kube-apiserver's warnings (an unrecognized schema format, a deprecated field) reach every
  # user who applies the install: none is allowed.
  applied=0
  k apply -k manifests/ 2>"$CLUSTER_DIR/apply.err" || applied=$?
  cat "$CLUSTER_DIR/apply.err" >&2
  [ "$applied" -eq 0 ] || fail "kubectl apply -k manifests/ failed (exit $applied)"
  if grep -q 'Warning:' "$CLUSTER_DIR/apply.err"; then
    fail "kube-apiserver warned while installing manifests/: $(grep 'Warning:' "$CLUSTER_DIR/apply.err" | sort -u | tr '\n' ' ')"
  fi
else
  sets=()
  [ "$IPV6" = 1 ] && sets+=(--set feature.enableIPv6=true)
  hack/cluster.sh install-chart "${sets[@]}"
fi
k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=120s
k -n kdoctor rollout status statefulset/kdoctor-controller --timeout=120s

step "the APIService is Available, as the real kube-aggregator judges it, through the Service"
k wait apiservice/v1beta1.system.kdoctor.io --for=condition=Available --timeout=90s
available="$(k get apiservice v1beta1.system.kdoctor.io -o jsonpath='{.spec.service.namespace}/{.spec.service.name} {.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Available")].reason}')"
[ "$available" = "kdoctor/kdoctor-controller True Passed" ] || fail "APIService: expected 'kdoctor/kdoctor-controller True Passed', got '$available'"
echo "$available"

step "every example task is accepted by the API server (server-side dry run)"
for f in examples/*.yaml examples/local/*.yaml; do
  k apply --dry-run=server -f "$f" >/dev/null || fail "the API server rejected $f"
  echo "accepted: $f"
done

step "the invalid tasks of api/tests are judged by the API server (schemas, CEL)"
hack/e2e/crd-judge.sh "$KUBECTL"

step "applying tasks"
k apply -f examples/netreach.yaml
k apply -f hack/e2e/netreach-carrier.yaml -f hack/e2e/netdns.yaml -f hack/e2e/apphttphealthy.yaml \
  -f hack/e2e/marker.yaml -f hack/e2e/gc.yaml
[ "$IPV6" = 1 ] && k apply -f hack/e2e/dual-stack.yaml
tasks="$(k get netreach,apphttphealthy,netdns -o name | wc -l)"

# Every task must have a status, and every expected round its result: a task whose status is
# never written counts as pending (a jsonpath filter on status.finish would skip it).
wait_finished() {
  local deadline=$((SECONDS + TIMEOUT)) pending
  while :; do
    pending="$(k get netreach,apphttphealthy,netdns -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.status.finish}{"\n"}{end}' | grep -v '=true$' || true)"
    [ -z "$pending" ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      k get netreach,apphttphealthy,netdns -o yaml >&2
      fail "still unfinished after ${TIMEOUT}s: $(echo "$pending" | tr '\n' ' ')"
    fi
    sleep 2
  done
}
step "waiting up to ${TIMEOUT}s for every round of $tasks tasks"
wait_finished
k get netreach,apphttphealthy,netdns
results="$(k get netreach,apphttphealthy,netdns -o jsonpath='{range .items[*]}{.kind}/{.metadata.name} {.status.expectedRound} {.status.doneRound} {.status.lastRoundStatus}{"\n"}{end}')"
bad="$(echo "$results" | awk '$2 != $3 || $4 != "succeed"' || true)"
if [ -n "$bad" ]; then
  echo "e2e: why, per node:" >&2
  k get kdoctorreport -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{range .report.latestRoundReport[*]}{"  "}{.nodeName}{": "}{.reasonsForFailure}{"\n"}{end}{end}' >&2
  fail "rounds missing or not succeeded (kind/name expected done last): $bad"
fi

step "reports through the aggregation layer"
k get kdoctorreport
k get kdoctorreport -o wide
if [ -n "$KUBECTL_OTHER" ]; then
  echo "with $KUBECTL_OTHER:"
  "$KUBECTL_OTHER" get kdoctorreport || fail "$KUBECTL_OTHER could not list the reports"
else
  echo "MISSING: no second kubectl (Debian's kubectl.1.NN) on this machine: the report list was read with $KUBECTL only"
fi
reports="$(k get kdoctorreport -o name | wc -l)"
[ "$reports" -ge "$tasks" ] || fail "expected a KdoctorReport per task ($tasks), got $reports"
# Captured before grep: `grep -q` stops reading at the first match, and kubectl, killed by
# SIGPIPE on its next write, would fail the pipeline under pipefail.
resources="$(k api-resources --api-group=system.kdoctor.io)"
grep -q '^kdoctorreports ' <<<"$resources" || fail "kubectl api-resources does not list kdoctorreports"
explained="$(k explain kdoctorreport.report.latestRoundReport)"
grep -q 'FIELD' <<<"$explained" || fail "kubectl explain kdoctorreport.report.latestRoundReport printed no field"

echo "netreach-e2e-carrier, targets probed by each node:"
k get kdoctorreport netreach-e2e-carrier -o jsonpath='{range .report.latestRoundReport[*]}{"  "}{.nodeName}{":"}{range .taskNetReach.roundTaskDetail[*]}{" "}{.name}{"="}{.requestSucceedRate}{end}{"\n"}{end}'
# Every node probes the three carrier pods, the Service three ways and the Ingress.
targets="$(k get kdoctorreport netreach-e2e-carrier -o jsonpath='{range .report.latestRoundReport[*]}{.taskNetReach.targetNumber}{" "}{end}')"
expected="$(for _ in $(seq "$NODES"); do printf '%s ' "$((NODES + 4))"; done)"
[ "$targets" = "$expected" ] || fail "expected $((NODES + 4)) targets per node on netreach-e2e-carrier, got: $targets"

if [ "$IPV6" = 1 ]; then
  targets="$(k get kdoctorreport netreach-e2e-dual-stack -o jsonpath='{range .report.latestRoundReport[*]}{.taskNetReach.targetNumber}{" "}{end}')"
  expected="$(for _ in $(seq "$NODES"); do printf '%s ' "$((2 * (NODES + 3) + 1))"; done)"
  [ "$targets" = "$expected" ] || fail "expected $((2 * (NODES + 3) + 1)) targets per node on netreach-e2e-dual-stack, got: $targets"
  v6="$(k get kdoctorreport netreach-e2e-dual-stack -o jsonpath='{range .report.latestRoundReport[*]}{range .taskNetReach.roundTaskDetail[*]}{.name}{"\n"}{end}{end}' | grep -c 'V6IP' || true)"
  [ "$v6" -eq "$((NODES * (NODES + 3)))" ] || fail "expected $((NODES * (NODES + 3))) IPv6 targets on netreach-e2e-dual-stack, got $v6"
  queries="$(k get kdoctorreport netdns-e2e-dns-dual-stack -o jsonpath='{range .report.latestRoundReport[*]}{range .taskNetDns.roundTaskDetail[*]}{.name}{"\n"}{end}{end}')"
  aaaa_v6="$(printf '%s\n' "$queries" | grep -c '^typeAAAA_\[fd6b:' || true)"
  if [ "$(printf '%s\n' "$queries" | grep -c '^type')" -ne "$((2 * NODES))" ] || [ "$aaaa_v6" -ne "$NODES" ]; then
    fail "expected an A query and an AAAA query at the IPv6 DNS address from every node, got: $queries"
  fi
fi

step "kubectl kdoctor (the plugin, through the aggregation layer)"
plugin summary
plugin matrix netreach-e2e-carrier --no-color | tee "$CLUSTER_DIR/matrix.txt"
rows="$(grep -cE '^node-[0-9]+ ' "$CLUSTER_DIR/matrix.txt" || true)"
if [ "$rows" -ne "$NODES" ] || grep -E '^node-[0-9]+ ' "$CLUSTER_DIR/matrix.txt" | grep -qvE '^node-[0-9]+( +100%)+ *$'; then
  fail "expected $NODES rows of 100% cells from kubectl kdoctor matrix"
fi
plugin history netreach-task
hint="$(plugin history task 2>&1 >/dev/null || true)"
case "$hint" in
  *"did you mean netreach-task?"*) ;;
  *) fail "kubectl kdoctor history task should point at netreach-task, said: $hint" ;;
esac

step "markers: the Node condition and labels of hack/e2e/marker.yaml"
hack/e2e/markers.sh "$KUBECTL" present

step "kubectl get kdoctorreport -w sees a new task's report, and kubectl kdoctor run --wait"
k get kdoctorreport -w --output-watch-events >"$CLUSTER_DIR/watch.txt" 2>&1 &
watch_pid=$!
plugin run -f hack/e2e/run-wait.yaml --wait --timeout-seconds 120
code=0
plugin run -f hack/e2e/run-wait-failing.yaml --wait --timeout-seconds 120 >"$CLUSTER_DIR/failing.txt" 2>&1 || code=$?
cat "$CLUSTER_DIR/failing.txt"
[ "$code" -eq 1 ] || fail "kubectl kdoctor run --wait of a failing task should exit 1, exited $code"
grep -q 'fail' "$CLUSTER_DIR/failing.txt" || fail "kubectl kdoctor run --wait of a failing task should say the round failed"
sleep 2
kill "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true
grep -qE '^(ADDED|MODIFIED) +netreach-e2e-run ' "$CLUSTER_DIR/watch.txt" || {
  cat "$CLUSTER_DIR/watch.txt" >&2
  fail "kubectl get kdoctorreport -w did not show netreach-e2e-run"
}
echo "the watch saw: $(grep -cE '^(ADDED|MODIFIED)' "$CLUSTER_DIR/watch.txt") events"

step "deleting a task: the garbage collector removes its carrier, the report stays"
gc_selector=kdoctor.io/task-kind=NetReach,kdoctor.io/task-name=e2e-gc
k get daemonset,service -n kdoctor -l "$gc_selector"
# The carrier must be there, owned as the collector follows it: the DaemonSet by the task, each
# Service by the DaemonSet (else its vanishing would prove nothing).
gc_task_uid=$(k get netreach e2e-gc -o jsonpath='{.metadata.uid}')
gc_ds=$(k get daemonset -n kdoctor -l "$gc_selector" -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}{"\n"}{end}')
gc_ds_uid=$(k get daemonset -n kdoctor -l "$gc_selector" -o jsonpath='{.items[*].metadata.uid}')
gc_svcs=$(k get service -n kdoctor -l "$gc_selector" -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}{"\n"}{end}')
[ "$(echo "$gc_ds" | wc -l)" = 1 ] && [ "${gc_ds#* }" = "NetReach/$gc_task_uid" ] ||
  fail "e2e-gc should have one carrier DaemonSet owned by the task ($gc_task_uid), found: $gc_ds"
[ -n "$gc_svcs" ] || fail "e2e-gc's carrier has no Service"
while read -r name owner; do
  [ "$owner" = "DaemonSet/$gc_ds_uid" ] || fail "Service $name of e2e-gc should be owned by its DaemonSet, is by $owner"
done <<<"$gc_svcs"
k delete netreach e2e-gc --wait=true
deadline=$((SECONDS + 60))
until [ -z "$(k get daemonset,service -n kdoctor -l "$gc_selector" -o name)" ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "the carrier of e2e-gc is still there 60s after the task was deleted"
  sleep 1
done
# Who deleted them: Kubernetes' garbage collector, not the controller's orphan sweep.
while read -r resource name; do
  by=$(python3 hack/e2e/audit.py deleters "$CLUSTER_DIR/logs/audit.log" "$resource" kdoctor "$name")
  [ "$by" = system:serviceaccount:kube-system:generic-garbage-collector ] ||
    fail "$resource/$name of e2e-gc should be deleted by the garbage collector alone, was by: ${by:-nobody in the audit log}"
done < <(echo "$gc_ds" | sed 's/^\([^ ]*\) .*/daemonsets \1/'; echo "$gc_svcs" | sed 's/^\([^ ]*\) .*/services \1/')
echo "the garbage collector deleted the DaemonSet and $(echo "$gc_svcs" | wc -l) Service(s)"
k get kdoctorreport netreach-e2e-gc || fail "the report of a deleted task is gone"

step "markers go away with their task"
k delete netreach e2e-marker --wait=true
hack/e2e/markers.sh "$KUBECTL" absent

step "people who are not cluster-admin: view, edit, nothing, a namespaced RoleBinding, a certificate's group"
hack/e2e/people.sh "$KUBECTL" "$BIN/kdoctor" netreach-e2e-marker.round-1

if [ "${E2E_CHAOS:-$([ "$FROM" = manifests ] && echo 1 || echo 0)}" = 1 ]; then
  step "the chaos suite: the leader killed, its node dead, paused, partitioned, its pod deleted; a follower partitioned then the leader killed; a rolling restart; a lost volume; a full disk; the StatefulSet scaled 3 to 5 to 3 and back with old volumes; a new replica killed inside its snapshot install; kube-apiserver and etcd restarted; an agent killed and one cut off — each mid-round"
  hack/chaos.sh "$KUBECTL" "$NODES"
else
  step "killing the leader: another replica leads, the round finishes once"
  hack/e2e/leader.sh "$KUBECTL" "$NODES"
fi

step "every request of kdoctor's ServiceAccounts was allowed by the shipped RBAC"
python3 hack/e2e/audit.py forbidden "$CLUSTER_DIR/logs/audit.log" system:serviceaccount:kdoctor:kdoctor-controller system:serviceaccount:kdoctor:kdoctor-agent

echo
[ -z "$MISSING" ] || echo "$MISSING" >&2
echo "e2e: passed — on a real control plane (Kubernetes $("$KUBECTL" version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')), installed from $FROM${IPV6:+$([ "$IPV6" = 1 ] && echo ', dual stack')}"
