package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/onceflight/onceflight/outbox"
)

// The journal is the source of truth only while it is complete. Three
// settings decide that, so they are never left to the broker's defaults:
//
//   - retention.ms of the journal must cover key_memory + dedupe_retention:
//     a key is remembered for key_memory after it finished, and its record
//     is what an executor restoring into an empty data dir learns it from;
//   - retention.bytes must be unbounded: size-based deletion removes
//     records of any age;
//   - max.message.bytes of every topic must admit the producer's limit, so
//     that a record is known to fit before it is written (the committer
//     checks each record against the same limit).
//
// serve creates missing topics with these settings and refuses to start on
// existing ones that contradict them, naming topic, setting, found and needed.

// journalRetention is the retention the journal needs: key memory plus the
// dedupe retention, plus a day of margin for clock drift and slow segment
// rolls.
func (e *Executor) journalRetention() time.Duration {
	return e.retention.memory + e.retention.keep + 24*time.Hour
}

func (e *Executor) topicConfigs(topic string) map[string]*string {
	s := func(v string) *string { return &v }
	cfg := map[string]*string{"max.message.bytes": s(strconv.Itoa(e.cfg.MaxMessageBytes))}
	if topic == e.cfg.Topics.Journal {
		cfg["cleanup.policy"] = s("delete")
		cfg["retention.ms"] = s(strconv.FormatInt(e.journalRetention().Milliseconds(), 10))
		cfg["retention.bytes"] = s("-1")
	}
	return cfg
}

func (e *Executor) ensureTopics(ctx context.Context) error {
	adm := kadm.NewClient(e.plain)
	for _, spec := range []struct {
		topic string
		parts int
	}{
		{e.cfg.Topics.Commands, e.cfg.Partitions},
		{e.cfg.Topics.Journal, e.cfg.Partitions},
		{e.cfg.Topics.Outcomes, e.cfg.Partitions},
		{e.cfg.Topics.Deadletter, 1},
	} {
		resp, err := adm.CreateTopic(ctx, int32(spec.parts), -1, e.topicConfigs(spec.topic), spec.topic)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("consumer: create topic %s: %w", spec.topic, err)
		}
		if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("consumer: create topic %s: %w", spec.topic, resp.Err)
		}
	}
	if err := e.checkTopicConfigs(ctx, adm); err != nil {
		return err
	}
	counts, ids, err := e.partitionCounts(ctx, adm)
	if err != nil {
		return err
	}
	e.counts = counts
	e.obTopics = outbox.Topics{
		Journal: e.cfg.Topics.Journal, Outcomes: e.cfg.Topics.Outcomes,
		Deadletter: e.cfg.Topics.Deadletter, Commands: e.cfg.Topics.Commands, Partitions: counts,
		MaxRecordBytes: e.cfg.MaxMessageBytes,
	}
	e.commandsID = ids[e.cfg.Topics.Commands]
	nc, nj := counts[e.cfg.Topics.Commands], counts[e.cfg.Topics.Journal]
	if nc == 0 || nc != nj {
		return fmt.Errorf("consumer: topics %s (%d partitions) and %s (%d) must have the same partition count",
			e.cfg.Topics.Commands, nc, e.cfg.Topics.Journal, nj)
	}
	e.nPart = nc
	return nil
}

func (e *Executor) partitionCounts(ctx context.Context, adm *kadm.Client) (map[string]int, map[string][16]byte, error) {
	all := []string{e.cfg.Topics.Commands, e.cfg.Topics.Journal, e.cfg.Topics.Outcomes, e.cfg.Topics.Deadletter}
	td, err := adm.ListTopics(ctx, all...)
	if err != nil {
		return nil, nil, fmt.Errorf("consumer: describe topics: %w", err)
	}
	counts, ids := map[string]int{}, map[string][16]byte{}
	for _, t := range all {
		d, ok := td[t]
		if !ok || d.Err != nil {
			return nil, nil, fmt.Errorf("consumer: describe topic %s: %v", t, d.Err)
		}
		counts[t] = len(d.Partitions)
		ids[t] = d.ID
	}
	return counts, ids, nil
}

// checkTopicConfigs refuses topics whose settings would let the journal
// lose records the executor still needs, or reject records it writes.
func (e *Executor) checkTopicConfigs(ctx context.Context, adm *kadm.Client) error {
	all := []string{e.cfg.Topics.Commands, e.cfg.Topics.Journal, e.cfg.Topics.Outcomes, e.cfg.Topics.Deadletter}
	rcs, err := adm.DescribeTopicConfigs(ctx, all...)
	if err != nil {
		return fmt.Errorf("consumer: describe topic configs: %w", err)
	}
	var errs []error
	for _, rc := range rcs {
		if rc.Err != nil {
			errs = append(errs, fmt.Errorf("topic %s: describe configs: %w", rc.Name, rc.Err))
			continue
		}
		get := func(name string) (string, bool) {
			for _, c := range rc.Configs {
				if c.Key == name && c.Value != nil {
					return *c.Value, true
				}
			}
			return "", false
		}
		if v, ok := get("max.message.bytes"); ok {
			if n, err := strconv.Atoi(v); err == nil && n < e.cfg.MaxMessageBytes {
				errs = append(errs, fmt.Errorf("topic %s: max.message.bytes is %d, needs at least %d (the producer's record limit, --max-message-bytes)", rc.Name, n, e.cfg.MaxMessageBytes))
			}
		}
		if rc.Name != e.cfg.Topics.Journal {
			continue
		}
		if v, ok := get("cleanup.policy"); ok && strings.Contains(v, "compact") {
			errs = append(errs, fmt.Errorf("topic %s: cleanup.policy is %q, needs \"delete\" (compaction drops state changes and epoch markers the journal's history is made of)", rc.Name, v))
		}
		need := e.journalRetention().Milliseconds()
		if v, ok := get("retention.ms"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n < need {
				errs = append(errs, fmt.Errorf("topic %s: retention.ms is %d (%s), needs at least %d (%s = key_memory + dedupe_retention + 1d): an executor restoring from it would forget keys it must still recognise",
					rc.Name, n, time.Duration(n)*time.Millisecond, need, time.Duration(need)*time.Millisecond))
			}
		}
		if v, ok := get("retention.bytes"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				errs = append(errs, fmt.Errorf("topic %s: retention.bytes is %d, needs -1 (size-based deletion removes records of any age)", rc.Name, n))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("consumer: topics cannot keep the journal complete:\n  %w", joinIndented(errs))
	}
	return nil
}

func joinIndented(errs []error) error {
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}

// watchPartitions stops new work when a topic's partition count changes
// while the executor runs. Entities are placed by murmur2 over the count:
// after a change, an entity's new commands land on another partition than
// its records, versions and in-progress state, and two partitions — two
// owners — could run one entity. There is no safe automatic way on, so the
// executor halts (readyz 503, ERROR every check) until an operator restores
// the count or moves to new topics (README: "Partition counts are fixed").
func (e *Executor) watchPartitions(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	adm := kadm.NewClient(e.plain)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		counts, _, err := e.partitionCounts(ctx, adm)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("partition watch: describe topics", "err", err)
			}
			continue
		}
		for _, topic := range []string{e.cfg.Topics.Commands, e.cfg.Topics.Journal, e.cfg.Topics.Outcomes} {
			if have, want := counts[topic], e.counts[topic]; have != want {
				e.halt(fmt.Errorf("topic %s now has %d partitions, the executor started with %d: entities would move away from their records; new work stopped. Restore the partition count or move to new topics (see README, \"Partition counts are fixed\")", topic, have, want))
			}
		}
	}
}

// halt stops taking new commands for good (this process): polled records
// are no longer dispatched, so their offsets are not committed and a
// correctly configured executor answers them later. Work already running
// finishes and commits.
func (e *Executor) halt(reason error) {
	first := e.halted.CompareAndSwap(nil, &reason)
	e.m.halted.Set(1)
	if first {
		e.log.Error("executor halted", "reason", reason)
	} else {
		e.log.Error("executor halted", "reason", *e.halted.Load())
	}
}

// Halted returns why the executor stopped taking new work, or nil.
func (e *Executor) Halted() error {
	if p := e.halted.Load(); p != nil {
		return *p
	}
	return nil
}
