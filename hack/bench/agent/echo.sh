#!/usr/bin/env bash
# Echo accuracy (issue 33): `kdoctor probe udp` against iperf3 -u and `kdoctor probe icmp`
# against iputils ping, in the same run, over the same path, at the same rate and size, each
# judged against what the kernel itself did to the datagrams. Two network namespaces joined by a veth pair (addresses of the 198.18.0.0/15
# testing range, only inside them; nothing leaves the machine). The prober's kernel copies a
# share of the datagrams it sends (`TEE` to the far side's address) and the far side's kernel
# drops a share of what arrives, copies included (iptables `statistic`, DROP on INPUT: a drop on
# the sender's own output path would fail its send with EPERM, which is not a loss on the
# path): the rules' counters are the ground truth of how many were duplicated and lost. The far side runs `kdoctor agent` (its UDP echo port) and
# `iperf3 -s`; its kernel answers pings. Each rate runs both tools of a protocol three times, in
# turns; the table gives each run's counts, so no median hides a miscount. The kernel here has
# no netem: delay and reordering are not injected, so jitter is the path's own (a veth).
#
#   hack/bench/agent/echo.sh [--only udp|icmp] [--secs N] [--rates 100,1000,10000] [--loss 0.02] [--dup 0.01]
#
# Installs iperf3 and iputils-ping (Debian) when missing; builds kdoctor (release). Prints
# markdown sections for docs/benchmarks.md. Needs root (network namespaces, ping's interval
# below 2 ms).
set -euo pipefail
cd "$(dirname "$0")/../../.."
secs=5 rates=100,1000,10000 loss=0.02 dup=0.01 size=64 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --secs) secs="$2"; shift 2 ;;
    --rates) rates="$2"; shift 2 ;;
    --loss) loss="$2"; shift 2 ;;
    --dup) dup="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    *) echo "echo.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "echo.sh: needs root (network namespaces)" >&2; exit 2; }
# shellcheck source=hack/bench/tools.sh
. hack/bench/tools.sh
need_tools iperf3 iputils-ping:ping
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
# kdoctor pings from an unprivileged ICMP socket: this namespace lets every group open one.
in_c sysctl -qw net.ipv4.ping_group_range="0 2147483647"
for proto in udp icmp; do
  in_s iptables -A INPUT -p "$proto" -s "$client_ip" -m statistic --mode random --probability "$loss" -j DROP
  in_c iptables -t mangle -A POSTROUTING -p "$proto" -d "$server_ip" -m statistic --mode random --probability "$dup" -j TEE --gateway "$server_ip"
done

log=$(mktemp -d)
in_s "$kdoctor" agent --bind "$server_ip" --udp-echo-port 5712 >"$log/agent.log" 2>&1 &
agent_pid=$!
in_s iperf3 -s -B "$server_ip" >"$log/iperf3-server.log" 2>&1 &
iperf_pid=$!
for _ in $(seq 50); do
  in_s ss -Hlun | grep -q ":5712 " && in_s ss -Hltn | grep -q ":5201 " && break
  sleep 0.2
done

# The kernel's counts of PROTO since the last zeroing: datagrams dropped (copies included), copied.
counters() { # proto
  local dropped copied n
  # The protocol column is its name or its number, depending on the iptables build.
  case "$1" in udp) n=17 ;; icmp) n=1 ;; esac
  dropped=$(in_s iptables -vnxL INPUT | awk -v p="$1" -v n="$n" '/statistic/ && ($4 == p || $4 == n) { print $1 }')
  copied=$(in_c iptables -t mangle -vnxL POSTROUTING | awk -v p="$1" -v n="$n" '/TEE/ && ($4 == p || $4 == n) { print $1 }')
  echo "$dropped $copied"
}
zero() { in_s iptables -Z INPUT; in_c iptables -t mangle -Z POSTROUTING; }

rows="$log/rows"
: >"$rows"
for rate in ${rates//,/ }; do
  for run in 1 2 3; do
    if [ "$only" != icmp ]; then
      zero
      in_c "$kdoctor" probe udp "$server_ip:5712" --qps "$rate" --duration "${secs}s" --timeout 500ms \
        --size "$size" -q -o json >"$log/k-$rate-$run.json" 2>"$log/k.err" || true
      echo "udp $rate $run kdoctor $(counters udp) $log/k-$rate-$run.json" >>"$rows"
      zero
      in_c iperf3 -c "$server_ip" -u -l "$size" -b "$((rate * size * 8))" -t "$secs" -J \
        >"$log/i-$rate-$run.json" 2>"$log/i.err" || true
      echo "udp $rate $run iperf3 $(counters udp) $log/i-$rate-$run.json" >>"$rows"
    fi
    if [ "$only" != udp ]; then
      zero
      in_c "$kdoctor" probe icmp "$server_ip" --qps "$rate" --duration "${secs}s" --timeout 500ms \
        --size "$size" -q -o json >"$log/kp-$rate-$run.json" 2>"$log/kp.err" || true
      echo "icmp $rate $run kdoctor $(counters icmp) $log/kp-$rate-$run.json" >>"$rows"
      zero
      # ping's -s is the data after the 8-byte ICMP header.
      in_c ping -n -q -c "$((rate * secs))" -i "$(python3 -c "print(1 / $rate)")" -s "$((size - 8))" \
        -W 1 "$server_ip" >"$log/p-$rate-$run.txt" 2>&1 || true
      echo "icmp $rate $run ping $(counters icmp) $log/p-$rate-$run.txt" >>"$rows"
    fi
  done
done

python3 - "$rows" "$secs" "$loss" "$dup" "$size" "$(iperf3 --version | head -1)" "$(ping -V | head -1)" <<'PY'
import json, re, sys

rows, secs, loss, dup, size, iperf_version, ping_version = sys.argv[1:]
lines = [l.split() for l in open(rows)]
head = ("| rate/s | run | tool | sent | kernel dropped | tool lost | kernel copied | tool duplicates | "
        "jitter ms | mean RTT ms |")


def kdoctor(path):
    data = json.load(open(path))
    d = data["taskNetReach"]["roundTaskDetail"][0]
    m = d["requestTargetMetrics"]
    g = m.get("datagrams", {})
    sent = m["requestCounts"]
    return (sent, sent - m["successCounts"], g.get("duplicates", ""),
            f"{g.get('jitterMs', float('nan')):.4f}", f"{d['requestMeanDelay']:.3f}")


def iperf3(path):
    data = json.load(open(path))
    if "error" in data or "sum" not in data.get("end", {}):
        raise ValueError(data.get("error", "no summary"))
    s = data["end"]["sum"]
    return s["packets"], s["lost_packets"], "—", f"{s['jitter_ms']:.4f}", ""


def ping(path):
    text = open(path).read()
    stats = re.search(r"(\d+) packets transmitted, (\d+) received(?:, \+(\d+) duplicates)?", text)
    if not stats:
        raise ValueError(text.strip().splitlines()[-1] if text.strip() else "no output")
    sent, received, dups = int(stats[1]), int(stats[2]), int(stats[3] or 0)
    rtt = re.search(r"= [\d.]+/([\d.]+)/[\d.]+/([\d.]+) ms", text)
    mean, mdev = (rtt[1], rtt[2]) if rtt else ("", "")
    return sent, sent - received, dups, f"mdev {mdev}", mean


readers = {"kdoctor": kdoctor, "iperf3": iperf3, "ping": ping}
for proto, title, peer, version in [
    ("udp", "UDP echo: `kdoctor probe udp` against `iperf3 -u`", "iperf3", iperf_version),
    ("icmp", "ICMP echo: `kdoctor probe icmp` against `ping`", "ping", ping_version),
]:
    mine = [l for l in lines if l[0] == proto]
    if not mine:
        continue
    print(f"### {title}, the kernel's counts as truth\n")
    print(f"`hack/bench/agent/echo.sh --only {proto} --secs {secs}`: {size}-byte {proto.upper()} "
          f"payloads over a veth pair between two network namespaces; the prober's kernel copies "
          f"{float(dup):.0%} of them (`TEE`) and the far side's drops {float(loss):.0%} of what "
          f"arrives, copies included (iptables `statistic` on INPUT), counting each. Each rate runs "
          f"both tools three times in turns; every run is listed. {version}.\n")
    print(head)
    print("|---|---|---|---|---|---|---|---|---|---|")
    for _, rate, run, tool, dropped, copied, path in mine:
        try:
            sent, lost, dups, jitter, mean = readers[tool](path)
        except (OSError, ValueError, KeyError) as e:
            print(f"| {rate} | {run} | {tool} | error: {e} | {dropped} | | {copied} | | | |")
            continue
        print(f"| {rate} | {run} | {tool} | {sent} | {dropped} | {lost} | {copied} | {dups} | {jitter} | {mean} |")
    print()
PY
