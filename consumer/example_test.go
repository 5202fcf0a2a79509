package consumer_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/examples/connector/ledger"
)

// An executor inside a program of one's own, when cli.Main (which adds the
// data-dir lock, /readyz, /metrics and the console to this) does not fit:
// Defaults are what serve starts from, New opens the state and Run serves
// until the context ends, leaving the group cleanly.
func ExampleNew() {
	actions, err := consumer.LoadActions("onceflight.yaml", "ledger")
	if err != nil {
		log.Fatal(err)
	}
	cfg := consumer.Defaults()
	cfg.Brokers = []string{"kafka-1:9092"}
	cfg.DataDir = "/var/lib/onceflight"
	ex, err := consumer.New(cfg, actions,
		consumer.WithConnector("ledger", func(a *consumer.Action) (connectors.Connector, error) {
			return ledger.New(a.Settings["currency"]), nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer ex.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ex.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
