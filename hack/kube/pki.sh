#!/usr/bin/env bash
# The test cluster's certificates (hack/cluster.sh up calls this), made with openssl as kubeadm
# would: a cluster CA and a front-proxy CA, the API server's serving certificate, a client
# certificate for each component, and the ServiceAccount signing key. Idempotent: what exists
# is kept, so a second `up` reuses them.
#   hack/kube/pki.sh DIR APISERVER_SANS [--node NAME IP]...
#     APISERVER_SANS: comma-separated IP:x / DNS:y; --node: a real kubelet's client certificate
#     (system:node:NAME in system:nodes, as the Node authorizer expects) and serving certificate.
set -euo pipefail
dir="$1"
sans="$2"
shift 2
mkdir -p "$dir"
cd "$dir"
umask 077

days=3650
ca() { # name CN
  [ -s "$1.crt" ] && return 0
  openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days "$days" -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$1.crt" 2>/dev/null
}
# name CA subject usage [sans]
leaf() {
  [ -s "$1.crt" ] && return 0
  local ext="$dir/$1.ext"
  openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"
  openssl req -new -key "$1.key" -subj "$3" -out "$1.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$4"
    [ -n "${5:-}" ] && echo "subjectAltName=$5"
  } >"$ext"
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial -sha256 -days "$days" \
    -extfile "$ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$ext"
}

ca ca kdoctor-test-cluster-ca
ca front-proxy-ca kdoctor-test-front-proxy-ca
leaf apiserver ca "/CN=kube-apiserver" serverAuth "$sans"
leaf apiserver-kubelet-client ca "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
leaf front-proxy-client front-proxy-ca "/CN=front-proxy-client" clientAuth
leaf admin ca "/O=system:masters/CN=kubernetes-admin" clientAuth
leaf controller-manager ca "/CN=system:kube-controller-manager" clientAuth
leaf scheduler ca "/CN=system:kube-scheduler" clientAuth
leaf kube-proxy ca "/CN=system:kube-proxy" clientAuth
# kube-sim plays the kubelet of every node from one process (docs/development.md says why it
# is not one system:node identity per node).
leaf kube-sim ca "/O=system:masters/CN=kube-sim" clientAuth
while [ $# -gt 0 ]; do
  [ "$1" = --node ] && [ $# -ge 3 ] || { echo "pki.sh: expected --node NAME IP, got: $*" >&2; exit 2; }
  leaf "kubelet-$2" ca "/O=system:nodes/CN=system:node:$2" clientAuth
  leaf "kubelet-$2-serving" ca "/CN=$2" serverAuth "IP:$3,DNS:$2"
  shift 3
done
if [ ! -s sa.key ]; then
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
fi
chmod 0644 ./*.crt sa.pub
