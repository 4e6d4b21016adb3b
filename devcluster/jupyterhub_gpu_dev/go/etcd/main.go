// Command etcd runs etcd's own server entrypoint, built from the pinned module version.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
