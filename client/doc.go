// Package client is the Go API of an Onceflight deployment: submit a
// command and await its outcome, subscribe to outcomes, look up an
// execution record. It speaks the wire protocol of docs/events.md (commands and outcomes) over
// Kafka, so a service needs no other Onceflight code than this package,
// and the executor needs nothing from the service.
//
// # Submit and await
//
//	c, err := client.New(client.WithBrokers("kafka-1:9092"), client.WithSource("refund-service"))
//	if err != nil { ... }
//	defer c.Close()
//
//	p, err := c.Submit(ctx, client.Command{
//		Action: "payments.refund",
//		Entity: "order-1042",
//		Key:    "refund-1042",           // the operation's identity: a retry is safe
//		Data:   json.RawMessage(`{"amount":100}`),
//	})
//	if err != nil { ... }                // not published
//	o, err := p.Wait(ctx)                // ctx bounds the wait
//	if errors.Is(err, client.ErrNoOutcome) { ... } // published, not answered yet
//	if err != nil { ... }                          // closed (ErrClosed), or the outcomes reader failed
//	if err := o.Err(); err != nil { ... }           // failed, rejected, unresolved, held
//
// Submit registers the wait before it produces the command, with the one
// outcomes reader the client shares among all its waits, started by the
// first Submit at the outcomes topic's end offsets. An outcome is written
// after its command, so none is missed however fast the executor is, and a
// thousand concurrent submits cost one Kafka consumer, not a thousand.
// Send publishes without waiting and starts no reader.
//
// # What the client decides for you
//
//   - The Kafka key is the entity and the partitioner is Kafka's murmur2,
//     so a command lands on its entity's partition, where the executor
//     keeps the entity's records (docs/guarantees.md). A command on another
//     partition would be forwarded, at the cost of a hop.
//   - Reads are read_committed: the executor writes outcomes in
//     transactions, and an aborted write (a fenced zombie's) is never
//     returned as a result.
//   - Commands are produced with no linger and no compression: a
//     submit-and-wait pays no batching delay, and any Kafka client can
//     read the topics.
//   - The idempotency key defaults to source/id, which makes every submit
//     new work. Set Command.Key to the operation's identity to get
//     at-most-once execution across retries: a repeat is answered with the
//     recorded result and Replayed set.
//
// # Outcomes
//
// The first outcome of a command is its answer, and final except for
// unresolved and held, which an operator or the reconciler settles later
// with a second outcome event for the same command. Outcome events may be
// republished after a crash with the same ID; a subscriber drops IDs it has
// handled and keeps the latest outcome per (entity, key):
//
//	for o, err := range c.Outcomes(ctx, client.FromEnd()) {
//		var de *client.DecodeError
//		if errors.As(err, &de) { continue } // not an outcome event
//		if err != nil { return err }        // ctx ended, or the read failed
//		...
//	}
//
// ReadOutcomes replays a bounded range (partitions, a start offset or time,
// an end time) and stops at the end, which is how `onceflight outcomes`
// replays for an audit trail.
//
// # Records
//
// Status reads the current execution record of a key from the journal, the
// executor's source of truth, and Records lists the records in given
// statuses (unresolved, held). Both read the whole journal; they are for
// operators and reconciliation jobs.
//
// # Connecting
//
// WithKafkaConfig takes the TLS and SASL settings of a kafkaconf.Config
// (Java/librdkafka properties, as `onceflight --kafka-config` reads them),
// WithKafkaOpts any franz-go option, and WithClient an existing franz-go
// client. New does not connect; Ping checks the brokers and the
// credentials up front.
//
// The examples directory of the repository has runnable programs: a Go
// submit-and-await, a Go subscriber, and the same protocol from kcat and
// kafkajs.
package client
