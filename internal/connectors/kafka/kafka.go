// Package kafkaconn is the kafka connector of docs/connectors.md: it produces the
// command's data to a configured topic, keyed by entity, and counts the
// broker's acknowledgement as the effect's confirmation.
//
// The caller's *kgo.Client produces (see Config.PartitionFor for the one
// exception); its idempotent producer (kgo's default, and required) keeps
// kgo's own internal retries from duplicating a record. A produce whose
// outcome is unknown (context deadline, record timeout) is Ambiguous; Confirm
// then scans the target partition for a record carrying the idempotency key
// header.
//
// # When "not found" can be trusted
//
// A "not found" is only true if no earlier produce of the key can still land.
// Execute gives up at the attempt's deadline, but kgo keeps a produce request
// that was sent until the broker answers: with idempotent writes kgo does not
// fail a sent record on a cancelled context or a delivery timeout, because it
// cannot know whether the broker wrote it. So the record may appear after
// Execute returned Ambiguous, and a read of the partition up to its end would
// miss it. The connector therefore counts, per (entity, key), the produces
// whose promise has not been called yet, and Confirm answers Ambiguous
// (still unknown) while any is outstanding. The promise is the one signal
// that kgo is done with a record: after it, kgo never sends the record again,
// and a record it wrote is below the high watermark Confirm reads up to.
//
// Execute does not wait for the promise instead: any bound on that wait can
// be exceeded (a stalled broker holds the request until the connection
// times out), and past the bound the same question comes back, while
// counting keeps the answer "unknown" exactly as long as it is. The count
// covers the produces of this process only; for those of an earlier process
// the bound is the executor's deadline rule (docs/guarantees.md: Confirm's "not found"
// is trusted only after the old attempt's deadline) together with
// kgo.RecordDeliveryTimeout on the client, no longer than the action's
// timeout, which keeps records that were never sent from leaving late.
package kafkaconn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
	// Client is required: it produces (unless PartitionFor is set) and gives
	// its seed brokers to Confirm. It must keep idempotent writes enabled.
	Client *kgo.Client
	Topic  string // required
	// PartitionFor, if set, places an entity's records: Execute writes to
	// PartitionFor(entity, n) and Confirm reads only that partition, where n
	// is a partition count pinned once (Partitions, else the topic's count
	// the first time the connector needs it) and never the topic's current
	// count. The placement is therefore stable when the topic grows: records
	// of an entity stay on one partition and Confirm reads the partition
	// Execute wrote to. To place records itself the connector produces
	// through a client of its own, built from Client's options with
	// kgo.ManualPartitioner and closed when Client is closed; Client must
	// then be a plain producer (no transactional ID, no consuming).
	// Without PartitionFor, Client's partitioner places records and Confirm
	// reads every partition.
	PartitionFor func(entity string, n int) int32
	// Partitions, if > 0, is the partition count PartitionFor is called
	// with. Set it to keep the placement across restarts when the topic may
	// grow while records are still to be confirmed; otherwise the count is
	// the topic's when this Connector first produces or confirms.
	Partitions int
	// ConfirmOpts are extra options for the short-lived client Confirm reads
	// with (TLS, SASL...). Seed brokers are taken from Client.
	ConfirmOpts []kgo.Opt
	// ClockDrift is how far the clock that stamped a record (another
	// producer's, or the broker's) may lag this process's: on a partition
	// retention trimmed, Confirm counts a miss only if the first record
	// kept is older than the attempt's start by this much (the executor's
	// --clock-drift).
	ClockDrift time.Duration
}

// Connector is the kafka connector; safe for concurrent use.
type Connector struct {
	cfg  Config
	prod *kgo.Client // produces: cfg.Client, or the manual-partitioning client of PartitionFor

	// mu guards the produces in flight and the pinned partition count:
	// Execute, the produce promises and Confirm take it. A leaf lock.
	mu struct {
		sync.Mutex
		outstanding map[produceID]int // produces whose promise has not been called
		partitions  int               // pinned count for PartitionFor; 0 until known
	}
}

// produceID scopes outstanding produces like keys are scoped (docs/events.md#execution-records).
type produceID struct{ entity, key string }

// New validates cfg. With PartitionFor it also creates the connector's
// producing client (see Config.PartitionFor).
func New(cfg Config) (*Connector, error) {
	if cfg.Client == nil {
		return nil, errors.New("kafkaconn: Client is required")
	}
	if cfg.Topic == "" {
		return nil, errors.New("kafkaconn: Topic is required")
	}
	if cfg.Partitions < 0 {
		return nil, fmt.Errorf("kafkaconn: Partitions is %d, want >= 0", cfg.Partitions)
	}
	if off, _ := cfg.Client.OptValue(kgo.DisableIdempotentWrite).(bool); off {
		// Without idempotency kgo may fail a record that was sent, and an
		// outstanding produce could land after Confirm said not found.
		return nil, errors.New("kafkaconn: Client must keep idempotent writes enabled")
	}
	c := &Connector{cfg: cfg, prod: cfg.Client}
	c.mu.outstanding, c.mu.partitions = map[produceID]int{}, cfg.Partitions
	if cfg.PartitionFor == nil {
		return c, nil
	}
	if txn, _ := cfg.Client.OptValue(kgo.TransactionalID).(string); txn != "" {
		return nil, errors.New("kafkaconn: with PartitionFor, Client must not be transactional")
	}
	topics, _ := cfg.Client.OptValue(kgo.ConsumeTopics).([]string)
	parts, _ := cfg.Client.OptValue(kgo.ConsumePartitions).(map[string]map[int32]kgo.Offset)
	group, _ := cfg.Client.OptValue(kgo.ConsumerGroup).(string)
	if len(topics) > 0 || len(parts) > 0 || group != "" {
		return nil, errors.New("kafkaconn: with PartitionFor, Client must not consume")
	}
	opts := append(append([]kgo.Opt(nil), cfg.Client.Opts()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	prod, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkaconn: producing client: %w", err)
	}
	c.prod = prod
	go func() {
		// The caller closes Client at shutdown, when no attempt runs; a
		// record still buffered then fails its promise (ErrClientClosed).
		<-cfg.Client.Context().Done()
		prod.Close()
	}()
	return c, nil
}

// begin and end count a produce of id between Produce and its promise.
func (c *Connector) begin(id produceID) {
	c.mu.Lock()
	c.mu.outstanding[id]++
	c.mu.Unlock()
}

func (c *Connector) end(id produceID) {
	c.mu.Lock()
	if c.mu.outstanding[id]--; c.mu.outstanding[id] <= 0 {
		delete(c.mu.outstanding, id)
	}
	c.mu.Unlock()
}

func (c *Connector) isOutstanding(id produceID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.outstanding[id] > 0
}

// partitionCount returns the pinned partition count for PartitionFor,
// pinning the topic's current count on first use.
func (c *Connector) partitionCount(ctx context.Context) (int, error) {
	c.mu.Lock()
	n := c.mu.partitions
	c.mu.Unlock()
	if n > 0 {
		return n, nil
	}
	td, err := kadm.NewClient(c.cfg.Client).ListTopics(ctx, c.cfg.Topic)
	if err != nil {
		return 0, fmt.Errorf("describe %s: %w", c.cfg.Topic, err)
	}
	d, ok := td[c.cfg.Topic]
	if !ok {
		return 0, fmt.Errorf("describe %s: topic not in metadata", c.cfg.Topic)
	}
	if d.Err != nil {
		return 0, fmt.Errorf("describe %s: %w", c.cfg.Topic, d.Err)
	}
	if len(d.Partitions) == 0 {
		return 0, fmt.Errorf("describe %s: no partitions", c.cfg.Topic)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.partitions == 0 { // the first answer wins; partitions only grow
		c.mu.partitions = len(d.Partitions)
	}
	return c.mu.partitions, nil
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
// If the attempt's deadline passes first it answers Ambiguous; the produce
// stays outstanding for Confirm until kgo calls its promise.
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
	if c.cfg.PartitionFor != nil {
		n, err := c.partitionCount(ctx)
		if err != nil {
			return connectors.Result{Kind: connectors.Unavailable, Message: fmt.Sprintf("not sent: %v", err)}
		}
		rec.Partition = c.cfg.PartitionFor(req.Entity, n)
		if rec.Partition < 0 || int(rec.Partition) >= n {
			return connectors.Result{Kind: connectors.Rejected, Message: fmt.Sprintf("PartitionFor(%q, %d) = %d: out of range", req.Entity, n, rec.Partition)}
		}
		// The look-up took time: the deadline is checked right before writing.
		if !req.Deadline.IsZero() && !time.Now().Before(req.Deadline) {
			return connectors.Result{Kind: connectors.Unavailable, Message: "deadline passed before the request was sent"}
		}
	}
	id := produceID{req.Entity, req.Key}
	done := make(chan error, 1)
	c.begin(id)
	c.prod.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		c.end(id) // before done: once Execute has the answer, nothing is outstanding
		done <- err
	})
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		// kgo may still be waiting on an in-flight request it cannot fail:
		// the produce stays outstanding, and Confirm will not say NotFound.
		return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("produce: no acknowledgement: %v", ctx.Err())}
	}
	if err == nil {
		return connectors.Result{Kind: connectors.Succeeded, Result: location{rec.Topic, rec.Partition, rec.Offset}.json()}
	}
	return connectors.Result{Kind: ClassifyProduceError(err), Message: fmt.Sprintf("produce: %v", err)}
}

// ClassifyProduceError is what Execute makes of a failed produce: rejected
// when the broker refused the record itself with a non-retriable error (too
// large, not authorised, invalid), which means it was not written and will
// not be; ambiguous for anything else, including the attempt's timeout,
// since the record may have been written. Exported so that `onceflight
// actions` describes what Execute does.
func ClassifyProduceError(err error) connectors.Kind {
	var ke *kerr.Error
	if errors.As(err, &ke) && !ke.Retriable {
		return connectors.Rejected
	}
	return connectors.Ambiguous
}

// CanConfirm reports true: a topic can always be read back.
func (c *Connector) CanConfirm() bool { return true }

// Confirm reads the target partition (or every partition) from the start up
// to its current end and answers Succeeded if a record carries req.Key in
// its idempotency key header, NotFound if none does and no produce of the
// key is outstanding, Ambiguous otherwise (errors, or a produce of this
// connector that may still land: see the package documentation). The read
// is bounded by the end offsets taken when Confirm starts; its cost grows
// with the topic. It reads from each partition's start as the broker keeps
// it: a record retention already deleted is not found, so the topic must
// keep its records longer than a confirmation may come after the produce
// (an executor stopped while the key was in progress, reconcile.for), or a
// record that landed reads as not found and the key is produced again.
func (c *Connector) Confirm(ctx context.Context, req connectors.Request) connectors.Result {
	id := produceID{req.Entity, req.Key}
	// Checked before the end offsets are read: a produce whose promise ran
	// before this check was answered by the broker before them, so a
	// record it wrote is below the offsets find reads up to.
	if c.isOutstanding(id) {
		return connectors.Result{Kind: connectors.Ambiguous, Message: "confirm: an earlier produce of this key is still outstanding"}
	}
	loc, found, err := c.find(ctx, req)
	if err != nil {
		return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("confirm: %v", err)}
	}
	if found {
		return connectors.Result{Kind: connectors.Succeeded, Result: loc.json()}
	}
	if c.isOutstanding(id) { // started meanwhile: G1 rules it out, the check is cheap
		return connectors.Result{Kind: connectors.Ambiguous, Message: "confirm: a produce of this key is outstanding"}
	}
	return connectors.Result{Kind: connectors.NotFound}
}

// errRetention means the topic's retention deleted records the one
// looked for may have been among: Confirm cannot tell, and says so.
var errRetention = errors.New("retention deleted the records from the attempt's time")

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
		// The pinned count, not len(partitions): after the topic grew the
		// current count names another partition than Execute wrote to.
		n, err := c.partitionCount(ctx)
		if err != nil {
			return location{}, false, err
		}
		p := c.cfg.PartitionFor(req.Entity, n)
		if _, exists := partitions[p]; !exists {
			return location{}, false, fmt.Errorf("partition %d of %s not found", p, c.cfg.Topic)
		}
		end, ok := want[p]
		want = map[int32]int64{}
		if ok {
			want[p] = end
		}
	}
	if len(want) == 0 {
		return location{}, false, nil
	}
	// Where retention has deleted the start of a partition, the record
	// looked for may be among what was deleted: "not found" would then
	// produce the key again (G3). It may be there only if it is not older
	// than the first record kept.
	starts, err := kadm.NewClient(c.cfg.Client).ListStartOffsets(ctx, c.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return location{}, false, fmt.Errorf("list start offsets: %w", err)
	}
	trimmed := map[int32]bool{}
	for p, end := range want {
		o, ok := starts.Lookup(c.cfg.Topic, p)
		if !ok || o.Offset == 0 {
			continue
		}
		if o.Offset >= end {
			// Nothing is left to read (a fetch would wait for a
			// record that never comes).
			return location{}, false, fmt.Errorf("%w: partition %d holds no record any more", errRetention, p)
		}
		trimmed[p] = true
	}
	// The record was created when the attempt began, at the latest one
	// delivery timeout before its deadline, by this process's clock; the
	// first record kept may be stamped by one that lags it by ClockDrift.
	// Without a delivery timeout (or a deadline) the attempt's start is
	// not known: zero, and a trimmed partition's miss is unknown.
	var written time.Time
	if d, ok := c.cfg.Client.OptValue(kgo.RecordDeliveryTimeout).(time.Duration); ok && d > 0 && !req.Deadline.IsZero() {
		written = req.Deadline.Add(-d - c.cfg.ClockDrift)
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
		var gone error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || hit != nil || gone != nil {
				return
			}
			if trimmed[r.Partition] {
				delete(trimmed, r.Partition)
				if written.IsZero() || r.Timestamp.After(written) {
					gone = fmt.Errorf("%w: partition %d starts at offset %d, written %s, after the attempt's record would have been (%s)",
						errRetention, r.Partition, r.Offset, r.Timestamp.UTC().Format(time.RFC3339), written.UTC().Format(time.RFC3339))
					return
				}
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
		if gone != nil {
			return location{}, false, gone
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
