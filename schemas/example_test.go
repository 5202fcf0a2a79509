package schemas_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// A producer encodes a command as a Kafka record: the key is the entity, so
// the partitioner sends every command of one entity to the same partition.
// The executor decodes it with DecodeCommand, which also fingerprints the
// content so that a reused idempotency key with other content is told apart.
func ExampleEncodeCommand() {
	rec, err := schemas.EncodeCommand(schemas.Command{
		ID:             "c-1",
		Source:         "billing",
		Type:           "refund.create",
		Subject:        "order-42",
		IdempotencyKey: "refund-42",
		Data:           json.RawMessage(`{"amount":1250,"currency":"EUR"}`),
	}, schemas.Structured)
	if err != nil {
		fmt.Println(err)
		return
	}
	rec.Topic = schemas.DefaultCommandsTopic

	cmd, err := schemas.DecodeCommand(rec, schemas.DefaultMaxDataBytes)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("key:", string(rec.Key))
	fmt.Println("action:", cmd.Type, "entity:", cmd.Subject, "idempotency key:", cmd.IdempotencyKey)
	fmt.Println("fingerprinted:", len(cmd.Fingerprint) > len("sha256:"))
	// Output:
	// key: order-42
	// action: refund.create entity: order-42 idempotency key: refund-42
	// fingerprinted: true
}

// A record that is not a valid command decodes to a *DecodeError that names
// the problem and, when it can, the entity: the executor deadletters the
// record and answers the entity with a rejected outcome instead of stopping
// the partition.
func ExampleDecodeCommand_invalid() {
	rec := &kgo.Record{
		Topic:   schemas.DefaultCommandsTopic,
		Key:     []byte("order-42"),
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}},
		Value:   []byte(`{"specversion":"1.0","id":"c-2","source":"billing","type":"refund.create","data":{"amount":1250}}`),
	}
	_, err := schemas.DecodeCommand(rec, schemas.DefaultMaxDataBytes)
	var de *schemas.DecodeError
	if errors.As(err, &de) {
		fmt.Println("entity:", de.Entity)
		fmt.Println("reason:", de.Reason)
	}
	// Output:
	// entity: order-42
	// reason: missing required attribute "subject"
}

// An outcome's id is derived from what it reports, so a consumer can drop a
// duplicate delivery of the same outcome by its id alone: the same key,
// status and command always give the same id.
func ExampleOutcomeID() {
	a := schemas.OutcomeID("refund-42", schemas.StatusSucceeded, "c-1")
	b := schemas.OutcomeID("refund-42", schemas.StatusSucceeded, "c-1")
	c := schemas.OutcomeID("refund-42", schemas.StatusFailed, "c-1")
	fmt.Println(len(a) == schemas.OutcomeIDLen, a == b, a == c)
	// Output: true true false
}
