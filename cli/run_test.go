package cli

import (
	"context"
	"io"
)

// run is Main without options and with a background context: the command
// line of cmd/onceflight, as the tests drive it.
func run(args []string, stdout, stderr io.Writer) int {
	return Main(context.Background(), args, stdout, stderr)
}
