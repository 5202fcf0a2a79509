package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/internal/topics"
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
	e.ensureStatusTopic(ctx, adm)
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
	e.journalID = ids[e.cfg.Topics.Journal]
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
