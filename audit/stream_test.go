package audit

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// TestRunStreamsPartitions (issue 24, audit at scale): Run audits a
// partition at a time, so the per-key, per-entity and per-answer state it
// holds at once follows the largest partition, not the topics. Six
// partitions of different sizes (30 to 180 keys, 2 keys per entity) on
// kfake over TCP; the auditor counts its live entries and their peak. It
// must reach the same report as Check over the same records (a cross-
// partition outcome id reuse and an unanswered command included, so that
// the id store and the deferred commands are exercised), and its peak must
// stay within two partitions' worth — far below the total.
func TestRunStreamsPartitions(t *testing.T) {
	in, perPart, total := streamHistory(t, false)
	want := Check(in)
	if want.OK() || find(want, CheckOutcomeIDs).Count != 2 || find(want, CheckAnswered).Count != 1 {
		t.Fatalf("the history should fail outcome_ids twice and commands_answered once: %+v", want.Checks)
	}
	a := runHistory(t, in, want, 50) // a fetch is decoded and checked in several chunks
	largest := 0
	for _, n := range perPart {
		largest = max(largest, n)
	}
	t.Logf("peak live entries %d; largest partition %d, all partitions %d", a.peak, largest, total)
	if a.peak > 2*largest {
		t.Errorf("Run held %d entries at once, more than two of the largest partition's %d", a.peak, largest)
	}
	if a.peak >= total/2 {
		t.Errorf("Run held %d entries at once: not a partition's worth, but most of all %d", a.peak, total)
	}
	if a.live != 0 {
		t.Errorf("%d entries still live after the last partition", a.live)
	}
}

// TestRunSpills: past maxStateInMemory entries per map, Run writes its
// per-partition state to the temporary store and reads it back, so the
// state in memory stays under a bound that does not depend on the number
// of keys, and the report is still Check's. The history of
// TestRunStreamsPartitions, with a key of partition 3 executed again after
// its final record at the end of the partition (a once_per_key violation
// that only the key's spilled state can show), audited with at most 7
// entries per map in memory.
func TestRunSpills(t *testing.T) {
	in, _, total := streamHistory(t, true)
	want := Check(in)
	if find(want, CheckOncePerKey).Count != 1 || find(want, CheckOutcomeIDs).Count != 2 || find(want, CheckAnswered).Count != 1 {
		t.Fatalf("the history should fail once_per_key and commands_answered once, outcome_ids twice: %+v", want.Checks)
	}
	const perMap = 7
	old := maxStateInMemory
	maxStateInMemory = perMap
	t.Cleanup(func() { maxStateInMemory = old })
	a := runHistory(t, in, want, 50) // a fetch is decoded and checked in several chunks
	// Keys, entities, answers and ids, and the causes of at most the two
	// command partitions a step holds, each at most perMap+1 at once.
	bound := 6 * (perMap + 1)
	t.Logf("peak live entries %d (bound %d); all partitions %d", a.peak, bound, total)
	if a.peak > bound {
		t.Errorf("Run held %d entries at once, more than %d", a.peak, bound)
	}
	if a.live != 0 {
		t.Errorf("%d entries still live after the last partition", a.live)
	}
}

// streamHistory builds six partitions of different sizes (30 to 180 keys,
// 2 keys per entity), with a cross-partition outcome id reuse and two
// commands answered late or never; with reexec, partition 3's first key
// starts again after its final record. perPart is the live entries Check
// holds per partition, total their sum.
func streamHistory(t *testing.T, reexec bool) (in Input, perPart []int, total int) {
	const parts = 6
	in = Input{Topics: tops, CommandPartitions: parts, Committed: map[int32]int64{}, MaxViolations: 20}
	perPart = make([]int, parts)
	var firstOutcome *kgo.Record // partition 1's, whose id partition 4 reuses
	for p := range int32(parts) {
		keys := 30 * int(p+1)
		ents := entitiesOn(p, parts, keys/2)
		var jents []jent
		for i := range keys {
			key, ent := fmt.Sprintf("k%d-%d", p, i), ents[i/2]
			seq := int64(i + 1)
			jents = append(jents,
				at(rec(key, ent, schemas.StatusInProgress, 1, seq, time.Duration(i)*time.Second), int64(i)),
				at(rec(key, ent, schemas.StatusSucceeded, 1, 0, time.Duration(i)*time.Second), int64(i)))
			in.Commands = append(in.Commands, command(t, "cmd-"+key, ent, key, p, int64(i)))
			o := outcome(t, key, ent, "cmd-"+key, schemas.StatusSucceeded, p, int64(i))
			o.Partition = p
			if p == 1 && i == 0 {
				firstOutcome = o
			}
			if p == 4 && i == 0 {
				// Partition 4's first outcome carries partition 1's
				// first id: two violations, one only a store of the
				// earlier partitions' ids can see.
				want, err := schemas.DecodeOutcome(o)
				if err != nil {
					t.Fatal(err)
				}
				first, err := schemas.DecodeOutcome(firstOutcome)
				if err != nil {
					t.Fatal(err)
				}
				o.Value = bytes.Replace(o.Value, []byte(want.ID), []byte(first.ID), 1)
			}
			in.Outcomes = append(in.Outcomes, o)
		}
		if reexec && p == 3 {
			key := "k3-0"
			jents = append(jents, at(rec(key, ents[0], schemas.StatusInProgress, 2, 1000, time.Hour), 0))
		}
		in.Journal = append(in.Journal, journal(t, p, jents...)...)
		in.Committed[p] = int64(keys)
		perPart[p] = 4*keys + len(ents) // keys, answers, ids, causes; entities
		total += perPart[p]
	}
	// One command more on partition 2, below the committed offset and
	// never answered; and one on partition 0 whose only answer is on
	// outcomes partition 5, read after partition 0 was judged: it still
	// counts, as when every outcome was read first.
	in.Commands = append(in.Commands, command(t, "cmd-lost", entitiesOn(2, parts, 1)[0], "lost", 2, 90))
	in.Committed[2] = 91
	e0 := entitiesOn(0, parts, 1)[0]
	in.Commands = append(in.Commands, command(t, "cmd-late", e0, "late", 0, 30))
	in.Committed[0] = 31
	late := outcome(t, "late", e0, "cmd-late", schemas.StatusSucceeded, 0, 180)
	late.Partition = 5
	in.Outcomes = append(in.Outcomes, late)
	return in, perPart, total
}

// runHistory audits in with Run on kfake, decoding chunks of chunk
// records, fails unless its report is want, and returns Run's auditor.
func runHistory(t *testing.T, in Input, want Report, chunk int) *auditor {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, cl := serveHistory(ctx, t, in, in.CommandPartitions)

	var a *auditor
	testHookAuditor = func(x *auditor) { a = x }
	old := decodeChunk
	decodeChunk = chunk
	defer func() { testHookAuditor, decodeChunk = nil, old }()
	got, err := Run(ctx, Options{Client: cl, MaxViolations: 20})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
		t.Fatalf("Run gave\n%s\nCheck gave\n%s", g, w)
	}
	return a
}

// serveHistory produces in's records to a new kfake cluster of parts
// partitions per topic, at the offsets the history gives them, and
// commits in.Committed for group "onceflight".
func serveHistory(ctx context.Context, t *testing.T, in Input, parts int) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(parts), tops.Commands, tops.Journal, tops.Outcomes, tops.Deadletter))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for _, rs := range [][]*kgo.Record{in.Journal, in.Outcomes, in.Commands} {
		for _, r := range rs {
			// Offsets are the broker's: the records were numbered
			// from 0 per partition in the order they are produced.
			cp := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers}
			if r.Topic == "" {
				cp.Topic = tops.Outcomes
			}
			if err := cl.ProduceSync(ctx, cp).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if cp.Offset != r.Offset {
				t.Fatalf("%s/%d: produced at offset %d, the history says %d", cp.Topic, cp.Partition, cp.Offset, r.Offset)
			}
		}
	}
	offs := kadm.Offsets{}
	for p, o := range in.Committed {
		offs.AddOffset(tops.Commands, p, o, -1)
	}
	if err := kadm.NewClient(cl).CommitAllOffsets(ctx, "onceflight", offs); err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// TestRunReadsAhead: while Run checks a partition's records, the next
// partition's reader is already fetching, so a step never starts by
// connecting and waiting for its first fetch. At the end of each step,
// before Run may open another reader, the broker must have been asked
// for the next partition (kfake sees every fetch request).
func TestRunReadsAhead(t *testing.T) {
	const parts = 4
	in := Input{Topics: tops, CommandPartitions: parts, Committed: map[int32]int64{}}
	for p := range int32(parts) {
		ents := entitiesOn(p, parts, 3)
		var jents []jent
		for i, e := range ents {
			key := fmt.Sprintf("k%d-%d", p, i)
			jents = append(jents, at(rec(key, e, schemas.StatusInProgress, 1, int64(i+1), 0), int64(i)),
				at(rec(key, e, schemas.StatusSucceeded, 1, 0, 0), int64(i)))
			in.Commands = append(in.Commands, command(t, "cmd-"+key, e, key, p, int64(i)))
			o := outcome(t, key, e, "cmd-"+key, schemas.StatusSucceeded, p, int64(i))
			o.Partition = p
			in.Outcomes = append(in.Outcomes, o)
		}
		in.Journal = append(in.Journal, journal(t, p, jents...)...)
		in.Committed[p] = int64(len(ents))
	}
	if !linkOutcomes(t, &in) {
		t.Fatal("outcomes not linked to their records")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, cl := serveHistory(ctx, t, in, parts)

	var mu sync.Mutex
	fetched := map[int32]bool{} // partition numbers any fetch asked for
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				fetched[p.Partition] = true
			}
		}
		return nil, nil, false
	})
	var missed []int32
	testHookStep = func(p int32) {
		// Step p read journal and outcomes p and commands p-1; only
		// step p+1 reads a partition numbered p+1.
		if p+1 >= parts {
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			ok := fetched[p+1]
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				missed = append(missed, p+1)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookStep = nil })
	rep, err := Run(ctx, Options{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Counts.Commands != 3*parts {
		t.Fatalf("the history should pass with %d commands: %+v %+v", 3*parts, rep.Checks, rep.Counts)
	}
	if len(missed) > 0 {
		t.Fatalf("partitions %v were not being fetched when the step before them ended", missed)
	}
}

// entitiesOn returns n entity names that partition p owns among parts.
func entitiesOn(p int32, parts, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		e := "ent-" + strconv.Itoa(i)
		if partitioner.ForEntity(e, parts) == p {
			out = append(out, e)
		}
	}
	return out
}

// FuzzCheckRecords: a journal record, outcome event or command of any
// bytes added to a healthy history never makes the audit panic, and Run's
// way of checking (a fetch at a time, decoded on every core, partitions
// dropped as they end) reaches Check's report.
func FuzzCheckRecords(f *testing.F) {
	rc := schemas.Record{IdempotencyKey: "k9", Entity: ent, Status: schemas.StatusSucceeded, Command: schemas.CommandRef{ID: "cmd-k9"}}
	if b, err := wire.MarshalRecord(rc); err == nil {
		f.Add(uint8(0), b)
	}
	if o, err := wire.EncodeOutcome(rc, "cmd-k9", false); err == nil {
		f.Add(uint8(1), o.Value)
	}
	if c, err := schemas.EncodeCommand(schemas.Command{ID: "cmd-k9", Source: "test", Type: "noop.ping", Subject: ent, IdempotencyKey: "k9"}, schemas.Structured); err == nil {
		f.Add(uint8(2), c.Value)
	}
	f.Add(uint8(0), []byte(`{"idempotency_key":`))
	f.Add(uint8(1), []byte(`{"specversion":"1.0"}`))
	f.Fuzz(func(t *testing.T, topic uint8, value []byte) {
		in := base(t)
		ce := kgo.RecordHeader{Key: "content-type", Value: []byte("application/cloudevents+json")}
		switch topic % 3 {
		case 0:
			in.Journal = append(in.Journal, &kgo.Record{Topic: tops.Journal, Partition: pe, Offset: int64(len(in.Journal)), Value: value,
				Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}})
		case 1:
			in.Outcomes = append(in.Outcomes, &kgo.Record{Topic: tops.Outcomes, Offset: int64(len(in.Outcomes)), Value: value, Headers: []kgo.RecordHeader{ce}})
		default:
			in.Commands = append(in.Commands, &kgo.Record{Topic: tops.Commands, Partition: pe, Offset: int64(len(in.Commands)), Value: value, Headers: []kgo.RecordHeader{ce}})
		}
		want := Check(in)

		a := newAuditor(in)
		a.useMemo()
		for _, o := range in.Outcomes {
			o.Topic = tops.Outcomes
		}
		a.records(append(sorted(in.Journal), sorted(in.Outcomes)...))
		a.endAnswers()
		a.records(sorted(in.Commands))
		for p := range int32(nParts) {
			a.endCommands(p)
		}
		if g, w := fmt.Sprintf("%+v", a.finish()), fmt.Sprintf("%+v", want); g != w {
			t.Fatalf("streamed:\n%s\nCheck:\n%s", g, w)
		}
	})
}

// BenchmarkAuditStatePerKey reports the live heap the auditor holds per key
// of the partition it is reading (key, entity, answer, outcome id and
// causation entries; one entity per two keys, as in a busy partition):
// the figure docs/memory.md#audit multiplies by the largest partition.
func BenchmarkAuditStatePerKey(b *testing.B) {
	const keys = 20_000
	var rs []*kgo.Record
	var jents []jent
	for i := range keys {
		key, e := fmt.Sprintf("k-%d", i), fmt.Sprintf("e-%d", i/2)
		jents = append(jents, rec(key, e, schemas.StatusInProgress, 1, int64(i+1), 0), rec(key, e, schemas.StatusSucceeded, 1, 0, 0))
		o, err := wire.EncodeOutcome(schemas.Record{IdempotencyKey: key, Entity: e, Status: schemas.StatusSucceeded,
			Command: schemas.CommandRef{ID: "c-" + key}}, "c-"+key, false)
		if err != nil {
			b.Fatal(err)
		}
		o.Topic, o.Offset = tops.Outcomes, int64(i)
		rs = append(rs, o)
	}
	t := &testing.T{}
	rs = append(journal(t, 0, jents...), rs...)
	var perKey float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		a := newAuditor(Input{Topics: tops})
		for lo := 0; lo < len(rs); lo += 1000 {
			a.records(rs[lo:min(lo+1000, len(rs))])
		}
		a.dbuf = [2][]decoded{}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / keys
		runtime.KeepAlive(a)
	}
	b.ReportMetric(perKey, "B/key")
}

// TestFeedDecodesNextFetchWhileChecking: feed checks the last chunk of a
// fetch while the first chunk of the next fetch is decoded, instead of
// checking it alone before returning (a fetch is about one and a quarter
// chunks, so most of the checks ran with no decoding beside them), and
// the report is still Check's.
func TestFeedDecodesNextFetchWhileChecking(t *testing.T) {
	in, _, _ := streamHistory(t, false)
	want := Check(in)
	rs := append(sorted(in.Journal), sorted(in.Outcomes)...)
	old := decodeChunk
	decodeChunk = 4
	defer func() { decodeChunk, testHookDecode, testHookCheck = old, nil, nil }()
	split := len(rs) - 6 // two fetches: the first ends with a short chunk
	nextDecoding := make(chan struct{})
	testHookDecode = func(c []*kgo.Record) {
		if c[0] == rs[split] {
			close(nextDecoding)
		}
	}
	waited := false
	testHookCheck = func(r *kgo.Record) {
		if r != rs[split-1] {
			return
		}
		select {
		case <-nextDecoding:
		case <-time.After(5 * time.Second):
			waited = true
		}
	}
	a := newAuditor(in)
	a.useMemo()
	a.feed(rs[:split])
	a.feed(rs[split:])
	a.flush()
	if waited {
		t.Errorf("the first fetch's last record was checked before the next fetch's first chunk was being decoded")
	}
	a.endAnswers()
	a.records(sorted(in.Commands))
	for p := range int32(in.CommandPartitions) {
		a.endCommands(p)
	}
	if g, w := fmt.Sprintf("%+v", a.finish()), fmt.Sprintf("%+v", want); g != w {
		t.Fatalf("fed:\n%s\nCheck:\n%s", g, w)
	}
}

// TestRunEndsStepWhileDecodingNext: Run ends a step (its partitions'
// G1 and G2, its outcome ids written to the store) while the next step's
// first chunk is decoded, not before the next step's records are fed; the
// report is still Check's.
func TestRunEndsStepWhileDecodingNext(t *testing.T) {
	in, _, _ := streamHistory(t, false)
	want := Check(in)
	var (
		mu      sync.Mutex
		decoded = map[int32]bool{} // steps of which a chunk began decoding
	)
	// The step a record is read in: journal and outcomes p in step p,
	// commands p in step p+1.
	stepOf := func(r *kgo.Record) int32 {
		if r.Topic == tops.Commands {
			return r.Partition + 1
		}
		return r.Partition
	}
	testHookDecode = func(c []*kgo.Record) {
		mu.Lock()
		decoded[stepOf(c[0])] = true
		mu.Unlock()
	}
	var missed []int32
	last := int32(in.CommandPartitions)
	testHookEnd = func(p int32) {
		if p == last || len(missed) > 0 {
			return // no step after the last; one miss is enough
		}
		deadline := time.Now().Add(2 * time.Second)
		for {
			mu.Lock()
			ok := decoded[p+1]
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				missed = append(missed, p)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookDecode, testHookEnd = nil, nil })
	runHistory(t, in, want, 1024)
	if len(missed) > 0 {
		t.Errorf("step %v ended before any chunk of the step after it was being decoded", missed)
	}
}

// TestDecodeEachSharesRecords: decodeEach's workers claim records as
// they go rather than each owning a fixed share, so a worker held up (as
// one is while feed checks the chunk before on its core) leaves the
// records it has not claimed to the others.
func TestDecodeEachSharesRecords(t *testing.T) {
	procs := runtime.GOMAXPROCS(2)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	in, _, _ := streamHistory(t, false)
	rs := sorted(in.Outcomes)
	if len(rs) < 4*64 {
		t.Fatalf("%d outcomes, want at least %d for two workers", len(rs), 4*64)
	}
	a := newAuditor(in)
	ds := make([]decoded, len(rs))
	index := map[*kgo.Record]int{}
	for i, r := range rs {
		index[r] = i
	}
	var mu sync.Mutex
	others := 0 // records outside the held worker's first batch taken so far
	done := make(chan struct{})
	held := false
	a.decodeEach(rs, ds, func(r *kgo.Record) bool {
		if r == rs[0] {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				held = true
			}
			return true
		}
		if index[r] >= decodeBatch {
			mu.Lock()
			if others++; others == len(rs)-decodeBatch {
				close(done)
			}
			mu.Unlock()
		}
		return true
	})
	if held {
		t.Errorf("with one worker held at the first record, the others did not decode the %d records it had not claimed", len(rs)-decodeBatch)
	}
	for i := range ds {
		if ds[i].err != nil || ds[i].o.id == "" {
			t.Fatalf("record %d not decoded: %+v", i, ds[i])
		}
	}
}

// newClientCount counts the clients made with it among their options.
type newClientCount struct{ n atomic.Int32 }

func (c *newClientCount) OnNewClient(*kgo.Client) { c.n.Add(1) }

// TestRunReadsStepsThroughTwoClients: Run reads its steps through two
// clients taking turns (rangeread.Steps), not a client per step, and
// gives Check's report.
func TestRunReadsStepsThroughTwoClients(t *testing.T) {
	in, _, _ := streamHistory(t, false)
	want := Check(in)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, _ := serveHistory(ctx, t, in, in.CommandPartitions)
	count := &newClientCount{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(count))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	before := count.n.Load()
	got, err := Run(ctx, Options{Client: cl, MaxViolations: 20})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
		t.Fatalf("Run gave\n%s\nCheck gave\n%s", g, w)
	}
	// Two for the steps, one for the deadletters if there are any.
	dl := 0
	if len(in.Deadletter) > 0 {
		dl = 1
	}
	if n := count.n.Load() - before; int(n) != 2+dl {
		t.Errorf("Run made %d reading clients for %d steps, want %d", n, in.CommandPartitions+1, 2+dl)
	}
}

// fetchSizes records the fetch sizes of the clients made with it among
// their options.
type fetchSizes struct {
	mu   sync.Mutex
	part []int32 // FetchMaxPartitionBytes of each client, in order
	max  []int32 // FetchMaxBytes
}

func (f *fetchSizes) OnNewClient(c *kgo.Client) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.part = append(f.part, c.OptValue(kgo.FetchMaxPartitionBytes).(int32))
	f.max = append(f.max, c.OptValue(kgo.FetchMaxBytes).(int32))
}

// TestRunStepFetchSizes: the two clients Run reads its steps through take
// Options.FetchBytes of a partition a fetch (DefaultFetchBytes unless set;
// stepFetchBytes a fetch), whatever the client it was given fetches; the
// deadletters' reader keeps the given client's sizes; a size below the
// minimum is refused, named. Memory: docs/memory.md#audit.
func TestRunStepFetchSizes(t *testing.T) {
	in, _, _ := streamHistory(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, _ := serveHistory(ctx, t, in, in.CommandPartitions)
	const given = 64 << 10
	for _, tc := range []struct{ opt, want int }{{0, DefaultFetchBytes}, {1 << 20, 1 << 20}} {
		sizes := &fetchSizes{}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(sizes),
			kgo.FetchMaxPartitionBytes(given), kgo.FetchMaxBytes(given))
		if err != nil {
			t.Fatal(err)
		}
		sizes.mu.Lock()
		sizes.part, sizes.max = nil, nil // cl's own
		sizes.mu.Unlock()
		_, err = Run(ctx, Options{Client: cl, MaxViolations: 20, FetchBytes: tc.opt})
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		sizes.mu.Lock()
		steps, other := 0, 0
		for i := range sizes.part {
			switch p, m := sizes.part[i], sizes.max[i]; {
			case p == int32(tc.want) && m == stepFetchBytes(tc.want):
				steps++
			case p == given && m == given:
				other++
			default:
				t.Errorf("FetchBytes %d: a reading client fetches %d bytes a partition and %d a fetch, want %d and %d (steps) or %d (others)",
					tc.opt, p, m, tc.want, stepFetchBytes(tc.want), given)
			}
		}
		sizes.mu.Unlock()
		dl := 0
		if len(in.Deadletter) > 0 {
			dl = 1
		}
		if steps != 2 || other != dl {
			t.Errorf("FetchBytes %d: %d clients with the steps' fetch sizes and %d with the given ones, want 2 and %d", tc.opt, steps, other, dl)
		}
	}
	if _, err := Run(ctx, Options{Brokers: c.ListenAddrs(), FetchBytes: 1000}); err == nil || !strings.Contains(err.Error(), "fetch bytes 1000") {
		t.Errorf("FetchBytes 1000: %v, want an error naming it", err)
	}
}
