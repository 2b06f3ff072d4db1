#!/usr/bin/env bash
# The chaos suite of issue 18, on a running real control plane with kdoctor installed (run by
# hack/e2e.sh after its other checks; CLUSTER_DIR and CLUSTER_NETNS name the cluster). Each case
# injects one fault while a round of its own NetReach task (hack/chaos/round.yaml) is probing,
# then asserts the goals and prints one line of figures:
#   acknowledged reports lost (goal 0), duplicate rounds (goal 0), recovery time, and for the
#   leader case failed reads through the aggregation layer (goal 0, hack/e2e/leader.sh).
#   chaos.sh KUBECTL NODES
set -euo pipefail
kubectl="$1"
nodes="$2"
here="$(cd "$(dirname "$0")" && pwd)"
k() { "$kubectl" "$@"; }
fail() { echo "chaos: FAILED: $*" >&2; exit 1; }
summary=()

# Applies the case's task and waits until its first round is probing.
start_task() { # name rounds
  sed -e "s/NAME/$1/" -e "s/ROUNDS/$2/" "$here/chaos/round.yaml" | k apply -f - >/dev/null
  local deadline=$((SECONDS + 90))
  until [ "$(k get netreach "$1" -o jsonpath='{.status.history[0].status}' 2>/dev/null)" = ongoing ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$1: its round did not start within 90s"
    sleep 1
  done
  sleep 5
}

# Waits until the task finished, within SECONDS.
wait_finished() { # name seconds
  local deadline=$((SECONDS + $2))
  until [ "$(k get netreach "$1" -o jsonpath='{.status.finish}' 2>/dev/null)" = true ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$1 did not finish within $2s: $(k get netreach "$1" -o jsonpath='{.status}' 2>&1)"
    sleep 1
  done
}

# Rounds in the status history with their result; each round once (no duplicate rounds).
check_history() { # name rounds
  local numbers distinct
  numbers="$(k get netreach "$1" -o jsonpath='{range .status.history[*]}{.roundNumber}{"\n"}{end}')"
  distinct="$(sort -u <<<"$numbers" | grep -c . || true)"
  [ "$distinct" -eq "$2" ] && [ "$(grep -c . <<<"$numbers")" -eq "$2" ] ||
    fail "$1: the status history has rounds '$(tr '\n' ' ' <<<"$numbers")', expected each of 1..$2 once"
  local stored
  stored="$(k get kdoctorreport "netreach-$1" -o jsonpath='{.metadata.annotations.kdoctor\.io/rounds}')"
  [ "$stored" = "$(seq -s, 1 "$2")" ] || fail "$1: the store holds rounds '$stored', expected 1..$2"
}

# The nodes with a result in round ROUND of the task's report, one line each.
reported() { # name round
  k get kdoctorreport "netreach-$1.round-$2" -o jsonpath='{range .report.latestRoundReport[*]}{.nodeName}{"\n"}{end}' | grep . | sort
}

# The agent's pod on NODE and its network namespace (kube-sim: <cluster namespace>-<uid16>).
agent_netns() { # node
  local pod uid
  pod="$(k -n kdoctor get pods -l app.kubernetes.io/name=kdoctor-agent -o jsonpath="{range .items[?(@.spec.nodeName==\"$1\")]}{.metadata.name}{end}")"
  [ -n "$pod" ] || fail "no default agent pod on $1"
  uid="$(k -n kdoctor get pod "$pod" -o jsonpath='{.metadata.uid}' | tr -d '-' | cut -c1-16)"
  echo "${CLUSTER_NETNS:?}-$uid"
}

agent_pid() { # netns
  local p
  for p in $(ip netns pids "$1" 2>/dev/null); do
    case "$(tr '\0' ' ' <"/proc/$p/cmdline")" in "/usr/bin/kdoctor agent"*) echo "$p"; return ;; esac
  done
}

# Until kubectl reads reports again, in seconds.
until_reads() {
  local started=$SECONDS deadline=$((SECONDS + 120))
  until k get kdoctorreport --request-timeout=3s >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "the report API did not answer within 120s"
    sleep 0.5
  done
  echo $((SECONDS - started))
}

case_leader() {
  local out
  out="$("$here/e2e/leader.sh" "$kubectl" "$nodes")" || { echo "$out"; fail "the leader case"; }
  echo "$out"
  summary+=("leader killed mid-round: $(grep -o 'the Lease moved within [0-9]*s' <<<"$out"), $(grep -o 'reads during the failover: .*' <<<"$out"); round finished once with every node; reports lost 0; duplicate rounds 0")
}

# Restarts a control-plane daemon mid-round: every node's report is still stored, once.
case_restart() { # daemon
  local name="chaos-$1" t0 reads finished
  start_task "$name" 1
  t0=$SECONDS
  CLUSTER_DIR="$CLUSTER_DIR" CLUSTER_NETNS="$CLUSTER_NETNS" "$here/cluster.sh" restart "$1" >/dev/null
  reads="$(until_reads)"
  wait_finished "$name" 180
  finished=$((SECONDS - t0))
  check_history "$name" 1
  [ "$(k get netreach "$name" -o jsonpath='{.status.lastRoundStatus}')" = succeed ] ||
    fail "$name: the round did not succeed after $1 restarted: $(k get netreach "$name" -o jsonpath='{.status.history[0]}')"
  [ "$(reported "$name" 1 | grep -c .)" -eq "$nodes" ] || fail "$name: not every node's report was stored: $(reported "$name" 1 | tr '\n' ' ')"
  summary+=("$1 restarted mid-round: reports readable again after ${reads}s, round finished ${finished}s after the restart, succeeded on $nodes of $nodes nodes; reports lost 0; duplicate rounds 0")
}

# Kills node-2's agent mid-round: its node fails or is not reported (a restarted agent may
# still report), every other node's report stands, the round is finalised once.
case_agent_kill() {
  local name=chaos-agent ns pid node2 others
  start_task "$name" 1
  ns="$(agent_netns node-2)"
  pid="$(agent_pid "$ns")"
  [ -n "$pid" ] || fail "cannot find node-2's agent process"
  kill -KILL "$pid"
  wait_finished "$name" 180
  check_history "$name" 1
  others="$(reported "$name" 1 | grep -vc '^node-2$' || true)"
  [ "$others" -eq $((nodes - 1)) ] || fail "$name: the other nodes' reports are not all there: $(reported "$name" 1 | tr '\n' ' ')"
  node2="$(k get netreach "$name" -o jsonpath='{.status.history[0].notReportAgentNodeList}')"
  summary+=("agent on node-2 killed mid-round: round finalised once; the other $others nodes' reports stored; node-2 $(if grep -q node-2 <<<"$node2"; then echo 'not reported'; else echo 'reported by its restarted agent'; fi); duplicate rounds 0")
}

# Cuts node-2's agent off the network for its first round: the round ends at its deadline with
# node-2 not reported; once the link is back, the next round succeeds on every node.
case_netns_cut() {
  local name=chaos-cut ns iface t0 recovered
  start_task "$name" 2
  ns="$(agent_netns node-2)"
  iface="$(ip -n "$ns" -o link show | awk -F': ' '$2 != "lo" { sub(/@.*/, "", $2); print $2; exit }')"
  [ -n "$iface" ] || fail "no interface in $ns"
  # A link set down loses its routes: kept, to put back with the link.
  local routes4 routes6
  routes4="$(mktemp)"
  routes6="$(mktemp)"
  ip -n "$ns" -4 route save >"$routes4"
  ip -n "$ns" -6 route save >"$routes6" 2>/dev/null || true
  restore() {
    ip -n "$ns" link set "$iface" up
    ip -n "$ns" -4 route restore <"$routes4" 2>/dev/null || true
    ip -n "$ns" -6 route restore <"$routes6" 2>/dev/null || true
    rm -f "$routes4" "$routes6"
  }
  ip -n "$ns" link set "$iface" down
  local deadline=$((SECONDS + 150))
  until [ "$(k get netreach "$name" -o jsonpath='{.status.doneRound}' 2>/dev/null)" = 1 ]; do
    [ "$SECONDS" -lt "$deadline" ] || { restore; fail "$name: round 1 did not end within 150s"; }
    sleep 1
  done
  restore
  t0=$SECONDS
  grep -q node-2 <<<"$(k get netreach "$name" -o jsonpath='{.status.history[?(@.roundNumber==1)].notReportAgentNodeList}')" ||
    fail "$name: node-2 was cut off, but round 1 does not list it as not reported"
  wait_finished "$name" 150
  recovered=$((SECONDS - t0))
  check_history "$name" 2
  [ "$(k get netreach "$name" -o jsonpath='{.status.history[?(@.roundNumber==2)].status}')" = succeed ] ||
    fail "$name: round 2 did not succeed once node-2 was back: $(k get netreach "$name" -o jsonpath='{.status.history}')"
  [ "$(reported "$name" 2 | grep -c .)" -eq "$nodes" ] || fail "$name: round 2 lacks nodes: $(reported "$name" 2 | tr '\n' ' ')"
  summary+=("node-2's agent cut off for round 1: round 1 ended at its deadline with node-2 not reported; round 2 succeeded on $nodes of $nodes nodes ${recovered}s after the link came back; duplicate rounds 0")
}

case_leader
case_restart kube-apiserver
case_restart etcd
case_agent_kill
case_netns_cut

echo
echo "chaos: every case met its goals:"
printf '  - %s\n' "${summary[@]}"
