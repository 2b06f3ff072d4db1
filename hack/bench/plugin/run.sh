#!/usr/bin/env bash
# `kubectl kdoctor matrix` on N × N rounds (issue 10): wall time and peak RSS of the plugin,
# against, in the same run and on the same object, `kubectl get kdoctorreport -o json` (what a
# user would otherwise run) and raw HTTPS reads by curl of the object's bytes and of its
# KdoctorReportMatrix view (the server's part of the plugin's time); the API server's peak RSS
# after serving the view, and after everything (the whole-object reads included).
# Each round: N nodes, each report probing every node's pod (hack/bench/plugin/fixture.py),
# imported into a store and served by `kdoctor apiserver`.
#
#   hack/bench/plugin/run.sh            # N = 100, 300, 1000
#   hack/bench/plugin/run.sh 50 200
# Needs python3, curl, /usr/bin/time and the pinned kubectl; builds kdoctor (release).
set -euo pipefail
cd "$(dirname "$0")/../../.."
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(100 300 1000)
TARGET="${CARGO_TARGET_DIR:-target}"
KUBECTL="$(hack/kube/build.sh)/kubectl"
cargo build --release -q --locked -p kdoctor
KDOCTOR="$(pwd)/$TARGET/release/kdoctor"
case "$TARGET" in /*) KDOCTOR="$TARGET/release/kdoctor" ;; esac
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kdoctor-bench-plugin.XXXXXX")"
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
mkdir -p "$WORK/bin" && ln -s "$KDOCTOR" "$WORK/bin/kubectl-kdoctor"

# Runs a command under /usr/bin/time; prints "<seconds> <peak MiB>", or "failed" when it exits
# non-zero (curl runs with --fail: an answer that is not a 2xx does not count).
measure() {
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$@" >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; echo "failed"; return; }
  awk '{printf "%.2f s, %.0f MiB", $1, $2 / 1024}' "$WORK/time"
}

echo "| round | report object | matrix view | kubectl kdoctor matrix | kubectl get -o json | curl: object | curl: matrix view | API server peak RSS: view / all |"
echo "|---|---|---|---|---|---|---|---|"
for n in "${SIZES[@]}"; do
  data="$WORK/data-$n"
  python3 hack/bench/plugin/fixture.py "$n" >"$WORK/backup-$n.jsonl"
  "$KDOCTOR" store import --data "$data" "$WORK/backup-$n.jsonl" >/dev/null
  rm -f "$WORK/backup-$n.jsonl" "$WORK/kubeconfig"
  port=$((20000 + RANDOM % 20000))
  "$KDOCTOR" apiserver --data "$data" --listen "127.0.0.1:$port" --kubeconfig-out "$WORK/kubeconfig" 2>/dev/null &
  SERVER=$!
  for _ in $(seq 100); do [ -s "$WORK/kubeconfig" ] && break; sleep 0.1; done
  name="netreach-mesh$n"
  k() { PATH="$WORK/bin:$PATH" "$KUBECTL" "$@"; }
  # Warm the server's reading path once (the first read opens the store pages).
  k kdoctor matrix "$name" --kubeconfig "$WORK/kubeconfig" >/dev/null
  # The server's peak so far: serving the matrix view (before any whole-object read).
  view_rss="$(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$SERVER/status")"
  url="$(awk '/server:/ {print $2; exit}' "$WORK/kubeconfig")/apis/system.kdoctor.io/v1beta1/kdoctorreports/$name"
  certs=(--cacert "$WORK/ca.crt")
  python3 - "$WORK/kubeconfig" "$WORK" <<'PY'
import base64, sys, yaml
kc = yaml.safe_load(open(sys.argv[1])); d = sys.argv[2]
open(f"{d}/ca.crt", "wb").write(base64.b64decode(kc["clusters"][0]["cluster"]["certificate-authority-data"]))
open(f"{d}/client.crt", "wb").write(base64.b64decode(kc["users"][0]["user"]["client-certificate-data"]))
open(f"{d}/client.key", "wb").write(base64.b64decode(kc["users"][0]["user"]["client-key-data"]))
PY
  bytes="$(curl -s --fail "${certs[@]}" --cert "$WORK/client.crt" --key "$WORK/client.key" -o /dev/null -w '%{size_download}' "$url")"
  plugin="$(measure env PATH="$WORK/bin:$PATH" "$KUBECTL" kdoctor matrix "$name" --kubeconfig "$WORK/kubeconfig" --no-color --columns-per-page "$((n + 8))")"
  get="$(measure "$KUBECTL" --kubeconfig "$WORK/kubeconfig" --cache-dir "$WORK/cache" get kdoctorreport "$name" -o json)"
  raw="$(measure curl -s --fail "${certs[@]}" --cert "$WORK/client.crt" --key "$WORK/client.key" -o /dev/null "$url")"
  view_accept="Accept: application/json;as=KdoctorReportMatrix;g=system.kdoctor.io;v=v1beta1"
  view_bytes="$(curl -s --fail "${certs[@]}" --cert "$WORK/client.crt" --key "$WORK/client.key" -H "$view_accept" -o /dev/null -w '%{size_download}' "$url")"
  view="$(measure curl -s --fail "${certs[@]}" --cert "$WORK/client.crt" --key "$WORK/client.key" -H "$view_accept" -o /dev/null "$url")"
  server_rss="$view_rss / $(awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$SERVER/status") MiB"
  view_mb="$(awk -v b="$view_bytes" 'BEGIN { printf "%.1f", b / 1e6 }')"
  printf '| %d × %d | %d MB | %s MB | %s | %s | %s | %s | %s |\n' "$n" "$n" "$((bytes / 1000000))" "$view_mb" "$plugin" "$get" "$raw" "$view" "$server_rss"
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""
  rm -rf "$data"
done
