package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/proctest"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// This file holds the phases that complete issue 24's table: the dedupe
// index at scale (a small version of make bench-scale, in a child
// process so that its RSS is its own), `onceflight audit` against a raw
// read of the same topics, and a hot entity sharing its partition.

// indexChildFlag makes the bench binary the index phase's child: it builds
// an index of keys and prints indexResult as JSON.
const indexChildFlag = "-index-child"

// indexResult is what the index child measured.
type indexResult struct {
	Keys        int     `json:"keys"`
	BuildSec    float64 `json:"build_sec"`
	DiskBytes   int64   `json:"disk_bytes"`
	HitP50Us    float64 `json:"hit_p50_us"`
	HitP99Us    float64 `json:"hit_p99_us"`
	MissP50Us   float64 `json:"miss_p50_us"`
	MissP99Us   float64 `json:"miss_p99_us"`
	MaxRSSBytes int64   `json:"-"`
}

// runIndexChild is the child's main: keys records written the way a
// restore writes them (sealed records of succeeded executions, batches of
// 1 000), then 20 000 lookups of existing keys and of absent ones, at
// random, one at a time (dedupe's BenchmarkIndexScale, smaller).
func runIndexChild(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("%s KEYS DIR", indexChildFlag)
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1000 {
		return fmt.Errorf("%s: keys %q: want a number, at least 1000", indexChildFlag, args[0])
	}
	dir := args[1]
	s, err := dedupe.Open(dir)
	if err != nil {
		return err
	}
	defer s.Close()
	key := func(i int) string { return fmt.Sprintf("%016x", rand.New(rand.NewPCG(uint64(i), 7)).Uint64()) }
	entity := func(i int) string { return "entity-" + strconv.Itoa(i%max(1, n/10)) }
	start := time.Now()
	for i := 0; i < n; i += 1000 {
		b := s.NewBatch()
		for j := i; j < min(i+1000, n); j++ {
			r := schemas.Record{IdempotencyKey: key(j), Entity: entity(j), Action: "bench.noop", Status: schemas.StatusSucceeded,
				Fingerprint: "sha256:" + key(j), Attempts: 1, Result: json.RawMessage(`{"noop":true}`),
				Command:  schemas.CommandRef{ID: "c-" + key(j), Source: "onceflight-bench", Partition: int32(j % 12), Offset: int64(j)},
				Executor: "bench", Epoch: 1}
			raw, err := wire.SealRecord(&r)
			if err != nil {
				b.Close()
				return err
			}
			b.PutRecordBytes(r, raw)
		}
		b.SetProgress(0, dedupe.Progress{JournalOffset: int64(i + 1000)})
		if err := b.CommitNoSync(); err != nil {
			return err
		}
	}
	res := indexResult{Keys: n, BuildSec: time.Since(start).Seconds()}
	rng := rand.New(rand.NewPCG(1, 2))
	const samples = 20_000
	lat := func(exist bool) (p50, p99 float64, err error) {
		d := make([]time.Duration, samples)
		for k := range d {
			i := rng.IntN(n)
			kk, ee := key(i), entity(i)
			if !exist {
				kk = "absent-" + kk
			}
			t0 := time.Now()
			_, found, err := s.Lookup(ee, kk)
			d[k] = time.Since(t0)
			if err != nil {
				return 0, 0, err
			}
			if found != exist {
				return 0, 0, fmt.Errorf("lookup %s/%s: found %v, want %v", ee, kk, found, exist)
			}
		}
		slices.Sort(d)
		us := func(q int) float64 { return float64(d[len(d)*q/100].Nanoseconds()) / 1000 }
		return us(50), us(99), nil
	}
	if res.HitP50Us, res.HitP99Us, err = lat(true); err != nil {
		return err
	}
	if res.MissP50Us, res.MissP99Us, err = lat(false); err != nil {
		return err
	}
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			res.DiskBytes += fi.Size()
		}
		return nil
	})
	return json.NewEncoder(os.Stdout).Encode(res)
}

// indexPhase runs the index child for keys keys and returns its result
// with its peak RSS.
func (b *bench) indexPhase(ctx context.Context, keys int) (indexResult, error) {
	self, err := os.Executable()
	if err != nil {
		return indexResult{}, fmt.Errorf("index: %w", err)
	}
	dir := filepath.Join(b.dir, "index-scale")
	if err := os.RemoveAll(dir); err != nil {
		return indexResult{}, err
	}
	cmd := exec.CommandContext(ctx, self, indexChildFlag, strconv.Itoa(keys), dir)
	cmd.Stderr = os.Stderr
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	rss, err := runWatchingHWM(cmd)
	if err != nil {
		return indexResult{}, fmt.Errorf("index child: %w", err)
	}
	out := stdout.Bytes()
	var res indexResult
	if err := json.Unmarshal(out, &res); err != nil {
		return indexResult{}, fmt.Errorf("index child: %w: %q", err, out)
	}
	res.MaxRSSBytes = rss
	_ = os.RemoveAll(dir)
	return res, nil
}

func indexRows(r indexResult) []row {
	note := fmt.Sprintf("at %d keys, built in %.1fs (%.0f keys/s); the goal is for 10 M keys: make bench-scale", r.Keys, r.BuildSec, float64(r.Keys)/r.BuildSec)
	rss := row{Phase: "index", Measure: "dedupe index: peak RSS", Value: float64(r.MaxRSSBytes) / (1 << 20), Unit: "MB", Note: note}
	goalAtMost(&rss, rss.Value, 300, "300 MB")
	hit := row{Phase: "index", Measure: "lookup p99, existing key (a repeat)", Value: r.HitP99Us / 1000, Unit: "ms", Note: fmt.Sprintf("p50 %.1f µs", r.HitP50Us)}
	goalAtMost(&hit, hit.Value, 1, "1 ms")
	miss := row{Phase: "index", Measure: "lookup p99, absent key (a new command)", Value: r.MissP99Us / 1000, Unit: "ms", Note: fmt.Sprintf("p50 %.1f µs", r.MissP50Us)}
	goalAtMost(&miss, miss.Value, 1, "1 ms")
	disk := row{Phase: "index", Measure: "disk per key", Value: float64(r.DiskBytes) / float64(max(1, r.Keys)), Unit: "B", Goal: "reported",
		Note: "disk is bounded by retention (pruning), not by this figure"}
	return []row{rss, hit, miss, disk}
}

// auditRun is `onceflight audit` over the run's topics and a raw read of
// the same topics.
type auditRun struct {
	took, raw   time.Duration
	rawRecords  int
	maxRSSBytes int64
	verdict     string
}

// auditPhase times `onceflight audit` of the run's topics as they are now,
// against a read_committed read of the commands, outcomes and journal
// topics (what kcat would read).
func (b *bench) auditPhase(ctx context.Context) (ar auditRun, err error) {
	for _, t := range []string{b.topics.Commands, b.topics.Outcomes, b.topics.Journal} {
		n, d, err := b.rawRead(ctx, t)
		if err != nil {
			return ar, err
		}
		ar.rawRecords += n
		ar.raw += d
	}
	start := time.Now()
	v, rss, err := b.timedAudit(ctx, "audit-phase")
	ar.took, ar.verdict, ar.maxRSSBytes = time.Since(start), v, rss
	return ar, err
}

func auditRows(ar auditRun) []row {
	t := row{Phase: "audit", Measure: "onceflight audit: seconds", Value: ar.took.Seconds(), Unit: "s", Vs: "raw read", Ratio: ratio(ar.took.Seconds(), ar.raw.Seconds()),
		Audit: ar.verdict, Note: fmt.Sprintf("raw read_committed read of commands, outcomes, journal: %d records in %.2fs", ar.rawRecords, ar.raw.Seconds())}
	if t.Ratio > 0 {
		goalAtMost(&t, t.Ratio, 2, "2×")
	}
	m := row{Phase: "audit", Measure: "onceflight audit: peak RSS", Value: float64(ar.maxRSSBytes) / (1 << 20), Unit: "MB", Goal: "bounded",
		Note: fmt.Sprintf("%.2f KB per record read; bounded only if it stays flat as the topics grow (one run cannot tell)", float64(ar.maxRSSBytes)/1024/float64(max(1, ar.rawRecords)))}
	return []row{t, m}
}

// hotRun is a hot entity's backlog with other entities of its partition
// behind it.
type hotRun struct {
	hot, others        int
	othersDone, hotEnd time.Duration // from the start of the phase
	othersAfterHot     int           // others answered after the hot backlog's last
}

// hotPhase queues hot commands for one entity, then others commands of
// other entities of the same partition, with serve running on dataDir,
// and reads when each is answered.
func (b *bench) hotPhase(ctx context.Context, dataDir string, hot, others int) (hr hotRun, err error) {
	hr.hot, hr.others = hot, others
	hotEntity := "hot-0"
	p := partitioner.ForEntity(hotEntity, b.partitions)
	var otherEntities []string
	for i := 0; len(otherEntities) < others; i++ {
		if e := "cold-" + strconv.Itoa(i); partitioner.ForEntity(e, b.partitions) == p {
			otherEntities = append(otherEntities, e)
		}
	}
	w, err := b.newOutcomeWatch(ctx)
	if err != nil {
		return hr, err
	}
	defer w.close()
	c, httpAddr, err := b.startServe("hot", dataDir, b.inflight)
	if err != nil {
		return hr, err
	}
	var sr serveRun
	defer func() { b.stopServe(ctx, c, "hot", &sr) }()
	if _, err := proctest.WaitReady(ctx, c, httpAddr, 2*time.Millisecond); err != nil {
		return hr, err
	}
	hotIDs, otherIDs := map[string]struct{}{}, map[string]struct{}{}
	var (
		mu      sync.Mutex
		prodErr error
	)
	start := time.Now()
	for i := range hot + others {
		id, entity := "hot-"+strconv.Itoa(i), hotEntity
		if i >= hot {
			id, entity = "cold-"+strconv.Itoa(i-hot), otherEntities[i-hot]
			otherIDs[id] = struct{}{}
		} else {
			hotIDs[id] = struct{}{}
		}
		r, err := schemas.EncodeCommand(schemas.Command{ID: id, Source: "onceflight-bench", Type: "bench.noop", Subject: entity,
			IdempotencyKey: id, Data: b.data}, schemas.Structured)
		if err != nil {
			return hr, err
		}
		r.Topic = b.topics.Commands
		b.prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && prodErr == nil {
				prodErr = err
			}
		})
	}
	if err := b.prod.Flush(ctx); err != nil {
		return hr, fmt.Errorf("hot: produce: %w", err)
	}
	mu.Lock()
	err = prodErr
	mu.Unlock()
	if err != nil {
		return hr, fmt.Errorf("hot: produce: %w", err)
	}
	alive := func() error {
		if c.Exited() {
			return c.ExitErr()
		}
		return nil
	}
	// Both sets at once: await deletes what it reads, so the others'
	// answers are seen whenever they come.
	all := map[string]struct{}{}
	for id := range hotIDs {
		all[id] = struct{}{}
	}
	for id := range otherIDs {
		all[id] = struct{}{}
	}
	times := map[string]time.Duration{}
	w.onOutcome = func(id string, at time.Time) { times[id] = at.Sub(start) }
	if _, err := w.await(ctx, all, b.stall, alive); err != nil {
		return hr, fmt.Errorf("hot: %w (serve log %s)", err, c.LogPath)
	}
	for id := range hotIDs {
		hr.hotEnd = max(hr.hotEnd, times[id])
	}
	for id := range otherIDs {
		hr.othersDone = max(hr.othersDone, times[id])
		if times[id] > hr.hotEnd {
			hr.othersAfterHot++
		}
	}
	return hr, nil
}

func hotRows(hr hotRun) []row {
	r := row{Phase: "hot", Measure: "other entities of a hot entity's partition: last answered", Value: hr.othersDone.Seconds(), Unit: "s",
		Vs: "hot backlog drained", Ratio: ratio(hr.othersDone.Seconds(), hr.hotEnd.Seconds()),
		Note: fmt.Sprintf("%d queued commands of one entity, then %d of other entities of its partition; the hot backlog drained in %.1fs; %d others answered after it",
			hr.hot, hr.others, hr.hotEnd.Seconds(), hr.othersAfterHot)}
	r.Goal = "all before the hot backlog"
	r.Met = yesNo(hr.othersAfterHot == 0 && hr.othersDone > 0)
	return []row{r}
}
