// etcd for the tests' control plane: the upstream binary's entry point, built from
// go.etcd.io/etcd/server/v3 at the release Kubernetes 1.34 pairs with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
