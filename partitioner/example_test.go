package partitioner_test

import (
	"fmt"

	"github.com/onceflight/onceflight/partitioner"
)

// A producer that does not use Kafka's default partitioner (librdkafka's
// consistent_random, a custom one) must still put an entity's commands on
// the partition its owner reads; ForEntity is that partition, the same as
// the Java client's and kafkajs's default (murmur2) for the record key.
func ExampleForEntity() {
	for _, entity := range []string{"order-42", "order-43", "customer-7"} {
		fmt.Println(entity, partitioner.ForEntity(entity, 12))
	}
	// Output:
	// order-42 0
	// order-43 10
	// customer-7 7
}
