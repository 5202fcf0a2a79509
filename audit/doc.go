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
//	outcomes_match (G4)     every outcome event states what the journal
//	                        states: its record, by its hash, is a journal
//	                        record of its partition, unchanged, and the
//	                        record of its key current when it was published
//	                        (no later record of the key below the highest
//	                        journal offset the partition's outcomes read
//	                        so far published); its type, subject and
//	                        idempotencykey restate the record; an outcome
//	                        without a journal record is one of the answers
//	                        the executor gives without one (rejections that
//	                        keep the key's record, deadlettered commands,
//	                        executor_error); one whose record retention
//	                        deleted is counted (audit/outcomesmatch.go)
//	once_per_key (G2)       no in_progress after a key's succeeded, failed or
//	                        rejected record; attempt numbers never go down
//	single_flight (G1)      no two keys of an entity in_progress at once;
//	                        fencing tokens strictly increase per entity; no
//	                        write of a replaced owner after a higher epoch's
//	                        marker or records (as restore reads them); after
//	                        a new owner settles a replaced owner's attempt,
//	                        the entity's next key starts after that
//	                        attempt's deadline; every record is on its
//	                        entity's partition
//
// Commands at or above the group's committed offset may still be in flight:
// they are counted as pending, not as violations. A Report lists at most
// Options.MaxViolations violations per check, the first by partition and
// offset, and counts all of them.
//
// # Memory
//
// Records are checked as they are read and dropped; none is kept. Run
// reads a partition at a time: the deadletters first, then for each
// partition number p the journal and outcomes partitions p together with
// the commands of partition p-1, whose answers the step before read
// (commands are partitioned by entity, and an entity's journal records and
// outcomes are on the same partition number). When a partition is done,
// what only it needed is dropped, so the audit holds about two partitions'
// state at a time, whatever the number of partitions:
//
//   - per journal partition: the previous record's hash and the current
//     epoch (a few dozen bytes, kept);
//   - per key and per entity of the partition being read: what G1 and G2
//     need, by value under a digest (no record, no decoded JSON), and
//     for outcomes_match a 32-byte entry (hash digest, offset, status)
//     per record of the key an outcome may carry (every status but
//     in_progress: usually one);
//   - per outcome read before the journal record it carries: a queued
//     entry (about 100 bytes), until the record is read (a few fetches'
//     worth at most in a healthy history; after an outcome whose record
//     the journal lacks, the rest of the partition's outcomes, judged as
//     the partition ends);
//   - per outcome event of that partition: digests of its id, causation
//     and (causation, entity, key), and its position;
//   - per command of that partition until its commands are read: a digest
//     of each answered causation id;
//   - the first use of every outcome id of the partitions done, on disk in
//     a temporary Pebble store under $TMPDIR (about 40 bytes per outcome;
//     in memory only its 8 MiB cache and memtables and a filter of 16
//     bits per outcome of the topic, at most 8 MiB),
//     since an id must stand for one (causation, status, key) across
//     partitions;
//   - the journal records decoded lately, for the outcomes that carry
//     their bytes (recordMemo): a 16-byte tag of each record's bytes and
//     the fields an outcome reads, at most 2 × 16 384 entries keeping
//     2 × 1 MiB of strings (≈ 7 MB), whatever the number of keys;
//   - per deadletter copy, forwarded and misrouted command, and command
//     found unanswered below the committed offset: its position (rare in
//     a healthy history).
//
// About 560 bytes per key of the largest partition (BenchmarkAuditStatePerKey),
// plus a fixed ~40 MB (fetches, the id store): docs/memory.md#audit has
// the figures. A partition of more than 65 536 keys, entities, answers or
// outcome ids does not hold them all: past that many entries, each map's
// are written to the same temporary store and looked up there (behind a
// 1 MiB Bloom filter per map), so the state in memory stays under ~40 MB
// whatever the number of keys, at the cost of disk and of a lookup for
// the few records whose key was written out while it was in progress. The records of each fetch are decoded on every core, then
// checked in order on one, while the next fetch is read, and, near a
// step's end, the next step's first fetch (two clients take turns at the
// steps: rangeread.Steps); a fetch's last chunk of records, and the end of a
// partition's step, are checked while the next fetch's first chunk is
// decoded.
//
// Check, which holds its Input in memory anyway, keeps every partition's
// state to the end; both reach the same report (TestRunStreamsPartitions).
// One difference is by design: a command at or above the committed offset
// whose only answer is on another partition read later (an outcome that
// names a partition other than its own) counts as pending in Run.
//
// # Testing the checks
//
// Check runs the same checks over records held in memory (an Input), which
// is how the checks are tested without a broker, and how a test can ask
// whether a hand-made history would pass.
package audit
