package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

const nParts = 3

// cluster starts kfake with the default topics and returns its addresses.
func cluster(t *testing.T) []string {
	t.Helper()
	return fakeCluster(t).ListenAddrs()
}

func fakeCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	d := schemas.DefaultTopics()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(nParts, d.Commands, d.Outcomes, d.Journal, d.Deadletter))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newClient(t *testing.T, brokers []string, opts ...Option) *Client {
	t.Helper()
	c, err := New(append([]Option{WithBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// producer is a plain client for writing what an executor would write.
func producer(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// outcomeFor is the outcome event an executor would publish for cmd, with
// result {"n": cmd's data n}.
func outcomeFor(t *testing.T, cmd schemas.Command, st schemas.Status) *kgo.Record {
	t.Helper()
	r, err := wire.EncodeOutcome(schemas.Record{IdempotencyKey: cmd.IdempotencyKey, Entity: cmd.Subject,
		Action: cmd.Type, Status: st, Result: cmd.Data, Command: schemas.CommandRef{ID: cmd.ID}}, cmd.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic = schemas.DefaultTopics().Outcomes
	return r
}

// responder is a stand-in executor: it reads the commands topic from the
// start and answers each command with a succeeded outcome echoing its
// data, until ctx ends. It reports on t with Error, from its goroutine.
func responder(ctx context.Context, t *testing.T, brokers []string) (done <-chan struct{}) {
	ch := make(chan struct{})
	out := producer(t, brokers)
	in := producer(t, brokers, kgo.ConsumeTopics(schemas.DefaultTopics().Commands), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	go func() {
		defer close(ch)
		for {
			fs := in.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			var recs []*kgo.Record
			fs.EachRecord(func(r *kgo.Record) {
				cmd, err := schemas.DecodeCommand(r, 0)
				if err != nil {
					t.Errorf("responder: %v", err)
					return
				}
				o, err := wire.EncodeOutcome(schemas.Record{IdempotencyKey: cmd.IdempotencyKey, Entity: cmd.Subject,
					Action: cmd.Type, Status: schemas.StatusSucceeded, Result: cmd.Data,
					Command: schemas.CommandRef{ID: cmd.ID, Partition: r.Partition, Offset: r.Offset}}, cmd.ID, false)
				if err != nil {
					t.Errorf("responder: %v", err)
					return
				}
				o.Topic = schemas.DefaultTopics().Outcomes
				recs = append(recs, o)
			})
			if err := out.ProduceSync(ctx, recs...).FirstErr(); err != nil && ctx.Err() == nil {
				t.Errorf("responder: %v", err)
			}
		}
	}()
	return ch
}

// TestSubmitThousandConcurrent: 1000 goroutines submit and wait at once
// through one client; each gets the outcome of its own command (its data
// echoed back), on its entity's murmur2 partition, and the shared reader
// holds no waiter afterwards.
func TestSubmitThousandConcurrent(t *testing.T) {
	brokers := cluster(t)
	ctx := testCtx(t)
	rctx, stop := context.WithCancel(ctx)
	done := responder(rctx, t, brokers)
	defer func() { stop(); <-done }()
	c := newClient(t, brokers)

	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			entity := "order-" + strconv.Itoa(i%97)
			p, err := c.Submit(ctx, Command{Action: "noop.ping", Entity: entity, Key: "k-" + strconv.Itoa(i),
				Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
			if err != nil {
				errs <- err
				return
			}
			if want := partitioner.ForEntity(entity, nParts); p.Partition != want {
				errs <- fmt.Errorf("command %d on partition %d, want %d (murmur2 of %q)", i, p.Partition, want, entity)
			}
			o, err := p.Wait(ctx)
			if err != nil {
				errs <- err
				return
			}
			var res struct{ N int }
			if err := json.Unmarshal(o.Result, &res); err != nil || res.N != i || o.CommandID != p.ID || o.Key != "k-"+strconv.Itoa(i) || o.Entity != entity {
				errs <- fmt.Errorf("command %d (%s) got outcome %+v (%v)", i, p.ID, o, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if w := c.mu.disp.waiting(); w != 0 {
		t.Errorf("%d waiters left after every outcome arrived", w)
	}
}

// TestWaitSkipsWhatIsNotTheAnswer: an outcome written before the submit, an
// aborted one (a fenced zombie's), another command's and a record that is
// no event at all are not the answer; the committed one after them is.
func TestWaitSkipsWhatIsNotTheAnswer(t *testing.T) {
	brokers := cluster(t)
	ctx := testCtx(t)
	c := newClient(t, brokers)
	cmd := schemas.Command{ID: "cmd-1", Type: "noop.ping", Subject: "ent", IdempotencyKey: "k"}
	plain := producer(t, brokers)
	if err := plain.ProduceSync(ctx, outcomeFor(t, cmd, schemas.StatusRejected)).FirstErr(); err != nil {
		t.Fatal(err)
	}

	p, err := c.Submit(ctx, Command{ID: cmd.ID, Action: cmd.Type, Entity: cmd.Subject, Key: cmd.IdempotencyKey})
	if err != nil {
		t.Fatal(err)
	}
	txn := func(commit bool, recs ...*kgo.Record) {
		cl := producer(t, brokers, kgo.TransactionalID(fmt.Sprint("test-", commit)))
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	junk := &kgo.Record{Topic: schemas.DefaultTopics().Outcomes, Key: []byte("ent"), Value: []byte("not an event")}
	other := outcomeFor(t, schemas.Command{ID: "cmd-other", Type: "noop.ping", Subject: "ent", IdempotencyKey: "k2"}, schemas.StatusSucceeded)
	txn(true, junk, other)
	txn(false, outcomeFor(t, cmd, schemas.StatusSucceeded))
	txn(true, outcomeFor(t, cmd, schemas.StatusFailed))

	o, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != schemas.StatusFailed || o.CommandID != "cmd-1" || o.Event == nil || o.Err() == nil {
		t.Fatalf("got %+v", o)
	}
	var oe *OutcomeError
	if !errors.As(o.Err(), &oe) || oe.Outcome.Status != schemas.StatusFailed {
		t.Fatalf("Err() = %v", o.Err())
	}
}

// TestWaitAgainAfterTimeout: a Wait that times out is ErrNoOutcome and
// keeps the registration, so a later Wait gets the outcome that came in
// between; Forget drops it.
func TestWaitAgainAfterTimeout(t *testing.T) {
	brokers := cluster(t)
	ctx := testCtx(t)
	c := newClient(t, brokers)
	p, err := c.Submit(ctx, Command{ID: "c1", Action: "noop.ping", Entity: "e", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := p.Wait(short); !errors.Is(err, ErrNoOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want ErrNoOutcome and DeadlineExceeded", err)
	}
	cmd := schemas.Command{ID: "c1", Type: "noop.ping", Subject: "e", IdempotencyKey: "k"}
	if err := producer(t, brokers).ProduceSync(ctx, outcomeFor(t, cmd, schemas.StatusSucceeded)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	o, err := p.Wait(ctx)
	if err != nil || o.Status != schemas.StatusSucceeded || o.Err() != nil {
		t.Fatalf("second Wait = %+v, %v", o, err)
	}

	q, err := c.Submit(ctx, Command{Action: "noop.ping", Entity: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if c.mu.disp.waiting() != 1 {
		t.Fatalf("waiting = %d, want 1", c.mu.disp.waiting())
	}
	q.Forget()
	if c.mu.disp.waiting() != 0 {
		t.Fatalf("waiting after Forget = %d, want 0", c.mu.disp.waiting())
	}
}

// TestCloseEndsWait: Close answers a Wait in progress with ErrClosed, and
// later calls fail with it.
func TestCloseEndsWait(t *testing.T) {
	brokers := cluster(t)
	ctx := testCtx(t)
	c := newClient(t, brokers)
	p, err := c.Submit(ctx, Command{Action: "noop.ping", Entity: "e"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := p.Wait(ctx)
		got <- err
	}()
	c.Close()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close = %v, want ErrClosed", err)
	}
	if _, err := c.Submit(ctx, Command{Action: "noop.ping", Entity: "e"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close = %v", err)
	}
	if _, err := c.Send(ctx, Command{Action: "noop.ping", Entity: "e"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
}

// TestSendValidates: Send needs no reader; bad commands fail before Kafka.
func TestSendValidates(t *testing.T) {
	brokers := cluster(t)
	ctx := testCtx(t)
	c := newClient(t, brokers, WithSource("svc"))
	s, err := c.Send(ctx, Command{ID: "x", Action: "noop.ping", Entity: "e"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Key != "svc/x" || s.Partition != partitioner.ForEntity("e", nParts) {
		t.Fatalf("sent %+v", s)
	}
	if c.mu.disp != nil {
		t.Fatal("Send started the outcomes reader")
	}
	for _, bad := range []Command{{Entity: "e"}, {Action: "a"}, {Action: "a", Entity: "e", Data: json.RawMessage(`[1]`)}, {Action: "a", Entity: "e", Data: json.RawMessage(`{`)}} {
		if _, err := c.Send(ctx, bad); err == nil {
			t.Errorf("Send(%+v) succeeded", bad)
		}
	}
}

// TestReadOutcomes: a bounded replay from the beginning yields every event
// in order, an undecodable one as a DecodeError, and stops at the end; a
// loop that breaks ends the read.
func TestReadOutcomes(t *testing.T) {
	brokers := cluster(t)
	ctx := testCtx(t)
	c := newClient(t, brokers)
	var recs []*kgo.Record
	for i := range 3 {
		r := outcomeFor(t, schemas.Command{ID: fmt.Sprint("c", i), Type: "a", Subject: "e", IdempotencyKey: fmt.Sprint("k", i)}, schemas.StatusSucceeded)
		recs = append(recs, r)
	}
	recs = append(recs, &kgo.Record{Topic: schemas.DefaultTopics().Outcomes, Key: []byte("e"), Value: []byte("junk")})
	if err := producer(t, brokers).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	var decodeErrs int
	for o, err := range c.ReadOutcomes(ctx, Range{Start: FromBeginning()}) {
		var de *DecodeError
		if errors.As(err, &de) {
			decodeErrs++
			if o.Event == nil || string(o.Event.Value) != "junk" {
				t.Errorf("decode error without its record: %+v", o)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.CommandID)
	}
	if fmt.Sprint(ids) != "[c0 c1 c2]" || decodeErrs != 1 {
		t.Fatalf("read %v and %d decode errors", ids, decodeErrs)
	}
	n := 0
	for _, err := range c.ReadOutcomes(ctx, Range{Start: FromOffset(0)}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Fatalf("broke after %d", n)
	}

	// Following reads past the end: the old events, then a new one, and
	// ends with ctx's error once cancelled.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := outcomeFor(t, schemas.Command{ID: "live", Type: "a", Subject: "e", IdempotencyKey: "kl"}, schemas.StatusFailed)
	produced := false
	var last string
	for o, err := range c.Outcomes(fctx, FromBeginning()) {
		var de *DecodeError
		if errors.As(err, &de) {
			// The junk is the last old event: the end was reached,
			// so what comes next was written during the follow.
			if err := producer(t, brokers).ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			produced = true
			continue
		}
		if errors.Is(err, context.Canceled) && last == "live" {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if last = o.CommandID; last == "live" {
			if !produced || o.Status != schemas.StatusFailed {
				t.Fatalf("followed %+v", o)
			}
			cancel()
		}
	}
	if last != "live" {
		t.Fatalf("follow ended at %q", last)
	}
}

// journalRec is a journal entry as the executor writes it.
func journalRec(t *testing.T, key, entity string, p int32, st schemas.Status) *kgo.Record {
	t.Helper()
	v, err := wire.MarshalRecord(schemas.Record{IdempotencyKey: key, Entity: entity, Status: st})
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: schemas.DefaultTopics().Journal, Partition: p, Key: []byte(key), Value: v,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}}
}

// TestStatusAndRecords: the latest record of (entity, key) wins; a key of
// two entities needs the entity; epoch markers are not records.
func TestStatusAndRecords(t *testing.T) {
	brokers := cluster(t)
	ctx := testCtx(t)
	c := newClient(t, brokers)
	marker := &kgo.Record{Topic: schemas.DefaultTopics().Journal, Partition: 0, Key: []byte("k1"), Value: []byte("epoch"),
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte("epoch")}}}
	pr := producer(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := pr.ProduceSync(ctx,
		journalRec(t, "k1", "e1", 0, schemas.StatusInProgress),
		journalRec(t, "k1", "e1", 0, schemas.StatusUnresolved),
		marker,
		journalRec(t, "k2", "e2", 1, schemas.StatusHeld),
		journalRec(t, "k1", "e3", 2, schemas.StatusSucceeded),
		journalRec(t, "k3", "e1", 0, schemas.StatusUnresolved),
		journalRec(t, "k3", "e1", 0, schemas.StatusSucceeded),
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r, err := c.Status(ctx, "k1", "e1")
	if err != nil || r.Status != schemas.StatusUnresolved {
		t.Fatalf("Status(k1, e1) = %+v, %v", r, err)
	}
	if _, err := c.Status(ctx, "k1", ""); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Status(k1) = %v, want ErrAmbiguous", err)
	}
	if r, err := c.Status(ctx, "k2", ""); err != nil || r.Entity != "e2" {
		t.Fatalf("Status(k2) = %+v, %v", r, err)
	}
	if _, err := c.Status(ctx, "k2", "e1"); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("Status(k2, e1) = %v, want ErrNoRecord", err)
	}
	recs, err := c.Records(ctx, schemas.StatusUnresolved, schemas.StatusHeld)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Entity+"/"+r.IdempotencyKey+"="+string(r.Status))
	}
	if fmt.Sprint(got) != "[e1/k1=unresolved e2/k2=held]" {
		t.Fatalf("Records = %v", got)
	}
}

// TestNewNeedsBrokers: no brokers and no client is an error, not a client
// that hangs at first use.
func TestNewNeedsBrokers(t *testing.T) {
	if _, err := New(); err == nil {
		t.Fatal("New() without brokers succeeded")
	}
	if got := (schemas.Topics{Outcomes: "o"}).WithDefaults(); got.Outcomes != "o" || got.Commands != schemas.DefaultTopics().Commands {
		t.Fatalf("WithDefaults = %+v", got)
	}
}

// TestReaderFailureEndsWaits: when the shared reader meets an error franz-go
// does not retry (here the broker refuses every fetch: not authorized),
// waiting callers get that error instead of hanging until their timeout,
// and a later Submit is refused before it produces.
func TestReaderFailureEndsWaits(t *testing.T) {
	c := fakeCluster(t)
	ctx := testCtx(t)
	cl := newClient(t, c.ListenAddrs())
	p, err := cl.Submit(ctx, Command{Action: "noop.ping", Entity: "e"})
	if err != nil {
		t.Fatal(err)
	}
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range fr.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	_, err = p.Wait(ctx)
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, ErrNoOutcome) {
		t.Fatalf("Wait = %v, want the reader's TopicAuthorizationFailed", err)
	}
	if _, err := cl.Submit(ctx, Command{Action: "noop.ping", Entity: "e"}); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("Submit after the reader failed = %v", err)
	}
}

// silentBroker listens, accepts connections and never answers; accepted
// gets a value at each new connection.
func silentBroker(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	acc := make(chan struct{}, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case acc <- struct{}{}:
			default:
			}
			go func() { _, _ = io.Copy(io.Discard, conn); conn.Close() }()
		}
	}()
	return ln.Addr().String(), acc
}

// TestCloseDuring: Close while a call waits on brokers that do not answer
// ends the call with ErrClosed (errors.Is). The first Submit, starting the
// outcomes reader, holds the client's lock, so Close waited for it (~40s
// here) before; a Send's produce ended with franz-go's "client closed".
func TestCloseDuring(t *testing.T) {
	cmd := Command{Action: "noop.ping", Entity: "e"}
	for name, call := range map[string]func(context.Context, *Client) error{
		"FirstSubmit": func(ctx context.Context, c *Client) error { _, err := c.Submit(ctx, cmd); return err },
		"Send":        func(ctx context.Context, c *Client) error { _, err := c.Send(ctx, cmd); return err },
	} {
		t.Run(name, func(t *testing.T) {
			addr, accepted := silentBroker(t)
			c := newClient(t, []string{addr})
			got := make(chan error, 1)
			go func() { got <- call(testCtx(t), c) }()
			<-accepted // the call is talking to the broker
			c.Close()
			if err := <-got; !errors.Is(err, ErrClosed) {
				t.Fatalf("%s during Close = %v, want ErrClosed", name, err)
			}
		})
	}
}

// TestCallsAfterCloseSayClosed: every call on a closed client fails with
// ErrClosed (errors.Is), the reads and Ping too, whether New built the
// Kafka client (closed with it) or was given one (left open).
func TestCallsAfterCloseSayClosed(t *testing.T) {
	brokers := cluster(t)
	ctx := testCtx(t)
	own := newClient(t, brokers)
	given := newClient(t, nil, WithClient(producer(t, brokers)))
	for name, c := range map[string]*Client{"New's": own, "WithClient's": given} {
		c.Close()
		_, err := c.Status(ctx, "k", "")
		_, kerr := c.KeyRecords(ctx, "k")
		_, rerr := c.Records(ctx, schemas.StatusUnresolved)
		var oerr error
		for _, err := range c.ReadOutcomes(ctx, Range{Start: FromBeginning()}) {
			oerr = err
		}
		for call, err := range map[string]error{"Status": err, "KeyRecords": kerr, "Records": rerr, "ReadOutcomes": oerr, "Ping": c.Ping(ctx)} {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s client: %s after Close = %v, want ErrClosed", name, call, err)
			}
		}
	}
}
