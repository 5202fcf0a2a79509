// Package kafkaconn is the kafka connector of SPEC §5: it produces the
// command's data to a configured topic, keyed by entity, and counts the
// broker's acknowledgement as the effect's confirmation.
//
// The caller's *kgo.Client is used as is; its idempotent producer (kgo's
// default) keeps kgo's own internal retries from duplicating a record. A
// produce whose outcome is unknown (context deadline, record timeout) is
// Ambiguous; Confirm then scans the target partition for a record carrying
// the idempotency key header. Set kgo.RecordDeliveryTimeout on the client no
// longer than the action's timeout, or kgo may still deliver a record that
// Execute already reported ambiguous.
package kafkaconn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/connectors"
)

// Header names set on every produced record.
const (
	HeaderKey          = "onceflight-idempotency-key"
	HeaderFencingToken = "onceflight-fencing-token"
	HeaderTraceParent  = "traceparent"
)

// Config configures the connector.
type Config struct {
	Client *kgo.Client // required; used for producing and for its seed brokers
	Topic  string      // required
	// PartitionFor, if set, names the partition an entity's records go to
	// (it must agree with the client's partitioner); Confirm then reads only
	// that partition. Otherwise Confirm reads every partition.
	PartitionFor func(entity string, n int) int32
	// ConfirmOpts are extra options for the short-lived client Confirm reads
	// with (TLS, SASL...). Seed brokers are taken from Client.
	ConfirmOpts []kgo.Opt
}

// Connector is the kafka connector; safe for concurrent use.
type Connector struct {
	cfg Config
}

// New validates cfg.
func New(cfg Config) (*Connector, error) {
	if cfg.Client == nil {
		return nil, errors.New("kafkaconn: Client is required")
	}
	if cfg.Topic == "" {
		return nil, errors.New("kafkaconn: Topic is required")
	}
	return &Connector{cfg: cfg}, nil
}

type location struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

func (l location) json() json.RawMessage {
	b, _ := json.Marshal(l) // plain struct: cannot fail
	return b
}

// Execute produces one record and waits for the broker's acknowledgement.
func (c *Connector) Execute(ctx context.Context, req connectors.Request) connectors.Result {
	if !req.Deadline.IsZero() && !time.Now().Before(req.Deadline) {
		return connectors.Result{Kind: connectors.Unavailable, Message: "deadline passed before the request was sent"}
	}
	if err := ctx.Err(); err != nil {
		return connectors.Result{Kind: connectors.Unavailable, Message: fmt.Sprintf("not sent: %v", err)}
	}
	if !req.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, req.Deadline)
		defer cancel()
	}
	value := []byte(req.Data)
	if len(value) == 0 {
		value = []byte("{}")
	}
	rec := &kgo.Record{
		Topic: c.cfg.Topic,
		Key:   []byte(req.Entity),
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: HeaderKey, Value: []byte(req.Key)},
			{Key: HeaderFencingToken, Value: []byte(strconv.FormatInt(req.FencingToken, 10))},
		},
	}
	if req.TraceParent != "" {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderTraceParent, Value: []byte(req.TraceParent)})
	}
	done := make(chan error, 1)
	c.cfg.Client.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		// kgo may still be waiting on an in-flight request it cannot fail.
		return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("produce: no acknowledgement: %v", ctx.Err())}
	}
	if err == nil {
		return connectors.Result{Kind: connectors.Succeeded, Result: location{rec.Topic, rec.Partition, rec.Offset}.json()}
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && !ke.Retriable {
		// The broker refused the record itself (too large, not
		// authorised, invalid): it was not written and will not be.
		return connectors.Result{Kind: connectors.Rejected, Message: fmt.Sprintf("produce: %v", err)}
	}
	return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("produce: %v", err)}
}

// CanConfirm reports true: a topic can always be read back.
func (c *Connector) CanConfirm() bool { return true }

// Confirm reads the target partition (or every partition) from the start up
// to its current end and answers Succeeded if a record carries req.Key in
// its idempotency key header, NotFound if none does, Ambiguous on errors.
// The read is bounded by the end offsets taken when Confirm starts; its cost
// grows with the topic, so keep such topics on a short retention.
func (c *Connector) Confirm(ctx context.Context, req connectors.Request) connectors.Result {
	loc, found, err := c.find(ctx, req)
	if err != nil {
		return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("confirm: %v", err)}
	}
	if !found {
		return connectors.Result{Kind: connectors.NotFound}
	}
	return connectors.Result{Kind: connectors.Succeeded, Result: loc.json()}
}

func (c *Connector) find(ctx context.Context, req connectors.Request) (location, bool, error) {
	ends, err := kadm.NewClient(c.cfg.Client).ListEndOffsets(ctx, c.cfg.Topic)
	if err != nil {
		return location{}, false, fmt.Errorf("list end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return location{}, false, fmt.Errorf("list end offsets: %w", err)
	}
	partitions := ends[c.cfg.Topic]
	want := map[int32]int64{} // partition -> end offset
	for p, o := range partitions {
		if o.Offset > 0 {
			want[p] = o.Offset
		}
	}
	if c.cfg.PartitionFor != nil {
		p := c.cfg.PartitionFor(req.Entity, len(partitions))
		end, ok := want[p]
		want = map[int32]int64{}
		if ok {
			want[p] = end
		}
	}
	if len(want) == 0 {
		return location{}, false, nil
	}
	seeds, _ := c.cfg.Client.OptValue(kgo.SeedBrokers).([]string)
	assign := map[int32]kgo.Offset{}
	for p := range want {
		assign[p] = kgo.NewOffset().AtStart()
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.cfg.Topic: assign}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}, c.cfg.ConfirmOpts...)
	rd, err := kgo.NewClient(opts...)
	if err != nil {
		return location{}, false, fmt.Errorf("confirm reader: %w", err)
	}
	defer rd.Close()
	key := []byte(req.Key)
	for len(want) > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return location{}, false, fmt.Errorf("read %s: %w", c.cfg.Topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return location{}, false, fmt.Errorf("read %s: %w", c.cfg.Topic, ferr)
		}
		var hit *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || hit != nil {
				return
			}
			for _, h := range r.Headers {
				if h.Key == HeaderKey && bytes.Equal(h.Value, key) {
					hit = r
					return
				}
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
		if hit != nil {
			return location{hit.Topic, hit.Partition, hit.Offset}, true, nil
		}
		// A partition whose end is past its last visible record (aborted
		// transactions, compaction) is finished once fetching stalls there;
		// the end offsets bound the work either way.
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if end, ok := want[p.Partition]; ok && p.HighWatermark > 0 && len(p.Records) == 0 && p.LastStableOffset >= end {
				delete(want, p.Partition)
			}
		})
	}
	return location{}, false, nil
}
