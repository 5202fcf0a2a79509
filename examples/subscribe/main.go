// Command subscribe prints outcome events as the executor publishes them:
// a subscriber over package client's Outcomes iterator.
//
//	go run ./examples/subscribe -brokers 127.0.0.1:9092 [-from-beginning] [-status failed,unresolved]
//
// Outcome events may be republished after an executor crash with the same
// id, so it drops ids it has already printed (a real subscriber keeps that
// set, or its effects, idempotent by id). Interrupt to stop.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/kafkaconf"
)

func main() {
	os.Exit(run())
}

func run() int {
	brokers := flag.String("brokers", "127.0.0.1:9092", "Kafka brokers, host:port,...")
	kafkaConfig := flag.String("kafka-config", "", "Kafka connection properties file (security.protocol, sasl.*, ssl.*)")
	fromBeginning := flag.Bool("from-beginning", false, "replay the retained outcomes first")
	statuses := flag.String("status", "", "only these statuses, e.g. failed,unresolved")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	conf, err := kafkaconf.Load(*kafkaConfig, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c, err := client.New(client.WithBrokers(strings.Split(*brokers, ",")...), client.WithKafkaConfig(conf))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()

	from := client.FromEnd()
	if *fromBeginning {
		from = client.FromBeginning()
	}
	var want []string
	if *statuses != "" {
		want = strings.Split(*statuses, ",")
	}
	seen := map[string]bool{}
	for o, err := range c.Outcomes(ctx, from) {
		var de *client.DecodeError
		switch {
		case errors.As(err, &de):
			fmt.Fprintln(os.Stderr, "skipping:", err) // not an outcome event
			continue
		case errors.Is(err, context.Canceled):
			return 0 // interrupted: the normal end
		case err != nil:
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if seen[o.ID] || (want != nil && !slices.Contains(want, string(o.Status))) {
			continue
		}
		seen[o.ID] = true
		line := fmt.Sprintf("%s %s/%s %s", o.Action, o.Entity, o.Key, o.Status)
		if o.ErrorCode != "" {
			line += " " + o.ErrorCode + ": " + o.ErrorMessage
		}
		if o.Replayed {
			line += " (replayed)"
		}
		fmt.Println(line)
	}
	return 0
}
