#!/usr/bin/env bash
# UDP echo accuracy (issue 33): `kdoctor probe udp` against iperf3 -u, in the same run, over the
# same path, at the same datagram rate and size, both judged against what the kernel itself did
# to the datagrams. Two network namespaces joined by a veth pair (addresses of the 198.18.0.0/15
# testing range, only inside them; nothing leaves the machine). The prober's kernel copies a
# share of the datagrams it sends (`TEE` to the far side's address) and the far side's kernel
# drops a share of what arrives, copies included (iptables `statistic`, DROP on INPUT: a drop on
# the sender's own output path would fail its send with EPERM, which is not a loss on the
# path): the rules' counters are the ground truth of how many were duplicated and lost. The far side runs `kdoctor agent` (its UDP echo port) and
# `iperf3 -s`. Each rate runs both tools three times, in turns; the table gives each run's
# counts, so no median hides a miscount. The kernel here has no netem: delay and reordering are
# not injected, so jitter is the path's own (a veth) for both tools.
#
#   hack/bench/agent/udp.sh [--secs N] [--rates 100,1000,10000] [--loss 0.02] [--dup 0.01]
#
# Installs iperf3 (Debian) when missing; builds kdoctor (release). Prints a markdown section for
# docs/benchmarks.md. Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/../../.."
secs=5 rates=100,1000,10000 loss=0.02 dup=0.01 size=64
while [ $# -gt 0 ]; do
  case "$1" in
    --secs) secs="$2"; shift 2 ;;
    --rates) rates="$2"; shift 2 ;;
    --loss) loss="$2"; shift 2 ;;
    --dup) dup="$2"; shift 2 ;;
    *) echo "udp.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "udp.sh: needs root (network namespaces)" >&2; exit 2; }
if ! command -v iperf3 >/dev/null; then
  echo "installing iperf3 (apt-get)" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 >/dev/null ||
    { echo "udp.sh: cannot install iperf3: apt-get install -y iperf3" >&2; exit 2; }
fi
target=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release -q -p kdoctor
kdoctor="$target/release/kdoctor"

client=kdb-udp-client server=kdb-udp-echo
client_ip=198.19.254.1 server_ip=198.19.254.2
cleanup() {
  [ -z "${agent_pid:-}" ] || kill "$agent_pid" 2>/dev/null || true
  [ -z "${iperf_pid:-}" ] || kill "$iperf_pid" 2>/dev/null || true
  ip netns del "$client" 2>/dev/null || true
  ip netns del "$server" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add "$client"
ip netns add "$server"
ip link add kdb-udp-c netns "$client" type veth peer name kdb-udp-e netns "$server"
in_c() { ip netns exec "$client" "$@"; }
in_s() { ip netns exec "$server" "$@"; }
in_c ip addr add "$client_ip/30" dev kdb-udp-c
in_s ip addr add "$server_ip/30" dev kdb-udp-e
for ns in "$client" "$server"; do
  ip netns exec "$ns" ip link set lo up
done
in_c ip link set kdb-udp-c up
in_s ip link set kdb-udp-e up
in_s iptables -A INPUT -p udp -s "$client_ip" -m statistic --mode random --probability "$loss" -j DROP
in_c iptables -t mangle -A POSTROUTING -p udp -d "$server_ip" -m statistic --mode random --probability "$dup" -j TEE --gateway "$server_ip"

log=$(mktemp -d)
in_s "$kdoctor" agent --bind "$server_ip" --udp-echo-port 5712 >"$log/agent.log" 2>&1 &
agent_pid=$!
in_s iperf3 -s -B "$server_ip" >"$log/iperf3-server.log" 2>&1 &
iperf_pid=$!
for _ in $(seq 50); do
  in_s ss -Hlun | grep -q ":5712 " && in_s ss -Hltn | grep -q ":5201 " && break
  sleep 0.2
done

# The kernel's counts since the last zeroing: datagrams dropped (copies included), copied.
counters() {
  local dropped copied
  dropped=$(in_s iptables -vnxL INPUT | awk '/statistic/ { print $1 }')
  copied=$(in_c iptables -t mangle -vnxL POSTROUTING | awk '/TEE/ { print $1 }')
  echo "$dropped $copied"
}
zero() { in_s iptables -Z INPUT; in_c iptables -t mangle -Z POSTROUTING; }

rows="$log/rows"
: >"$rows"
for rate in ${rates//,/ }; do
  for run in 1 2 3; do
    zero
    in_c "$kdoctor" probe udp "$server_ip:5712" --qps "$rate" --duration "${secs}s" --timeout 500ms \
      --size "$size" -q -o json >"$log/k.json" 2>"$log/k.err" || true
    echo "$rate $run kdoctor $(counters) $log/k-$rate-$run.json" >>"$rows"
    mv "$log/k.json" "$log/k-$rate-$run.json"
    zero
    in_c iperf3 -c "$server_ip" -u -l "$size" -b "$((rate * size * 8))" -t "$secs" -J \
      >"$log/i-$rate-$run.json" 2>"$log/i.err" || true
    echo "$rate $run iperf3 $(counters) $log/i-$rate-$run.json" >>"$rows"
  done
done

python3 - "$rows" "$secs" "$loss" "$dup" "$size" "$(iperf3 --version | head -1)" <<'PY'
import json, sys

rows, secs, loss, dup, size, version = sys.argv[1:]
print("### UDP echo: `kdoctor probe udp` against `iperf3 -u`, the kernel's own counts as truth\n")
print(f"`hack/bench/agent/udp.sh --secs {secs}`: {size}-byte datagrams over a veth pair between two "
      f"network namespaces; the prober's kernel copies {float(dup):.0%} of them (`TEE`) and the "
      f"far side's drops {float(loss):.0%} of what arrives, copies included (iptables `statistic` "
      f"on INPUT), counting each. Each rate "
      f"runs both tools three times in turns; every run is listed. {version}. kdoctor's loss is "
      "datagrams with no echo in 500 ms; its duplicates are second echoes; iperf3's are the "
      "receiver's lost count and out-of-order count (it counts a copy as out of order).\n")
print("| rate/s | run | tool | sent | kernel dropped | tool lost | kernel copied | tool duplicates (iperf3: out of order) | jitter ms | mean RTT ms |")
print("|---|---|---|---|---|---|---|---|---|---|")
for line in open(rows):
    rate, run, tool, dropped, copied, path = line.split()
    try:
        data = json.load(open(path))
    except (OSError, ValueError):
        print(f"| {rate} | {run} | {tool} | no result | {dropped} | | {copied} | | | |")
        continue
    if tool == "kdoctor":
        d = data["taskNetReach"]["roundTaskDetail"][0]
        m = d["requestTargetMetrics"]
        g = m.get("datagrams", {})
        sent = m["requestCounts"]
        lost = sent - m["successCounts"]
        print(f"| {rate} | {run} | kdoctor | {sent} | {dropped} | {lost} | {copied} | "
              f"{g.get('duplicates', '')} | {g.get('jitterMs', float('nan')):.4f} | "
              f"{d['requestMeanDelay']:.3f} |")
    else:
        if "error" in data or "sum" not in data.get("end", {}):
            print(f"| {rate} | {run} | iperf3 | error: {data.get('error', 'no summary')} | {dropped} | | {copied} | | | |")
            continue
        s = data["end"]["sum"]
        sent = s["packets"]
        print(f"| {rate} | {run} | iperf3 | {sent} | {dropped} | {s['lost_packets']} | {copied} | "
              f"{s.get('out_of_order', '')} | {s['jitter_ms']:.4f} | |")
print()
PY
