// Command etcd is the etcd server, built from its Go module: `go install` of etcd itself fails
// because its modules carry replace directives, while a module that merely imports the server
// package builds the same binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
