package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/schemas"
)

// createTopics creates the run's four executor topics the way serve would
// (it refuses existing topics whose settings could lose journal records),
// so that the backlog can be on the commands topic before serve starts.
func (b *bench) createTopics(ctx context.Context) error {
	mmb := strconv.Itoa(consumer.Defaults().MaxMessageBytes)
	keep, del := "-1", "delete"
	for _, t := range []struct {
		name  string
		parts int
		cfg   map[string]*string
	}{
		{b.topics.Commands, b.partitions, map[string]*string{"max.message.bytes": &mmb}},
		{b.topics.Journal, b.partitions, map[string]*string{"max.message.bytes": &mmb, "retention.ms": &keep, "retention.bytes": &keep, "cleanup.policy": &del}},
		{b.topics.Outcomes, b.partitions, map[string]*string{"max.message.bytes": &mmb}},
		{b.topics.Deadletter, 1, map[string]*string{"max.message.bytes": &mmb}},
	} {
		if err := createTopic(ctx, b.adm, t.name, t.parts, t.cfg); err != nil {
			return err
		}
	}
	return nil
}

func createTopic(ctx context.Context, adm *kadm.Client, name string, parts int, cfg map[string]*string) error {
	resp, err := adm.CreateTopic(ctx, int32(parts), -1, cfg, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	return nil
}

// benchData is the command data: a JSON object of exactly size bytes, the
// "200-byte data" of issue 8.
func benchData(size int) json.RawMessage {
	const head, tail = `{"amount":1,"pad":"`, `"}`
	pad := max(0, size-len(head)-len(tail))
	return json.RawMessage(head + strings.Repeat("x", pad) + tail)
}

// cmdSpec says which commands one phase produces: ids idPrefix-i with keys
// keyPrefix-i, for i in [from, from+n), on entity e-(i mod entities).
type cmdSpec struct {
	action    string
	idPrefix  string
	keyPrefix string
	from, n   int
}

func (s cmdSpec) id(i int) string { return s.idPrefix + "-" + strconv.Itoa(i) }

// ids is the set of command ids the phase waits outcomes for.
func (s cmdSpec) ids() map[string]struct{} {
	m := make(map[string]struct{}, s.n)
	for i := s.from; i < s.from+s.n; i++ {
		m[s.id(i)] = struct{}{}
	}
	return m
}

// idempotencyKey is the key of command i of s: keyPrefix-i, or with
// -random-keys keyPrefix-<i mixed, 16 hex digits>, the same for the same i
// (the repeats phase sends the executor phase's keys again).
func (b *bench) idempotencyKey(s cmdSpec, i int) string {
	if !b.randomKeys {
		return s.keyPrefix + "-" + strconv.Itoa(i)
	}
	x := uint64(i) // SplitMix64's finalizer, a bijection
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return fmt.Sprintf("%s-%016x", s.keyPrefix, x^x>>31)
}

// command encodes command i of s in structured mode (the whole CloudEvent
// JSON in the value), as issue 8's kcat producer did; key = entity.
func (b *bench) command(s cmdSpec, i int) (*kgo.Record, error) {
	r, err := schemas.EncodeCommand(schemas.Command{
		ID: s.id(i), Source: "onceflight-bench", Type: s.action,
		Subject:        "e-" + strconv.Itoa(i%b.entities),
		IdempotencyKey: b.idempotencyKey(s, i),
		Data:           b.data,
	}, schemas.Structured)
	if err != nil {
		return nil, fmt.Errorf("encode command %s: %w", s.id(i), err)
	}
	r.Topic = b.topics.Commands
	return r, nil
}

// produceBacklog writes s's commands to topic (the commands topic unless
// another is given) in batches and waits until all are acknowledged.
// franz-go's default partitioner hashes keys with murmur2, the executor's
// entity mapping, so nothing is forwarded.
func (b *bench) produceBacklog(ctx context.Context, s cmdSpec, topic string) error {
	var (
		mu       sync.Mutex
		firstErr error
	)
	for i := s.from; i < s.from+s.n; i++ {
		r, err := b.command(s, i)
		if err != nil {
			return err
		}
		if topic != "" {
			r.Topic = topic
		}
		b.prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	if err := b.prod.Flush(ctx); err != nil {
		return fmt.Errorf("flush backlog %s: %w", s.idPrefix, err)
	}
	// Promises have all run once Flush returns.
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return fmt.Errorf("produce backlog %s: %w", s.idPrefix, firstErr)
	}
	return nil
}

// endOffsets returns topic's end offsets, the point from which a reader
// sees only what is written after it.
func (b *bench) endOffsets(ctx context.Context, topic string) (map[int32]kgo.Offset, int64, error) {
	listed, err := b.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	out := map[int32]kgo.Offset{}
	var sum int64
	listed.Each(func(o kadm.ListedOffset) {
		out[o.Partition] = kgo.NewOffset().At(o.Offset)
		sum += o.Offset
	})
	return out, sum, nil
}

// outcomeWatch is a read_committed reader of the outcomes topic from the
// end offsets at its creation: a phase creates it before producing, so no
// outcome of the phase is missed and none of an earlier phase is read.
type outcomeWatch struct {
	cl       *kgo.Client
	statuses map[string]int
	replayed int
	// onOutcome, if set, is called with each wanted id when its outcome
	// is read (the hot phase's timings).
	onOutcome func(id string, at time.Time)
}

func (b *bench) newOutcomeWatch(ctx context.Context) (*outcomeWatch, error) {
	from, _, err := b.endOffsets(ctx, b.topics.Outcomes)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b.topics.Outcomes: from}),
		kgo.FetchMaxWait(time.Second))
	if err != nil {
		return nil, fmt.Errorf("outcomes reader: %w", err)
	}
	return &outcomeWatch{cl: cl, statuses: map[string]int{}}, nil
}

func (w *outcomeWatch) close() { w.cl.Close() }

// drainResult is when a phase's outcomes were read.
type drainResult struct {
	first, last time.Time
	got         int
}

// await reads outcomes until every id in want has one, deleting them from
// want. Outcomes of other ids are skipped. It fails if no wanted outcome
// arrives for stall (the executor is stuck, or lost commands), reporting
// how far it got. check, if set, is called between polls and can end the
// wait early (e.g. serve exited).
func (w *outcomeWatch) await(ctx context.Context, want map[string]struct{}, stall time.Duration, check func() error) (drainResult, error) {
	var res drainResult
	total := len(want)
	lastProgress := time.Now()
	lastPrint := lastProgress
	for len(want) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := w.cl.PollFetches(pctx)
		cancel()
		now := time.Now()
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("await outcomes: %d of %d read: %w", res.got, total, err)
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				fmt.Printf("warning: fetch %s/%d: %v\n", t, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			o, err := schemas.DecodeOutcome(r)
			if err != nil {
				return
			}
			if _, ok := want[o.CausationID]; !ok {
				return
			}
			delete(want, o.CausationID)
			if w.onOutcome != nil {
				w.onOutcome(o.CausationID, now)
			}
			w.statuses[string(o.Record.Status)]++
			if o.Replayed {
				w.replayed++
			}
			if res.got == 0 {
				res.first = now
			}
			res.got++
			res.last = now
			lastProgress = now
		})
		if len(want) == 0 {
			break
		}
		// A long drain says how far it is, so a run of minutes is not
		// mistaken for a hang.
		if total >= 10_000 && now.Sub(lastPrint) >= 10*time.Second {
			fmt.Fprintf(os.Stderr, "  %d of %d outcomes\n", res.got, total)
			lastPrint = now
		}
		if now.Sub(lastProgress) > stall {
			return res, fmt.Errorf("stalled: no outcome for %s with %d of %d read", stall, res.got, total)
		}
		if check != nil {
			if err := check(); err != nil {
				return res, fmt.Errorf("await outcomes (%d of %d read): %w", res.got, total, err)
			}
		}
	}
	return res, nil
}

// notSucceeded describes outcomes with another status than succeeded, ""
// when there were none.
func (w *outcomeWatch) notSucceeded() string {
	var parts []string
	for s, n := range w.statuses {
		if s != string(schemas.StatusSucceeded) {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	return strings.Join(parts, ", ")
}
