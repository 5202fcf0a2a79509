// Command onceflight is the Onceflight executor and its operator tools
// (docs/cli.md); the command line itself is package cli, which a program
// with connectors of its own reuses (examples/connector).
package main

import (
	"context"
	"os"

	"github.com/onceflight/onceflight/cli"
	// Bounds glibc's malloc arenas, which hold Pebble's C memory in a cgo
	// build (docs/memory.md).
	_ "github.com/onceflight/onceflight/internal/cmalloc/bound"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
