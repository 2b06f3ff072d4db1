// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3, the release kube-apiserver's
// module graph already pins), built here because Debian's etcd is too old for Kubernetes 1.34.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
