// Package audit checks Onceflight's guarantees (docs/guarantees.md#g1-single-flight–G5) from the
// records alone: it reads the commands, journal, outcomes and deadletter
// topics from their start to the end offsets taken when the audit starts,
// and reports, check by check, whether each guarantee held and where it did
// not. It trusts nothing the executor keeps privately (Pebble, metrics):
// anyone with read access to the topics can run it and reach the same
// verdict. It is what `onceflight audit` runs.
//
// # Running an audit
//
// From a cron job, a CI step or a test:
//
//	rep, err := audit.Run(ctx, audit.Options{
//		Brokers: []string{"kafka-1:9092"},
//		Kafka:   conf.Opts(), // TLS, SASL: a kafkaconf.Config
//	})
//	if err != nil {
//		return err // the audit could not run: Kafka unreachable, a topic missing
//	}
//	rep.WriteText(os.Stdout)
//	if !rep.OK() {
//		// a guarantee was broken; rep.Checks says which and where
//	}
//
// Or pass an existing client as Options.Client. Run never joins a consumer
// group and commits nothing, so it does not disturb the executors.
//
// # The checks
//
//	hash_chain (G5)         each journal partition's records chain: prev_hash is
//	                        the previous record's hash, and hash is the SHA-256 of
//	                        the record's RFC 8785 (JCS) form without its hash
//	                        field, so any JCS library can verify it
//	commands_answered (G4)  every command below the group's committed offset has
//	                        an outcome (by causationid); undecodable ones are on
//	                        the deadletter topic, misrouted ones were forwarded
//	outcome_ids (G4)        an outcome id stands for one (causation, status, key)
//	                        and is their deterministic id; repeats are counted
//	                        as republications
//	once_per_key (G2)       no in_progress after a key's succeeded, failed or
//	                        rejected record; attempt numbers never go down
//	single_flight (G1)      no two keys of an entity in_progress at once;
//	                        fencing tokens strictly increase per entity; no
//	                        write of a replaced owner after an epoch marker
//
// Commands at or above the group's committed offset may still be in flight:
// they are counted as pending, not as violations. A Report lists at most
// Options.MaxViolations violations per check, the first by partition and
// offset, and counts all of them.
//
// # Memory
//
// Records are checked as they are read and dropped; none is kept. The
// audit keeps, for the partitions it checks:
//
//   - per journal partition: the previous record's hash and the current
//     epoch;
//   - per (partition, idempotency key): the latest status, the position and
//     finish time of its last final record, and its highest attempt;
//   - per (partition, entity): the keys in progress and the highest fencing
//     token;
//   - per outcome event: a 16-byte digest of its causation id, and one of
//     its id with a digest of what it stands for and its position (about
//     50 bytes, plus map overhead): commands_answered and outcome_ids match
//     events by id, so that much is needed per event;
//   - per deadletter copy and forwarded command: 12 bytes of position, and
//     per misrouted command its position and message.
//
// So memory grows with keys and entities, and by tens of bytes per outcome,
// not with the size of records or results. A very large deployment can be
// audited a slice at a time with Options.Partitions.
//
// # Testing the checks
//
// Check runs the same checks over records held in memory (an Input), which
// is how the checks are tested without a broker, and how a test can ask
// whether a hand-made history would pass.
package audit
