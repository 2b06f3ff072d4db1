#!/usr/bin/env bash
# The real API server judges the CRDs: every case of api/tests/invalid/ (one invalid task per
# validation rule, written by api/tests/api/invalid.rs) is applied with a server-side dry run.
# A case marked "kube-apiserver: rejects FIELD" must be refused with a message naming FIELD; a
# case marked "accepts" must pass (the controller rejects it later, with a status condition).
# Then a task's spec is changed on a real object: the API server must refuse it (the CRD's
# `self == oldSelf` rule), while a label change passes.
#   crd-judge.sh KUBECTL       (KUBECONFIG points at the cluster)
set -euo pipefail
kubectl="$1"
cd "$(dirname "$0")/../.."
failures=0
checked=0
for f in api/tests/invalid/*.yaml; do
  verdict="$(sed -n 's/^# kube-apiserver: //p' "$f")"
  out="$("$kubectl" apply --dry-run=server -f "$f" 2>&1)" && code=0 || code=$?
  checked=$((checked + 1))
  case "$verdict" in
    rejects\ *)
      field="${verdict#rejects }"
      if [ "$code" -eq 0 ]; then
        echo "NOT REJECTED: $f ($field): $out"
        failures=$((failures + 1))
      elif ! grep -qF "$field" <<<"$out"; then
        echo "REJECTED WITHOUT NAMING $field: $f: $out"
        failures=$((failures + 1))
      fi
      ;;
    accepts*)
      if [ "$code" -ne 0 ]; then
        echo "REJECTED (the CRD is stricter than api/tests says): $f: $out"
        failures=$((failures + 1))
      fi
      ;;
    *) echo "no verdict in $f"; failures=$((failures + 1)) ;;
  esac
done

# An update: the spec is immutable, labels are not.
task='apiVersion: kdoctor.io/v1beta1
kind: NetReach
metadata:
  name: crd-judge-immutable
spec:
  schedule: {schedule: "0 1", roundTimeoutMinute: 1, roundNumber: 1}
  request: {durationInSecond: 1, qps: 5, perRequestTimeoutInMS: 500}
  target: {endpoint: true, ipv4: true}
  expect: {successRate: 1, meanAccessDelayInMs: 1000}'
# A schedule far in the future: the task never runs while it exists.
task="${task/\"0 1\"/\"100000 1\"}"
printf '%s\n' "$task" | "$kubectl" apply -f - >/dev/null
out="$(printf '%s\n' "$task" | sed 's/qps: 5/qps: 6/' | "$kubectl" apply -f - 2>&1)" && code=0 || code=$?
checked=$((checked + 1))
if [ "$code" -eq 0 ] || ! grep -q 'spec is immutable' <<<"$out"; then
  echo "A SPEC CHANGE WAS NOT REFUSED AS IMMUTABLE: $out"
  failures=$((failures + 1))
fi
out="$(printf '%s\n' "$task" | sed 's/  name: crd-judge-immutable/&\n  labels: {team: net}/' | "$kubectl" apply -f - 2>&1)" || {
  echo "A LABEL CHANGE WAS REFUSED: $out"
  failures=$((failures + 1))
}
checked=$((checked + 1))
"$kubectl" delete netreach crd-judge-immutable --wait=false >/dev/null
if [ "$failures" -ne 0 ]; then
  echo "e2e: FAILED: $failures of $checked judgements of the API server differ from api/tests" >&2
  exit 1
fi
echo "the API server judged all $checked cases as api/tests expects"
