#!/usr/bin/env bash
# Every test, with all of their set-up, on a fresh machine: the README's test command, which
# .ci/run calls after formatting and lints. As root (network namespaces for the test clusters,
# Debian packages, the simulated cluster's IPv6 route).
#
#   hack/test.sh                # set up, then cargo test --workspace, then the end-to-end runs
#   hack/test.sh -p kdoctor-api # extra arguments go to cargo test (the e2e runs are then skipped)
#
# It installs what the tests run against when missing: the real control plane (hack/kube/
# build.sh, Go; about 6 minutes the first time), iptables, the CNI plugins and strace (hack/cluster.sh),
# nginx and unbound (the agent's peers), Chromium (the heatmap screenshot test), Helm's engine
# (PyPI), and builds the image (hack/image/build.sh). The last line is the tally, "N passed, N
# failed, N skipped", after one line per skipped part (SKIPPED: name: reason) and per failure.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "hack/test.sh: run as root (network namespaces, packages); the tests need it" >&2; exit 2; }

# The default control plane is hack/kube/go.mod's pin (v1.34); the install e2e runs again on this
# one (README's compatibility table).
NEWEST_KUBE=v1.37
# The disk is shared with the build and the test clusters' kubelets (which evict below 512 MiB
# free): say how much there is, for a failure's reader.
echo "== set-up (disk: $(df -h --output=avail . | tail -n 1 | xargs) free)" >&2
hack/kube/build.sh >/dev/null
# The newest served minor too, for one more install e2e (hack/kube/versions/).
KUBE_VERSION="$NEWEST_KUBE" hack/kube/build.sh >/dev/null
hack/cluster.sh deps
hack/agent-test-peers.sh
hack/chromium.sh
if ! python3 -c 'import helm_python, yaml' 2>/dev/null; then
  python3 -m pip install --quiet helm-python-sdk pyyaml
fi
# Tests that cannot do a part here (IPv6 in a network namespace, say) write which test and why to
# this file (kube_sim::testcluster::missing); they are counted as skipped, never as passed.
export KDOCTOR_MISSING_FILE="${TMPDIR:-/tmp}/kdoctor-missing.$$"
: >"$KDOCTOR_MISSING_FILE"
trap 'rm -f "$KDOCTOR_MISSING_FILE"' EXIT
# The 1,000-node test holds ~5,000 sockets in one process.
ulimit -n 65536 2>/dev/null || true
# The image, built without a container engine (tests/cli/image.rs checks it; the first build
# compiles kdoctor in release, about 6 minutes).
hack/image/build.sh
# Tests start real clusters from inside cargo test, which holds the build directory while they
# run: what those clusters run is built first.
cargo build --locked -q -p kube-sim -p kdoctor

# The run's tally: cargo's tests, then each end-to-end run as one test. A test that could not do
# its part here (it says MISSING) is counted as skipped, never as passed; so is a run not made.
skipped=()    # "name: reason"
failed=()
passed=0
e2e_blocked=""   # why the end-to-end runs are not made: args, cargo, or an earlier run failed
[ $# -eq 0 ] || { e2e_blocked=args; skipped+=("the end-to-end runs: not asked for (arguments given to cargo test)"); }

echo "== cargo test" >&2
cargo_log="${TMPDIR:-/tmp}/kdoctor-cargo-test.$$"
trap 'rm -f "$KDOCTOR_MISSING_FILE" "$cargo_log"' EXIT
cargo_status=0
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$cargo_log" || cargo_status=$?
# libtest: "test result: ok. 12 passed; 0 failed; 0 ignored; ..." per test binary.
read -r cargo_passed _ cargo_ignored < <(awk '/^test result: /{p+=$4; f+=$6; i+=$8} END{print p+0, f+0, i+0}' "$cargo_log")
while IFS= read -r name; do failed+=("$name"); done < <(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$cargo_log" | sort -u)
[ "$cargo_ignored" -eq 0 ] || skipped+=("$cargo_ignored test(s) marked #[ignore]: the project allows none")
# Each MISSING line is "<test>\t<what>: <why>"; a test that passed with a part missing is skipped.
declare -A missing_of=()
while IFS=$'\t' read -r name why; do
  missing_of[$name]="${missing_of[$name]:+${missing_of[$name]}; }$why"
done <"$KDOCTOR_MISSING_FILE"
for name in "${!missing_of[@]}"; do
  skipped+=("$name: ${missing_of[$name]}")
  if grep -qxF "test $name ... ok" "$cargo_log"; then cargo_passed=$((cargo_passed - 1)); fi
done
passed=$cargo_passed
if [ "$cargo_status" -ne 0 ] && [ "${#failed[@]}" -eq 0 ]; then
  failed+=("cargo test (exit $cargo_status before any test failed: a build error?)")
fi
if [ -z "$e2e_blocked" ] && [ "$cargo_status" -ne 0 ]; then
  e2e_blocked=cargo
  skipped+=("the end-to-end runs: not run, cargo test failed")
fi

# Runs one end-to-end step (NAME LOG COMMAND...): passed, failed, or skipped when it said a
# part was MISSING; after a failure the later ones are not run (CI's 90 minutes).
e2e() {
  local name="$1" log="$2" status=0
  shift 2
  case "$e2e_blocked" in
    "") ;;
    e2e) skipped+=("$name: not run, an earlier end-to-end run failed"); return ;;
    *) return ;;
  esac
  "$@" 2>&1 | tee "$log" || status=$?
  local parts
  parts="$(grep -h '^MISSING: ' "$log" | sed 's/^MISSING: //' | sort -u | paste -sd ';' || true)"
  if [ "$status" -ne 0 ]; then
    # CI keeps only the run's last lines, and the cluster's teardown fills them: the step the
    # run was in and its first FAILED line go into the tally, so the reason outlives the log.
    local where why
    where="$(grep -h '^== ' "$log" | tail -n 1 || true)"
    why="$(grep -h -m 1 'FAILED' "$log" || true)"
    failed+=("$name (exit $status; its log: $log)${where:+; last step: ${where#== }}${why:+; ${why}}")
    e2e_blocked=e2e
  elif [ -n "$parts" ]; then
    skipped+=("$name: $parts")
  else
    passed=$((passed + 1))
  fi
}

[ -n "$e2e_blocked" ] || echo "== end to end, on a real control plane" >&2
# Each run is bounded (timeout signals its whole process group, and the run's own clean-up
# tears its cluster down): a hung step ends as a failure with its cluster's logs, not at CI's
# limit with none. About 25, 8, 4, 8 and 4 minutes when healthy.
e2e "hack/e2e.sh (manifests, chaos suite)" /tmp/kdoctor-e2e-manifests.log timeout -k 180 2700 hack/e2e.sh
e2e "hack/e2e.sh (chart, dual stack)" /tmp/kdoctor-e2e-chart.log env E2E_FROM=chart E2E_IPV6=1 timeout -k 180 1200 hack/e2e.sh
e2e "hack/e2e-real-node.sh (chart and manifests on three real kubelets)" /tmp/kdoctor-e2e-real-node.log timeout -k 180 1200 hack/e2e-real-node.sh
e2e "hack/e2e.sh (manifests, Kubernetes $NEWEST_KUBE)" "/tmp/kdoctor-e2e-$NEWEST_KUBE.log" env KUBE_VERSION="$NEWEST_KUBE" E2E_CHAOS=0 timeout -k 180 1200 hack/e2e.sh
e2e "hack/e2e-real-node.sh (Kubernetes $NEWEST_KUBE)" "/tmp/kdoctor-e2e-real-node-$NEWEST_KUBE.log" env KUBE_VERSION="$NEWEST_KUBE" timeout -k 180 1200 hack/e2e-real-node.sh

for s in "${skipped[@]}"; do echo "SKIPPED: $s" >&2; done
for f in "${failed[@]}"; do echo "FAILED: $f" >&2; done
echo "hack/test.sh: $passed passed, ${#failed[@]} failed, ${#skipped[@]} skipped" >&2
[ "${#failed[@]}" -eq 0 ]
