#!/usr/bin/env bash
# The kdoctor image's files, and nothing else: the static binary, the CA certificates (the
# controller reaches the API server with rustls-native-certs' system roots when no CA is given),
# /etc/passwd and /etc/group naming the non-root user 65532, and an empty /tmp. The Dockerfile's
# last stage copies exactly this directory; hack/image/build.sh packs it into an OCI layer.
#
#   hack/image/rootfs.sh BINARY DIR
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: hack/image/rootfs.sh BINARY DIR" >&2; exit 2; }
bin="$1"
out="$2"
certs=/etc/ssl/certs/ca-certificates.crt
[ -s "$certs" ] || { echo "rootfs.sh: $certs is missing (apt-get install ca-certificates)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out/usr/bin" "$out/etc/ssl/certs" "$out/tmp"
install -m 0755 "$bin" "$out/usr/bin/kdoctor"
install -m 0644 "$certs" "$out/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$out/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$out/etc/group"
chmod 0644 "$out/etc/passwd" "$out/etc/group"
chmod 0755 "$out/usr" "$out/usr/bin" "$out/etc" "$out/etc/ssl" "$out/etc/ssl/certs"
chmod 1777 "$out/tmp"
