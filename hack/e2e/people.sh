#!/usr/bin/env bash
# Reports read as the people of a real cluster read them, none of them cluster-admin, through
# the real aggregation layer (kube-apiserver proxies to kdoctor's API server, which asks the real
# kube-apiserver a TokenReview and a SubjectAccessReview for each): ServiceAccounts bound to the
# built-in `view` and `edit` ClusterRoles (which the shipped kdoctor-report-reader and -editor
# aggregate into), one bound to nothing, one with `view` by a RoleBinding in its own namespace
# only (a RoleBinding grants nothing on a cluster-scoped kind), and a user of a client
# certificate signed through the CertificateSigningRequest API whose group alone is bound.
#
#   people.sh KUBECTL KDOCTOR DELETABLE      (KUBECONFIG: the admin's, to set the people up)
#
# DELETABLE is a report object the editor deletes (a stored round, say netreach-x.round-1).
set -euo pipefail
kubectl="$1"
kdoctor="$2"
deletable="$3"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
ns=kdoctor-e2e-people
group=kdoctor-e2e-readers
report_path=/apis/system.kdoctor.io/v1beta1/kdoctorreports

fail() {
  echo "e2e: FAILED: people: $*" >&2
  exit 1
}
k() { "$kubectl" "$@"; }

server="$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
k config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$dir/ca.crt"

# A kubeconfig of NAME with the credentials in the remaining arguments (kubectl's
# set-credentials flags).
kubeconfig_of() { # name credential-flags...
  local name="$1" file="$dir/$1.kubeconfig"
  shift
  k config --kubeconfig="$file" set-cluster e2e --server="$server" --certificate-authority="$dir/ca.crt" --embed-certs=true >/dev/null
  k config --kubeconfig="$file" set-credentials "$name" "$@" >/dev/null
  k config --kubeconfig="$file" set-context e2e --cluster=e2e --user="$name" >/dev/null
  k config --kubeconfig="$file" use-context e2e >/dev/null
  echo "$file"
}

# The Status kube-apiserver passes on for METHOD PATH as NAME: "<code> <reason>" from its body.
status_of() { # kubeconfig method path
  local token cert key out
  token="$(k config --kubeconfig="$1" view --raw -o jsonpath='{.users[0].user.token}')"
  if [ -n "$token" ]; then
    out="$(curl -sS --cacert "$dir/ca.crt" -X "$2" -H "Authorization: Bearer $token" "$server$3")"
  else
    cert="$dir/$(basename "$1" .kubeconfig).crt"
    key="$dir/$(basename "$1" .kubeconfig).key"
    out="$(curl -sS --cacert "$dir/ca.crt" --cert "$cert" --key "$key" -X "$2" "$server$3")"
  fi
  python3 -c 'import json, sys
body = json.loads(sys.argv[1])
if body.get("kind") != "Status":
    print("not-a-Status", body.get("kind"))
else:
    print(body.get("code"), body.get("reason"), body.get("message", "").replace("\n", " "))' "$out"
}

# Expects STATUS (code and reason) for METHOD PATH as the user of KUBECONFIG, a Status naming
# the user as kube-apiserver does.
expect_status() { # who kubeconfig method path "code reason" user
  local got
  got="$(status_of "$2" "$3" "$4")"
  case "$got" in
    "$5 "*"$6"*) echo "  $1: $3 $4 -> $5 (a Status naming $6)" ;;
    *) fail "$1: $3 $4 should answer a $5 Status naming $6, answered: $got" ;;
  esac
}

echo "people: ServiceAccounts and bindings in $ns"
k create namespace "$ns" --dry-run=client -o yaml | k apply -f - >/dev/null
for sa in viewer editor nobody ns-viewer; do
  k -n "$ns" create serviceaccount "$sa" --dry-run=client -o yaml | k apply -f - >/dev/null
done
k create clusterrolebinding e2e-people-viewer --clusterrole=view --serviceaccount="$ns:viewer" --dry-run=client -o yaml | k apply -f - >/dev/null
k create clusterrolebinding e2e-people-editor --clusterrole=edit --serviceaccount="$ns:editor" --dry-run=client -o yaml | k apply -f - >/dev/null
k -n "$ns" create rolebinding e2e-people-ns-viewer --clusterrole=view --serviceaccount="$ns:ns-viewer" --dry-run=client -o yaml | k apply -f - >/dev/null
k create clusterrolebinding e2e-people-readers --clusterrole=view --group="$group" --dry-run=client -o yaml | k apply -f - >/dev/null

for sa in viewer editor nobody ns-viewer; do
  kubeconfig_of "$sa" --token="$(k -n "$ns" create token "$sa" --duration=1h)" >/dev/null
done
viewer="$dir/viewer.kubeconfig" editor="$dir/editor.kubeconfig" nobody="$dir/nobody.kubeconfig" ns_viewer="$dir/ns-viewer.kubeconfig"

# The client-certificate user: a key made here, its certificate signed by kube-controller-
# manager's signer for kube-apiserver clients once the CSR is approved, as an admin does it.
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$dir/cert-user.key" \
  -subj "/CN=e2e-cert-user/O=$group" -out "$dir/cert-user.csr" 2>/dev/null
k delete csr e2e-cert-user --ignore-not-found >/dev/null
k apply -f - >/dev/null <<EOF
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: e2e-cert-user
spec:
  request: $(base64 -w0 <"$dir/cert-user.csr")
  signerName: kubernetes.io/kube-apiserver-client
  expirationSeconds: 3600
  usages: [client auth]
EOF
k certificate approve e2e-cert-user >/dev/null
for _ in $(seq 60); do
  [ -n "$(k get csr e2e-cert-user -o jsonpath='{.status.certificate}')" ] && break
  sleep 1
done
k get csr e2e-cert-user -o jsonpath='{.status.certificate}' | base64 -d >"$dir/cert-user.crt"
[ -s "$dir/cert-user.crt" ] || fail "the CSR of e2e-cert-user was not signed within 60s: $(k get csr e2e-cert-user -o yaml)"
cert_user="$(kubeconfig_of cert-user --client-certificate="$dir/cert-user.crt" --client-key="$dir/cert-user.key" --embed-certs=true)"

viewer_user="system:serviceaccount:$ns:viewer"
for who in viewer cert-user; do
  case "$who" in viewer) kc="$viewer" user="$viewer_user" ;; *) kc="$cert_user" user=e2e-cert-user ;; esac
  echo "people: $who ($user) reads"
  listed="$(k --kubeconfig="$kc" get kdoctorreport -o name)" || fail "$who could not list the reports"
  [ -n "$listed" ] || fail "$who listed no report"
  first="$(head -n1 <<<"$listed")"
  k --kubeconfig="$kc" get "$first" -o json >/dev/null || fail "$who could not get $first"
  # A watch: its first lines are the current objects (kubectl ends it at the timeout).
  watched="$(timeout 8 "$kubectl" --kubeconfig="$kc" get kdoctorreport -w --output-watch-events 2>&1 || true)"
  grep -q "^ADDED" <<<"$watched" || fail "$who: kubectl get kdoctorreport -w showed nothing: $watched"
  "$kdoctor" kubectl --kubeconfig "$kc" matrix netreach-e2e-carrier --no-color >/dev/null ||
    fail "$who: kubectl kdoctor matrix failed"
  "$kdoctor" kubectl --kubeconfig "$kc" history netreach-e2e-carrier >/dev/null ||
    fail "$who: kubectl kdoctor history failed"
  echo "  $who: list ($(wc -l <<<"$listed") reports), get, watch, kubectl kdoctor matrix and history"
  expect_status "$who" "$kc" DELETE "$report_path/$deletable" "403 Forbidden" "$user"
  k get kdoctorreport "$deletable" -o name >/dev/null || fail "$deletable is gone after $who's refused delete"
done

echo "people: nobody and ns-viewer are refused"
expect_status nobody "$nobody" GET "$report_path" "403 Forbidden" "system:serviceaccount:$ns:nobody"
expect_status nobody "$nobody" GET "$report_path/$deletable" "403 Forbidden" "system:serviceaccount:$ns:nobody"
# Its token works where its RoleBinding applies: the refusal is the binding's scope, not a bad
# credential.
k --kubeconfig="$ns_viewer" -n "$ns" get serviceaccounts -o name >/dev/null ||
  fail "ns-viewer cannot list ServiceAccounts in $ns, where its RoleBinding grants view"
expect_status ns-viewer "$ns_viewer" GET "$report_path" "403 Forbidden" "system:serviceaccount:$ns:ns-viewer"

echo "people: editor deletes $deletable"
k --kubeconfig="$editor" delete kdoctorreport "$deletable" || fail "editor could not delete $deletable"
gone="$(k --kubeconfig="$viewer" get kdoctorreport "$deletable" 2>&1 || true)"
grep -q NotFound <<<"$gone" || fail "$deletable is still there after the editor deleted it: $gone"
echo "  editor: delete; viewer then gets NotFound"

k delete clusterrolebinding e2e-people-viewer e2e-people-editor e2e-people-readers >/dev/null
k delete csr e2e-cert-user >/dev/null
k delete namespace "$ns" --wait=false >/dev/null
echo "people: view, edit, none, a namespaced RoleBinding and a certificate's group, each as RBAC decides"
