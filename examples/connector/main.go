// Command connector is an executor binary of your own: Onceflight's
// executor with one more connector kind, "ledger", configured from the
// actions file like the built-in ones:
//
//	actions:
//	  accounts.credit:
//	    connector: ledger
//	    settings: {currency: EUR}
//
//	go run ./examples/connector --brokers 127.0.0.1:9092 --config ledger.yaml --data-dir /tmp/ledger
//	onceflight submit --action accounts.credit --entity acct-1 --data '{"amount":5}' --wait
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/examples/connector/ledger"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka brokers, comma-separated")
	cfgPath := flag.String("config", "ledger.yaml", "actions file")
	dataDir := flag.String("data-dir", "ledger-data", "local state")
	flag.Parse()
	if err := run(*brokers, *cfgPath, *dataDir); err != nil {
		fmt.Fprintln(os.Stderr, "connector:", err)
		os.Exit(1)
	}
}

func run(brokers, cfgPath, dataDir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	actions, err := consumer.LoadActions(cfgPath, "ledger")
	if err != nil {
		return err
	}
	store, err := dedupe.Open(dataDir)
	if err != nil {
		return err
	}
	defer store.Close()
	ex, err := consumer.New(consumer.Config{
		Brokers:    strings.Split(brokers, ","),
		ExecutorID: "ledger-example",
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}, actions, store, consumer.WithConnector("ledger", func(a *consumer.Action) (connectors.Connector, error) {
		return ledger.New(a.Settings["currency"]), nil
	}))
	if err != nil {
		return err
	}
	return ex.Run(ctx)
}
