#!/usr/bin/env bash
# The chaos suite of issues 18 and 31, on a running real control plane with kdoctor installed
# (three controller replicas under Raft; run by hack/e2e.sh after its other checks; CLUSTER_DIR
# and CLUSTER_NETNS name the cluster). Each case injects one fault while a round of its own
# NetReach task (hack/chaos/round.yaml) is probing, then asserts its goals from what happened,
# not only from the end state, and prints one line of figures:
# - no acknowledged report lost: every report an agent was told it may drop (its own `.ack`
#   record) is in the store (hack/chaos/acked.py);
# - no round run twice: each round once in the status history and once in the store;
# - for the faults of the controller's replicas, seen by a user's clients through the
#   aggregation layer (hack/chaos/observe.py): `kubectl get kdoctorreport` twice a second answers
#   every time while two of three replicas are up, its resourceVersion never goes backwards, and
#   a watch opened before the fault sees each change once, in order, resuming wherever it lands;
# - one writer at a time: the audit log never shows two replicas writing task status in turn
#   within the lease (hack/chaos/writers.py).
#   chaos.sh KUBECTL NODES
set -euo pipefail
kubectl="$1"
nodes="$2"
here="$(cd "$(dirname "$0")" && pwd)"
k() { "$kubectl" "$@"; }
fail() { echo "chaos: FAILED: $*" >&2; exit 1; }
# A case that fails leaves its observer (and a partition's cutter) running; they would outlive
# this script, keep hack/test.sh's `| tee` open and hang the run until CI's limit.
stop_background() { jobs -p | xargs -r kill -TERM 2>/dev/null || true; }
trap stop_background EXIT
summary=()
kubeconfig="${KUBECONFIG:?KUBECONFIG: the admin kubeconfig of the cluster}"

# The replica that leads, as the Lease names it (it renews it every 5 s while it leads).
leader() { k -n kdoctor get lease kdoctor-controller-lease -o jsonpath='{.spec.holderIdentity}'; }
renewed() { k -n kdoctor get lease kdoctor-controller-lease -o jsonpath='{.spec.renewTime}'; }

# Waits until a replica other than OLD (by name, or any when OLD is empty) renews the Lease
# after the moment AFTER (seconds since the epoch): a live leader, not a stale record.
new_leader() { # old after limit
  local deadline=$((SECONDS + $3)) holder at
  while :; do
    holder="$(leader)"
    at="$(date -d "$(renewed)" +%s 2>/dev/null || echo 0)"
    if [ -n "$holder" ] && [ "$holder" != "$1" ] && [ "$at" -gt "$2" ]; then echo "$holder"; return; fi
    [ "$SECONDS" -lt "$deadline" ] || fail "no replica other than '$1' led within $3s (Lease: '$holder' renewed $(renewed))"
    sleep 1
  done
}

# A controller pod's network namespace and process (kube-sim: <cluster namespace>-<uid16>).
uid_netns() { # pod-uid
  echo "${CLUSTER_NETNS:?}-$(tr -d '-' <<<"$1" | cut -c1-16)"
}
pod_netns() { # pod
  uid_netns "$(k -n kdoctor get pod "$1" -o jsonpath='{.metadata.uid}')"
}
controller_pid_in() { # netns
  local p
  for p in $(ip netns pids "$1" 2>/dev/null); do
    case "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" in "/usr/bin/kdoctor controller"*) echo "$p"; return ;; esac
  done
}
controller_pid() { controller_pid_in "$(pod_netns "$1")"; } # pod
replicas() { k -n kdoctor get pods -l app.kubernetes.io/name=kdoctor-controller -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'; }
a_follower() { replicas | grep -vx "$(leader)" | head -n1; }

# The observer of a case: started before the fault, stopped after the case's round finished.
observe_start() { # case
  observed="$(mktemp)"
  python3 "$here/chaos/observe.py" "$kubectl" "$kubeconfig" "$observed" &
  observer=$!
  sleep 2
}
observe_stop() { # case → sets "observed_line"
  kill -TERM "$observer" 2>/dev/null || true
  wait "$observer" 2>/dev/null || true
  local figures
  figures="$(python3 - "$observed" "$observed.faults" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
try:
    faults = [float(x) for x in open(sys.argv[2]).read().split()]
except OSError:
    faults = []
# A fault that takes a replica away at once (a kill, its node's death) explains a failure of
# a read begun from 2 s before it to 10 s after it: the answer the replica was giving broken
# off, or kube-apiserver's own 503 for it while it was still in the endpoints (until the
# leader, or a new one, takes it out). Twice a second, with a third to a half of the reads
# routed to it, for the 0.4-2 s a killed process takes to be back, or until an election that
# must first pass over a replica that had been cut off ends and the new leader drops it from
# the endpoints (chaos-behind: up to 5 seen, about 7 s): at most six per fault.
explained = [t for t, kind in f["failures"]
             if kind in ("cut", "unreachable") and any(x - 2 <= t <= x + 10 for x in faults)]
others = len(f["failures"]) - len(explained)
print(f["reads"], others, len(f["backwards"]), f["events"], len(f["duplicates"]), len(f["out_of_order"]), f["relists"], f["resumes"], f["slowest"], len(explained), len(faults))
for e in f["errors"][:3] + f["backwards"][:3] + f["duplicates"][:3] + f["out_of_order"][:3]:
    print("  " + e, file=sys.stderr)
PY
)"
  rm -f "$observed" "$observed.faults"
  read -r reads failed backwards events duplicates disorder relists resumes slowest explained faults <<<"$figures"
  observed_line="reads $reads (failed $failed, slowest ${slowest}s; $explained just after the replica went), resourceVersion backwards $backwards; watch events $events (duplicated $duplicates, out of order $disorder, relists $relists, resumed $resumes times)"
  [ "$failed" -eq 0 ] || fail "$1: $failed of $reads reads through the aggregation layer failed ($observed_line)"
  [ "$explained" -le $((6 * faults)) ] || fail "$1: $explained reads failed right after $faults replica(s) went, more than that explains ($observed_line)"
  [ "$backwards" -eq 0 ] || fail "$1: a client saw resourceVersions go backwards ($observed_line)"
  [ "$duplicates" -eq 0 ] && [ "$disorder" -eq 0 ] && [ "$relists" -eq 0 ] ||
    fail "$1: the watch did not see each change once, in order ($observed_line)"
  [ "$events" -gt 0 ] || fail "$1: the watch saw no change at all ($observed_line)"
}

# Every acknowledged report of TASK in the store; one writer of task status at a time since T.
acked() { python3 "$here/chaos/acked.py" "$CLUSTER_DIR" "$kubectl" "$1" || fail "$1: acknowledged reports lost"; }
writers() { python3 "$here/chaos/writers.py" "$CLUSTER_DIR/logs/audit.log" "$1" || fail "two replicas wrote task status at once"; }

# Applies the case's task and waits until its first round is probing.
start_task() { # name rounds
  # A case run again (CHAOS_CASES on a kept cluster) starts a task of its own, not the last one's.
  k delete netreach "$1" --ignore-not-found --wait >/dev/null
  sed -e "s/NAME/$1/" -e "s/ROUNDS/$2/" "$here/chaos/round.yaml" | k apply -f - >/dev/null
  local deadline=$((SECONDS + 90))
  until [ "$(k get netreach "$1" -o jsonpath='{.status.history[0].status}' 2>/dev/null)" = ongoing ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$1: its round did not start within 90s: $(k get netreach "$1" -o jsonpath='{.status}'; k get nodes; k -n kdoctor get pods -o wide)"
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

# Fails unless round ROUND of NAME holds reports of COUNT distinct nodes, each once.
check_reported() { # name round count
  local list total distinct
  list="$(reported "$1" "$2")"
  total="$(grep -c . <<<"$list" || true)"
  distinct="$(sort -u <<<"$list" | grep -c . || true)"
  [ "$distinct" -eq "$3" ] && [ "$total" -eq "$3" ] ||
    fail "$1: round $2 has reports of '$(tr '\n' ' ' <<<"$list")', expected $3 distinct nodes, each once"
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

# A fault of the controller's replicas, around its own task's round(s): the observer watches
# from before the fault, the fault function runs (and says what it did in fault_line), the
# task finishes, then every goal is checked and one line of figures kept.
# A fault function may change what the rounds must show (want_result, want_nodes: a dead
# node's agent reports nothing) and name what undoes the fault once the rounds are checked
# (case_after), still under observation.
controller_case() { # name rounds description fault-function
  local name="$1" rounds="$2" what="$3" since t0 finished r ack who
  shift 3
  want_result=succeed want_nodes="$nodes" case_after=""
  start_task "$name" "$rounds"
  since="$(date +%s)"
  observe_start "$name"
  t0=$SECONDS
  "$@"
  wait_finished "$name" 360
  finished=$((SECONDS - t0))
  for r in $(seq 1 "$rounds"); do
    [ "$(k get netreach "$name" -o jsonpath="{.status.history[?(@.roundNumber==$r)].status}")" = "$want_result" ] ||
      fail "$name: round $r did not end '$want_result': $(k get netreach "$name" -o jsonpath='{.status.history}')"
    check_reported "$name" "$r" "$want_nodes"
  done
  [ -z "$case_after" ] || "$case_after"
  observe_stop "$name"
  check_history "$name" "$rounds"
  ack="$(acked "$name")"
  who="$(writers "$since")"
  echo "$what: $fault_line"
  summary+=("$what: $fault_line; finished ${finished}s after the fault began, $rounds round(s) once, each '$want_result' with reports of $want_nodes of $nodes nodes; $ack; $observed_line; $who")
}

# The leader's process killed (SIGKILL) and its pod force-deleted, as when its node dies.
kill_leader() {
  local old pid at new
  old="$(leader)"
  pid="$(controller_pid "$old")"
  [ -n "$pid" ] || fail "cannot find the process of the leading controller pod $old"
  at="$(date +%s)"
  kill -KILL "$pid"
  date +%s.%N >>"$observed.faults"
  k -n kdoctor delete pod "$old" --grace-period=0 --force --wait=false 2>&1 | grep -v 'Warning: Immediate deletion' || true
  new="$(new_leader "" "$((at + 1))" 120)"
  fault_line="the leader $old killed; $new led within $(( $(date +%s) - at ))s"
}

# The leader paused (SIGSTOP) for 30 s, then resumed: another leads meanwhile, the old one,
# resumed, finds its lease gone and follows.
pause_leader() {
  local old pid at new
  old="$(leader)"
  pid="$(controller_pid "$old")"
  [ -n "$pid" ] || fail "cannot find the process of the leading controller pod $old"
  at="$(date +%s)"
  kill -STOP "$pid"
  new="$(new_leader "$old" "$at" 60)" || { kill -CONT "$pid"; exit 1; }
  local led=$(( $(date +%s) - at ))
  sleep $((30 - ($(date +%s) - at) > 0 ? 30 - ($(date +%s) - at) : 0))
  kill -CONT "$pid"
  fault_line="the leader $old paused for 30s (SIGSTOP); $new led after ${led}s"
}

# Cuts a replica's pod off the other replicas (port 5722 both ways), not off kube-apiserver,
# for SECONDS; runs in the background when asked to.
cut_replica() { # pod seconds
  local ns
  ns="$(pod_netns "$1")"
  ip netns exec "$ns" iptables -I INPUT -p tcp --dport 5722 -j DROP
  ip netns exec "$ns" iptables -I OUTPUT -p tcp --dport 5722 -j DROP
  sleep "$2"
  ip netns exec "$ns" iptables -D INPUT -p tcp --dport 5722 -j DROP
  ip netns exec "$ns" iptables -D OUTPUT -p tcp --dport 5722 -j DROP
}

# The leader partitioned from the other replicas for 30 s, not from kube-apiserver.
partition_leader() {
  local old at new
  old="$(leader)"
  at="$(date +%s)"
  cut_replica "$old" 30 &
  local cutter=$!
  new="$(new_leader "$old" "$at" 60)" || { wait "$cutter"; exit 1; }
  local led=$(( $(date +%s) - at ))
  wait "$cutter"
  fault_line="the leader $old cut off from the other replicas for 30s (not from kube-apiserver); $new led after ${led}s"
}

# A follower partitioned for two minutes while rounds run, healed, then the leader killed:
# the new leader is elected among the two, and the one that was behind catches up.
partition_follower_then_kill_leader() {
  local follower
  follower="$(a_follower)"
  cut_replica "$follower" 120
  kill_leader
  fault_line="$follower cut off from the other replicas for 120s while rounds ran; then $fault_line"
}

# The leader's pod deleted the ordinary way (kubectl delete pod, as a rolling update does).
delete_leader_pod() {
  local old at gone new
  old="$(leader)"
  at="$(date +%s)"
  # Returns once the pod is gone: it stopped leading during its graceful stop.
  k -n kdoctor delete pod "$old" >/dev/null
  gone="$(date +%s)"
  new="$(new_leader "" "$gone" 120)"
  fault_line="the leader's pod $old deleted (kubectl delete pod, gone after $((gone - at))s); $new led $(( $(date +%s) - gone ))s after that"
}

# A rolling restart of the StatefulSet.
rolling_restart() {
  local at
  at=$SECONDS
  k -n kdoctor rollout restart statefulset/kdoctor-controller >/dev/null
  k -n kdoctor rollout status statefulset/kdoctor-controller --timeout=360s >/dev/null ||
    fail "the rolling restart did not finish within 360s"
  fault_line="a rolling restart of every replica took $((SECONDS - at))s"
}

# A metric of a controller pod (its metrics port, from inside the cluster).
pod_metric() { # pod metric
  local ip
  ip="$(k -n kdoctor get pod "$1" -o jsonpath='{.status.podIP}')"
  ip netns exec "${CLUSTER_NETNS:?}" curl -fsS --max-time 5 "http://$ip:5721/metrics" 2>/dev/null |
    awk -v m="$2" '$1 == m { print $2 }'
}

# Waits until POD's store holds what the leader's does, VOTERS voters (3 unless said; within
# SECONDS).
caught_up() { # pod seconds [voters]
  local deadline=$((SECONDS + $2)) mine theirs want="${3:-3}"
  while :; do
    mine="$(pod_metric "$1" kdoctor_store_resource_version || true)"
    theirs="$(pod_metric "$(leader)" kdoctor_store_resource_version || true)"
    if [ -n "$mine" ] && [ -n "$theirs" ] && [ "$mine" = "$theirs" ] &&
      [ "$(pod_metric "$(leader)" kdoctor_raft_voters || true)" = "$want" ]; then echo "$theirs"; return; fi
    [ "$SECONDS" -lt "$deadline" ] || fail "$1 did not come back with the leader's data within $2s (its resourceVersion '$mine', the leader's '$theirs')"
    sleep 2
  done
}

# The hostPath directory of a PVC's volume.
pvc_path() { # pvc
  k get pv "$(k -n kdoctor get pvc "$1" -o jsonpath='{.spec.volumeName}')" -o jsonpath='{.spec.hostPath.path}'
}

# A follower's disk full: its volume is put on a 256 MiB tmpfs, filled from outside but for
# 24 KiB, and the follower comes back on it as a new node, which must write more than that to
# catch up. Its store stops on the write error ("No space left on
# device") and its process restarts (and fails again) while the two others go on; once space
# returns it catches up. (Filling under a replica that already holds everything proved no
# test: sled rewrites the space it already has, and the next writes may need none.)
fill_follower_disk() {
  local follower path at back full stored free avail
  follower="$(a_follower)"
  path="$(pvc_path "reports-$follower")"
  [ -d "$path" ] || fail "no volume directory for $follower"
  stored="$(pod_metric "$(leader)" kdoctor_store_stored_bytes || true)"
  [ -n "$stored" ] || fail "cannot read the leader's kdoctor_store_stored_bytes"
  # Room for a new store's first files (16 KiB, store/tests/store/full_disk.rs), not for what
  # the leader holds, by the log or by a snapshot, however well it compresses.
  free=24
  mount -t tmpfs -o size=256m,mode=0777 kdoctor-chaos-full "$path"
  avail="$(df -k --output=avail "$path" | tail -n 1)"
  dd if=/dev/zero of="$path/filler" bs=1K count=$((avail - free)) status=none 2>/dev/null || true
  at=$SECONDS
  k -n kdoctor delete pod "$follower" >/dev/null
  # Its writes fail: its store stops on the error and the process restarts, or (a snapshot
  # chunk that does not fit, which the leader sends again later) it stays out of the endpoints
  # meanwhile. Either is seen first as the error in its log while it is not ready.
  local deadline=$((SECONDS + 180)) outcome="" log
  while [ -z "$outcome" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { rm -f "$path/filler"; fail "$follower did not stop on its full disk (${free} KiB free, the leader holding ${stored} bytes) within 180s"; }
    sleep 2
    if [ "$(k -n kdoctor get pod "$follower" -o jsonpath='{.status.containerStatuses[0].restartCount}' 2>/dev/null || echo 0)" -gt 0 ]; then
      outcome="its store stopped and the pod restarted"
    else
      log="$CLUSTER_DIR/kubelet/pods/$(k -n kdoctor get pod "$follower" -o jsonpath='{.metadata.uid}')/controller.log"
      if grep -q 'No space left on device' "$log" 2>/dev/null &&
        [ "$(k -n kdoctor get pod "$follower" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = False ]; then
        outcome="its writes failed (No space left on device): not ready, out of the endpoints"
      fi
    fi
  done
  full=$((SECONDS - at))
  sleep 10
  rm -f "$path/filler"
  # Its restarts back off (up to 5 min) while the disk is full; once space is back the pod is
  # restarted at once, as an operator would after freeing it.
  k -n kdoctor delete pod "$follower" --wait=false >/dev/null
  back="$(caught_up "$follower" 300)"
  # The tmpfs goes; the replica comes back on a fresh volume of its own (a new node again).
  k -n kdoctor delete pvc "reports-$follower" --wait=false >/dev/null
  k -n kdoctor delete pod "$follower" >/dev/null
  umount -l "$path" || true
  caught_up "$follower" 240 >/dev/null
  fault_line="$follower back as a new node on a volume with ${free} KiB free (the leader holding $((${stored%.*} / 1024)) KiB): $outcome ${full}s later; once space returned it caught up to resourceVersion $back"
}

# Waits until the leader counts N voters (within SECONDS).
voters_become() { # n seconds
  local deadline=$((SECONDS + $2)) now
  while :; do
    now="$(pod_metric "$(leader)" kdoctor_raft_voters || true)"
    [ "$now" = "$1" ] && return
    [ "$SECONDS" -lt "$deadline" ] || fail "the leader did not count $1 voters within $2s (it counts '$now'): $(k -n kdoctor get pods -o wide)"
    sleep 2
  done
}

# The StatefulSet scaled to N and settled: N voters, N pods ready, none beyond.
scale_to() { # n
  k -n kdoctor scale statefulset kdoctor-controller --replicas="$1" >/dev/null
  voters_become "$1" 180
  k -n kdoctor rollout status statefulset/kdoctor-controller --timeout=180s >/dev/null ||
    fail "the StatefulSet did not settle at $1 replicas within 180s: $(k -n kdoctor get pods -o wide)"
  local deadline=$((SECONDS + 120))
  while [ "$(replicas | grep -c .)" -ne "$1" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "replicas beyond $1 still there after 120s: $(replicas | tr '\n' ' ')"
    sleep 2
  done
}

# The StatefulSet scaled 3 -> 5 -> 3 -> 5 -> 3 while rounds run. Scaled down, the leader takes
# the two replicas out of the membership; their volumes stay (the StatefulSet's default). Scaled
# up again, they come back with those volumes: each learns from the leader that it was taken
# out, discards its store, restarts and joins as a new node.
scale_out_and_back() {
  local at up down again
  at=$SECONDS
  scale_to 5
  up=$((SECONDS - at))
  at=$SECONDS
  scale_to 3
  down=$((SECONDS - at))
  at=$SECONDS
  scale_to 5
  again=$((SECONDS - at))
  local restarts
  restarts="$(k -n kdoctor get pods kdoctor-controller-3 kdoctor-controller-4 -o jsonpath='{range .items[*]}{.status.containerStatuses[0].restartCount}{" "}{end}')"
  [ "$restarts" = "1 1 " ] ||
    fail "replicas 3 and 4, back with the volumes of removed nodes, should each have restarted once (discarding their stores), restarted '$restarts'"
  caught_up kdoctor-controller-3 120 5 >/dev/null
  caught_up kdoctor-controller-4 120 5 >/dev/null
  scale_to 3
  fault_line="scaled 3 to 5 in ${up}s (5 voters), back to 3 in ${down}s; to 5 again in ${again}s (replicas 3 and 4 back with their removed nodes' volumes: each discarded its store, restarted once and joined as a new node with the leader's data); back to 3"
}
# A replica killed in the middle of a snapshot install. The leader is made to compact its log
# often (the StatefulSet's containers get --raft-compact-after-bytes=4096: a rolling restart;
# it stays for the cases after this one), so a follower that loses its volume comes back as a
# new node that can only be caught up by snapshot. strace, attached to its new process, kills
# it (SIGKILL) when the install, the store's content already switched to the snapshot's,
# creates the file that keeps the snapshot (raft-snapshots/current.tmp) — the received
# snapshot is still on the volume then, which shows an install was under way. Restarted, the
# replica must open its store and catch up.
kill_in_snapshot_install() {
  local follower old_uid uid pid path trace deadline at back
  command -v strace >/dev/null || fail "strace is needed to aim a kill inside a snapshot install (apt-get install strace)"
  if ! k -n kdoctor get statefulset kdoctor-controller -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -q -- --raft-compact-after-bytes=4096; then
    k -n kdoctor patch statefulset kdoctor-controller --type json \
      -p '[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--raft-compact-after-bytes=4096"}]' >/dev/null
    k -n kdoctor rollout status statefulset/kdoctor-controller --timeout=240s >/dev/null ||
      fail "the StatefulSet did not roll out --raft-compact-after-bytes within 240s"
    voters_become 3 120
  fi
  # The leader compacts within a round or two (each appends the agents' reports).
  deadline=$((SECONDS + 300))
  until [ "$(pod_metric "$(leader)" kdoctor_raft_snapshot_index)" -gt 0 ] 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "the leader made no snapshot within 300s of --raft-compact-after-bytes=4096"
    sleep 2
  done
  follower="$(a_follower)"
  old_uid="$(k -n kdoctor get pod "$follower" -o jsonpath='{.metadata.uid}')"
  k -n kdoctor delete pvc "reports-$follower" --wait=false >/dev/null
  k -n kdoctor delete pod "$follower" --wait=false >/dev/null
  at=$SECONDS
  deadline=$((SECONDS + 120))
  uid=""
  until [ -n "$uid" ] && [ "$uid" != "$old_uid" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$follower was not re-created within 120s"
    sleep 0.2
    uid="$(k -n kdoctor get pod "$follower" -o jsonpath='{.metadata.uid}' 2>/dev/null || true)"
  done
  # Its process, as soon as it runs (joining and receiving the snapshot take a second or more).
  local ns
  ns="$(uid_netns "$uid")"
  pid=""
  while [ -z "$pid" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$follower's process did not start within 120s"
    pid="$(controller_pid_in "$ns")"
    [ -n "$pid" ] || sleep 0.05
  done
  trace="$(mktemp)"
  timeout 120 strace -f -q -p "$pid" -P /report/raft-snapshots/current.tmp -e trace=openat \
    -e inject=openat:signal=KILL -o "$trace" 2>/dev/null || true
  grep -q 'killed by SIGKILL' "$trace" ||
    fail "$follower was not killed inside a snapshot install within 120s (strace: $(tail -n 3 "$trace" | tr '\n' ' '))"
  local killed=$((SECONDS - at))
  path="$(pvc_path "reports-$follower")"
  local incoming
  incoming="$(ls "$path/raft-snapshots/" 2>/dev/null | grep -c '^incoming-' || true)"
  [ "$incoming" -gt 0 ] || fail "$follower was killed, but not inside a snapshot install (no snapshot being received on its volume: $(ls "$path/raft-snapshots/" 2>&1 | tr '\n' ' '))"
  rm -f "$trace"
  back="$(caught_up "$follower" 240)"
  fault_line="the leader compacting every 4 KiB; $follower's volume lost, its new node killed ${killed}s later inside the snapshot install (content switched, the snapshot not yet kept); restarted, it caught up to resourceVersion $back"
}

# The pods' network namespaces on NODE (host-network pods have none of their own).
node_netns() { # node
  local uid
  for uid in $(k get pods -A --field-selector "spec.nodeName=$1" -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}'); do
    [ -e "/run/netns/$(uid_netns "$uid")" ] && uid_netns "$uid"
  done
}

# The leader's node dies: its kubelet falls silent (kube-sim's down-nodes list), every pod on
# it is frozen (SIGSTOP) and cut off from everything (its network namespace drops every
# packet, as a dead machine answers nothing); then its pod is deleted as the node controller's
# eviction would, and stays Terminating (no kubelet confirms). The two other replicas must take
# over, not a replacement pod. The round ends at its deadline without the dead node's agent.
# After the round: the node comes back, its kubelet finishes the deletion, the StatefulSet
# re-creates the pod and it catches up.
down_file=""
down_node=""
down_netns=""
down_pod=""
down_uid=""
node_down_leader() {
  local old uid at new ns led
  old="$(leader)"
  down_pod="$old"
  uid="$(k -n kdoctor get pod "$old" -o jsonpath='{.metadata.uid}')"
  down_uid="$uid"
  down_node="$(k -n kdoctor get pod "$old" -o jsonpath='{.spec.nodeName}')"
  down_file="$CLUSTER_DIR/kubelet/down-nodes"
  down_netns="$(node_netns "$down_node")"
  [ -n "$down_netns" ] || fail "no pod network namespaces on $down_node"
  echo "$down_node" >>"$down_file"
  sleep 1 # kube-sim reads the list twice a second: its kubelet is silent before the freeze
  at="$(date +%s)"
  for ns in $down_netns; do
    ip netns exec "$ns" iptables -I INPUT -j DROP
    ip netns exec "$ns" iptables -I OUTPUT -j DROP
    # shellcheck disable=SC2046
    kill -STOP $(ip netns pids "$ns") 2>/dev/null || true
  done
  date +%s.%N >>"$observed.faults"
  new="$(new_leader "$old" "$at" 60)"
  led=$(( $(date +%s) - at ))
  k -n kdoctor delete pod "$old" --wait=false >/dev/null
  sleep 10
  [ "$(k -n kdoctor get pod "$old" -o jsonpath='{.metadata.uid}/{.metadata.deletionTimestamp}')" != "$uid/" ] &&
    [ "$(k -n kdoctor get pod "$old" -o jsonpath='{.metadata.uid}')" = "$uid" ] ||
    fail "$old: expected the dead node's pod to stay Terminating, not replaced"
  want_result=fail want_nodes=$((nodes - 1)) case_after=node_up
  fault_line="$down_node (the leader $old's) dead: kubelet silent, its pods frozen and cut off; $new led after ${led}s; $old Terminating, not replaced, while the node was down"
}

node_up() {
  local ns at
  at=$SECONDS
  for ns in $down_netns; do
    ip netns exec "$ns" iptables -D INPUT -j DROP || true
    ip netns exec "$ns" iptables -D OUTPUT -j DROP || true
    # shellcheck disable=SC2046
    kill -CONT $(ip netns pids "$ns") 2>/dev/null || true
  done
  grep -vx "$down_node" "$down_file" >"$down_file.new" || true
  mv "$down_file.new" "$down_file"
  k wait node "$down_node" --for=condition=Ready --timeout=60s >/dev/null ||
    fail "$down_node not Ready within 60s of its kubelet's return"
  k -n kdoctor rollout status daemonset/kdoctor-agent --timeout=120s >/dev/null ||
    fail "the agent on $down_node not ready within 120s of its node's return: $(k -n kdoctor get pods -o wide)"
  # Its kubelet back, the Terminating pod goes and the StatefulSet makes a new one.
  local deadline=$((SECONDS + 180)) now
  while :; do
    now="$(k -n kdoctor get pod "$down_pod" -o jsonpath='{.metadata.uid}' 2>/dev/null || true)"
    [ -n "$now" ] && [ "$now" != "$down_uid" ] && break
    [ "$SECONDS" -lt "$deadline" ] || fail "$down_pod was not re-created within 180s of its node's return"
    sleep 1
  done
  local theirs
  theirs="$(caught_up "$down_pod" 240)"
  fault_line="$fault_line; back after the round: the pod re-created and caught up (resourceVersion $theirs) $((SECONDS - at))s later"
}

# A follower's volume deleted and its pod re-created: it comes back empty, as a new node, and
# catches up by snapshot.
lose_volume() {
  local follower at
  follower="$(a_follower)"
  at=$SECONDS
  k -n kdoctor delete pvc "reports-$follower" --wait=false >/dev/null
  k -n kdoctor delete pod "$follower" >/dev/null
  local theirs
  theirs="$(caught_up "$follower" 240)"
  fault_line="$follower's volume deleted and its pod re-created; back as a new node with every report (resourceVersion $theirs) $((SECONDS - at))s later, 3 voters"
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
  check_reported "$name" 1 "$nodes"
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
  # Every other node once; node-2 too if its restarted agent made it in time.
  others=$((nodes - 1))
  if reported "$name" 1 | grep -qx node-2; then check_reported "$name" 1 "$nodes"; else check_reported "$name" 1 "$others"; fi
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
  check_reported "$name" 2 "$nodes"
  summary+=("node-2's agent cut off for round 1: round 1 ended at its deadline with node-2 not reported; round 2 succeeded on $nodes of $nodes nodes ${recovered}s after the link came back; duplicate rounds 0")
}

# CHAOS_CASES="chaos-node chaos-kill": only these cases (a rerun on a kept cluster:
# E2E_KEEP=1 hack/e2e.sh, then CLUSTER_DIR=… CLUSTER_NETNS=… KUBECONFIG=… hack/chaos.sh …).
only() { [ -z "${CHAOS_CASES:-}" ] || grep -qw -- "$1" <<<"$CHAOS_CASES"; }
if only chaos-kill; then controller_case chaos-kill 1 "leader killed mid-round" kill_leader; fi
if only chaos-node; then controller_case chaos-node 1 "the leader's node dead mid-round" node_down_leader; fi
if only chaos-pause; then controller_case chaos-pause 1 "leader paused mid-round" pause_leader; fi
if only chaos-partition; then controller_case chaos-partition 1 "leader partitioned mid-round" partition_leader; fi
if only chaos-behind; then controller_case chaos-behind 3 "follower partitioned, then the leader killed" partition_follower_then_kill_leader; fi
if only chaos-delete; then controller_case chaos-delete 1 "leader's pod deleted mid-round" delete_leader_pod; fi
if only chaos-rolling; then controller_case chaos-rolling 1 "rolling restart mid-round" rolling_restart; fi
if only chaos-volume; then controller_case chaos-volume 1 "a follower's volume lost mid-round" lose_volume; fi
if only chaos-full; then controller_case chaos-full 2 "a follower's disk full" fill_follower_disk; fi
if only chaos-scale; then controller_case chaos-scale 2 "the StatefulSet scaled 3 to 5 to 3 to 5 to 3" scale_out_and_back; fi
if only chaos-install; then controller_case chaos-install 2 "a new replica killed inside its snapshot install" kill_in_snapshot_install; fi
if only chaos-kube-apiserver; then case_restart kube-apiserver; fi
if only chaos-etcd; then case_restart etcd; fi
if only chaos-agent; then case_agent_kill; fi
if only chaos-cut; then case_netns_cut; fi

echo
echo "chaos: every case met its goals:"
printf '  - %s\n' "${summary[@]}"
