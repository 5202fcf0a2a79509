// Command submit publishes one command to an Onceflight executor and waits
// for its outcome: the submit-and-await of package client in a program.
//
//	go run ./examples/submit -brokers 127.0.0.1:9092 -action payments.refund \
//	    -entity order-1042 -key refund-1042 -data '{"amount":25}'
//
// Connection properties (TLS, SASL) come from a Java/librdkafka properties
// file, as for the onceflight CLI: -kafka-config client.properties.
// It prints the outcome and exits 0 if the command succeeded, 3 if it did
// not, 4 if no outcome came within -timeout.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/kafkaconf"
)

func main() {
	os.Exit(run())
}

func run() int {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka brokers, host:port,...")
	kafkaConfig := flag.String("kafka-config", "", "Kafka connection properties file (security.protocol, sasl.*, ssl.*)")
	action := flag.String("action", "noop.ping", "the action")
	entity := flag.String("entity", "order-1042", "the entity")
	key := flag.String("key", "", "idempotency key (default: a new one per run)")
	data := flag.String("data", "", "command data, a JSON object")
	timeout := flag.Duration("timeout", 30*time.Second, "how long to wait for the outcome")
	flag.Parse()

	// First SIGINT cancels the wait; the command stays published.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	conf, err := kafkaconf.Load(*kafkaConfig, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c, err := client.New(
		client.WithBrokers(strings.Split(*brokers, ",")...),
		client.WithKafkaConfig(conf),
		client.WithSource("examples/submit"),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	if err := c.Ping(ctx); err != nil { // a wrong password fails here, not as a timeout
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	cmd := client.Command{Action: *action, Entity: *entity, Key: *key}
	if *data != "" {
		cmd.Data = json.RawMessage(*data)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	p, err := c.Submit(ctx, cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("submitted %s (key %s) to partition %d offset %d\n", p.ID, p.Key, p.Partition, p.Offset)
	o, err := p.Wait(ctx)
	if errors.Is(err, client.ErrNoOutcome) {
		fmt.Fprintln(os.Stderr, "published, but no outcome yet:", err)
		return 4
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("%s: %s (replayed %t) result %s\n", o.Key, o.Status, o.Replayed, o.Result)
	if err := o.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}
