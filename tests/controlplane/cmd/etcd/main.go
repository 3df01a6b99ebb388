// Command etcd is the official etcd server, built from go.etcd.io/etcd/server/v3 so that the
// tests need nothing prebuilt: the Go module proxy is the only source.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
