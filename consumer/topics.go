package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/onceflight/onceflight/internal/topics"
	"github.com/onceflight/onceflight/outbox"
)

// journalRetention is the retention the journal needs: key memory plus the
// dedupe retention, plus a day of margin for clock drift and slow segment
// rolls (internal/topics says why each topic setting matters).
func (e *Executor) journalRetention() time.Duration {
	return e.retention.memory + e.retention.keep + topics.JournalMargin
}

func (e *Executor) topicNeeds() topics.Needs {
	return topics.Needs{Topics: e.cfg.Topics, MaxMessageBytes: e.cfg.MaxMessageBytes, JournalRetention: e.journalRetention()}
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
		resp, err := adm.CreateTopic(ctx, int32(spec.parts), -1, e.topicNeeds().Create(spec.topic), spec.topic)
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
	all := e.cfg.Topics.All()
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
	found, err := topics.Settings(ctx, adm, e.cfg.Topics.All())
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	var errs []error
	for _, s := range e.topicNeeds().Check(found) {
		if !s.OK {
			errs = append(errs, errors.New(s.Problem()))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("consumer: topics cannot keep the journal complete (`onceflight topics check` shows them, `onceflight topics apply` raises what can be raised):\n  %w", joinIndented(errs))
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
