package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/onceflight/onceflight/cli"
	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/consumer"
)

// stamp is a connector of one's own; its Execute is all the executor needs.
type stamp struct{ prefix string }

func (s stamp) Execute(_ context.Context, req connectors.Request) connectors.Result {
	res, _ := json.Marshal(map[string]string{"stamp": s.prefix + req.Key})
	return connectors.Result{Kind: connectors.Succeeded, Result: res}
}

// An executor binary with one more connector kind is onceflight's Main with
// WithConnector: every subcommand and flag (serve's data-dir lock, /readyz,
// /metrics, --console, --ingress) comes with it, and the actions file names
// the new kind like a built-in one. A real main passes os.Args[1:].
func ExampleWithConnector() {
	dir, err := os.MkdirTemp("", "onceflight-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	actions := filepath.Join(dir, "actions.yaml")
	yaml := "actions:\n  docs.stamp:\n    connector: stamp\n    settings: {prefix: S-}\n"
	if err := os.WriteFile(actions, []byte(yaml), 0o600); err != nil {
		fmt.Println(err)
		return
	}

	withStamp := cli.WithConnector("stamp", func(a *consumer.Action) (connectors.Connector, error) {
		return stamp{prefix: a.Settings["prefix"]}, nil
	})
	var out, errs bytes.Buffer
	code := cli.Main(context.Background(), []string{"config", "validate", actions}, &out, &errs, withStamp)
	// After the verdict, validate lists warnings: what this action's
	// answers would leave to an operator.
	verdict, _, _ := strings.Cut(out.String(), "\n")
	fmt.Println(code, strings.TrimPrefix(verdict, actions+": "))
	// Output:
	// 0 valid, 1 actions
}
