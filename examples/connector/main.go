// Command connector is an executor binary of your own: `onceflight` with one
// more connector kind, "ledger", configured from the actions file like the
// built-in ones. Every subcommand and flag of onceflight is here, so serve
// has the data-dir lock, /readyz, /metrics, --console and --ingress:
//
//	actions:
//	  accounts.credit:
//	    connector: ledger
//	    settings: {currency: EUR}
//
//	go run ./examples/connector serve --config ledger.yaml --console 127.0.0.1:8090
//	go run ./examples/connector submit --action accounts.credit --entity acct-1 --data '{"amount":5}' --wait
package main

import (
	"context"
	"os"

	"github.com/onceflight/onceflight/cli"
	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/examples/connector/ledger"
)

// options are what this binary adds to onceflight: the ledger kind, built
// once per action that uses it, from the action's `settings:`.
var options = []cli.Option{
	cli.WithConnector("ledger", func(a *consumer.Action) (connectors.Connector, error) {
		return ledger.New(a.Settings["currency"]), nil
	}),
}

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr, options...))
}
