package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/onceflight/onceflight/client"
)

// Submit a command and await its outcome; submitting the same key again
// is answered with the recorded result instead of a second execution.
func Example() {
	brokers, stop, err := startExecutor() // kfake and an executor with a noop action
	if err != nil {
		log.Fatal(err)
	}
	defer stop()

	c, err := client.New(client.WithBrokers(brokers...), client.WithSource("example"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for range 2 {
		p, err := c.Submit(ctx, client.Command{
			Action: "noop.ping",
			Entity: "order-1042",
			Key:    "ping-1042", // the operation's identity
			Data:   json.RawMessage(`{"n":1}`),
		})
		if err != nil {
			log.Fatal(err)
		}
		o, err := p.Wait(ctx)
		if errors.Is(err, client.ErrNoOutcome) {
			log.Fatal("published, but no outcome yet: is an executor running?")
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(o.Entity, o.Key, o.Status, "replayed:", o.Replayed)
	}
	// Output:
	// order-1042 ping-1042 succeeded replayed: false
	// order-1042 ping-1042 succeeded replayed: true
}

// A subscriber ranges over outcomes as they are published. This one reads
// the past ones too (FromBeginning), and stops at its first event.
func ExampleClient_Outcomes() {
	c, ctx, done := exampleClient() // a client of kfake and an executor, as in Example
	defer done()

	if _, err := c.Send(ctx, client.Command{Action: "noop.ping", Entity: "order-7", Key: "k-7"}); err != nil {
		log.Fatal(err)
	}
	for o, err := range c.Outcomes(ctx, client.FromBeginning()) {
		var de *client.DecodeError
		if errors.As(err, &de) {
			continue // someone else's record on the topic
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(o.Entity, o.Key, o.Status)
		break
	}
	// Output:
	// order-7 k-7 succeeded
}

// Status reads the current record of a key of an entity from the journal.
func ExampleClient_Status() {
	c, ctx, done := exampleClient() // a client of kfake and an executor, as in Example
	defer done()

	p, err := c.Submit(ctx, client.Command{Action: "noop.ping", Entity: "order-9", Key: "k-9"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	rec, err := c.Status(ctx, "k-9", "order-9")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Status, rec.Attempts)
	// Output:
	// succeeded 1
}
