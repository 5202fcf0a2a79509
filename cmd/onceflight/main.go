// Command onceflight is the Onceflight executor and its operator tools
// (docs/cli.md); the command line itself is package cli, which a program
// with connectors of its own reuses (examples/connector).
package main

import (
	"context"
	"os"

	"github.com/onceflight/onceflight/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
