// etcd v3.5 built from its Go module (the server module's replace directives keep
// `go install` from building it directly): the etcd backend's tests run on it as well as
// on Debian's 3.4.23, because from 3.5.13 (and 3.4.31) etcd's watch progress reports can
// be trusted and Plinth serves consistent reads from its watch cache — a path Debian's
// etcd never takes.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
