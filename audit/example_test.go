package audit_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/schemas"
)

// Audit a deployment from a cron job or a test: Run reads the topics and
// checks them; the report says which guarantees held. Here the deployment
// is a fresh cluster with the executor's topics and no traffic yet.
func ExampleRun() {
	d := schemas.DefaultTopics()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, d.Commands, d.Outcomes, d.Journal, d.Deadletter))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := audit.Run(ctx, audit.Options{
		Brokers: cluster.ListenAddrs(),
		// Kafka: conf.Opts(), for TLS and SASL (package kafkaconf)
		MaxViolations: 20,
	})
	if err != nil {
		log.Fatal(err) // the audit could not run
	}
	if err := rep.WriteText(os.Stdout); err != nil {
		log.Fatal(err)
	}
	fmt.Println("ok:", rep.OK())
	// Output:
	// hash_chain         (G5) ok
	// commands_answered  (G4) ok
	// outcome_ids        (G4) ok
	// outcomes_match     (G4) ok
	// once_per_key       (G2) ok
	// single_flight      (G1) ok
	// evidence           (G3) ok
	// commands 0, outcomes 0, journal records 0, keys 0, unresolved keys 0, republications 0, pending 0, deadlettered 0, forwarded 0
	// ok: true
}
